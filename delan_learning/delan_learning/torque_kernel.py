"""The torque that matches an estimated acceleration.

Accelerations are estimated by differentiating a window of positions (or velocities): the
estimate is not ``qdd(t_c)`` but a weighted average ``integral w(s) qdd(s) ds`` over the window,
with ``w`` the filter's Peano kernel (from Taylor's theorem with integral remainder; it integrates
to one). Pairing it with the *raw* torque of the centre sample leaves the part of the torque that
changes within the window (a PD loop's high-frequency content, a torque step) as a residual no
model can fit: on a UR5 under PD control that floor was a torque nMSE of 0.01-0.02 for the true
plant itself. Averaging the torque with the same kernel gives the pair the dynamics relate:
exactly for dynamics linear in the torque over the window, to first order otherwise.

Convention: the effort of a sample stamped ``t_j`` is the torque applied over ``(t_{j-1}, t_j]``
(a simulator in lockstep reports the torque of the step that led to the state; a drive reports
the mean over its last cycle).
"""

from __future__ import annotations

import numpy as np


def interval_weights(t: np.ndarray, coef: np.ndarray, tc: float, deriv: int) -> np.ndarray:
    """Weights ``W (m,)`` of the torques of samples ``t (m,)`` (increasing) such that
    ``sum_j W_j tau_j`` is the torque matching ``sum_k coef_k x_k``, the estimate of ``qdd`` at
    the sample time ``tc`` from positions (``deriv=2``) or velocities (``deriv=1``) ``x``.

    ``W_0`` is 0: the first sample's torque acts before the window. The weights sum to one when
    ``coef`` differentiates quadratics (positions) or lines (velocities) exactly.
    """
    t = np.asarray(t, dtype=np.float64)
    c = np.asarray(coef, dtype=np.float64)
    m = t.size
    W = np.zeros(m)
    if m < 2:
        return W
    lower = np.tril(np.ones((m - 1, m), dtype=bool))  # row r (interval r+1): k <= r
    left = t[1:] <= tc + 1e-12  # interval (t_r, t_{r+1}] before tc
    if deriv == 2:  # w(s) = sum_{t_k <= s} c_k (s - t_k) left, sum_{t_k >= s} c_k (t_k - s)
        D1 = t[1:, None] - t[None, :]
        D0 = t[:-1, None] - t[None, :]
        T = 0.5 * (D1 * D1 - D0 * D0)
        sign_left, sign_right = 1.0, -1.0
    elif deriv == 1:  # w(s) = -sum_{t_k <= s} c_k left of tc, +sum_{t_k >= s} c_k right
        T = np.broadcast_to(np.diff(t)[:, None], (m - 1, m))
        sign_left, sign_right = -1.0, 1.0
    else:
        raise ValueError(f'deriv must be 1 or 2, got {deriv}')
    cT = c[None, :] * T
    from_left = np.where(lower, cT, 0.0).sum(axis=1)
    from_right = np.where(lower, 0.0, cT).sum(axis=1)
    W[1:] = np.where(left, sign_left * from_left, sign_right * from_right)
    return W


def matched_torque_uniform(tau: np.ndarray, dt: float, coef: np.ndarray, deriv: int) -> np.ndarray:
    """``tau (T, n)`` on a uniform grid averaged with the kernel matching the centred filter
    ``coef`` (odd length ``m``, applied as ``sum_k coef_k x[i - m//2 + k]``). The first and last
    ``m // 2`` samples, where the filter is not centred, keep their raw torque."""
    tau = np.asarray(tau, dtype=np.float64)
    m = len(coef)
    half = m // 2
    out = tau.copy()
    if len(tau) < m:
        return out
    t = dt * (np.arange(m) - half)
    W = interval_weights(t, coef, 0.0, deriv)
    T = len(tau)
    acc = np.zeros((T - 2 * half, tau.shape[1]))
    for r in range(1, m):
        acc += W[r] * tau[r : T - 2 * half + r]
    out[half : T - half] = acc
    return out
