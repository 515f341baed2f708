"""A trained DeLaN in numpy float64 behind the :class:`~delan_common.dynamics.DynamicsModel`
protocol, without torch: the control-loop path. A torch call costs ~5-10 us of dispatch per op
whatever the tensor size and an inverse-dynamics call is ~60 ops (~250 us at batch 1), so:

- one state ``(n,)`` of ``inverse`` runs the compiled kernel (:mod:`delan_learning.c_kernel`,
  ~15-20 us for a 7-DoF arm, of which ~2 us is the ctypes call);
- without a compiler, a hand-tuned numpy version of the same (~45 us);
- batches and all other terms use vectorised numpy (~0.5-1 us per op). The K side-by-side
  networks are re-laid out once as one input matrix ``(m, K*W)``, block-diagonal hidden
  matrices ``(K*W, K*W)`` and one stacked head ``(K*W, P)``, so every layer is one matmul and
  the same code serves ``(n,)`` and ``(B, n)``.
"""

from __future__ import annotations

import ctypes
from typing import Any, Optional, Sequence, Tuple, cast

import numpy as np
import torch

from delan_common.dynamics import COULOMB_SMOOTHING
from delan_learning.c_kernel import CModel, c_kernel
from delan_learning.features import ANGULAR_TYPES
from delan_learning.friction import FRICTION_IDS, friction_torque
from delan_learning.lagrangian import DelanModel, tril_layout
from delan_learning.models import joint_names_of


def _softplus(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(0.0, x)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))


def _cholesky_solve(H: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``H^-1 b`` for SPD ``H (..., n, n)`` by Cholesky and two substitutions, no inverse."""
    Lc = np.linalg.cholesky(H)
    n = b.shape[-1]
    y = np.empty_like(b)
    for i in range(n):  # L y = b
        y[..., i] = (b[..., i] - np.einsum('...j,...j->...', Lc[..., i, :i], y[..., :i])) / Lc[
            ..., i, i
        ]
    x = np.empty_like(b)
    for i in reversed(range(n)):  # L^T x = y
        x[..., i] = (
            y[..., i] - np.einsum('...j,...j->...', Lc[..., i + 1 :, i], x[..., i + 1 :])
        ) / Lc[..., i, i]
    return x


class NumpyDelan:
    """A trained DeLaN in numpy float64; implements the ``DynamicsModel`` protocol.

    Inputs are ``(n,)`` or ``(B, n)`` arrays (anything ``np.asarray`` takes); outputs match.
    The weights are a snapshot: retraining the torch model does not change this object (build
    a new one, it takes microseconds).
    """

    #: the learner's version of the weights, where a loader records it
    model_version: int = 0

    def __init__(
        self, model: DelanModel, joint_names: Optional[Sequence[str]] = None, use_c: bool = True
    ):
        if not isinstance(model, DelanModel):
            raise TypeError(
                f'NumpyDelan needs a DelanModel, got {type(model).__name__}; use '
                'TorchDynamics for other models'
            )
        self.joint_names = joint_names_of(model, joint_names)
        self.joint_types = list(model.joint_types)
        n = self.n_dof = model.n_dof
        self.n_l = model.n_l
        self.activation = model.activation

        def f64(t: torch.Tensor) -> np.ndarray:
            return np.ascontiguousarray(t.detach().to('cpu', torch.float64).numpy())

        K = model.weights[0].shape[0]
        ws = [f64(w) for w in model.layer_weights()]
        bs = [f64(b) for b in model.biases]
        self.w_in = np.concatenate(list(ws[0]), axis=1)  # (m, K*W)
        self.b = [np.concatenate([bk.ravel() for bk in b]) for b in bs]  # (K*W,)
        self.w_hidden = []
        for w in ws[1:]:
            W = w.shape[-1]
            blk = np.zeros((K * W, K * W))
            for k in range(K):
                blk[k * W : (k + 1) * W, k * W : (k + 1) * W] = w[k]
            self.w_hidden.append(blk)
        head = f64(model.head_weight * cast(torch.Tensor, model.head_mask))  # (K, W, P)
        self.head = np.concatenate(list(head), axis=0)  # (K*W, P)
        self.head_b = f64(model.head_bias)
        self.w_in_t = np.ascontiguousarray(self.w_in.T)
        self.w_hidden_t = [np.ascontiguousarray(w.T) for w in self.w_hidden]
        self.head_t = np.ascontiguousarray(self.head.T)
        self.root = f64(model.entry_root())  # (P,): L entries by row, 1 on the V column
        self.v_scale = float(cast(torch.Tensor, model.v_scale))
        self.eps = model.eps
        self.diag_offset = model.diag_offset
        sel = (model.sel_r, model.sel_c, model.sel_s)
        self.R, self.C, self.S = (f64(cast(torch.Tensor, t)) for t in sel)
        self.R_t, self.C_t = np.ascontiguousarray(self.R.T), np.ascontiguousarray(self.C.T)
        self.diag = f64(cast(torch.Tensor, model.diag_mask).to(torch.float64)).astype(bool)
        self.not_diag = ~self.diag
        self.v_col = f64(cast(torch.Tensor, model.v_col))
        self.use_friction = model.use_friction
        self.friction_model = model.friction_model
        #: (F, n): rows friction.COEFFICIENTS[friction_model]; (2, n) zeros without friction
        self.friction_coef = f64(torch.stack(model.friction_coefficients()))
        types = self.joint_types
        self.ang = np.array([i for i, t in enumerate(types) if t in ANGULAR_TYPES], dtype=int)
        self.lin = np.array([i for i, t in enumerate(types) if t not in ANGULAR_TYPES], dtype=int)
        self.all_angular = len(self.lin) == 0
        self.eye = np.eye(n)
        # for _inverse_single
        self._single_ok = (
            self.all_angular and self.activation == 'softplus' and len(self.w_hidden) == 1
        )
        self.w_in_flip = self.w_in.copy()
        self.w_in_flip[n:] *= -1.0  # tangent of cos(q) is -sin(q) qd
        self.root_vec = self.root.copy()
        self.offset_root = self.diag_offset * self.root[:n]
        self.v_out = self.v_col * self.v_scale
        #: 'c' when one-state inverse() runs the compiled kernel, else 'numpy'
        self.backend = 'numpy'
        self._c: Optional[Tuple[Any, ...]] = None
        if use_c and c_kernel() is not None:
            self._c = self._c_setup(model, c_kernel())
            self.backend = 'c'

    def _c_setup(self, model: DelanModel, fn):
        """Weights and buffers for the compiled kernel (arrays kept alive on ``self``)."""
        n, K = self.n_dof, model.weights[0].shape[0]

        def f64(t):
            return np.ascontiguousarray(t.detach().to('cpu', torch.float64).numpy())

        ang_pos = {j: k for k, j in enumerate(self.ang)}
        lin_pos = {j: k for k, j in enumerate(self.lin)}
        feat = [ang_pos[i] if i in ang_pos else 2 * len(self.ang) + lin_pos[i] for i in range(n)]
        rows, cols = tril_layout(n)
        W = model.width
        keep = {
            'feat': np.array(feat, dtype=np.int32),
            'is_ang': np.array([i in ang_pos for i in range(n)], dtype=np.int32),
            'rows': rows.astype(np.int32),
            'cols': cols.astype(np.int32),
            'w_in': f64(model.layer_weights()[0]),
            'w_hid': (
                np.ascontiguousarray(np.stack([f64(w) for w in model.weights[1:]]))
                if model.depth > 1
                else np.zeros(1)
            ),
            'bias': np.ascontiguousarray(np.stack([f64(b).reshape(K, W) for b in model.biases])),
            'head': f64(model.head_weight * cast(torch.Tensor, model.head_mask)),
            'head_b': f64(model.head_bias),
            'friction_coef': self.friction_coef,
            'root': np.ascontiguousarray(self.root[: self.n_l]),
        }
        st = CModel(
            n=n,
            m=model.features.n_features,
            n_ang=len(self.ang),
            K=K,
            W=W,
            depth=model.depth,
            P=self.head.shape[1],
            n_l=self.n_l,
            act=1 if self.activation == 'tanh' else 0,
            friction=FRICTION_IDS[self.friction_model] if self.use_friction else 0,
            v_scale=self.v_scale,
            eps=self.eps,
            diag_offset=self.diag_offset,
            inv_smooth=1.0 / COULOMB_SMOOTHING,
            **{k: v.ctypes.data for k, v in keep.items()},
        )
        bufs = [np.empty(n) for _ in range(4)]
        ptrs = [ctypes.c_void_p(b.ctypes.data) for b in bufs]
        return fn, st, ctypes.byref(st), keep, bufs, ptrs

    def _c_inverse(self, q, qd, qdd) -> Optional[np.ndarray]:
        assert self._c is not None  # called only when the kernel is set up
        fn, _, ref, _, (bq, bqd, bqdd, btau), (pq, pqd, pqdd, ptau) = self._c
        np.copyto(bq, q)
        np.copyto(bqd, qd)
        np.copyto(bqdd, qdd)
        if fn(ref, pq, pqd, pqdd, ptau) != 0:  # non-finite result: let numpy say more
            return None
        return btau.copy()

    # -- network --------------------------------------------------------------------------------
    def _act(self, a):
        if self.activation == 'tanh':
            h = np.tanh(a)
            return h, 1.0 - h * h
        return _softplus(a), _sigmoid(a)

    def _features(self, q):
        if self.all_angular:
            s, c = np.sin(q), np.cos(q)
            return np.concatenate((s, c), axis=-1), s, c
        qa = q[..., self.ang]
        s, c = np.sin(qa), np.cos(qa)
        return np.concatenate((s, c, q[..., self.lin]), axis=-1), s, c

    def _network(self, q, qd=None):
        z, s, c = self._features(q)
        h, d = self._act(z @ self.w_in + self.b[0])
        slopes = [d]
        for w, b in zip(self.w_hidden, self.b[1:]):
            h, d = self._act(h @ w + b)
            slopes.append(d)
        out = h @ self.head + self.head_b
        root = self.root
        l = np.where(self.diag, _softplus(out) + self.diag_offset, out) * root
        slope = np.where(self.diag, _sigmoid(out), 1.0) * root
        ldot = out_dot = None
        if qd is not None:
            if self.all_angular:
                dz = np.concatenate((c * qd, -s * qd), axis=-1)
            else:
                qda = qd[..., self.ang]
                dz = np.concatenate((c * qda, -s * qda, qd[..., self.lin]), axis=-1)
            t = (dz @ self.w_in) * slopes[0]
            for w, d in zip(self.w_hidden, slopes[1:]):
                t = (t @ w) * d
            out_dot = t @ self.head
            ldot = out_dot * slope
        return s, c, slopes, out, l, slope, ldot, out_dot

    def _grad_q(self, s, c, slopes, g_out):
        g = g_out @ self.head_t
        for w, d in zip(reversed(self.w_hidden_t), reversed(slopes[1:])):
            g = (g * d) @ w
        g = (g * slopes[0]) @ self.w_in_t
        na = len(self.ang) if not self.all_angular else self.n_dof
        ga = c * g[..., :na] - s * g[..., na : 2 * na]
        if self.all_angular:
            return ga
        dq = np.empty(g.shape[:-1] + (self.n_dof,))
        dq[..., self.ang] = ga
        dq[..., self.lin] = g[..., 2 * na :]
        return dq

    def _terms(self, q, qd, qdd=None, with_c=True, with_g=True):
        """``H qdd`` (if qdd) ``+ c`` (if with_c) ``+ g`` (if with_g); see DelanModel._terms."""
        s, c, slopes, out, l, slope, ldot, _ = self._network(q, qd)
        R, C, R_t, C_t = self.R, self.C, self.R_t, self.C_t
        qdR = qd @ R
        u = (l * qdR) @ C
        uC = u @ C_t
        if qdd is not None:
            x = l * (qdd @ R)
            if with_c:
                x = x + ldot * qdR
        else:
            x = ldot * qdR if with_c else None
        total = 0.0
        if x is not None:
            lin = l * ((x @ C) @ C_t)
            if with_c:
                lin = lin + ldot * uC
            total = lin @ R_t
            if qdd is not None and self.eps:
                total = total + self.eps * qdd
        g_out = self.v_col * (self.v_scale if with_g else 0.0)
        if with_c:
            g_out = g_out - (qdR * uC) * slope
        return total + self._grad_q(s, c, slopes, np.broadcast_to(g_out, out.shape))

    # -- protocol -------------------------------------------------------------------------------
    @staticmethod
    def _in(*xs):
        return [np.asarray(x, dtype=np.float64) for x in xs]

    def friction(self, qd: np.ndarray) -> np.ndarray:
        """Learned friction torque at ``qd`` (``(n,)`` or ``(B, n)``); zeros for a model without
        friction."""
        (qd,) = self._in(qd)
        if not self.use_friction:
            return np.zeros_like(qd)
        return friction_torque(self.friction_coef, qd)

    def _inverse_single(self, q: np.ndarray, qd: np.ndarray, qdd: np.ndarray) -> np.ndarray:
        """:meth:`inverse` for one state ``(n,)`` of an all-angular softplus model.

        The same arithmetic as :meth:`_terms` with fewer numpy calls (each costs ~0.5-1 us at
        these sizes, which is all the time there is): no ``where`` masks, the sign of the
        ``cos`` feature's tangent folded into a copy of the input weights, softplus and its
        slope from one ``exp``.
        """
        n = self.n_dof
        s, c = np.sin(q), np.cos(q)
        a = np.concatenate((s, c)) @ self.w_in
        a += self.b[0]
        e = np.exp(a)
        h = np.log1p(e)
        d1 = e / (1.0 + e)
        a = h @ self.w_hidden[0]
        a += self.b[1]
        e = np.exp(a)
        h = np.log1p(e)
        d2 = e / (1.0 + e)
        out = h @ self.head
        out += self.head_b
        t = (np.concatenate((c * qd, s * qd)) @ self.w_in_flip) * d1
        t = (t @ self.w_hidden[0]) * d2
        slope = self.root_vec.copy()
        e = np.exp(out[:n])
        ed = e / (1.0 + e)
        slope[:n] = ed * self.root[:n]
        l = out * self.root
        l[:n] = np.log1p(e) * self.root[:n] + self.offset_root
        ldot = (t @ self.head) * slope
        qdR = qd @ self.R
        u = (l * qdR) @ self.C
        uC = u @ self.C_t
        x = l * (qdd @ self.R) + ldot * qdR
        lin = (l * ((x @ self.C) @ self.C_t) + ldot * uC) @ self.R_t
        g = (self.v_out - (qdR * uC) * slope) @ self.head_t
        g = ((g * d2) @ self.w_hidden_t[0]) * d1
        g = g @ self.w_in_t
        tau = lin + c * g[:n] - s * g[n:]
        tau += self.eps * qdd
        if self.use_friction:
            tau += friction_torque(self.friction_coef, qd)
        return tau

    def inverse(self, q: np.ndarray, qd: np.ndarray, qdd: np.ndarray) -> np.ndarray:
        """Torque ``(n,)`` or ``(B, n)`` for the motion ``(q, qd, qdd)``. One state tries the
        compiled kernel, then the single-state numpy path (each falls through when it cannot run or
        gives non-finite torques); batches take the vectorised path."""
        q, qd, qdd = self._in(q, qd, qdd)
        if self._c is not None and q.shape == qd.shape == qdd.shape == (self.n_dof,):
            tau = self._c_inverse(q, qd, qdd)
            if tau is not None:
                return tau
        if self._single_ok and q.ndim == 1:
            with np.errstate(all='ignore'):
                tau = self._inverse_single(q, qd, qdd)
            if np.isfinite(tau).all():
                return tau
        tau = self._terms(q, qd, qdd)
        if self.use_friction:
            tau = tau + self.friction(qd)
        return tau

    def mass_matrix(self, q: np.ndarray) -> np.ndarray:
        """Inertia matrix ``H(q) = L L^T + eps I``, ``(n, n)`` or ``(B, n, n)``."""
        (q,) = self._in(q)
        L = self._cholesky_factor(self._network(q)[4])
        return L @ np.swapaxes(L, -1, -2) + self.eps * self.eye

    def _cholesky_factor(self, l):
        n = self.n_dof
        return (l @ self.S).reshape(l.shape[:-1] + (n, n))

    def forward(self, q: np.ndarray, qd: np.ndarray, tau: np.ndarray) -> np.ndarray:
        """Acceleration ``H^-1 (tau - c - g - tau_f)``, ``(n,)`` or ``(B, n)``, by a Cholesky
        solve."""
        q, qd, tau = self._in(q, qd, tau)
        rhs = tau - self._terms(q, qd) - self.friction(qd)
        return _cholesky_solve(self.mass_matrix(q), rhs)

    def coriolis(self, q: np.ndarray, qd: np.ndarray) -> np.ndarray:
        """Coriolis/centrifugal torque ``c(q, qd)``, ``(n,)`` or ``(B, n)``."""
        q, qd = self._in(q, qd)
        return self._terms(q, qd, None, True, False)

    def gravity(self, q: np.ndarray) -> np.ndarray:
        """Gravity torque ``g(q) = dV/dq``, ``(n,)`` or ``(B, n)``."""
        (q,) = self._in(q)
        s, c, slopes, out, *_ = self._network(q)
        return self._grad_q(s, c, slopes, np.broadcast_to(self.v_col * self.v_scale, out.shape))

    def energy(self, q: np.ndarray, qd: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        """Kinetic ``T = qd^T H qd / 2`` and potential ``V`` energy: scalars for one state,
        ``(B,)`` each for a batch (``V`` up to a constant)."""
        q, qd = self._in(q, qd)
        _, _, _, out, l, *_ = self._network(q)
        u = (l * (qd @ self.R)) @ self.C
        T = 0.5 * np.sum(u * u, axis=-1) + 0.5 * self.eps * np.sum(qd * qd, axis=-1)
        return T, out[..., self.n_l] * self.v_scale
