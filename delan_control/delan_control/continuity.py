"""Whether consecutive joint states can be one motion of the arm: no stall, no jump.

A measured position that the arm cannot have reached since the previous state (a sim reset, a
driver re-homed or restarted without a pause, an encoder glitch) leaves a controller tracking a
reference from where the arm no longer is: the feedback sees the whole jump as an error. The
controller treats such a jump as it treats joint states that restart after a stall (rejoin the
reference smoothly, or drop a far one and hold the arm where it is); during a stall its
watchdog sends zero torque once (:class:`StateContinuity`).
"""

from __future__ import annotations

import threading
from typing import Callable, NamedTuple, Optional

import numpy as np

from delan_control.control_laws import position_error

#: velocity assumed for joints without a (usable) limit [rad/s or m/s]
UNLIMITED_VELOCITY = 10.0
#: the measured velocities witness the step between two states at most this far apart [s]
WITNESS_DT = 0.05
#: a step off what the measured velocities explain by more than this [rad or m] ...
WITNESS_MARGIN = 0.05
#: ... plus this share of what they explain (filtered, lagging velocities) is a jump
WITNESS_SLACK = 0.5


class JumpDetector:
    """Flags a position step beyond ``factor`` x the velocity limits x the time step, plus
    ``margin`` [rad or m] for noise and a late state; and, where the states carry velocities
    and follow each other within :data:`WITNESS_DT`, a step that the measured velocities do not
    explain (the trapezoid of the two, off by more than :data:`WITNESS_MARGIN` plus
    :data:`WITNESS_SLACK` of it): a sim reset that puts the arm elsewhere at rest, a step the
    limits' bound lets through where the URDF gives no velocity limits (10 rad/s assumed:
    0.18 rad between states 4 ms apart). ``continuous`` ``(n,)`` bool (None: none): joints
    whose step is taken modulo 2 pi (a driver that reports them wrapped does not jump when it
    crosses pi)."""

    def __init__(
        self,
        velocity_limits: np.ndarray,
        factor: float = 2.0,
        margin: float = 0.1,
        continuous: Optional[np.ndarray] = None,
    ):
        v = np.asarray(velocity_limits, dtype=np.float64)
        self.velocity = np.where(np.isfinite(v) & (v > 0), v, UNLIMITED_VELOCITY)
        self.factor, self.margin = float(factor), float(margin)
        self.continuous = continuous
        self._t: Optional[float] = None
        self._q: Optional[np.ndarray] = None
        self._qd: Optional[np.ndarray] = None

    def reset(self) -> None:
        """Forget the last state (after a stall: the next one is judged as a restart)."""
        self._t = self._q = self._qd = None

    def check(self, t: float, q: np.ndarray, qd: Optional[np.ndarray] = None) -> Optional[float]:
        """The largest joint step [rad or m] when ``q`` (with the measured velocities ``qd``,
        if any) at time ``t`` is a jump, else None."""
        q = np.asarray(q, dtype=np.float64)
        qd = None if qd is None else np.asarray(qd, dtype=np.float64)
        last_t, last_q, last_qd = self._t, self._q, self._qd
        self._t, self._q = float(t), q.copy()
        self._qd = None if qd is None or qd.shape != q.shape else qd.copy()
        if last_q is None or last_q.shape != q.shape:
            return None
        assert last_t is not None  # set with _q
        dt = max(float(t) - last_t, 0.0)
        moved = position_error(q, last_q, self.continuous)
        step = np.abs(moved)
        jump = step > self.factor * self.velocity * dt + self.margin
        if self._qd is not None and last_qd is not None and dt <= WITNESS_DT:
            measured = 0.5 * (self._qd + last_qd) * dt
            jump |= np.abs(moved - measured) > WITNESS_MARGIN + WITNESS_SLACK * np.abs(measured)
        if np.any(jump):
            return float(np.max(step))
        return None


class Restart(NamedTuple):
    """Why a joint state restarts the motion (:meth:`StateContinuity.take`)."""

    cause: str  # 'the stall' or 'a jump of the arm'
    message: str  # what to log


class StateContinuity:
    """Whether joint states go on as one motion of the arm: stale (from the start, and once
    none came for ``timeout`` [s] of a monotonic clock) until the next one, and jumps beyond
    ``velocity_limits`` ``(n,)`` (:class:`JumpDetector`, with its ``continuous``).
    Thread-safe: the control loop calls :meth:`take`, a timer :meth:`expire`."""

    def __init__(
        self, timeout: float, velocity_limits: np.ndarray, continuous: Optional[np.ndarray] = None
    ):
        self.timeout = float(timeout)
        self.stale = True
        self.trips = 0  # how often states went stale
        self._last: Optional[float] = None
        self._jumps = JumpDetector(velocity_limits, continuous=continuous)  # control thread only
        self._lock = threading.Lock()

    def take(
        self, now: float, t: float, q: np.ndarray, qd: Optional[np.ndarray] = None
    ) -> Optional[Restart]:
        """A joint state came at ``now`` (monotonic), stamped ``t`` [s], at ``q`` ``(n,)``
        moving at ``qd`` (when measured): a restart when it ends a stale spell (the first
        state too) or the arm jumped, else None."""
        with self._lock:
            self._last = now
            resumed, self.stale = self.stale, False
        if resumed:
            self._jumps.reset()
        jump = self._jumps.check(t, q, qd)
        if resumed:
            return Restart('the stall', 'joint states fresh: commanding')
        if jump is not None:
            return Restart(
                'a jump of the arm',
                f'the arm jumped {jump:.3f} between two joint states (a reset, a re-homed '
                'driver): taken as a restart',
            )
        return None

    def expire(self, now: float, on_trip: Callable[[], None]) -> bool:
        """Go stale when the last state is more than ``timeout`` old at ``now``: ``on_trip``
        runs then (the zero command), before a fresh state can be taken, so a command sent
        for that state always comes after it. True when it tripped."""
        with self._lock:
            if self.stale or self._last is None or now - self._last <= self.timeout:
                return False
            self.stale = True
            self.trips += 1
            on_trip()
        return True
