"""Whether consecutive joint states can be one motion of the arm.

A measured position that the arm cannot have reached since the previous state (a sim reset, a
driver re-homed or restarted without a pause, an encoder glitch) leaves a controller tracking a
reference from where the arm no longer is: the feedback sees the whole jump as an error. The
controller treats such a jump as it treats joint states that restart after a stall (rejoin the
reference smoothly, or drop a far one and hold the arm where it is).
"""

from __future__ import annotations

from typing import Optional

import numpy as np

#: velocity assumed for joints without a (usable) limit [rad/s or m/s]
UNLIMITED_VELOCITY = 10.0


class JumpDetector:
    """Flags a position step beyond ``factor`` x the velocity limits x the time step, plus
    ``margin`` [rad or m] for noise and a late state."""

    def __init__(self, velocity_limits: np.ndarray, factor: float = 2.0, margin: float = 0.1):
        v = np.asarray(velocity_limits, dtype=np.float64)
        self.velocity = np.where(np.isfinite(v) & (v > 0), v, UNLIMITED_VELOCITY)
        self.factor, self.margin = float(factor), float(margin)
        self._t: Optional[float] = None
        self._q: Optional[np.ndarray] = None

    def reset(self) -> None:
        """Forget the last state (after a stall: the next one is judged as a restart)."""
        self._t = self._q = None

    def check(self, t: float, q: np.ndarray) -> Optional[float]:
        """The largest joint step [rad or m] when ``q`` at time ``t`` is a jump, else None."""
        q = np.asarray(q, dtype=np.float64)
        last_t, last_q = self._t, self._q
        self._t, self._q = float(t), q.copy()
        if last_q is None or last_q.shape != q.shape:
            return None
        assert last_t is not None  # set with _q
        dt = max(float(t) - last_t, 0.0)
        step = np.abs(q - last_q)
        if np.any(step > self.factor * self.velocity * dt + self.margin):
            return float(np.max(step))
        return None
