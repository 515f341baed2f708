"""The one interface every dynamics model of the suite offers (DeLaN, MLP, Pinocchio, identified).

Controllers, the demo and the evaluation hold any of them through this protocol. Arrays are numpy
float64 in the model's joint order, shaped ``(n,)`` for one state or ``(B, n)`` for a batch;
matrices ``(n, n)`` or ``(B, n, n)``. Torques follow

    tau = H(q) qdd + c(q, qd) + g(q) + tau_f(qd)

with ``tau_f`` the dissipative friction torque the motors must overcome.
"""

from __future__ import annotations

from typing import List, Protocol, Tuple, Union, runtime_checkable

import numpy as np

#: Velocity scale [rad/s or m/s] of the smooth Coulomb term
#: ``coulomb * tanh(qd / COULOMB_SMOOTHING)``.
#: Shared by the plant, the URDF friction model, identification and DeLaN, so all mean the same.
COULOMB_SMOOTHING = 0.05

#: An energy [J] of :meth:`DynamicsModel.energy`, ``(...)``: an array for a batch of states, a
#: numpy scalar for one state.
Energy = Union[np.ndarray, np.float64]


def friction_torque(qd: np.ndarray, viscous: np.ndarray, coulomb: np.ndarray) -> np.ndarray:
    """Viscous + smooth Coulomb friction torque, ``(..., n)``."""
    return viscous * qd + coulomb * np.tanh(qd / COULOMB_SMOOTHING)


@runtime_checkable
class DynamicsModel(Protocol):
    """What a controller needs of a dynamics model: inverse dynamics and its terms, in the
    model's joint order."""

    joint_names: List[str]

    def inverse(self, q: np.ndarray, qd: np.ndarray, qdd: np.ndarray) -> np.ndarray:
        """Torque needed for the motion: ``(..., n)``."""

    def forward(self, q: np.ndarray, qd: np.ndarray, tau: np.ndarray) -> np.ndarray:
        """Acceleration produced by the torque: ``(..., n)``."""

    def mass_matrix(self, q: np.ndarray) -> np.ndarray:
        """``H(q)``: ``(..., n, n)``, symmetric positive definite."""

    def coriolis(self, q: np.ndarray, qd: np.ndarray) -> np.ndarray:
        """``c(q, qd) = dH/dt qd - 1/2 d/dq (qd^T H qd)``: ``(..., n)``."""

    def gravity(self, q: np.ndarray) -> np.ndarray:
        """``g(q) = dV/dq``: ``(..., n)``."""

    def friction(self, qd: np.ndarray) -> np.ndarray:
        """``tau_f(qd)``: ``(..., n)``."""

    def energy(self, q: np.ndarray, qd: np.ndarray) -> Tuple[Energy, Energy]:
        """Kinetic and potential energy ``(T, V)``, each ``(...)``, in J."""


def gravity_stiffness(model: DynamicsModel, q: np.ndarray, step: float = 1e-6) -> np.ndarray:
    """``dg/dq (n, n)`` at ``q``: negative eigenvalues pull the arm away from ``q`` (an
    inverted pendulum), positive ones pull it back (a hanging one)."""
    q = np.asarray(q, dtype=np.float64)
    cols = [
        (np.asarray(model.gravity(q + step * e)) - np.asarray(model.gravity(q - step * e)))
        / (2.0 * step)
        for e in np.eye(q.size)
    ]
    return np.array(cols).T


def pull_away(stiffness: np.ndarray, mass_matrix: np.ndarray) -> float:
    """How strongly [1/s^2] a stiffness ``(n, n)`` (of :func:`gravity_stiffness`, or a part of
    it) pulls an arm of ``mass_matrix`` ``(n, n)`` away from its posture: the largest
    ``lambda`` of ``-K v = lambda H v`` for the symmetric part ``K``; 0 where it only pulls
    back. A feedback loop of stiffness ``omega^2 H`` holds the posture only above it."""
    k = np.asarray(stiffness, dtype=np.float64)
    inv = np.linalg.inv(np.linalg.cholesky(np.asarray(mass_matrix, dtype=np.float64)))
    return max(0.0, float(np.linalg.eigvalsh(inv @ (-0.5 * (k + k.T)) @ inv.T).max()))
