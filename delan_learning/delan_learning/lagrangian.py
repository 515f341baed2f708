"""Deep Lagrangian Network (Lutter, Ritter & Peters, ICLR 2019; Lutter & Peters 2021).

The Lagrangian ``L = 1/2 qd^T H(q) qd - V(q)`` is learned, not the torque: Euler-Lagrange gives

    tau = H(q) qdd + c(q, qd) + g(q) + tau_f(qd)
    c   = dH/dt qd - 1/2 d/dq (qd^T H qd),      g = dV/dq,
    tau_f = viscous * qd + coulomb * tanh(qd / COULOMB_SMOOTHING)    ('coulomb_viscous')

(or the asymmetric Stribeck law ``friction_model='stribeck'``, :mod:`delan_learning.friction`)

with ``H = L L^T + eps I`` and ``L(q) = sqrt(h_scale D) Lnet(q)`` (``D`` a diagonal of per-joint
inertia scales from the data, ``h_rel``) lower triangular with a strictly
positive diagonal (softplus + offset), so ``H`` is symmetric positive definite for every weight
and the model conserves energy up to the (non-negative) friction it learns. ``h_scale`` and
``v_scale`` (``V = v_scale * Vnet``) are fixed typical magnitudes from the data
(:func:`~delan_learning.models.data_scales`) so the networks work at unit scale.

Derivatives are analytic: no autograd is needed to evaluate the model (it runs under
``torch.no_grad`` and the numpy fast path mirrors it line by line), and the cost does not grow
with the number of joints ``n``:

* ``dH/dt`` needs only ``dL/dt = dL/dq qd``: one forward-mode (tangent) pass through the network
  along ``dz = J_phi(q) qd``.
* ``1/2 d/dq (qd^T H qd)`` and ``dV/dq`` are gradients of scalars: one reverse-mode pass whose
  output cotangent is closed-form, ``d(1/2 |L^T qd|^2)/dL = qd (L^T qd)^T``, and ``v_scale`` for V.

So an inverse-dynamics call costs three network passes, where the reference implementation's
full Jacobian ``dL/dq`` costs ``1 + n`` (8 for a 7-DoF arm), and all of it is a few dozen tensor
ops, which is what bounds speed on a CPU at these sizes.

``L`` is kept as the vector ``l`` of its ``n(n+1)/2`` non-zeros (diagonal first, then the strict
lower triangle row by row); products with ``L`` are two small dense matmuls with 0/1 selector
matrices (``L^T x = (l * x R) C``, ``L y = (l * y C^T) R^T``), so no batched tiny matrices are
built. The potential is one more output column of the same head (index ``n_l``).

Network layout: H and V come from two *separate* networks by default (``shared_trunk=False``),
evaluated side by side as one batched matmul per layer (weights ``(2, in, W)``), so separation
costs no extra ops. Separate networks cannot trade hidden features between the kinetic and the
potential part, which keeps the split of the torque into ``H qdd + c`` and ``g`` (what is
compared with Pinocchio) well conditioned; a shared trunk (the ICLR 2019 layout, half the hidden
FLOPs) is ``shared_trunk=True``.

A fixed-base arm's mass matrix does not depend on the position of its first joint: that joint
turns (or slides) everything that moves rigidly, and kinetic energy does not change under a
rigid motion. ``inertia_invariant_joints`` names such joints
(:attr:`~delan_common.urdf_joints.RobotDescription.inertia_invariant_joints`); the H network's
input weights from their features are held at zero (``input_mask``), so the learned H, and with
it the Coriolis terms, cannot depend on them. The potential keeps them: gravity about a tilted
axis, or a spring, depends on that joint. Without the mask the network learns a spurious
``dH/dq`` of the joint from noise, and a Coriolis torque with it.
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from delan_learning import friction as friction_law
from delan_learning.activations import ACTIVATIONS, activation_and_slope
from delan_learning.features import JointFeatures
from delan_learning.models import DynamicsModule, data_scales

#: Scale of the output layer's Xavier init (see DelanModel.__init__).
HEAD_INIT_GAIN = 0.1


def tril_layout(n: int) -> Tuple[np.ndarray, np.ndarray]:
    """Row and column of each entry of ``l``: diagonal first, then strict lower row-major."""
    rows, cols = np.tril_indices(n, -1)
    return (
        np.concatenate([np.arange(n), rows]).astype(np.int64),
        np.concatenate([np.arange(n), cols]).astype(np.int64),
    )


class DynamicsTerms(NamedTuple):
    """All terms of the equation of motion for a batch: ``H (B,n,n)``, the others ``(B, n)``."""

    H: torch.Tensor
    c: torch.Tensor
    g: torch.Tensor
    tau_f: torch.Tensor


class _Pass(NamedTuple):
    """Values of one network evaluation that the derivative passes reuse (internal)."""

    s: torch.Tensor  # sin of the angular joints (B, n_a)
    c: torch.Tensor  # cos of the angular joints (B, n_a)
    slopes: list  # activation slopes per hidden layer, each (K, B, W)
    out: torch.Tensor  # head output (B, P): raw l entries, then Vnet
    l: torch.Tensor  # L's non-zeros (B, P) (column n_l unused)
    slope: torch.Tensor  # dl / d out (B, P)
    ldot: Optional[torch.Tensor]  # dl/dt along qd (B, P) (column n_l unused)


class DelanModel(DynamicsModule):
    """Structured Lagrangian dynamics model; see the module docstring for the equations.

    Args:
        joint_types: ``'revolute' | 'continuous' | 'prismatic'`` per joint, in model order.
        width, depth: hidden units per layer and number of hidden layers of each network.
        activation: ``'softplus'`` (default, as the reference) or ``'tanh'``.
        friction: learn friction; ``False`` fixes ``tau_f = 0``.
        friction_model: its law, ``'coulomb_viscous'`` (viscous + smooth symmetric Coulomb) or
            ``'stribeck'`` (viscous + asymmetric Coulomb + Stribeck); see
            :mod:`~delan_learning.friction`.
        shared_trunk: one hidden network for H and V instead of two.
        inertia_invariant_joints: model indices of joints H does not depend on (see the module
            docstring); needs separate networks (``shared_trunk=False``).
        eps: ``H = L L^T + eps I`` (physical units; keeps H invertible whatever L does).
        diag_offset: added to the softplus on ``Lnet``'s diagonal (network units).
    """

    kind = 'delan'
    #: ``forward_dynamics`` is differentiable in the weights, so the forward loss can train it
    differentiable_forward = True

    # buffers (register_buffer), declared for the type checker
    head_mask: torch.Tensor  # (K, W, P)
    sel_r: torch.Tensor  # (n, P)
    sel_c: torch.Tensor  # (P, n)
    sel_s: torch.Tensor  # (P, n * n)
    v_col: torch.Tensor  # (P,)
    diag_mask: torch.Tensor  # (P,) bool
    eye: torch.Tensor  # (n, n)
    input_mask: torch.Tensor  # (K, m, 1)
    h_scale: torch.Tensor  # ()
    h_rel: torch.Tensor  # (n,)
    v_scale: torch.Tensor  # ()
    tau_scale: torch.Tensor  # (n,)

    def __init__(
        self,
        joint_types: Sequence[str],
        width: int = 64,
        depth: int = 2,
        activation: str = 'softplus',
        friction: bool = True,
        shared_trunk: bool = False,
        eps: float = 1e-6,
        diag_offset: float = 1e-3,
        friction_model: str = friction_law.DEFAULT_FRICTION_MODEL,
        inertia_invariant_joints: Sequence[int] = (),
    ):
        super().__init__(joint_types)
        if activation not in ACTIVATIONS:
            raise ValueError(f'activation {activation!r} not in {ACTIVATIONS}')
        if width < 1 or depth < 1:
            raise ValueError('width and depth must be >= 1')
        n = self.n_dof
        self.width, self.depth, self.activation = int(width), int(depth), activation
        self.use_friction, self.shared_trunk = bool(friction), bool(shared_trunk)
        self.friction_model = friction_law.check_friction_model(friction_model)
        self.eps, self.diag_offset = float(eps), float(diag_offset)
        self.features = JointFeatures(self.joint_types)
        K = 1 if shared_trunk else 2
        self.inertia_invariant_joints = sorted({int(j) for j in inertia_invariant_joints})
        if any(not 0 <= j < n for j in self.inertia_invariant_joints):
            raise ValueError(
                f'inertia_invariant_joints {self.inertia_invariant_joints}: a {n}-joint model '
                f'has joints 0 to {n - 1}'
            )
        if self.inertia_invariant_joints and shared_trunk:
            raise ValueError('inertia_invariant_joints needs separate H and V networks')
        self.n_l = n * (n + 1) // 2
        P = self.n_l + 1  # head outputs: L's entries, then V
        # hidden layers of K networks side by side: weights (K, in, W), biases (K, 1, W)
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        for k in range(depth):
            fan_in = self.features.n_features if k == 0 else width
            std = math.sqrt(2.0 / (fan_in + width))  # Xavier-normal per network
            self.weights.append(nn.Parameter(torch.randn(K, fan_in, width) * std))
            self.biases.append(nn.Parameter(torch.zeros(K, 1, width)))
        # network 0 (H) does not see the features of inertia-invariant joints
        input_mask = torch.ones(K, self.features.n_features, 1)
        for j in self.inertia_invariant_joints:
            input_mask[0, self.features.columns(j)] = 0.0
        self.register_buffer('input_mask', input_mask, persistent=False)
        with torch.no_grad():
            self.weights[0].mul_(input_mask)  # the stored weights, as exported, are the model's
        # head (K, W, P): network 0 feeds the L columns, network K-1 the V column
        head_mask = torch.ones(K, width, P)
        if K == 2:
            head_mask[0, :, self.n_l :] = 0.0
            head_mask[1, :, : self.n_l] = 0.0
        # small head: at start L ~ (softplus(0) + offset) sqrt(h_scale) I, so H starts near
        # 0.48 h_scale I and V near flat. A large random H at start gives large torque errors
        # whose first updates can drive the diagonal into softplus' flat tail (dead H network).
        self.head_weight = nn.Parameter(
            torch.randn(K, width, P) * math.sqrt(2.0 / (width + P)) * HEAD_INIT_GAIN * head_mask
        )
        self.head_bias = nn.Parameter(torch.zeros(P))
        self.register_buffer('head_mask', head_mask, persistent=False)
        rows, cols = tril_layout(n)
        e = np.arange(self.n_l)
        R = np.zeros((n, P))
        R[rows, e] = 1.0  # x @ R: x_{row(e)} per entry
        C = np.zeros((P, n))
        C[e, cols] = 1.0  # v @ C: sum of entries per column
        S = np.zeros((P, n * n))
        S[e, rows * n + cols] = 1.0  # l @ S: L flattened row-major
        diag = np.zeros(P, dtype=bool)
        diag[:n] = True
        v_col = np.zeros(P)
        v_col[self.n_l] = 1.0
        for name, arr in (('sel_r', R), ('sel_c', C), ('sel_s', S), ('v_col', v_col)):
            self.register_buffer(name, torch.as_tensor(arr, dtype=torch.float32), persistent=False)
        self.register_buffer('diag_mask', torch.as_tensor(diag), persistent=False)
        self.register_buffer('eye', torch.eye(n), persistent=False)
        # fixed scales set from data (data_scales), saved with the weights
        self.register_buffer('h_scale', torch.ones(()))
        # per-joint inertia scale relative to h_scale: L's row i is scaled by sqrt(h_rel_i), so
        # H = D^1/2 Lnet Lnet^T D^1/2 (still positive definite). An arm's shoulder and last
        # wrist joint differ by 1e4 in inertia; one scalar scale would start the wrist's H at
        # 1e3 times its value and leave the network to unlearn that.
        self.register_buffer('h_rel', torch.ones(n))
        self.register_buffer('v_scale', torch.ones(()))
        self.register_buffer('tau_scale', torch.ones(n))
        if self.use_friction:
            # (F, n): rows friction_law.COEFFICIENTS[friction_model], before softplus and unit
            self.friction_raw = nn.Parameter(friction_law.initial_raw(friction_model, n))

    #: buffers a checkpoint written before they existed lacks, with the value that reproduces
    #: that checkpoint's model (a single inertia scale: h_rel = 1)
    STATE_DEFAULTS = {'h_rel': lambda model: torch.ones_like(model.h_rel)}

    def config(self) -> Dict[str, Any]:
        """JSON-able constructor arguments (without ``joint_types``): what a checkpoint stores to
        rebuild the model."""
        return {
            'width': self.width,
            'depth': self.depth,
            'activation': self.activation,
            'friction': self.use_friction,
            'shared_trunk': self.shared_trunk,
            'eps': self.eps,
            'diag_offset': self.diag_offset,
            'friction_model': self.friction_model,
            'inertia_invariant_joints': list(self.inertia_invariant_joints),
        }

    @torch.no_grad()
    def init_scales(self, q, qd, qdd, tau) -> None:
        """Set the fixed inertia, potential and torque scales from training data ``(N, n)``
        (:func:`data_scales`) and, for the Stribeck law, start its coefficients at a least-squares
        fit."""
        arrays = [
            np.asarray(torch.as_tensor(x).detach().cpu(), dtype=np.float64)
            for x in (q, qd, qdd, tau)
        ]
        s = data_scales(*arrays)
        self.h_scale.fill_(float(s['h_scale']))
        self.h_rel.copy_(torch.as_tensor(s['h_joint'] / s['h_scale']))
        self.v_scale.fill_(float(s['v_scale']))
        self.tau_scale.copy_(torch.as_tensor(s['tau_std']))
        if self.use_friction and self.friction_model == 'stribeck':
            # the Stribeck law starts at a least-squares fit (fit_stribeck says why)
            q_, qd_, qdd_, tau_ = arrays
            coef = friction_law.fit_stribeck(q_, qd_, qdd_, tau_, tau_scale=s['tau_std'])
            self.friction_raw.copy_(friction_law.raw_of(coef, s['tau_std']))
        self.scales_initialised.fill_(True)

    # -- network passes -------------------------------------------------------------------------
    def layer_weights(self) -> List[torch.Tensor]:
        """The hidden layers' weights ``(K, in, W)``, the first one masked (``input_mask``)."""
        weights = list(self.weights)
        if self.inertia_invariant_joints:
            weights[0] = weights[0] * self.input_mask
        return weights

    def _network(self, q: torch.Tensor, qd: Optional[torch.Tensor] = None) -> _Pass:
        """Forward pass, plus the tangent pass along ``qd`` when given."""
        z, s, c = self.features.encode(q)
        weights = self.layer_weights()
        K = weights[0].shape[0]
        h = z.unsqueeze(0).expand(K, -1, -1)
        slopes = []
        for w, b in zip(weights, self.biases):
            h, d = activation_and_slope(torch.baddbmm(b, h, w), self.activation)
            slopes.append(d)
        head = self.head_weight * self.head_mask
        out = torch.matmul(h, head).sum(0) + self.head_bias
        root = self.entry_root()
        l = torch.where(self.diag_mask, F.softplus(out, 1.0, 40.0) + self.diag_offset, out) * root
        slope = torch.where(self.diag_mask, torch.sigmoid(out), torch.ones_like(out)) * root
        ldot = None
        if qd is not None:
            # only network 0 (the H network) needs a time derivative
            t = self.features.tangent(s, c, qd)
            for w, d in zip(weights, slopes):
                t = torch.matmul(t, w[0]) * d[0]
            ldot = torch.matmul(t, head[0]) * slope
        return _Pass(s, c, slopes, out, l, slope, ldot)

    def entry_root(self) -> torch.Tensor:
        """``(P,)`` factor of each head output: sqrt(h_scale h_rel_row) on L entries, 1 on V."""
        per_entry = torch.matmul(self.h_rel.to(self.sel_r.dtype), self.sel_r) + self.v_col
        return torch.sqrt(self.h_scale * per_entry)

    def _grad_q(self, p: _Pass, g_out: torch.Tensor) -> torch.Tensor:
        """Reverse pass: ``d/dq`` of ``<g_out, out>`` for a head cotangent ``g_out (B, P)``."""
        head = self.head_weight * self.head_mask
        g = torch.matmul(g_out, head.transpose(1, 2))
        for w, d in zip(reversed(self.layer_weights()), reversed(p.slopes)):
            g = torch.bmm(g * d, w.transpose(1, 2))
        return self.features.cotangent(p.s, p.c, g.sum(0))

    def _matrix(self, l: torch.Tensor) -> torch.Tensor:
        n = self.n_dof
        return torch.matmul(l, self.sel_s.to(l.dtype)).view(*l.shape[:-1], n, n)

    def _sel(self, x: torch.Tensor):
        dt = x.dtype
        return self.sel_r.to(dt), self.sel_c.to(dt)

    def _terms(self, q, qd, qdd=None, c_weight: float = 1.0, g_weight: float = 1.0):
        """``(pass, u = L^T qd, rest)`` with ``rest = H qdd + c_weight*c + g_weight*g`` (B, n).

        One forward, one tangent and one reverse pass; ``qdd=None`` leaves out ``H qdd``.
        """
        p = self._network(q, qd)
        assert p.ldot is not None  # the tangent pass runs whenever qd is given
        R, C = self._sel(q)
        qdR = torch.matmul(qd, R)
        u = torch.matmul(p.l * qdR, C)  # L^T qd
        uC = torch.matmul(u, C.t())
        lin = None  # L w + Ldot u with w = L^T qdd + Ldot^T qd (Hdot qd = Ldot u + L Ldot^T qd)
        if qdd is not None:
            w = torch.matmul(p.l * torch.matmul(qdd, R) + c_weight * (p.ldot * qdR), C)
        elif c_weight:
            w = c_weight * torch.matmul(p.ldot * qdR, C)
        else:
            w = None
        if w is not None:
            lin = p.l * torch.matmul(w, C.t())
            if c_weight:
                lin = lin + c_weight * (p.ldot * uC)
            lin = torch.matmul(lin, R.t())
            if qdd is not None and self.eps:
                lin = lin + self.eps * qdd
        # d/dq of (g_weight V - c_weight 1/2 qd^T H qd); d(1/2 |L^T qd|^2)/dl_e = qd_row u_col
        g_out = g_weight * self.v_scale * self.v_col.to(q.dtype)
        if c_weight:
            g_out = g_out - c_weight * (qdR * uC) * p.slope
        dq = self._grad_q(p, g_out.expand_as(p.out))
        return p, u, dq if lin is None else lin + dq

    # -- equation-of-motion terms ---------------------------------------------------------------
    def friction_coefficients(self) -> Tuple[torch.Tensor, ...]:
        """Non-negative coefficients, one ``(n,)`` per row of the law
        (``friction.COEFFICIENTS``: ``(viscous, coulomb)`` for the default); ``(zeros, zeros)``
        when friction is off."""
        if not self.use_friction:
            z = torch.zeros_like(self.tau_scale)
            return z, z
        return tuple(friction_law.coefficients(self.friction_raw, self.tau_scale).unbind(0))

    def friction(self, qd: torch.Tensor) -> torch.Tensor:
        """``tau_f (B, n)`` at ``qd (B, n)``: the law of :mod:`delan_learning.friction`."""
        if not self.use_friction:
            return torch.zeros_like(qd)
        coef = friction_law.coefficients(self.friction_raw, self.tau_scale)
        return friction_law.friction_torque(coef, qd)

    def inverse(self, q, qd, qdd):
        """``tau = H qdd + c + g + tau_f`` ``(B, n)`` of the motion ``(B, n)`` each."""
        tau = self._terms(q, qd, qdd)[2]
        return tau + self.friction(qd) if self.use_friction else tau

    def forward_dynamics(self, q, qd, tau):
        """``qdd = H^-1 (tau - c - g - tau_f)`` by a Cholesky solve. A non-finite state (a
        rollout that diverged) gives a NaN row, not an exception for the whole batch."""
        p, _, cg = self._terms(q, qd)
        rhs = tau - cg
        if self.use_friction:
            rhs = rhs - self.friction(qd)
        chol, info = torch.linalg.cholesky_ex(self._H(p.l))
        qdd = torch.cholesky_solve(rhs.unsqueeze(-1), chol).squeeze(-1)
        return torch.where((info == 0).unsqueeze(-1), qdd, torch.full_like(qdd, float('nan')))

    def _H(self, l: torch.Tensor) -> torch.Tensor:
        L = self._matrix(l)
        return torch.matmul(L, L.transpose(-1, -2)) + self.eps * self.eye.to(l.dtype)

    def cholesky_factor(self, q):
        """``L(q) (B, n, n)`` with ``H = L L^T + eps I``."""
        return self._matrix(self._network(q).l)

    def mass_matrix(self, q):
        """``H(q) = L L^T + eps I`` ``(B, n, n)``: symmetric positive definite for every weight."""
        return self._H(self._network(q).l)

    def gravity(self, q):
        """``g(q) = dV/dq`` ``(B, n)``, by one reverse pass through the network."""
        p = self._network(q)
        g_out = (self.v_scale * self.v_col.to(q.dtype)).expand_as(p.out)
        return self._grad_q(p, g_out)

    def coriolis(self, q, qd):
        """``c(q, qd) = dH/dt qd - 1/2 d/dq (qd^T H qd)`` ``(B, n)``."""
        return self._terms(q, qd, None, 1.0, 0.0)[2]

    def mass_matrix_rate(self, q, qd):
        """``dH/dt = dL/dt L^T + L dL/dt^T`` along ``qd``: ``(B, n, n)``."""
        p = self._network(q, qd)
        A = torch.matmul(self._matrix(p.ldot), self._matrix(p.l).transpose(-1, -2))
        return A + A.transpose(-1, -2)

    def potential(self, q):
        """``V(q) (B,)``, defined up to a constant."""
        return self._network(q).out[..., self.n_l] * self.v_scale

    def energy(self, q, qd):
        """Kinetic ``T = qd^T H qd / 2`` and potential ``V`` energy, ``(B,)`` each (``V`` up to a
        constant)."""
        p = self._network(q)
        u = torch.matmul(p.l * torch.matmul(qd, self.sel_r.to(q.dtype)), self.sel_c.to(q.dtype))
        T = 0.5 * (u * u).sum(-1) + 0.5 * self.eps * (qd * qd).sum(-1)
        return T, p.out[..., self.n_l] * self.v_scale

    def energy_rate(self, q, qd, qdd):
        """``dE/dt = qd^T (H qdd + 1/2 dH/dt qd) + dV/dt``: ``(B,)``; = ``qd^T (tau - tau_f)``.

        Uses ``qd^T dH/dt qd = 2 (L^T qd) . (dL/dt^T qd)`` and ``dV/dt = g . qd``.
        """
        p = self._network(q, qd)
        assert p.ldot is not None  # the tangent pass runs whenever qd is given
        R, C = self._sel(q)
        qdR = torch.matmul(qd, R)
        u = torch.matmul(p.l * qdR, C)
        udot = torch.matmul(p.ldot * qdR, C)
        w = torch.matmul(p.l * torch.matmul(qdd, R), C)  # L^T qdd
        kinetic = (u * w).sum(-1) + self.eps * (qd * qdd).sum(-1) + (u * udot).sum(-1)
        return kinetic + (self.gravity(q) * qd).sum(-1)

    def dynamics(self, q, qd) -> DynamicsTerms:
        """``H, c, g, tau_f`` in one call."""
        tau_f = self.friction(qd) if self.use_friction else torch.zeros_like(qd)
        return DynamicsTerms(self.mass_matrix(q), self.coriolis(q, qd), self.gravity(q), tau_f)
