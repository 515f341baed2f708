"""A nominal model plus a learned residual, as one dynamics model.

Euler-Lagrange is linear in the Lagrangian, so a residual Lagrangian ``T_r + V_r`` on top of the
nominal one adds term by term:

    H = H_nom + H_res,  c = c_nom + c_res,  g = g_nom + g_res,  tau_f = tau_f,nom + tau_f,res

``H_nom`` is positive definite (a URDF's rigid bodies) and ``H_res = L L^T`` is positive
semidefinite, so ``H`` stays positive definite and the forward model and the energies stay
defined whatever the residual learned.
"""

from __future__ import annotations

from typing import List, Tuple

import numpy as np

from delan_common.dynamics import DynamicsModel


class NominalPlusResidual:
    """:class:`~delan_common.dynamics.DynamicsModel` of ``nominal + residual`` (same joints)."""

    def __init__(self, nominal: DynamicsModel, residual: DynamicsModel):
        if list(nominal.joint_names) != list(residual.joint_names):
            raise ValueError(
                f'residual joints {list(residual.joint_names)} are not the nominal '
                f"model's {list(nominal.joint_names)}"
            )
        self.nominal, self.residual = nominal, residual
        self.joint_names: List[str] = list(nominal.joint_names)
        #: the learner's version of the residual (0 when not from the learner)
        self.model_version = int(getattr(residual, 'model_version', 0) or 0)

    def inverse(self, q: np.ndarray, qd: np.ndarray, qdd: np.ndarray) -> np.ndarray:
        """Torque ``(n,)`` or ``(B, n)``: the nominal torque plus the residual's."""
        return self.nominal.inverse(q, qd, qdd) + self.residual.inverse(q, qd, qdd)

    def forward(self, q: np.ndarray, qd: np.ndarray, tau: np.ndarray) -> np.ndarray:
        """Acceleration ``(n,)`` or ``(B, n)``: ``H^-1 (tau - b)`` with the summed ``H`` and the
        bias ``b`` (the summed torque at zero acceleration: ``c + g + tau_f``)."""
        q, qd, tau = (np.asarray(x, dtype=np.float64) for x in (q, qd, tau))
        bias = self.inverse(q, qd, np.zeros_like(q))
        return np.linalg.solve(self.mass_matrix(q), (tau - bias)[..., None])[..., 0]

    def mass_matrix(self, q: np.ndarray) -> np.ndarray:
        """``H_nom + H_res``, ``(n, n)`` or ``(B, n, n)``: positive definite (module docstring)."""
        return self.nominal.mass_matrix(q) + self.residual.mass_matrix(q)

    def coriolis(self, q: np.ndarray, qd: np.ndarray) -> np.ndarray:
        """``c_nom + c_res``, ``(n,)`` or ``(B, n)``."""
        return self.nominal.coriolis(q, qd) + self.residual.coriolis(q, qd)

    def gravity(self, q: np.ndarray) -> np.ndarray:
        """``g_nom + g_res``, ``(n,)`` or ``(B, n)``."""
        return self.nominal.gravity(q) + self.residual.gravity(q)

    def friction(self, qd: np.ndarray) -> np.ndarray:
        """Nominal plus residual friction torque at ``qd``, ``(n,)`` or ``(B, n)``."""
        return self.nominal.friction(qd) + self.residual.friction(qd)

    def energy(self, q: np.ndarray, qd: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        """Kinetic and potential energy ``(T, V)``, each the nominal plus the residual one (scalars
        for one state, ``(B,)`` for a batch)."""
        t_n, v_n = self.nominal.energy(q, qd)
        t_r, v_r = self.residual.energy(q, qd)
        return np.asarray(t_n) + np.asarray(t_r), np.asarray(v_n) + np.asarray(v_r)
