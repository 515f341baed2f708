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

    def __init__(self, joint_names: Sequence[str], allow_extra: bool = True,
                 require_velocity: bool = True):
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
            return self._index
        if len(set(key)) != len(key):
            raise JointStateError('duplicate_names', f'joint names repeat: {list(key)}')
        pos = {n: i for i, n in enumerate(key)}
        missing = [n for n in self.joint_names if n not in pos]
        if missing:
            raise JointStateError('missing_joints', f'message lacks joints {missing} (has {list(key)})')
        if not self.allow_extra:
            extra = [n for n in key if n not in set(self.joint_names)]
            if extra:
                raise JointStateError('unknown_joints', f'unknown joints {extra}')
        self._cache_key = key
        self._index = np.array([pos[n] for n in self.joint_names], dtype=np.intp)
        return self._index

    def map(self, msg) -> MappedJointState:
        names = list(msg.name)
        n_msg = len(names)
        if n_msg == 0:
            raise JointStateError('empty', 'joint state has no names')
        idx = self._indices(names)
        position = np.asarray(msg.position, dtype=np.float64)
        velocity = np.asarray(msg.velocity, dtype=np.float64)
        effort = np.asarray(msg.effort, dtype=np.float64)
        if position.shape != (n_msg,):
            raise JointStateError('length_mismatch', f'{n_msg} names but {position.size} positions')
        if velocity.size == 0 and self.require_velocity:
            raise JointStateError('no_velocity', 'joint state carries no velocities')
        if velocity.size not in (0, n_msg):
            raise JointStateError('length_mismatch', f'{n_msg} names but {velocity.size} velocities')
        if effort.size not in (0, n_msg):
            raise JointStateError('length_mismatch', f'{n_msg} names but {effort.size} efforts')
        q = position[idx]
        qd = velocity[idx] if velocity.size else np.zeros(len(idx))
        tau = effort[idx] if effort.size else None
        if not (np.all(np.isfinite(q)) and np.all(np.isfinite(qd))
                and (tau is None or np.all(np.isfinite(tau)))):
            raise JointStateError('non_finite', 'NaN or Inf in joint state')
        return MappedJointState(q, qd, tau)
