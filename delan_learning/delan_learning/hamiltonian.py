"""Structured Hamiltonian model: DeLaN's networks, the equations of motion in ``(q, p)``.

The Hamiltonian counterpart Lutter & Peters (2021) compare structured DeLaN with::

    H(q, p) = 1/2 p^T M(q)^-1 p + V(q),        p = M(q) qd
    qd = dH/dp,        pdot = -dH/dq|_p + tau - tau_f(qd)

with ``M = L L^T + eps I`` and ``V`` from the very networks of
:class:`~delan_learning.lagrangian.DelanModel` (held as the submodule ``delan``: the Cholesky
network, the potential network, DeLaN's data scales and its friction), so for the same weights it
is the same physical model as DeLaN. What differs is how the torque is computed: with
``pdot = d/dt (M qd) = M qdd + (dM/dt) qd``,

    tau = M qdd + (dM/dt) qd + dH/dq|_p + tau_f(qd)
    qdd = M^-1 (tau - tau_f - (dM/dt) qd - dH/dq|_p)          (forward model)

where ``dH/dq|_p`` is autograd of the Hamiltonian in ``q`` at fixed momentum (a Cholesky solve
with ``M`` inside) and ``(dM/dt) qd`` a Jacobian-vector product of ``q -> M(q) qd`` along ``qd``;
DeLaN instead evaluates the Lagrangian form ``-1/2 d/dq (qd^T M qd) + dV/dq`` by its analytic
passes. The two agree to rounding (``dH/dq|_p = -1/2 qd^T (dM/dq) qd + dV/dq``), which the tests
check; costs are several autograd passes per call, against DeLaN's three analytic ones.
"""

from __future__ import annotations

from typing import Any, Dict, Sequence, Tuple, cast

import torch

from delan_learning.lagrangian import DelanModel
from delan_learning.models import DynamicsModule, grad, graph_input


class HamiltonianModel(DynamicsModule):
    """``H(q, p) = 1/2 p^T M(q)^-1 p + V(q)`` with DeLaN's ``M`` and ``V`` (module docstring).

    Args:
        joint_types: ``'revolute' | 'continuous' | 'prismatic'`` per joint, in model order.
        **config: :class:`~delan_learning.lagrangian.DelanModel`'s arguments (width, depth,
            activation, friction, shared_trunk, eps, diag_offset), for the networks it holds.
    """

    kind = 'hamiltonian'
    #: ``forward_dynamics`` is differentiable in the weights, so the forward loss can train it
    differentiable_forward = True

    def __init__(self, joint_types: Sequence[str], **config: Any):
        super().__init__(joint_types)
        #: the Cholesky and potential networks, scales and friction: DeLaN's, reused whole
        self.delan = DelanModel(self.joint_types, **config)

    def config(self) -> Dict[str, Any]:
        """DeLaN's constructor arguments: the networks are DeLaN's, so a checkpoint rebuilds them
        the same way."""
        return self.delan.config()

    @property
    def use_friction(self) -> bool:
        """Whether the model learns a friction term (DeLaN's setting)."""
        return bool(self.delan.use_friction)

    @property
    def h_rel(self) -> torch.Tensor:
        """DeLaN's per-joint inertia scales ``(n,)`` (the trainer floors them for rollouts)."""
        return cast(torch.Tensor, self.delan.h_rel)

    @torch.no_grad()
    def init_scales(
        self, q: torch.Tensor, qd: torch.Tensor, qdd: torch.Tensor, tau: torch.Tensor
    ) -> None:
        """Set DeLaN's fixed data scales from training data ``(N, n)``; once per model."""
        self.delan.init_scales(q, qd, qdd, tau)
        self.scales_initialised.fill_(True)

    # -- the Hamiltonian ------------------------------------------------------------------------
    def momentum(self, q: torch.Tensor, qd: torch.Tensor) -> torch.Tensor:
        """``p = M(q) qd`` ``(B, n)``."""
        return (self.delan.mass_matrix(q) @ qd.unsqueeze(-1)).squeeze(-1)

    def hamiltonian(self, q: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
        """``H(q, p) = 1/2 |C^-1 p|^2 + V(q)`` ``(B,)`` with ``M = C C^T`` (Cholesky; M is
        positive definite, so it fails only on non-finite states, which give NaN)."""
        chol = torch.linalg.cholesky_ex(self.delan.mass_matrix(q)).L
        y = torch.linalg.solve_triangular(chol, p.unsqueeze(-1), upper=False)
        return 0.5 * y.square().sum((-2, -1)) + self.delan.potential(q)

    def _terms(
        self, q: torch.Tensor, qd: torch.Tensor, create_graph: bool
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        """``(M (B, n, n), (dM/dt) qd + dH/dq|_p (B, n))``; call under ``enable_grad``.

        ``q`` enters through two separate graph nodes: one for ``p = M(q) qd`` (whose
        derivative along ``qd`` is ``(dM/dt) qd``), one for ``H(q, p)``, so that the gradient in
        the second is taken at fixed ``p``."""
        q_p, q_h = graph_input(q), graph_input(q)
        M = self.delan.mass_matrix(q_p)
        p = (M @ qd.unsqueeze(-1)).squeeze(-1)
        u = torch.zeros_like(p).requires_grad_(True)  # (dM/dt) qd = J v by two vjps
        mdot_qd = grad((grad(p * u, q_p) * qd).sum(-1), u, create_graph)
        dhdq = grad(self.hamiltonian(q_h, p), q_h, create_graph)
        return M, mdot_qd + dhdq

    # -- dynamics -------------------------------------------------------------------------------
    def friction(self, qd: torch.Tensor) -> torch.Tensor:
        """Friction torque ``tau_f (B, n)`` at ``qd``: DeLaN's law and coefficients."""
        return self.delan.friction(qd)

    def inverse(self, q: torch.Tensor, qd: torch.Tensor, qdd: torch.Tensor) -> torch.Tensor:
        """``tau = M qdd + (dM/dt) qd + dH/dq|_p + tau_f`` ``(B, n)``; works under no_grad."""
        create = torch.is_grad_enabled()
        with torch.enable_grad():
            M, rest = self._terms(q, qd, create)
            tau = (M @ qdd.unsqueeze(-1)).squeeze(-1) + rest
        if self.use_friction:
            tau = tau + self.friction(qd)
        return tau if create else tau.detach()

    def forward_dynamics(
        self, q: torch.Tensor, qd: torch.Tensor, tau: torch.Tensor
    ) -> torch.Tensor:
        """``qdd = M^-1 (tau - tau_f - (dM/dt) qd - dH/dq|_p)`` ``(B, n)`` by a Cholesky solve.

        A non-finite state (a rollout that diverged) gives a NaN row, not an exception."""
        create = torch.is_grad_enabled()
        with torch.enable_grad():
            M, rest = self._terms(q, qd, create)
        rhs = tau - rest
        if self.use_friction:
            rhs = rhs - self.friction(qd)
        chol, info = torch.linalg.cholesky_ex(M if create else M.detach())
        qdd = torch.cholesky_solve(rhs.unsqueeze(-1), chol).squeeze(-1)
        qdd = torch.where((info == 0).unsqueeze(-1), qdd, torch.full_like(qdd, float('nan')))
        return qdd if create else qdd.detach()

    def mass_matrix(self, q: torch.Tensor) -> torch.Tensor:
        """``M(q) = L L^T + eps I`` ``(B, n, n)``: DeLaN's, the same for the same weights."""
        return self.delan.mass_matrix(q)

    def gravity(self, q: torch.Tensor) -> torch.Tensor:
        """``g(q) = dV/dq`` ``(B, n)``: DeLaN's analytic evaluation of the shared potential."""
        return self.delan.gravity(q)

    def coriolis(self, q: torch.Tensor, qd: torch.Tensor) -> torch.Tensor:
        """``(dM/dt) qd + dH/dq|_p - g`` ``(B, n)`` (the Hamiltonian's own evaluation)."""
        create = torch.is_grad_enabled()
        with torch.enable_grad():
            rest = self._terms(q, qd, create)[1]
        c = rest - self.gravity(q)
        return c if create else c.detach()

    def energy(self, q: torch.Tensor, qd: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """``(T, V)`` ``(B,)`` each, as DeLaN's (``T = 1/2 qd^T M qd = 1/2 p^T M^-1 p``)."""
        return self.delan.energy(q, qd)

    def total_energy(self, q: torch.Tensor, qd: torch.Tensor) -> torch.Tensor:
        """``H(q, M qd) = T + V`` ``(B,)``, the model's energy (up to a constant)."""
        T, V = self.energy(q, qd)
        return T + V
