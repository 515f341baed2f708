"""Why a recorded joint state or command is malformed: the data logger records such messages
anyway and counts them by reason, so a bag's flaws are known before training reads it."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Callable, Optional, Tuple

import numpy as np

from delan_common.joint_state import JointStateError, JointStateMapper
from delan_learning.bags.types import (
    COMMAND_TYPE,
    JOINT_STATE_TYPE,
    deserialize_cdr,
    ros2_typestore,
)

#: joint-name tuples whose mapper is kept (a recording sees one or a few)
MAPPER_CACHE = 64

Deserialize = Callable[[bytes, str], Any]


def _deserialize_cdr(data: bytes, msgtype: str) -> Any:
    return deserialize_cdr(ros2_typestore(), data, msgtype)


class MessageChecker:
    """Checks serialised joint states (names, array lengths, finite values) and commands
    (data, finite values, layout); other types pass. ``deserialize(data, msgtype)`` decodes a
    payload (default: the ROS 2 typestore of ``rosbags``; the logger passes rclpy's)."""

    def __init__(self, deserialize: Deserialize = _deserialize_cdr):
        self._deserialize = deserialize
        self._mappers: 'OrderedDict[tuple, JointStateMapper]' = OrderedDict()

    def problem(self, msgtype: str, data: bytes) -> Optional[Tuple[str, str]]:
        """``(reason, detail)`` of what is wrong with the message; None when nothing is."""
        try:
            if msgtype == JOINT_STATE_TYPE:
                self._check_joint_state(self._deserialize(data, msgtype))
            elif msgtype == COMMAND_TYPE:
                self._check_command(self._deserialize(data, msgtype))
        except JointStateError as err:
            return err.reason, err.detail
        except Exception as exc:  # noqa: BLE001 - undecodable payload
            return 'undecodable', str(exc)
        return None

    def _check_joint_state(self, msg: Any) -> None:
        names = tuple(msg.name)
        if not names:
            raise JointStateError('empty', 'joint state has no names')
        mapper = self._mappers.get(names)
        if mapper is None:
            if len(set(names)) != len(names):
                raise JointStateError('duplicate_names', f'joint names repeat: {names}')
            mapper = JointStateMapper(names, require_velocity=False)
            self._mappers[names] = mapper
            if len(self._mappers) > MAPPER_CACHE:
                self._mappers.popitem(last=False)
        mapper.map(msg)

    @staticmethod
    def _check_command(msg: Any) -> None:
        values = np.asarray(msg.data, dtype=np.float64)
        if values.size == 0:
            raise JointStateError('empty', 'command has no data')
        if not np.all(np.isfinite(values)):
            raise JointStateError('non_finite', 'NaN or Inf in command')
        dims = [d.size for d in msg.layout.dim]
        if dims and int(np.prod(dims)) + msg.layout.data_offset > values.size:
            raise JointStateError(
                'layout_mismatch', f'layout {dims} needs more than {values.size} values'
            )
