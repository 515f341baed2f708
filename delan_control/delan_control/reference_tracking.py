"""What the torque controller tracks: the latest reference trajectory, a smooth way onto it
when it arrives and back onto it after joint states stalled or the arm jumped, or the position
it holds without a reference.

A new reference is taken up at the next joint state (:meth:`ReferenceTracker.adopt`). One that
continues the current reference (the same course at that moment: a splice) replaces it and
nothing else changes. Any other begins where the arm is, as ros2_control's
JointTrajectoryController starts from the current state: the target starts at the arm's
position and velocity, with the acceleration of the last target (zero when holding), and joins
the reference's course over ``resume_time`` (longer for a large offset), so a reference that
begins elsewhere, begins later, or arrives late (its course already far along and
accelerating) never kicks the arm. One whose first point lies farther than
``resume_tolerance`` from the arm (meant for another start) is dropped and the arm held where
it is.

When joint states (re)start, or the arm jumps (a sim reset, a re-homed driver), what the gap
added to the deviation "arm minus reference" is taken out of the target and brought back in
over ``resume_time`` (:func:`~delan_control.trajectories.rejoin_offset`): the feedback goes on
from where it was before and the target's acceleration (the model's feed-forward) from the last
target's, with no torque step however far the reference's course went on, and a frozen driver
that resumes where it stopped changes nothing. A reference farther than ``resume_tolerance``
from the arm is dropped and the arm held where it is until a new reference arrives. ROS-free
and thread-safe: the control loop calls :meth:`ReferenceTracker.resume`,
:meth:`ReferenceTracker.adopt` and :meth:`ReferenceTracker.target`, the executor
:meth:`ReferenceTracker.set_reference` and the parameter setters.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import numpy as np

from delan_control.control_laws import position_error
from delan_control.trajectories import PiecewiseQuintic, rejoin_offset

#: a growth of the deviation below this (position [rad or m], velocity [/s], acceleration
#: [/s^2]) is nothing to catch up on
REJOIN_NEGLIGIBLE = np.array([1e-3, 0.05, 0.2])
#: the cause :meth:`ReferenceTracker.adopt` reports
NEW_REFERENCE = 'a new reference'


@dataclass(frozen=True)
class Resumed:
    """What :meth:`ReferenceTracker.resume` or :meth:`ReferenceTracker.adopt` did, for the
    caller to log."""

    action: str  # 'holding' (no reference), 'unchanged', 'rejoining' or 'dropped'
    # how much farther the reference got from the arm [rad or m]; of a new reference
    # (NEW_REFERENCE), how far from the arm it is ('dropped': its first point)
    error: float = 0.0
    until: float = 0.0  # 'rejoining': when the target is back on the reference [s]

    def describe(self, cause: str, t: float, tolerance: float) -> Optional[Tuple[str, str]]:
        """``(level, message)`` to log of a resume at ``t`` [s] after ``cause`` (the stall, a
        jump, a new reference) under ``resume_tolerance`` ``tolerance``; None when there is
        nothing to say."""
        if cause == NEW_REFERENCE and self.action == 'rejoining':
            return 'info', (
                f'new reference taken up from the arm, {self.error:.3f} from its course, '
                f'joined over {self.until - t:.2f} s'
            )
        if cause == NEW_REFERENCE and self.action == 'dropped':
            return 'warning', (
                f'new reference dropped: its first point is {self.error:.3f} from the arm '
                f'(resume_tolerance {tolerance}); holding the current position until a nearer '
                'reference arrives'
            )
        if self.action == 'rejoining':
            return 'info', (
                f'rejoining the reference ({cause} left it {self.error:.3f} farther from the '
                f'arm) over {self.until - t:.2f} s'
            )
        if self.action == 'dropped':
            return 'warning', (
                f'reference dropped: {self.error:.3f} farther from the arm after {cause} '
                f'(resume_tolerance {tolerance}); holding the current position until a new '
                'reference arrives'
            )
        return None


class ReferenceTracker:
    """The controller's target per cycle. ``velocity_limits`` ``(n,)`` bound the rejoin's
    speed; ``resume_tolerance`` [rad or m] and ``resume_time`` [s] as the node's parameters
    (assignable at runtime). ``tracked`` ``(n,)`` bool: the joints a reference can be tracked
    on (default all); the others (passive joints, never commanded) swing wherever they do, so
    how far they are from their reference neither drops nor rejoins it. ``continuous`` ``(n,)``
    bool (None: none): joints whose position differences count modulo 2 pi, as the
    controller's position error does."""

    def __init__(
        self,
        velocity_limits: np.ndarray,
        resume_tolerance: float,
        resume_time: float,
        tracked: Optional[np.ndarray] = None,
        continuous: Optional[np.ndarray] = None,
    ):
        self.velocity_limits = np.asarray(velocity_limits, dtype=np.float64)
        n = self.velocity_limits.size
        self.tracked = np.ones(n, bool) if tracked is None else np.asarray(tracked, bool)
        self.continuous = continuous
        self.resume_tolerance = float(resume_tolerance)
        self.resume_time = float(resume_time)
        self.received = self.rejoined = self.dropped = 0
        self._lock = threading.Lock()
        self._reference: Optional[PiecewiseQuintic] = None
        self._rejoin: Optional[PiecewiseQuintic] = None  # offset arm - reference, decaying
        # arm minus reference (q, qd) at the last target: what the feedback was working on
        # before a gap (None: no target on the current reference yet)
        self._deviation: Optional[np.ndarray] = None
        # the acceleration of the last target (None: no target yet), where a take-up or a
        # rejoin starts the target's so that the feed-forward has no step
        self._acceleration: Optional[np.ndarray] = None
        self._hold: Optional[np.ndarray] = None
        self._pending: Optional[PiecewiseQuintic] = None  # arrived, not taken up yet

    @property
    def reference(self) -> Optional[PiecewiseQuintic]:
        """The reference being tracked; None while holding."""
        return self._reference

    @property
    def rejoining(self) -> bool:
        """True while the target is still on its way back onto the reference."""
        return self._rejoin is not None

    def set_reference(self, reference: PiecewiseQuintic) -> None:
        """Track ``reference`` from the next joint state on (:meth:`adopt`), replacing any
        other."""
        with self._lock:
            self._pending = reference
            self.received += 1

    def adopt(self, t: float, q: np.ndarray, qd: np.ndarray) -> Optional[Resumed]:
        """Take up a reference that arrived since the last call, with the arm at ``q``, ``qd``
        ``(n,)`` at time ``t`` (module docstring): one that continues the current reference
        replaces it as it is; any other begins where the arm is and joins its course over
        ``resume_time``, or is dropped when its first point lies beyond ``resume_tolerance``
        from the arm. None when none arrived."""
        with self._lock:
            new, self._pending = self._pending, None
            if new is None:
                return None
            now = np.stack([a[0] for a in new.sample(t)])
            if self._reference is not None:
                old = np.stack([a[0] for a in self._reference.sample(t)])
                apart = self._tracked(old[:2] - now[:2])
                if np.all(np.abs(apart) <= REJOIN_NEGLIGIBLE[:2, None]):
                    self._reference = new  # a splice: rejoin and deviation carry on
                    return Resumed('unchanged', float(np.max(np.abs(apart[0]), initial=0.0)))
            self._deviation = self._rejoin = None
            first = self._tracked(np.stack([q - new.q[0], np.zeros_like(q)]))[0]
            distance = float(np.max(np.abs(first), initial=0.0))
            if distance > self.resume_tolerance:
                self._reference, self._hold = None, np.array(q, dtype=np.float64)
                self.dropped += 1
                return Resumed('dropped', distance)
            self._reference = new
            offset = self._tracked(np.stack([q - now[0], qd - now[1], self._last_acc() - now[2]]))
            error = float(np.max(np.abs(offset[0]), initial=0.0))
            if np.all(np.abs(offset) <= REJOIN_NEGLIGIBLE[:, None]):
                return Resumed('unchanged', error)
            self._rejoin = rejoin_offset(
                t, offset[0], offset[1], self.velocity_limits, self.resume_time, dqdd=offset[2]
            )
            return Resumed('rejoining', error, self._rejoin.end_time)

    def _tracked(self, delta: np.ndarray) -> np.ndarray:
        """Differences ``(k, n)`` (position, velocity[, acceleration]) with continuous joints'
        positions wrapped and untracked joints' zero."""
        delta = np.array(delta, dtype=np.float64)
        delta[0] = position_error(delta[0], np.zeros_like(delta[0]), self.continuous)
        return np.where(self.tracked, delta, 0.0)

    def _last_acc(self) -> np.ndarray:
        """The last target's acceleration ``(n,)`` (zero before the first); under the lock."""
        if self._acceleration is None:
            return np.zeros_like(self.velocity_limits)
        return self._acceleration

    def resume(self, t: float, q: np.ndarray, qd: np.ndarray) -> Resumed:
        """Joint states (re)started, or the arm jumped, with the arm at ``q``, ``qd`` ``(n,)``
        at time ``t``: the hold position becomes ``q``; the reference is rejoined smoothly or
        dropped (module docstring)."""
        with self._lock:
            self._hold = np.array(q, dtype=np.float64)
            ref = self._reference
            if ref is None:
                return Resumed('holding')
            q_ref, qd_ref, qdd_ref = (a[0] for a in ref.sample(t))
            # a rejoin under way goes on from where it is at t, with what the gap added; the
            # target's acceleration from the last target's (the reference's went on meanwhile)
            offset = np.zeros((3, q_ref.size))
            if self._rejoin is not None:
                offset = np.stack([a[0] for a in self._rejoin.sample(t)])
            grown = np.stack([q - q_ref, qd - qd_ref, self._last_acc() - qdd_ref]) - offset
            if self._deviation is not None:
                grown[:2] -= self._deviation
            grown = self._tracked(grown)
            error = float(np.max(np.abs(grown[0])))
            if np.all(np.abs(grown) <= REJOIN_NEGLIGIBLE[:, None]):
                return Resumed('unchanged', error)
            if error > self.resume_tolerance:
                self._reference = self._rejoin = None
                self.dropped += 1
                return Resumed('dropped', error)
            self._rejoin = rejoin_offset(
                t,
                offset[0] + grown[0],
                offset[1] + grown[1],
                self.velocity_limits,
                self.resume_time,
                dqdd=offset[2] + grown[2],
            )
            self.rejoined += 1
            return Resumed('rejoining', error, self._rejoin.end_time)

    def _target(self, t: float, q: np.ndarray) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The reference plus what is left of a rejoin at ``t``, or the hold position (the
        arm's ``q`` before there is one) at rest; under the lock."""
        if self._hold is None:
            self._hold = np.array(q, dtype=np.float64)
        if self._reference is None:
            zero = np.zeros_like(self._hold)
            return self._hold, zero, zero
        q_ref, qd_ref, qdd_ref = (a[0] for a in self._reference.sample(t))
        if self._rejoin is not None:
            dq, dqd, dqdd = (a[0] for a in self._rejoin.sample(t))
            q_ref, qd_ref, qdd_ref = q_ref + dq, qd_ref + dqd, qdd_ref + dqdd
        return q_ref, qd_ref, qdd_ref

    def target(
        self, t: float, q: np.ndarray, qd: np.ndarray
    ) -> Tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
        """``(q_ref, qd_ref, qdd_ref, holding)`` at time ``t`` for the arm at ``q``, ``qd``:
        the reference (plus what is left of a rejoin), or the hold position at rest. A
        reference not taken up yet is (:meth:`adopt`, its outcome unreported)."""
        self.adopt(t, q, qd)
        with self._lock:
            ref, rejoin = self._reference, self._rejoin
            q_ref, qd_ref, qdd_ref = self._target(t, q)
            self._acceleration = qdd_ref
        if ref is None:
            return q_ref, qd_ref, qdd_ref, True
        deviation = np.stack([q - q_ref, qd - qd_ref])
        with self._lock:
            if rejoin is not None and t >= rejoin.end_time and self._rejoin is rejoin:
                self._rejoin = None
            if self._reference is ref:
                self._deviation = deviation
        return q_ref, qd_ref, qdd_ref, False


def reference_from_points(
    joint_names: Sequence[str],
    names: Sequence[str],
    t0: float,
    offsets: Sequence[float],
    positions: Sequence[Sequence[float]],
    velocities: Sequence[Sequence[float]],
    accelerations: Sequence[Sequence[float]],
) -> PiecewiseQuintic:
    """A reference trajectory in the order of ``joint_names`` from the points of a message in
    the order of ``names``: starting at ``t0`` [s], the points ``offsets`` [s] after it, one
    row a point for each of ``positions``, ``velocities``, ``accelerations`` (empty rows: not
    given). ``ValueError`` says what is wrong with it."""
    names = list(names)
    missing = [j for j in joint_names if j not in names]
    if missing:
        raise ValueError(f'reference lacks joints {missing}')
    idx = np.array([names.index(j) for j in joint_names])
    if not offsets:
        raise ValueError('reference has no points')
    t = t0 + np.array(offsets, dtype=float)

    def arr(field: str, rows: List[Sequence[float]]) -> Optional[np.ndarray]:
        if all(len(r) == 0 for r in rows):
            return None
        if any(len(r) != len(names) for r in rows):
            raise ValueError(f'{field} of some points has the wrong length')
        return np.asarray(rows, float)[:, idx]

    q = arr('positions', list(positions))
    if q is None:
        raise ValueError('reference points have no positions')
    return PiecewiseQuintic(
        t, q, arr('velocities', list(velocities)), arr('accelerations', list(accelerations))
    )
