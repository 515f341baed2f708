"""Black-box Lagrangian: one MLP for the scalar ``L(q, qd)``, the dynamics by autograd.

The unstructured Lagrangian variant that Lutter & Peters (2021) compare structured DeLaN with
(the "Lagrangian neural network" form): nothing is assumed about ``L`` beyond smoothness, and
Euler-Lagrange gives the torque from its derivatives::

    p   = dL/dqd                      generalised momentum (B, n)
    H   = d2L/dqd2                    "mass matrix" (B, n, n), a function of q AND qd
    tau = H qdd + (d2L/dqd dq) qd - dL/dq + tau_f(qd)
    E   = qd . dL/dqd - L             energy (the Hamiltonian); conserved when tau = tau_f

``tau_f`` is DeLaN's friction law with DeLaN's parametrisation (the very functions of
:class:`~delan_learning.lagrangian.DelanModel`, see :class:`BlackboxLagrangianModel`).

What the structure of DeLaN buys is visible here by its absence: ``H`` is *not* positive
definite (nor even invertible) by construction; there is no split into kinetic and potential
energy (``energy`` raises, ``total_energy`` is ``E``); and the forward model solves
``H qdd = tau - tau_f - (d2L/dqd dq) qd + dL/dq`` with a general (LU) solve, which fails or
blows up where the learned ``H`` is singular. ``E`` is still conserved by the model's own
frictionless dynamics wherever ``H`` is invertible: that holds for every Lagrangian without
explicit time dependence.

Derivatives are plain autograd (no analytic passes as in DeLaN): ``d/dt dL/dqd`` along
``(qd, qdd)`` is one Jacobian-vector product (two reverse passes, the double-vjp trick), so the
inverse model costs a constant number of passes in ``n``; ``H`` itself (forward model, mass
matrix) costs ``n`` more. Training differentiates through all of it (third derivatives of the
network), so the activation must be smooth (softplus or tanh, never ReLU).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple, cast

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from delan_learning.activations import ACTIVATIONS, activation
from delan_learning.features import JointFeatures
from delan_learning.friction import softplus_inverse
from delan_learning.lagrangian import DelanModel
from delan_learning.models import DynamicsModule, data_scales, grad, graph_input


class BlackboxLagrangianModel(DynamicsModule):
    """``L(q, qd) = e_scale * MLP([phi(q), qd * qd_gain])``; dynamics as in the module docstring.

    Fixed scales from the data (:meth:`init_scales`): ``e_scale`` is a typical energy (torque
    RMS times 1 rad, DeLaN's ``v_scale``) and ``qd_gain_i = sqrt(h_i / e_scale)`` with ``h_i``
    joint ``i``'s inertia estimate, so the kinetic energy ``1/2 sum h_i qd_i^2`` is
    ``e_scale * 1/2 |x|^2`` in the network's input ``x``: the Hessian the network has to learn
    is about the identity on every joint, whatever their inertias (a shoulder and a wrist differ
    by 1e4).

    Args:
        joint_types: ``'revolute' | 'continuous' | 'prismatic'`` per joint, in model order.
        width, depth: hidden units per layer and hidden layers of the MLP.
        activation: ``'softplus'`` (default) or ``'tanh'``; smooth, as training needs third
            derivatives.
        friction: learn DeLaN's viscous + smooth Coulomb friction; ``False`` fixes ``tau_f = 0``.
    """

    kind = 'blackbox_lagrangian'
    #: ``forward_dynamics`` is differentiable in the weights, so the forward loss can train it
    differentiable_forward = True
    #: registered buffers (torch's attribute typing of modules does not know them)
    e_scale: torch.Tensor
    qd_gain: torch.Tensor
    tau_scale: torch.Tensor

    def __init__(
        self,
        joint_types: Sequence[str],
        width: int = 64,
        depth: int = 2,
        activation: str = 'softplus',
        friction: bool = True,
    ):
        super().__init__(joint_types)
        if activation not in ACTIVATIONS:
            raise ValueError(f'activation {activation!r} not in {ACTIVATIONS}')
        if width < 1 or depth < 1:
            raise ValueError('width and depth must be >= 1')
        n = self.n_dof
        self.width, self.depth, self.activation = int(width), int(depth), activation
        self.use_friction = bool(friction)
        self.features = JointFeatures(self.joint_types)
        n_in = self.features.n_features + n
        self.layers = nn.ModuleList(
            nn.Linear(n_in if k == 0 else width, width) for k in range(depth)
        )
        self.head = nn.Linear(width, 1)
        for lin in cast(List[nn.Linear], list(self.layers)) + [self.head]:
            nn.init.xavier_normal_(lin.weight)
            nn.init.zeros_(lin.bias)
        self.register_buffer('e_scale', torch.ones(()))
        self.register_buffer('qd_gain', torch.ones(n))
        self.register_buffer('tau_scale', torch.ones(n))  # friction's unit, as in DeLaN
        if self.use_friction:
            start = softplus_inverse(0.02)  # DeLaN's start: 2 % of each joint's torque spread
            self.friction_raw = nn.Parameter(torch.full((2, n), start))  # (viscous, coulomb)

    def config(self) -> Dict[str, Any]:
        """JSON-able constructor arguments (without ``joint_types``): what a checkpoint stores to
        rebuild the model."""
        return {
            'width': self.width,
            'depth': self.depth,
            'activation': self.activation,
            'friction': self.use_friction,
        }

    @torch.no_grad()
    def init_scales(
        self, q: torch.Tensor, qd: torch.Tensor, qdd: torch.Tensor, tau: torch.Tensor
    ) -> None:
        """Set the fixed scales ``e_scale``, ``qd_gain`` and the friction's torque unit from
        training data ``(N, n)`` (class docstring)."""
        s = data_scales(
            *(
                np.asarray(torch.as_tensor(x).detach().cpu(), dtype=np.float64)
                for x in (q, qd, qdd, tau)
            )
        )
        self.e_scale.fill_(float(s['v_scale']))
        self.qd_gain.copy_(torch.as_tensor(np.sqrt(s['h_joint'] / s['v_scale'])))
        self.tau_scale.copy_(torch.as_tensor(s['tau_std']))
        self.scales_initialised.fill_(True)

    # -- friction: DeLaN's own functions --------------------------------------------------------
    # ``DelanModel``'s methods, called on this model: they read ``use_friction``,
    # ``friction_raw (2, n)`` and ``tau_scale (n,)``, which it holds with DeLaN's meaning, so
    # friction is the same law with the same parametrisation (the cast is only for the typing).
    def friction_coefficients(self) -> Tuple[torch.Tensor, ...]:
        """Non-negative ``(viscous, coulomb)`` ``(n,)`` each; zeros when friction is off."""
        return DelanModel.friction_coefficients(cast(DelanModel, self))

    def friction(self, qd: torch.Tensor) -> torch.Tensor:
        """``tau_f = viscous * qd + coulomb * tanh(qd / COULOMB_SMOOTHING)`` ``(B, n)``."""
        return DelanModel.friction(cast(DelanModel, self), qd)

    # -- the Lagrangian and its derivatives -----------------------------------------------------
    def lagrangian(self, q: torch.Tensor, qd: torch.Tensor) -> torch.Tensor:
        """``L(q, qd)`` ``(B,)`` from ``q, qd (B, n)``."""
        h = torch.cat((self.features(q), qd * self.qd_gain), dim=-1)
        for lin in cast(Sequence[nn.Linear], self.layers):
            h = activation(F.linear(h, lin.weight, lin.bias), self.activation)
        return self.e_scale * F.linear(h, self.head.weight, self.head.bias)[..., 0]

    def _first(
        self, q: torch.Tensor, qd: torch.Tensor
    ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(q_node, qd_node, L, dL/dq, dL/dqd)``: first derivatives, graph kept (call under
        ``enable_grad``)."""
        qn, qdn = graph_input(q), graph_input(qd)
        L = self.lagrangian(qn, qdn)
        return qn, qdn, L, grad(L, qn), grad(L, qdn)

    def _momentum_rate(
        self,
        qn: torch.Tensor,
        qdn: torch.Tensor,
        p: torch.Tensor,
        dq: torch.Tensor,
        dqd: Optional[torch.Tensor],
        create_graph: bool,
    ) -> torch.Tensor:
        """``(dp/dq) dq + (dp/dqd) dqd`` ``(B, n)`` for ``p = dL/dqd``: one Jacobian-vector
        product by two reverse passes (``J^T u``, then its gradient in ``u`` along the
        direction)."""
        u = torch.zeros_like(p).requires_grad_(True)
        pu = p * u
        along = (grad(pu, qn) * dq).sum(-1)
        if dqd is not None:
            along = along + (grad(pu, qdn) * dqd).sum(-1)
        return grad(along, u, create_graph)

    def _hessian(self, qdn: torch.Tensor, p: torch.Tensor, create_graph: bool) -> torch.Tensor:
        """``H = dp/dqd = d2L/dqd2`` ``(B, n, n)``, one reverse pass per row."""
        return torch.stack([grad(p[..., i], qdn, create_graph) for i in range(self.n_dof)], -2)

    # -- dynamics -------------------------------------------------------------------------------
    def inverse(self, q: torch.Tensor, qd: torch.Tensor, qdd: torch.Tensor) -> torch.Tensor:
        """``tau = d/dt dL/dqd - dL/dq + tau_f`` ``(B, n)``; works under ``torch.no_grad``."""
        create = torch.is_grad_enabled()
        with torch.enable_grad():
            qn, qdn, _, dLdq, p = self._first(q, qd)
            tau = self._momentum_rate(qn, qdn, p, qd, qdd, create) - dLdq
        if self.use_friction:
            tau = tau + self.friction(qd)
        return tau if create else tau.detach()

    def forward_dynamics(
        self, q: torch.Tensor, qd: torch.Tensor, tau: torch.Tensor
    ) -> torch.Tensor:
        """``qdd = H^-1 (tau - tau_f - (d2L/dqd dq) qd + dL/dq)`` ``(B, n)`` by LU.

        ``H`` may be indefinite or singular (nothing in the structure excludes it): the rows of
        states where it is singular come back NaN, so one bad state marks its own rollout as
        diverged instead of failing the whole batch."""
        create = torch.is_grad_enabled()
        with torch.enable_grad():
            qn, qdn, _, dLdq, p = self._first(q, qd)
            rhs = tau + dLdq - self._momentum_rate(qn, qdn, p, qd, None, create)
            H = self._hessian(qdn, p, create)
        if self.use_friction:
            rhs = rhs - self.friction(qd)
        qdd, info = torch.linalg.solve_ex(H, rhs)
        qdd = torch.where((info == 0).unsqueeze(-1), qdd, torch.full_like(qdd, float('nan')))
        return qdd if create else qdd.detach()

    def mass_matrix(self, q: torch.Tensor, qd: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``H = d2L/dqd2`` ``(B, n, n)`` at ``(q, qd)`` (``qd`` defaults to rest: a black-box
        ``L`` makes it depend on the velocity too). Returned as learned: symmetric, but neither
        positive definite nor invertible by construction."""
        create = torch.is_grad_enabled()
        qd = torch.zeros_like(q) if qd is None else qd
        with torch.enable_grad():
            _, qdn, _, _, p = self._first(q, qd)
            H = self._hessian(qdn, p, create)
        return H if create else H.detach()

    def gravity(self, q: torch.Tensor) -> torch.Tensor:
        """``g(q) = -dL/dq`` at rest ``(B, n)``: the torque that holds the arm still."""
        return self.inverse(q, torch.zeros_like(q), torch.zeros_like(q))

    def coriolis(self, q: torch.Tensor, qd: torch.Tensor) -> torch.Tensor:
        """``c(q, qd) = (d2L/dqd dq) qd - dL/dq - g(q)`` ``(B, n)``: the torque at ``qdd = 0``
        less gravity and friction."""
        tau = self.inverse(q, qd, torch.zeros_like(qd)) - self.gravity(q)
        return tau - self.friction(qd) if self.use_friction else tau

    def total_energy(self, q: torch.Tensor, qd: torch.Tensor) -> torch.Tensor:
        """``E = qd . dL/dqd - L`` ``(B,)``: the model's energy (defined up to a constant)."""
        create = torch.is_grad_enabled()
        with torch.enable_grad():
            _, _, L, _, p = self._first(q, qd)
            E = (qd * p).sum(-1) - L
        return E if create else E.detach()

    def energy(self, q: torch.Tensor, qd: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """Always NotImplementedError: a black-box ``L`` does not split into kinetic and potential
        energy (:meth:`total_energy` is its energy)."""
        raise NotImplementedError(
            'a black-box Lagrangian has no separate kinetic and potential energy; '
            'total_energy(q, qd) is its energy E = qd . dL/dqd - L'
        )
