"""Any learned torch model (DeLaN, the residual, the MLP baseline) behind the numpy
:class:`~delan_common.dynamics.DynamicsModel` protocol, converting arrays at the boundary; a model
raises ``NotImplementedError`` for the terms it does not have."""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import torch

from delan_learning.models import DynamicsModule, joint_names_of


class TorchDynamics:
    """Any learned torch model behind the numpy ``DynamicsModel`` protocol.

    Arrays are converted to the model's device and dtype and back to float64 numpy; calls run
    under ``torch.no_grad`` (DeLaN needs no autograd; the MLP's numerical forward model enables
    it locally). Methods the model does not define raise ``NotImplementedError``.
    """

    #: the learner's version of the weights, where a loader records it
    model_version: int = 0

    def __init__(self, model: DynamicsModule, joint_names: Optional[Sequence[str]] = None):
        self.model = model.eval()
        self.joint_names = joint_names_of(model, joint_names)
        self.n_dof = model.n_dof

    def _t(self, x) -> torch.Tensor:
        return torch.as_tensor(np.asarray(x, dtype=np.float64)).to(
            device=self.model.device, dtype=self.model.dtype
        )

    def _call(self, fn, *xs):
        arrays = [np.asarray(x, dtype=np.float64) for x in xs]
        single = arrays[0].ndim == 1
        ts = [self._t(a[None] if single else a) for a in arrays]
        with torch.no_grad():
            out = fn(*ts)
        if isinstance(out, tuple):
            return tuple(
                o.detach().cpu().double().numpy()[0]
                if single
                else o.detach().cpu().double().numpy()
                for o in out
            )
        out = out.detach().cpu().double().numpy()
        return out[0] if single else out

    def inverse(self, q, qd, qdd):
        """Torque ``(n,)`` or ``(B, n)`` for the motion ``(q, qd, qdd)`` (the model's inverse
        dynamics)."""
        return self._call(self.model.inverse, q, qd, qdd)

    def forward(self, q, qd, tau):
        """Acceleration ``(n,)`` or ``(B, n)`` that torques ``tau`` give at ``(q, qd)`` (the
        model's ``forward_dynamics``)."""
        return self._call(self.model.forward_dynamics, q, qd, tau)

    def mass_matrix(self, q):
        """Inertia matrix ``H(q)``, ``(n, n)`` or ``(B, n, n)``."""
        return self._call(self.model.mass_matrix, q)

    def coriolis(self, q, qd):
        """Coriolis/centrifugal torque ``c(q, qd)``, ``(n,)`` or ``(B, n)``."""
        return self._call(self.model.coriolis, q, qd)

    def gravity(self, q):
        """Gravity torque ``g(q)``, ``(n,)`` or ``(B, n)``."""
        return self._call(self.model.gravity, q)

    def friction(self, qd):
        """Learned friction torque at velocities ``qd``, ``(n,)`` or ``(B, n)``."""
        return self._call(self.model.friction, qd)

    def energy(self, q, qd):
        """Kinetic and potential energy ``(T, V)``: scalars for one state, ``(B,)`` each for a
        batch."""
        return self._call(self.model.energy, q, qd)
