"""Message types and topics of bags: the ROS 2 typestore (extended with the suite's installed
interfaces), type names, QoS records, CDR decoding, and the constants the other modules share."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterator, List, Optional, Tuple, Union

from rosbags.interfaces import (
    MessageDefinition,
    Qos,
    QosDurability,
    QosHistory,
    QosLiveliness,
    QosReliability,
    QosTime,
)
from rosbags.typesys import Stores, get_types_from_msg, get_typestore
from rosbags.typesys.store import Typestore

from delan_learning.bags.errors import BagError

JOINT_STATE_TYPE = 'sensor_msgs/msg/JointState'
COMMAND_TYPE = 'std_msgs/msg/Float64MultiArray'
COMMAND_TOPIC_SUFFIX = 'effort_controller/commands'
STORAGES = ('mcap', 'sqlite3')
STORAGE_EXT = {'mcap': '.mcap', 'sqlite3': '.db3'}
PathLike = Union[str, os.PathLike]


@dataclass
class BagTopic:
    """A topic as a bag records it: type, definition and hash (when stored), offered QoS."""

    name: str
    msgtype: str
    msgdef: Optional[MessageDefinition] = None
    digest: str = ''
    qos: List[Qos] = field(default_factory=list)


@lru_cache(maxsize=1)
def ros2_typestore() -> Typestore:
    """The newest ROS 2 typestore ``rosbags`` ships (Kilted for 0.11.x; Jazzy at least)."""
    for name in ('ROS2_KILTED', 'ROS2_JAZZY', 'ROS2_IRON', 'ROS2_HUMBLE'):
        store = getattr(Stores, name, None)
        if store is not None:
            return get_typestore(store)
    raise RuntimeError('rosbags has no ROS 2 typestore')  # pragma: no cover


@lru_cache(maxsize=None)
def type_definition(msgtype: str) -> Tuple[str, str]:
    """(ros2msg definition text, RIHS01 type hash) of a ROS 2 message type, from the typestore;
    a type it does not ship (this suite's delan_msgs, ...) is added to it first from the
    installed ``.msg`` files (:func:`register_installed_type`)."""
    store = ros2_typestore()
    if msgtype not in store.fielddefs:
        register_installed_type(msgtype)
    return store.generate_msgdef(msgtype, ros_version=2)[0], store.hash_rihs01(msgtype)


def normalize_msgtype(name: str) -> str:
    """``pkg/msg/Type`` of ``pkg/msg/Type`` or ``pkg/Type``; ValueError for anything else."""
    parts = name.strip().split('/')
    if len(parts) == 2:
        parts.insert(1, 'msg')
    if (
        len(parts) != 3
        or parts[1] != 'msg'
        or not all(re.fullmatch(r'[A-Za-z][A-Za-z0-9_]*', p) for p in parts)
    ):
        raise ValueError(f'{name!r} is not a message type (pkg/msg/Type or pkg/Type)')
    return '/'.join(parts)


def parse_topic_entry(entry: str) -> Tuple[str, Optional[str]]:
    """``(topic, message type or None)`` of ``'topic'`` or ``'topic:pkg/msg/Type'`` (a topic
    name has no ``:``); ValueError for an empty topic or a malformed type."""
    topic, sep, msgtype = entry.strip().partition(':')
    topic = topic.strip()
    if not topic:
        raise ValueError(f'{entry!r}: no topic name')
    return topic, normalize_msgtype(msgtype) if sep else None


def installed_interface_file(msgtype: str) -> Path:
    """``share/<pkg>/msg/<Type>.msg`` of the first prefix in ``$AMENT_PREFIX_PATH`` that has it;
    BagError when none does."""
    pkg, kind, name = normalize_msgtype(msgtype).split('/')
    for prefix in os.environ.get('AMENT_PREFIX_PATH', '').split(os.pathsep):
        path = Path(prefix, 'share', pkg, kind, f'{name}.msg') if prefix else None
        if path is not None and path.is_file():
            return path
    raise BagError(
        f'message type {msgtype}: no share/{pkg}/{kind}/{name}.msg in '
        'AMENT_PREFIX_PATH (is its package built and sourced?)'
    )


def register_installed_type(msgtype: str) -> None:
    """Add ``msgtype``, and every type it uses that the typestore lacks, to the typestore from
    their installed ``.msg`` files, so bags can name them with definition and type hash."""
    store = ros2_typestore()
    todo = [normalize_msgtype(msgtype)]
    while todo:
        name = todo.pop()
        if name in store.fielddefs:
            continue
        types = get_types_from_msg(installed_interface_file(name).read_text(), name)
        todo.extend(t for t in _named_types(types[name][1]) if t not in store.fielddefs)
        store.register(types)


def _named_types(node: object) -> Iterator[str]:
    """The ``pkg/msg/Type`` names in a rosbags field definition (nested tuples)."""
    if isinstance(node, str):
        if node.count('/') == 2:
            yield node
    elif isinstance(node, (tuple, list)):
        for item in node:
            yield from _named_types(item)


def qos_profile(reliable: bool = True, depth: int = 100) -> Qos:
    """A rosbags QoS record (for ``offered_qos_profiles`` in the bag) of a volatile keep-last
    subscription; deadlines and leases are 0 = unspecified (the rmw default)."""
    zero = QosTime(0, 0)
    return Qos(
        QosHistory.KEEP_LAST,
        int(depth),
        QosReliability.RELIABLE if reliable else QosReliability.BEST_EFFORT,
        QosDurability.VOLATILE,
        zero,
        zero,
        QosLiveliness.AUTOMATIC,
        zero,
        False,
    )


def deserialize_cdr(store: Typestore, data: Union[bytes, memoryview], msgtype: str) -> Any:
    """``store.deserialize_cdr`` that also takes the up to 7 padding bytes rclpy (rmw_fastrtps)
    appends, where rosbags allows 3: a JointState with an empty last field (no effort, as
    joint_state_broadcaster publishes for a robot without effort sensing) ends 4 bytes short
    of its 8-byte padded size. Raises ValueError when the payload is no CDR ``msgtype``."""
    if len(data) < 4 or bytes(data[:2]) not in (b'\x00\x00', b'\x00\x01'):
        raise ValueError('not a CDR payload')
    msgdef = store.get_msgdef(msgtype)
    decode = msgdef.deserialize_cdr_le if data[1] else msgdef.deserialize_cdr_be
    msg, pos = decode(memoryview(data)[4:], 0, msgdef.cls, store)
    if len(data) - 4 - pos > 7:
        raise ValueError(f'{len(data) - 4 - pos} bytes after the {msgtype} message')
    return msg
