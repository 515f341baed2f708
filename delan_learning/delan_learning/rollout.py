"""Multi-step prediction with a learned forward model: windows of recorded data and rollouts.

Both the forward-model loss (:class:`~delan_learning.training.Trainer` with ``loss='forward'``)
and the multi-step metric (``delan-eval --horizon N``) use this module, so the model is trained
and judged by the same integration. No ROS, no acceleration estimate.

* :func:`window_index` cuts recorded samples into windows of ``H + 1`` consecutive samples of one
  trajectory; a window never spans a trajectory boundary or a gap in the time stamps (a step
  longer than ``gap_factor`` times the trajectory's median step, e.g. a dropped message).
* :func:`rollout` integrates ``qdd = model.forward_dynamics(q, qd, tau)`` from each window's first
  state over its ``H`` steps under the recorded torques, held constant over each step (zero-order
  hold, as a controller applies them). ``'rk4'`` (classic Runge-Kutta, default) or ``'euler'``
  (semi-implicit: velocity first, then position with the new velocity; symplectic, one model call
  per step). The rollout is differentiable, which is what the forward loss backpropagates.
* Torque timing (``torque_timing``): ``'start'`` takes the torque of sample ``k`` as the one
  applied over ``[t_k, t_k+1)`` (``delan-gen-data``, the conftest data); ``'end'`` takes the
  torque of sample ``k+1`` (a joint state's effort reports the torque that led to it: a simulator
  in lockstep, a drive's mean over its last cycle; see :mod:`delan_learning.torque_kernel`).
"""

from __future__ import annotations

from typing import Callable, Dict, Optional, Sequence, Tuple, Union, cast

import numpy as np
import torch

from delan_learning.data import trajectory_slices
from delan_learning.train_config import INTEGRATORS, TORQUE_TIMINGS


def window_index(
    traj: np.ndarray, t: np.ndarray, horizon: int, gap_factor: float = 1.5, stride: int = 1
) -> Tuple[np.ndarray, np.ndarray]:
    """Sample indices ``(M, H+1)`` of every window of ``H = horizon`` steps, and their step
    lengths ``dt (M, H)`` [s].

    ``traj (N,)`` trajectory ids, ``t (N,)`` time stamps; samples of one id are taken in data
    order. Windows start every ``stride`` samples and lie inside one run of a trajectory whose
    steps are all positive and at most ``gap_factor`` times that trajectory's median step.
    """
    if horizon < 1 or stride < 1:
        raise ValueError(f'horizon and stride must be >= 1, got {horizon}, {stride}')
    traj = np.asarray(traj).reshape(-1)
    t = np.asarray(t, dtype=np.float64).reshape(-1)
    if t.shape != traj.shape:
        raise ValueError(f't has {t.size} samples but traj has {traj.size}')
    idx_parts, dt_parts = [], []
    offsets = np.arange(horizon + 1)
    for sl in trajectory_slices(traj):
        if len(sl) < horizon + 1:
            continue
        steps = np.diff(t[sl])
        positive = steps[steps > 0]
        if positive.size == 0:
            continue
        bad = (steps <= 0) | (steps > gap_factor * np.median(positive))
        # a window starting at i uses steps i .. i+H-1: none of them may be bad
        bad_before = np.concatenate([[0], np.cumsum(bad)])
        starts = np.arange(0, len(sl) - horizon, stride)
        starts = starts[bad_before[starts + horizon] == bad_before[starts]]
        if starts.size == 0:
            continue
        idx_parts.append(sl[starts[:, None] + offsets])
        dt_parts.append(steps[starts[:, None] + offsets[:-1]])
    if not idx_parts:
        return np.zeros((0, horizon + 1), dtype=np.int64), np.zeros((0, horizon))
    return np.concatenate(idx_parts).astype(np.int64), np.concatenate(dt_parts)


def step_torques(tau: torch.Tensor, torque_timing: str = 'start') -> torch.Tensor:
    """The torque acting over each step ``(B, H, n)`` of a window's torques ``(B, H+1, n)``."""
    if torque_timing == 'start':
        return tau[:, :-1]
    if torque_timing == 'end':
        return tau[:, 1:]
    raise ValueError(f'torque_timing must be one of {TORQUE_TIMINGS}, got {torque_timing!r}')


def rollout(
    model: torch.nn.Module,
    q0: torch.Tensor,
    qd0: torch.Tensor,
    tau: torch.Tensor,
    dt: torch.Tensor,
    integrator: str = 'rk4',
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Predicted ``q, qd (B, H, n)`` after steps ``1..H`` from ``q0, qd0 (B, n)``.

    ``tau (B, H, n)`` is held over step ``k`` of length ``dt (B, H)`` [s]. Differentiable
    w.r.t. the model's parameters (no ``no_grad`` here: callers choose).
    """
    if integrator not in INTEGRATORS:
        raise ValueError(f'integrator must be one of {INTEGRATORS}, got {integrator!r}')
    f = cast(Callable[..., torch.Tensor], model.forward_dynamics)
    q, qd = q0, qd0
    qs, qds = [], []
    for k in range(tau.shape[1]):
        u, h = tau[:, k], dt[:, k : k + 1]
        if integrator == 'euler':
            qd = qd + h * f(q, qd, u)
            q = q + h * qd
        else:
            a1 = f(q, qd, u)
            v2 = qd + 0.5 * h * a1
            a2 = f(q + 0.5 * h * qd, v2, u)
            v3 = qd + 0.5 * h * a2
            a3 = f(q + 0.5 * h * v2, v3, u)
            v4 = qd + h * a3
            a4 = f(q + h * v3, v4, u)
            q = q + h / 6.0 * (qd + 2.0 * v2 + 2.0 * v3 + v4)
            qd = qd + h / 6.0 * (a1 + 2.0 * a2 + 2.0 * a3 + a4)
        qs.append(q)
        qds.append(qd)
    return torch.stack(qs, 1), torch.stack(qds, 1)


def position_error(
    q_hat: torch.Tensor, q: torch.Tensor, wrap: Optional[torch.Tensor] = None
) -> torch.Tensor:
    """``q_hat - q`` (any shape ``(..., n)``), wrapped to ``(-pi, pi]`` where ``wrap (n,)``
    (continuous joints: a prediction one turn off is right)."""
    e = q_hat - q
    if wrap is None or not bool(wrap.any()):
        return e
    return torch.where(wrap, torch.atan2(torch.sin(e), torch.cos(e)), e)


def continuous_mask(joint_types: Sequence[str], device=None) -> torch.Tensor:
    """``(n,)`` bool: the joints whose position errors wrap."""
    return torch.tensor([t == 'continuous' for t in joint_types], dtype=torch.bool, device=device)


def horizon_scales(q: np.ndarray, qd: np.ndarray, dt: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """Per-joint scales ``(n,)`` of what the dynamics change over a window, for the loss.

    From windows ``q, qd (M, H+1, n)``, ``dt (M, H)``: the spread of the velocity change
    ``qd_H - qd_0`` and of the position's departure from constant velocity
    ``q_H - q_0 - T qd_0`` (``T`` the window's duration). A model that predicts no dynamics
    scores about 1 at the horizon on every joint, whatever its units or inertia; spreads are
    floored at 1e-3 of the largest so a joint at rest cannot divide by zero.
    """
    T = dt.sum(1)[:, None]
    dv = qd[:, -1] - qd[:, 0]
    dp = q[:, -1] - q[:, 0] - T * qd[:, 0]

    def spread(x):
        s = np.sqrt(np.mean(x * x, axis=0)) if len(x) else np.ones(x.shape[-1])
        return np.maximum(s, max(1e-12, 1e-3 * float(np.max(s))))

    return spread(dp), spread(dv)


@torch.no_grad()
def rollout_errors(
    model: torch.nn.Module,
    q: torch.Tensor,
    qd: torch.Tensor,
    tau: torch.Tensor,
    index: Union[np.ndarray, torch.Tensor],
    dt: Union[np.ndarray, torch.Tensor],
    integrator: str = 'rk4',
    torque_timing: str = 'start',
    chunk: int = 4096,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Prediction errors ``(M, H, n)`` of positions and velocities over the windows ``index
    (M, H+1)`` / ``dt (M, H)`` of samples ``q, qd, tau (N, n)`` (model dtype and device)."""
    wrap = continuous_mask(getattr(model, 'joint_types', ['revolute'] * q.shape[1]), q.device)
    idx = torch.as_tensor(index, device=q.device)
    steps = torch.as_tensor(dt, device=q.device, dtype=q.dtype)
    eq, ev = [], []
    for i in range(0, len(idx), chunk):
        w = idx[i : i + chunk]
        q_hat, qd_hat = rollout(
            model,
            q[w[:, 0]],
            qd[w[:, 0]],
            step_torques(tau[w], torque_timing),
            steps[i : i + chunk],
            integrator,
        )
        eq.append(position_error(q_hat, q[w[:, 1:]], wrap))
        ev.append(qd_hat - qd[w[:, 1:]])
    if not eq:
        n = q.shape[1]
        H = index.shape[1] - 1
        empty = torch.zeros((0, H, n), dtype=q.dtype, device=q.device)
        return empty, empty
    return torch.cat(eq), torch.cat(ev)


def horizon_metrics(
    eq: torch.Tensor, ev: torch.Tensor, names: Sequence[str], dt: np.ndarray
) -> Dict:
    """RMS position/velocity error per joint at the horizon (last step) of errors ``(M, H, n)``,
    as ``delan-eval`` reports it."""
    q_rms = eq[:, -1].double().pow(2).mean(0).sqrt().cpu().numpy()
    v_rms = ev[:, -1].double().pow(2).mean(0).sqrt().cpu().numpy()
    return {
        'horizon_steps': int(eq.shape[1]),
        'n_windows': int(eq.shape[0]),
        'horizon_s': float(np.mean(dt.sum(1))) if len(dt) else 0.0,
        'q_rms': dict(zip(names, q_rms.tolist())),
        'qd_rms': dict(zip(names, v_rms.tolist())),
        'q_rms_mean': float(q_rms.mean()),
        'qd_rms_mean': float(v_rms.mean()),
    }
