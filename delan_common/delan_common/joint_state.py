"""Map joint-state arrays given by name onto a model's fixed joint order, rejecting bad input.

Pure numpy and duck-typed (anything with ``name``, ``position``, ``velocity``, ``effort``), so the
same checks serve the ROS nodes, the bag reader and the tests.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np


class JointStateError(ValueError):
    """A joint state that cannot be used; ``reason`` is a short, countable key."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f'{reason}: {detail}')
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True)
class MappedJointState:
    """Arrays in model joint order; ``effort`` is None when the message carried none."""

    position: np.ndarray
    velocity: np.ndarray
    effort: Optional[np.ndarray]


class JointStateMapper:
    """Reorders joint states by name into ``joint_names`` order.

    Messages may name more joints than the model (e.g. a gripper): extra names are ignored
    unless ``allow_extra`` is False. Missing joints, duplicated names, mismatched array lengths
    and non-finite values raise :class:`JointStateError`.
    """

    def __init__(
        self, joint_names: Sequence[str], allow_extra: bool = True, require_velocity: bool = True
    ):
        if len(set(joint_names)) != len(joint_names):
            raise ValueError(f'duplicated joint names in model: {list(joint_names)}')
        if len(joint_names) == 0:
            raise ValueError('model has no joints')
        self.joint_names = list(joint_names)
        self.allow_extra = allow_extra
        self.require_velocity = require_velocity
        self._cache_key: Optional[tuple] = None
        self._index: Optional[np.ndarray] = None

    def _indices(self, names: Sequence[str]) -> np.ndarray:
        key = tuple(names)
        if key == self._cache_key:
            assert self._index is not None  # set with _cache_key
            return self._index
        if len(set(key)) != len(key):
            raise JointStateError('duplicate_names', f'joint names repeat: {list(key)}')
        pos = {n: i for i, n in enumerate(key)}
        missing = [n for n in self.joint_names if n not in pos]
        if missing:
            raise JointStateError(
                'missing_joints', f'message lacks joints {missing} (has {list(key)})'
            )
        if not self.allow_extra:
            extra = [n for n in key if n not in set(self.joint_names)]
            if extra:
                raise JointStateError('unknown_joints', f'unknown joints {extra}')
        self._cache_key = key
        self._index = np.array([pos[n] for n in self.joint_names], dtype=np.intp)
        return self._index

    def map(self, msg) -> MappedJointState:
        """A JointState message in model order: ``q, qd (n,)`` (``qd`` zeros when the message has
        none and none is required) and ``tau (n,)`` or None. Raises :class:`JointStateError` with
        its reason for an unusable message (names, lengths, non-finite values)."""
        names = list(msg.name)
        n_msg = len(names)
        if n_msg == 0:
            raise JointStateError('empty', 'joint state has no names')
        idx = self._indices(names)
        position = np.asarray(msg.position, dtype=np.float64)
        velocity = np.asarray(msg.velocity, dtype=np.float64)
        effort = np.asarray(msg.effort, dtype=np.float64)
        if position.shape != (n_msg,):
            raise JointStateError(
                'length_mismatch', f'{n_msg} names but {position.size} positions'
            )
        if velocity.size == 0 and self.require_velocity:
            raise JointStateError('no_velocity', 'joint state carries no velocities')
        if velocity.size not in (0, n_msg):
            raise JointStateError(
                'length_mismatch', f'{n_msg} names but {velocity.size} velocities'
            )
        if effort.size not in (0, n_msg):
            raise JointStateError('length_mismatch', f'{n_msg} names but {effort.size} efforts')
        q = position[idx]
        qd = velocity[idx] if velocity.size else np.zeros(len(idx))
        tau = effort[idx] if effort.size else None
        if not (
            np.isfinite(q).all()
            and np.isfinite(qd).all()
            and (tau is None or np.isfinite(tau).all())
        ):
            raise JointStateError('non_finite', 'NaN or Inf in joint state')
        return MappedJointState(q, qd, tau)


MAX_STAMP_JUMP_S = 1.0


class StampGate:
    """Rejects header stamps that go backwards or jump ahead by more than ``max_jump`` s.

    Clock-domain free (wall time, sim time and a faster-than-real-time sim all work): only the
    continuity of the stream is checked. A rejected stamp becomes a *candidate*; the next stamp
    that continues it is accepted, so a genuine restart of the sender's clock (a sim reset, a
    looping bag) costs one message, while a single stray stamp (far future, an old duplicate)
    costs only itself. ``strict`` also rejects a repeated stamp.
    """

    def __init__(self, max_jump: float = MAX_STAMP_JUMP_S, strict: bool = False):
        self.max_jump = max_jump
        self.strict = strict
        self.last: Optional[float] = None
        self._candidate: Optional[float] = None

    def _continues(self, ref: Optional[float], t: float) -> bool:
        if ref is None:
            return False
        ahead = t - ref
        return (ahead > 0.0 if self.strict else ahead >= 0.0) and ahead <= self.max_jump

    def check(self, t: float) -> None:
        """Raise :class:`JointStateError` unless ``t`` is acceptable; remember it if it is."""
        if not np.isfinite(t):
            raise JointStateError('bad_stamp', f'stamp {t}')
        if (
            self.last is None
            or self._continues(self.last, t)
            or self._continues(self._candidate, t)
        ):
            self.last, self._candidate = t, None
            return
        last, self._candidate = self.last, t
        if t - last > self.max_jump:
            raise JointStateError(
                'stamp_jump',
                f'stamp {t:.6f} is {t - last:.3f} s after the '
                f'previous {last:.6f} (> {self.max_jump} s)',
            )
        raise JointStateError(
            'stamp_backwards', f'stamp {t:.6f} is not after the previous {last:.6f}'
        )

    def reset(self) -> None:
        """Forget the stamps seen: the next stamp is accepted whatever it is (the sender
        restarted)."""
        self.last = self._candidate = None
