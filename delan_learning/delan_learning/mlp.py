"""Black-box baseline: an MLP from ``(q, qd, qdd)`` straight to ``tau``.

It gets the same joint features as DeLaN (``sin``/``cos`` of angles) and standardised velocities
and accelerations, so the comparison isolates the Lagrangian structure. It has no H, c, g,
friction or energy: those methods raise ``NotImplementedError``. Its forward model is numerical
(see :meth:`MlpInverseModel.forward_dynamics`).
"""

from __future__ import annotations

from typing import Any, Dict, List, Sequence, cast

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from delan_learning.activations import ACTIVATIONS, activation
from delan_learning.features import JointFeatures
from delan_learning.models import DynamicsModule, data_scales


class MlpInverseModel(DynamicsModule):
    """``tau = tau_mean + tau_std * MLP([phi(q), qd / qd_std, qdd / qdd_std])``.

    Args:
        joint_types: as for :class:`~delan_learning.lagrangian.DelanModel`.
        width, depth, activation: hidden layers (same meaning as DeLaN's).
    """

    kind = 'mlp'
    #: registered buffers (torch's attribute typing of modules does not know them)
    qd_scale: torch.Tensor
    qdd_scale: torch.Tensor
    tau_mean: torch.Tensor
    tau_scale: torch.Tensor

    def __init__(
        self,
        joint_types: Sequence[str],
        width: int = 64,
        depth: int = 2,
        activation: str = 'softplus',
    ):
        super().__init__(joint_types)
        if activation not in ACTIVATIONS:
            raise ValueError(f'activation {activation!r} not in {ACTIVATIONS}')
        n = self.n_dof
        self.width, self.depth, self.activation = int(width), int(depth), activation
        self.features = JointFeatures(self.joint_types)
        n_in = self.features.n_features + 2 * n
        self.layers = nn.ModuleList(
            nn.Linear(n_in if k == 0 else width, width) for k in range(depth)
        )
        self.head = nn.Linear(width, n)
        for lin in cast(List[nn.Linear], list(self.layers)) + [self.head]:
            nn.init.xavier_normal_(lin.weight)
            nn.init.zeros_(lin.bias)
        self.register_buffer('qd_scale', torch.ones(n))
        self.register_buffer('qdd_scale', torch.ones(n))
        self.register_buffer('tau_mean', torch.zeros(n))
        self.register_buffer('tau_scale', torch.ones(n))

    def config(self) -> Dict[str, Any]:
        """JSON-able constructor arguments (without ``joint_types``): what a checkpoint stores to
        rebuild the model."""
        return {'width': self.width, 'depth': self.depth, 'activation': self.activation}

    @torch.no_grad()
    def init_scales(self, q, qd, qdd, tau) -> None:
        """Set the fixed input (velocity, acceleration) and output (torque mean and spread) scales
        from training data ``(N, n)``, so the network works at unit scale."""
        s = data_scales(
            *(
                np.asarray(torch.as_tensor(x).detach().cpu(), dtype=np.float64)
                for x in (q, qd, qdd, tau)
            )
        )
        self.qd_scale.copy_(torch.as_tensor(s['qd_std']))
        self.qdd_scale.copy_(torch.as_tensor(s['qdd_std']))
        self.tau_mean.copy_(torch.as_tensor(s['tau_mean']))
        self.tau_scale.copy_(torch.as_tensor(s['tau_std']))
        self.scales_initialised.fill_(True)

    def inverse(self, q, qd, qdd):
        """Torque ``(B, n)``: the network of the joint features and the scaled ``qd, qdd`` ``(B,
        n)``, mapped back to torque units."""
        h = torch.cat((self.features(q), qd / self.qd_scale, qdd / self.qdd_scale), dim=-1)
        for lin in self.layers:
            h = activation(F.linear(h, lin.weight, lin.bias), self.activation)
        return self.tau_mean + self.tau_scale * F.linear(h, self.head.weight, self.head.bias)

    def forward_dynamics(self, q, qd, tau, iterations: int = 20, tol: float = 1e-9):
        """``qdd`` solving ``MLP(q, qd, qdd) = tau`` by Newton's method.

        The Jacobian ``d tau / d qdd`` (the MLP's implicit "mass matrix") is exact, from
        ``torch.func``; start at ``qdd = 0``; stop when the torque residual is below ``tol``
        times the torque scale, or after ``iterations``. Converges where the learned torque is
        close to affine in ``qdd`` (as true dynamics are), which holds near the training data but
        is not guaranteed far from it; unlike DeLaN nothing keeps the Jacobian invertible.
        """

        def single(q1, qd1, qdd1):
            return self.inverse(q1[None], qd1[None], qdd1[None])[0]

        jac = torch.func.vmap(torch.func.jacrev(single, argnums=2))
        qdd = torch.zeros_like(tau)
        for _ in range(iterations):
            with torch.no_grad():
                res = self.inverse(q, qd, qdd) - tau
            if float((res.abs() / self.tau_scale).max()) < tol:
                break
            with torch.enable_grad():
                J = jac(q, qd, qdd).detach()
            qdd = qdd - torch.linalg.solve(J, res.unsqueeze(-1)).squeeze(-1)
        return qdd.detach()
