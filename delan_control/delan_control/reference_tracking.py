"""What the torque controller tracks: the latest reference trajectory, a smooth way back onto it
after joint states stalled or the arm jumped, or the position it holds without a reference.

When joint states (re)start, or the arm jumps (a sim reset, a re-homed driver), what the gap
added to the deviation "arm minus reference" is taken out of the target and brought back in
over ``resume_time`` (:func:`~delan_control.trajectories.rejoin_offset`): the feedback goes on
from where it was before, with no torque step, and a frozen driver that resumes where it stopped
changes nothing. A reference farther than ``resume_tolerance`` from the arm is dropped and the
arm held where it is until a new reference arrives. ROS-free and thread-safe: the control loop
calls :meth:`ReferenceTracker.resume` and :meth:`ReferenceTracker.target`, the executor
:meth:`ReferenceTracker.set_reference` and the parameter setters.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import numpy as np

from delan_control.trajectories import PiecewiseQuintic, rejoin_offset

#: a growth of the deviation below this (position [rad or m], velocity [/s]) is nothing to
#: catch up on
REJOIN_NEGLIGIBLE = np.array([1e-3, 0.05])


@dataclass(frozen=True)
class Resumed:
    """What :meth:`ReferenceTracker.resume` did, for the caller to log."""

    action: str  # 'holding' (no reference), 'unchanged', 'rejoining' or 'dropped'
    error: float = 0.0  # how much farther the reference got from the arm [rad or m]
    until: float = 0.0  # 'rejoining': when the target is back on the reference [s]

    def describe(self, cause: str, t: float, tolerance: float) -> Optional[Tuple[str, str]]:
        """``(level, message)`` to log of a resume at ``t`` [s] after ``cause`` (the stall, a
        jump) under ``resume_tolerance`` ``tolerance``; None when there is nothing to say."""
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
    how far they are from their reference neither drops nor rejoins it."""

    def __init__(
        self,
        velocity_limits: np.ndarray,
        resume_tolerance: float,
        resume_time: float,
        tracked: Optional[np.ndarray] = None,
    ):
        self.velocity_limits = np.asarray(velocity_limits, dtype=np.float64)
        n = self.velocity_limits.size
        self.tracked = np.ones(n, bool) if tracked is None else np.asarray(tracked, bool)
        self.resume_tolerance = float(resume_tolerance)
        self.resume_time = float(resume_time)
        self.received = self.rejoined = self.dropped = 0
        self._lock = threading.Lock()
        self._reference: Optional[PiecewiseQuintic] = None
        self._rejoin: Optional[PiecewiseQuintic] = None  # offset arm - reference, decaying
        # arm minus reference (q, qd) at the last target: what the feedback was working on
        # before a gap (None: no target on the current reference yet)
        self._deviation: Optional[np.ndarray] = None
        self._hold: Optional[np.ndarray] = None

    @property
    def reference(self) -> Optional[PiecewiseQuintic]:
        """The reference being tracked; None while holding."""
        return self._reference

    @property
    def rejoining(self) -> bool:
        """True while the target is still on its way back onto the reference."""
        return self._rejoin is not None

    def set_reference(self, reference: PiecewiseQuintic) -> None:
        """Track ``reference`` from now on (replacing any other, and any rejoin)."""
        with self._lock:
            self._reference, self._rejoin, self._deviation = reference, None, None
            self.received += 1

    def resume(self, t: float, q: np.ndarray, qd: np.ndarray) -> Resumed:
        """Joint states (re)started, or the arm jumped, with the arm at ``q``, ``qd`` ``(n,)``
        at time ``t``: the hold position becomes ``q``; the reference is rejoined smoothly or
        dropped (module docstring)."""
        with self._lock:
            self._hold = np.array(q, dtype=np.float64)
            ref = self._reference
            if ref is None:
                return Resumed('holding')
            q_ref, qd_ref, _ = (a[0] for a in ref.sample(t))
            # a rejoin under way goes on from where it is at t, with what the gap added
            offset = np.zeros((3, q_ref.size))
            if self._rejoin is not None:
                offset = np.stack([a[0] for a in self._rejoin.sample(t)])
            grown = np.stack([q - q_ref, qd - qd_ref]) - offset[:2]
            if self._deviation is not None:
                grown = grown - self._deviation
            grown = np.where(self.tracked, grown, 0.0)
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
                dqdd=offset[2],
            )
            self.rejoined += 1
            return Resumed('rejoining', error, self._rejoin.end_time)

    def target(
        self, t: float, q: np.ndarray, qd: np.ndarray
    ) -> Tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
        """``(q_ref, qd_ref, qdd_ref, holding)`` at time ``t`` for the arm at ``q``, ``qd``:
        the reference (plus what is left of a rejoin), or the hold position at rest."""
        with self._lock:
            ref, rejoin = self._reference, self._rejoin
            if self._hold is None:
                self._hold = np.array(q, dtype=np.float64)
            hold = self._hold
        if ref is None:
            zero = np.zeros_like(hold)
            return hold, zero, zero, True
        q_ref, qd_ref, qdd_ref = (a[0] for a in ref.sample(t))
        if rejoin is not None:
            dq, dqd, dqdd = (a[0] for a in rejoin.sample(t))
            q_ref, qd_ref, qdd_ref = q_ref + dq, qd_ref + dqd, qdd_ref + dqdd
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
