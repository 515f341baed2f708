"""Excitation trajectories for learning: finite Fourier series kept inside joint limits.

A finite Fourier series (Swevers et al. 1997) excites all frequencies up to ``n_harmonics *
base_freq`` and is periodic, so q, qd, qdd are analytic and consistent. Amplitudes are drawn
from a seed, then the whole trajectory is scaled so that position and velocity stay inside the
given limits (with a margin).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

import numpy as np


@dataclass(frozen=True)
class FourierTrajectory:
    """``q(t) = q0 + sum_k a_k sin(k w t) + b_k cos(k w t)`` per joint; coefficients ``(n, K)``."""

    q0: np.ndarray
    a: np.ndarray
    b: np.ndarray
    base_freq: float  # [Hz]
    speed: float = 1.0  # time scaling: 2.0 plays the same path twice as fast

    @property
    def period(self) -> float:
        """Period of the trajectory [s] at this ``speed``."""
        return 1.0 / (self.base_freq * self.speed)

    def sample(self, t: np.ndarray) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """q, qd, qdd at times ``t`` (shape ``(T,)``), each ``(T, n)``."""
        t = np.asarray(t, dtype=np.float64).reshape(-1, 1, 1)
        w = 2.0 * np.pi * self.base_freq * self.speed
        k = np.arange(1, self.a.shape[1] + 1, dtype=np.float64)  # (K,)
        ph = k * w * t  # (T, 1, K)
        s, c = np.sin(ph), np.cos(ph)
        q = self.q0 + np.sum(self.a * s + self.b * c, axis=-1)
        qd = np.sum((self.a * c - self.b * s) * (k * w), axis=-1)
        qdd = -np.sum((self.a * s + self.b * c) * (k * w) ** 2, axis=-1)
        return q, qd, qdd

    def at_speed(self, speed: float) -> 'FourierTrajectory':
        """The same path played at another ``speed`` (a time scaling)."""
        return FourierTrajectory(self.q0, self.a, self.b, self.base_freq, speed)

    def scaled(self, factor: np.ndarray) -> 'FourierTrajectory':
        """Each joint's motion about ``q0`` times ``factor (n,)``: its positions' swing, its
        velocities and accelerations all scale by it; 1 leaves a joint as it is."""
        f = np.asarray(factor, dtype=np.float64)[:, None]
        return FourierTrajectory(self.q0, self.a * f, self.b * f, self.base_freq, self.speed)


def random_fourier_trajectory(
    lower: np.ndarray,
    upper: np.ndarray,
    max_velocity: np.ndarray,
    seed: Optional[int] = None,
    n_harmonics: int = 5,
    base_freq: float = 0.1,
    margin: float = 0.1,
    velocity_fraction: float = 0.6,
    center: Optional[np.ndarray] = None,
) -> FourierTrajectory:
    """A seeded random excitation inside ``[lower, upper]`` and
    ``|qd| <= velocity_fraction * vmax``.

    ``margin`` is the fraction of the range kept free at each limit. Infinite limits (continuous
    joints) are treated as +-pi around ``center``.
    """
    rng = np.random.default_rng(seed)
    lower = np.asarray(lower, dtype=np.float64)
    upper = np.asarray(upper, dtype=np.float64)
    vmax = np.asarray(max_velocity, dtype=np.float64)
    n = lower.size
    if center is None:
        with np.errstate(invalid='ignore'):
            mid = 0.5 * (lower + upper)
        mid = np.where(np.isfinite(mid), mid, 0.0)  # continuous joints: around 0
    else:
        mid = np.asarray(center, dtype=np.float64)
    lo = np.where(np.isfinite(lower), lower, mid - np.pi)
    hi = np.where(np.isfinite(upper), upper, mid + np.pi)
    span = hi - lo
    lo_m, hi_m = lo + margin * span, hi - margin * span
    k = np.arange(1, n_harmonics + 1, dtype=np.float64)
    # 1/k decay keeps the energy spread but the path smooth
    a = rng.normal(size=(n, n_harmonics)) / k
    b = rng.normal(size=(n, n_harmonics)) / k
    w = 2.0 * np.pi * base_freq
    # bounds of the series from the coefficients (|sum| <= sum of |amplitudes|)
    amp = np.sqrt(a**2 + b**2)
    pos_bound = amp.sum(axis=1)
    vel_bound = (amp * k * w).sum(axis=1)
    room = np.minimum(hi_m - mid, mid - lo_m)
    room = np.maximum(room, 1e-6)
    scale = np.minimum(room / pos_bound, velocity_fraction * vmax / vel_bound)
    return FourierTrajectory(
        q0=mid.copy(), a=a * scale[:, None], b=b * scale[:, None], base_freq=base_freq
    )
