"""rosbag2 files in and out, free of ROS: the data logger's split writer, crash recovery, and
reading joint-state bags into training arrays.

Everything goes through the pure-Python ``rosbags`` library, so bags are written and read the
same way with or without a ROS installation. Bags written here are ordinary rosbag2 directories
(``metadata.yaml`` + one ``.mcap`` or ``.db3`` file, CDR payloads, ROS 2 message definitions and
RIHS01 type hashes from the ROS 2 typestore), which ``ros2 bag info`` / ``ros2 bag play`` read.

Writing (:class:`SplitBagWriter`)
    One recording session is a series of complete bag directories
    ``<bag_dir>/<prefix>_<YYYY_MM_DD-HH_MM_SS>_<NNN>/`` (``NNN`` = split index from 000; the
    storage file inside is ``<that name>.mcap`` / ``.db3``). A new split starts before a message
    would push the current one past ``max_bag_size_mb`` (payload + per-record overhead; the index
    and summary are not counted) or when a message arrives ``max_bag_duration_s`` or more after the
    split's first message (bag = receive time). ``rosbags`` cannot split files inside one bag, so
    every split is its own readable bag; :func:`read_bag_arrays` on ``<bag_dir>`` reads them all.

    :meth:`SplitBagWriter.flush` makes everything written so far durable: for mcap it closes the
    pending chunk (with its message indexes) and fsyncs, for sqlite3 it commits. A bag cut off
    by SIGKILL or power loss then keeps every message written before the last flush; it has no
    ``metadata.yaml`` (and an mcap without summary/footer), which :func:`recover_bag` repairs and
    :func:`read_bag_arrays` salvages on the fly.

Reading (:func:`read_bag_arrays`)
    Accepts a bag directory (this logger's or ``ros2 bag record``'s, mcap or sqlite3, split into
    several files or not), a single ``.mcap`` / ``.db3`` file, or a directory whose subdirectories
    are bags (a logger session's splits). Truncated mcap files are read up to the last complete
    record; that, and a missing ``metadata.yaml``, is reported in ``result['info']['recovered']``
    (``strict=True`` raises :class:`BagError` instead).
"""

from __future__ import annotations

import math
import mmap
import os
import re
import shutil
import sqlite3
import struct
import tempfile
import time
import warnings
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np
from rosbags.interfaces import (
    MessageDefinition,
    MessageDefinitionFormat,
    Qos,
    QosDurability,
    QosHistory,
    QosLiveliness,
    QosReliability,
    QosTime,
)
from rosbags.rosbag2 import Reader, ReaderError, StoragePlugin, Writer
from rosbags.rosbag2 import storage_mcap as _mcap
from rosbags.typesys import Stores, get_types_from_msg, get_typestore

from delan_common.command_order import CommandOrder, CommandOrderError
from delan_common.joint_state import JointStateError, JointStateMapper
from delan_learning.data import complete_derivatives, split_at_gaps

__all__ = [
    'BagError',
    'BagWarning',
    'TopicSpec',
    'SplitBagWriter',
    'read_bag_arrays',
    'recover_bag',
    'list_bags',
    'iter_bag_messages',
    'ros2_typestore',
    'type_definition',
    'qos_profile',
    'normalize_msgtype',
    'parse_topic_entry',
    'register_installed_type',
    'JOINT_STATE_TYPE',
    'COMMAND_TYPE',
    'ARRAY_KEYS',
]

JOINT_STATE_TYPE = 'sensor_msgs/msg/JointState'
COMMAND_TYPE = 'std_msgs/msg/Float64MultiArray'
COMMAND_TOPIC_SUFFIX = 'effort_controller/commands'
STORAGES = ('mcap', 'sqlite3')
STORAGE_EXT = {'mcap': '.mcap', 'sqlite3': '.db3'}
# npz keys of a training set (joint_types only when known)
ARRAY_KEYS = ('q', 'qd', 'qdd', 'tau', 'traj', 't', 'joint_names', 'joint_types')
# bytes a message costs in the storage besides its payload (mcap: record 31 + index entry 16)
RECORD_OVERHEAD = 47
MCAP_MAGIC = b'\x89MCAP0\r\n'
PathLike = Union[str, os.PathLike]


class BagError(ValueError):
    """A bag that cannot be used (missing, unreadable, or without the data asked for)."""


class BagWarning(UserWarning):
    """Data was read from a damaged bag (truncated file, missing metadata.yaml)."""


@lru_cache(maxsize=1)
def ros2_typestore():
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


def _named_types(node) -> Iterator[str]:
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


# ---------------------------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TopicSpec:
    """A topic to record: resolved name, ROS 2 type name, and the QoS it was subscribed with."""

    name: str
    msgtype: str
    qos: Tuple[Qos, ...] = ()


class SplitBagWriter:
    """Writes one recording session as a series of complete rosbag2 directories.

    Not thread-safe: one thread (the logger's writer thread) calls :meth:`write`, :meth:`flush`
    and :meth:`close`. The first split is opened by :meth:`open` (or the first write); later ones
    when a limit is reached and another message arrives, so a session never ends with an empty
    split. Limits may be changed between writes (``max_bag_size_mb``, ``max_bag_duration_s``;
    0 = unlimited).

    Durability: after :meth:`flush` returns, everything written before it is on disk in a form
    :func:`recover_bag` restores even if the process is then killed (SIGKILL) or the machine
    loses power. :meth:`close` writes the mcap summary and ``metadata.yaml``.
    """

    def __init__(
        self,
        bag_dir: PathLike,
        topics: Sequence[TopicSpec],
        *,
        prefix: str = 'delan',
        storage: str = 'mcap',
        max_bag_size_mb: float = 0.0,
        max_bag_duration_s: float = 0.0,
        session: Optional[str] = None,
        custom_data: Optional[Dict[str, str]] = None,
    ):
        if storage not in STORAGES:
            raise ValueError(f'storage must be one of {STORAGES}, not {storage!r}')
        if not topics:
            raise ValueError('no topics to record')
        if not re.fullmatch(r'[A-Za-z0-9_.\-]+', prefix):
            raise ValueError(
                f'bag prefix {prefix!r} must be a plain file name (letters, digits, "_", "-", ".")'
            )
        self.bag_dir = Path(bag_dir).expanduser()
        self.topics = list(topics)
        self.storage = storage
        self.max_bag_size_mb = float(max_bag_size_mb)
        self.max_bag_duration_s = float(max_bag_duration_s)
        self.custom_data = dict(custom_data or {})
        self.bag_dir.mkdir(parents=True, exist_ok=True)
        if not os.access(self.bag_dir, os.W_OK | os.X_OK):
            raise PermissionError(f'bag directory {self.bag_dir} is not writable')
        self.session = session or self._new_session_name(prefix)
        self.index = -1  # split index of the open (or last) bag
        self.paths: List[Path] = []  # every split opened so far
        self.messages_written = 0  # in the whole session
        self.bytes_written = 0
        self.topic_counts: Counter = Counter()
        self._writer: Optional[Writer] = None
        self._conns: Dict[str, object] = {}
        self._bag_bytes = 0
        self._bag_messages = 0
        self._bag_start_ns: Optional[int] = None
        self._unflushed = 0

    def _new_session_name(self, prefix: str) -> str:
        stamp = time.strftime('%Y_%m_%d-%H_%M_%S')
        name, k = f'{prefix}_{stamp}', 1
        while any(self.bag_dir.glob(f'{glob_escape(name)}_[0-9][0-9][0-9]*')):
            k += 1
            name = f'{prefix}_{stamp}.{k}'
        return name

    # -- state
    @property
    def path(self) -> Optional[Path]:
        """The bag directory being written (None before the first and after :meth:`close`)."""
        return self.paths[-1] if self._writer is not None else None

    @property
    def is_open(self) -> bool:
        return self._writer is not None

    @property
    def pending(self) -> int:
        """Messages written since the last flush (what a SIGKILL now would lose)."""
        return self._unflushed

    # -- lifecycle
    def open(self) -> Path:
        """Open the next split (closing the current one first). Returns its directory."""
        if self._writer is not None:
            self._close_current()
        self.index += 1
        path = self.bag_dir / f'{self.session}_{self.index:03d}'
        writer = Writer(
            path,
            version=Writer.VERSION_LATEST,
            storage_plugin=StoragePlugin.MCAP if self.storage == 'mcap' else StoragePlugin.SQLITE3,
        )
        writer.open()
        try:
            conns = {spec.name: self._add_connection(writer, spec) for spec in self.topics}
            for key, value in self.custom_data.items():
                writer.set_custom_data(key, str(value))
            writer.set_custom_data('delan.session', self.session)
            writer.set_custom_data('delan.split_index', str(self.index))
        except BaseException:
            writer.abort()
            raise
        self._writer, self._conns = writer, conns
        self.paths.append(path)
        self._bag_bytes = self._bag_messages = 0
        self._bag_start_ns = None
        self._unflushed = 0
        if self.storage == 'sqlite3':
            # schema, topics and definitions durable now: a crash leaves a bag with all topics
            writer.storage.conn.commit()
        return path

    def add_topic(self, spec: TopicSpec) -> None:
        """Record ``spec`` too, from now on: in the open split and every later one."""
        if any(t.name == spec.name for t in self.topics):
            raise ValueError(f'topic {spec.name} is recorded already')
        if self._writer is not None:
            self._conns[spec.name] = self._add_connection(self._writer, spec)
        self.topics.append(spec)

    @staticmethod
    def _add_connection(writer: Writer, spec: TopicSpec):
        msgdef, rihs01 = type_definition(spec.msgtype)
        return writer.add_connection(
            spec.name,
            spec.msgtype,
            msgdef=msgdef,
            rihs01=rihs01,
            offered_qos_profiles=list(spec.qos),
        )

    def _needs_split(self, timestamp: int, size: int) -> bool:
        if self._bag_messages == 0:
            return False
        if (
            self.max_bag_size_mb > 0
            and self._bag_bytes + size + RECORD_OVERHEAD > self.max_bag_size_mb * 1e6
        ):
            return True
        if (
            self.max_bag_duration_s > 0
            and self._bag_start_ns is not None
            and timestamp - self._bag_start_ns >= self.max_bag_duration_s * 1e9
        ):
            return True
        return False

    def write(self, topic: str, timestamp: int, data: Union[bytes, memoryview]) -> None:
        """Append one CDR-serialised message (``timestamp`` = receive time, ns since epoch)."""
        conn = self._conns.get(topic) if self._writer is not None else None
        if self._writer is None or self._needs_split(timestamp, len(data)):
            self.open()
            conn = self._conns.get(topic)
        if conn is None:
            raise KeyError(f'topic {topic!r} is not recorded (have {list(self._conns)})')
        self._writer.write(conn, int(timestamp), data)
        if self._bag_start_ns is None:
            self._bag_start_ns = int(timestamp)
        self._bag_messages += 1
        self._bag_bytes += len(data) + RECORD_OVERHEAD
        self._unflushed += 1
        self.messages_written += 1
        self.bytes_written += len(data)
        self.topic_counts[topic] += 1

    def flush(self) -> None:
        """Make every message written so far survive a crash of this process (and of the OS)."""
        writer = self._writer
        if writer is None or writer.storage is None or self._unflushed == 0:
            return
        storage = writer.storage
        if self.storage == 'mcap':
            # rosbags 0.11 keeps the open chunk in memory until it reaches 1 MiB; close it early
            # (chunk + message indexes, a valid mcap prefix) so the data reaches the file.
            chunk = getattr(storage, 'chunk', None)
            if chunk is not None and chunk.msgs:
                storage.close_chunk()
            storage.bio.flush()
            os.fsync(storage.bio.fileno())
        else:
            storage.conn.commit()
        self._unflushed = 0

    def _close_current(self) -> None:
        writer, self._writer = self._writer, None
        self._conns = {}
        if writer is not None:
            writer.close()  # mcap summary + footer, metadata.yaml (written atomically)
            self._unflushed = 0

    def close(self) -> None:
        """Close the open split (complete bag with metadata.yaml). Idempotent."""
        self._close_current()

    def abort(self) -> None:
        """Drop the open split without finishing it (after a write error); recover it later."""
        writer, self._writer = self._writer, None
        self._conns = {}
        if writer is not None:
            try:
                writer.abort()
            except Exception:  # noqa: BLE001 - best effort after a failure
                pass


def glob_escape(name: str) -> str:
    return re.sub(r'([\[\]*?])', r'[\1]', name)


# ---------------------------------------------------------------------------------------------
# Low-level reading and salvage
# ---------------------------------------------------------------------------------------------


@dataclass
class _Topic:
    name: str
    msgtype: str
    msgdef: Optional[MessageDefinition] = None
    digest: str = ''
    qos: list = field(default_factory=list)


@dataclass
class _Source:
    """The messages of one storage unit (a readable bag directory or one storage file)."""

    path: Path
    storage: str
    topics: Dict[str, _Topic]
    reader: Optional[Reader] = None  # intact: read lazily through rosbags
    messages: Optional[List[Tuple[str, int, bytes]]] = None  # salvaged: materialised

    def iter(self, topics: Optional[Sequence[str]] = None) -> Iterator[Tuple[str, int, bytes]]:
        wanted = None if topics is None else set(topics)
        if self.reader is not None:
            conns = [c for c in self.reader.connections if wanted is None or c.topic in wanted]
            if not conns:
                return
            try:
                for conn, timestamp, data in self.reader.messages(connections=conns):
                    yield conn.topic, timestamp, data
            except (ReaderError, OSError, struct.error) as exc:
                raise BagError(
                    f'{self.path}: damaged data ({exc}); recover_bag() rewrites what is readable'
                ) from exc
        else:
            for topic, timestamp, data in self.messages or ():
                if wanted is None or topic in wanted:
                    yield topic, timestamp, data

    def close(self) -> None:
        if self.reader is not None and self.reader.is_open:
            self.reader.close()


# (topics, messages as (topic, timestamp, cdr bytes), notes on the damage)
_Salvaged = Tuple[Dict[str, _Topic], List[Tuple[str, int, bytes]], List[str]]


def _storage_files(bag: Path) -> List[Path]:
    files = [p for p in bag.iterdir() if p.is_file() and p.suffix in ('.mcap', '.db3')]

    def key(p: Path):
        m = re.search(r'_(\d+)$', p.stem)
        return (p.stem[: m.start()] if m else p.stem, int(m.group(1)) if m else -1, p.name)

    return sorted(files, key=key)


def _is_bag_dir(path: Path) -> bool:
    return path.is_dir() and ((path / 'metadata.yaml').is_file() or bool(_storage_files(path)))


def list_bags(path: PathLike) -> List[Path]:
    """The bags under ``path``: itself if it is a bag directory or storage file, else its
    subdirectories that are bags (e.g. a logger session's splits), sorted by name."""
    p = Path(path).expanduser()
    if not p.exists():
        raise BagError(f'bag path {p} does not exist')
    if p.is_file():
        if p.suffix not in ('.mcap', '.db3'):
            raise BagError(f'{p} is not a bag: expected a directory, or a .mcap or .db3 file')
        return [p]
    if _is_bag_dir(p):
        return [p]
    subs = sorted(d for d in p.iterdir() if _is_bag_dir(d))
    if not subs:
        raise BagError(
            f'{p} is not a bag directory: no metadata.yaml, no .mcap/.db3 file and no '
            'bag subdirectories'
        )
    return subs


def _topics_of_reader(reader: Reader) -> Dict[str, _Topic]:
    topics: Dict[str, _Topic] = {}
    for c in reader.connections:
        if c.topic not in topics:
            qos = list(getattr(c.ext, 'offered_qos_profiles', []) or [])
            topics[c.topic] = _Topic(c.topic, c.msgtype, c.msgdef, c.digest or '', qos)
    return topics


def _open_reader(path: Path, storage: str) -> _Source:
    reader = Reader(path)
    reader.open()
    try:
        return _Source(path, storage, _topics_of_reader(reader), reader=reader)
    except BaseException:
        reader.close()
        raise


def _read_str(buf, pos: int) -> Tuple[str, int]:
    (n,) = struct.unpack_from('<I', buf, pos)
    pos += 4
    return bytes(buf[pos : pos + n]).decode('utf-8'), pos + n


def _mcap_records(buf, pos: int, end: int) -> Iterator[Tuple[int, int, int]]:
    """(opcode, content start, content end) of each complete record in buf[pos:end]; stops at the
    first incomplete one (the reason is raised as the generator's return value)."""
    while pos < end:
        if pos + 9 > end:
            return 'record header cut off'
        op = buf[pos]
        (length,) = struct.unpack_from('<Q', buf, pos + 1)
        start = pos + 9
        if start + length > end:
            return 'record cut off'
        yield op, start, start + length
        pos = start + length
    return None


def salvage_mcap(path: PathLike) -> _Salvaged:
    """Read every complete message of an mcap file, also one without summary/footer (SIGKILL,
    full disk, copy cut short). Returns (topics, messages as (topic, log_time, data) in time order,
    notes on what was damaged). Raises BagError when not even the header is readable."""
    path = Path(path)
    notes: List[str] = []
    size = path.stat().st_size
    if size < len(MCAP_MAGIC) + 9:
        raise BagError(f'{path}: not an mcap file or cut off in its header ({size} bytes)')
    with path.open('rb') as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        if buf[:8] != MCAP_MAGIC:
            raise BagError(f'{path}: not an mcap file (bad magic)')
        schemas: Dict[int, Tuple[str, str, str]] = {}
        channels: Dict[int, Tuple[str, int, str]] = {}
        raw: List[Tuple[int, int, bytes]] = []  # (log_time, channel, data)

        def handle(container, op, start, end, nested) -> Optional[str]:
            if op == 0x03:  # Schema
                (sid,) = struct.unpack_from('<H', container, start)
                name, p = _read_str(container, start + 2)
                encoding, p = _read_str(container, p)
                (n,) = struct.unpack_from('<I', container, p)
                schemas[sid] = (
                    name,
                    encoding,
                    bytes(container[p + 4 : p + 4 + n]).decode('utf-8'),
                )
            elif op == 0x04:  # Channel
                cid, sid = struct.unpack_from('<HH', container, start)
                topic, p = _read_str(container, start + 4)
                channels[cid] = (topic, sid, '')
            elif op == 0x05:  # Message
                cid, _seq, log_time, _pub = struct.unpack_from('<HIQQ', container, start)
                raw.append((log_time, cid, bytes(container[start + 22 : end])))
            elif op == 0x06 and not nested:  # Chunk
                _s, _e, usize, crc = struct.unpack_from('<QQQI', container, start)
                compression, p = _read_str(container, start + 28)
                (csize,) = struct.unpack_from('<Q', container, p)
                p += 8
                if p + csize > end:
                    return 'chunk record inconsistent'
                try:
                    inner = _mcap.decompress(
                        bytes(container[p : p + csize]), compression, usize, crc
                    )
                except ReaderError as exc:
                    notes.append(f'{path.name}: skipped a damaged chunk ({exc})')
                    return None
                gen = _mcap_records(inner, 0, len(inner))
                try:
                    while True:
                        iop, istart, iend = next(gen)
                        handle(inner, iop, istart, iend, True)
                except StopIteration as stop:
                    if stop.value:
                        notes.append(f'{path.name}: a chunk ends in a cut-off record')
            return None

        gen = _mcap_records(buf, 8, size)
        complete = False
        try:
            while True:
                op, start, end = next(gen)
                if op in (0x0F, 0x02):  # DataEnd / Footer: all data records seen
                    complete = True
                    break
                try:
                    problem = handle(buf, op, start, end, False)
                except (struct.error, UnicodeDecodeError, IndexError) as exc:
                    problem = f'malformed record ({exc})'
                if problem:
                    notes.append(f'{path.name}: {problem}; stopped reading there')
                    break
        except StopIteration as stop:
            if stop.value:
                notes.append(
                    f'{path.name}: truncated ({stop.value} at the end): read up to the '
                    'last complete record'
                )
            elif not complete:
                notes.append(
                    f'{path.name}: truncated (no data-end record or footer): read all '
                    'complete records'
                )
    topics: Dict[str, _Topic] = {}
    for cid, (topic, sid, _) in sorted(channels.items()):
        name, encoding, text = schemas.get(sid, ('', '', ''))
        if not name or topic in topics:
            continue
        fmt = MessageDefinitionFormat.IDL if encoding == 'ros2idl' else MessageDefinitionFormat.MSG
        topics[topic] = _Topic(topic, name, MessageDefinition(fmt, text))
    messages = [
        (channels[cid][0], ts, data)
        for ts, cid, data in sorted(raw, key=lambda r: r[0])
        if cid in channels and channels[cid][0] in topics
    ]
    lost = len(raw) - len(messages)
    if lost:
        notes.append(f'{path.name}: {lost} messages of unknown channels skipped')
    return topics, messages, notes


def salvage_sqlite(path: PathLike) -> _Salvaged:
    """Read a rosbag2 ``.db3`` without trusting metadata.yaml, on a private copy so a hot journal
    left by a crash is rolled back (only committed messages are returned) without touching the
    original."""
    path = Path(path)
    notes: List[str] = []
    with tempfile.TemporaryDirectory(prefix='delan_bag_') as tmp:
        copy = Path(tmp) / path.name
        shutil.copyfile(path, copy)
        for suffix in ('-journal', '-wal', '-shm'):
            side = path.with_name(path.name + suffix)
            if side.exists():
                shutil.copyfile(side, copy.with_name(copy.name + suffix))
                notes.append(
                    f'{path.name}: found {side.name} (interrupted write); '
                    'uncommitted messages rolled back'
                )
        try:
            con = sqlite3.connect(str(copy))
            try:
                cols = {r[1] for r in con.execute('PRAGMA table_info(topics)')}
                if not {'id', 'name', 'type'} <= cols:
                    raise BagError(f'{path}: not a rosbag2 sqlite3 file (no topics table)')
                topics_rows = con.execute(
                    'SELECT id, name, type FROM topics ORDER BY id'
                ).fetchall()
                defs: Dict[str, Tuple[str, str]] = {}
                if con.execute(
                    "SELECT name FROM sqlite_master WHERE type='table' AND "
                    "name='message_definitions'"
                ).fetchone():
                    for ttype, enc, text in con.execute(
                        'SELECT topic_type, encoding, encoded_message_definition '
                        'FROM message_definitions'
                    ):
                        defs[ttype] = (enc, text)
                rows = con.execute(
                    'SELECT topic_id, timestamp, data FROM messages ORDER BY timestamp, id'
                ).fetchall()
            finally:
                con.close()
        except sqlite3.DatabaseError as exc:
            raise BagError(f'{path}: unreadable sqlite3 bag ({exc})') from exc
    topics: Dict[str, _Topic] = {}
    by_id: Dict[int, str] = {}
    for tid, name, ttype in topics_rows:
        by_id[tid] = name
        if name not in topics:
            enc, text = defs.get(ttype, ('', ''))
            fmt = MessageDefinitionFormat.IDL if enc == 'ros2idl' else MessageDefinitionFormat.MSG
            topics[name] = _Topic(name, ttype, MessageDefinition(fmt, text) if text else None)
    messages = [(by_id[tid], ts, bytes(data)) for tid, ts, data in rows if tid in by_id]
    return topics, messages, notes


def _open_file(path: Path, notes: List[str], strict: bool) -> _Source:
    storage = 'mcap' if path.suffix == '.mcap' else 'sqlite3'
    if storage == 'sqlite3':
        damaged = any(path.with_name(path.name + s).exists() for s in ('-journal', '-wal'))
        if not damaged:
            try:
                return _open_reader(path, storage)
            except (ReaderError, OSError) as exc:
                notes.append(f'{path.name}: rosbags could not open it ({exc}); salvaging')
        topics, msgs, more = salvage_sqlite(path)
    else:
        try:
            return _open_reader(path, storage)
        except Exception as exc:  # noqa: BLE001 - any failure to open: salvage record by record
            more_first = f'{path.name}: {exc}'
        topics, msgs, more = salvage_mcap(path)
        more = [more_first] + more
    notes.extend(more)
    if strict and more:
        raise BagError('damaged bag (strict=True): ' + '; '.join(more))
    return _Source(path, storage, topics, messages=msgs)


def _open_sources(bag: Path, notes: List[str], strict: bool) -> List[_Source]:
    """The readable storage units of one bag (directory or file)."""
    if bag.is_file():
        return [_open_file(bag, notes, strict)]
    if (bag / 'metadata.yaml').is_file():
        try:
            storage = 'mcap' if any(bag.glob('*.mcap*')) else 'sqlite3'
            return [_open_reader(bag, storage)]
        except Exception as exc:  # noqa: BLE001 - bad metadata or a damaged file: per file
            msg = f'{bag.name}: cannot be read as a whole ({exc}); reading its files one by one'
            if strict:
                raise BagError(msg + ' (strict=True)') from exc
            notes.append(msg)
    else:
        msg = f'{bag.name}: no metadata.yaml (recording cut off?); reading its storage files'
        if strict:
            raise BagError(
                msg.replace('; reading its storage files', '') + ' (strict=True); '
                'run recover_bag() first'
            )
        notes.append(msg)
    files = _storage_files(bag)
    if not files:
        raise BagError(f'{bag}: no readable storage (.mcap or .db3) file')
    return [_open_file(f, notes, strict) for f in files]


def iter_bag_messages(
    path: PathLike, topics: Optional[Sequence[str]] = None, notes: Optional[List[str]] = None
) -> Iterator[Tuple[str, str, int, bytes]]:
    """(topic, msgtype, timestamp, cdr bytes) of every message under ``path`` (see
    :func:`list_bags`), bag by bag; damaged bags are salvaged and noted in ``notes``."""
    notes = [] if notes is None else notes
    for bag in list_bags(path):
        sources = _open_sources(bag, notes, strict=False)
        try:
            for src in sources:
                for topic, ts, data in src.iter(topics):
                    yield topic, src.topics[topic].msgtype, ts, data
        finally:
            for src in sources:
                src.close()


# ---------------------------------------------------------------------------------------------
# Recovery
# ---------------------------------------------------------------------------------------------


def _bag_is_intact(bag: Path) -> bool:
    if not (bag / 'metadata.yaml').is_file():
        return False
    if any(bag.glob('*.db3-journal')) or any(bag.glob('*.db3-wal')):
        return False
    try:
        with Reader(bag) as reader:
            for _ in reader.messages():
                pass
        return True
    except Exception:  # noqa: BLE001 - any failure means "needs recovery"
        return False


def recover_bag(path: PathLike, keep_original: bool = True) -> Path:
    """Make a bag cut off by a crash (SIGKILL, power loss) a complete, readable bag again.

    ``path`` is a bag directory (or a directory of them: each is recovered). A bag that already
    reads cleanly is left alone. Otherwise every complete message (see :func:`salvage_mcap`,
    :func:`salvage_sqlite`) is rewritten into a fresh bag of the same storage, with summary and
    ``metadata.yaml``, at the same path; the damaged files move to ``<path>/recovered_from/``
    (deleted when ``keep_original`` is False). Returns ``path``.
    """
    p = Path(path).expanduser()
    if not p.is_dir():
        raise BagError(f'bag directory {p} does not exist')
    bags = list_bags(p)
    if bags != [p]:
        for b in bags:
            recover_bag(b, keep_original)
        return p
    if _bag_is_intact(p):
        return p
    files = _storage_files(p)
    if not files:
        raise BagError(f'{p}: nothing to recover (no .mcap or .db3 file)')
    storage = 'mcap' if files[0].suffix == '.mcap' else 'sqlite3'
    topics: Dict[str, _Topic] = {}
    messages: List[Tuple[str, int, bytes]] = []
    notes: List[str] = []
    for f in files:
        src = _open_file(f, notes, strict=False)
        try:
            for name, t in src.topics.items():
                topics.setdefault(name, t)
            messages.extend(src.iter())
        finally:
            src.close()
    messages.sort(key=lambda m: m[1])
    store = ros2_typestore()
    tmp = Path(tempfile.mkdtemp(prefix=f'.{p.name}.recover-', dir=p.parent))
    new = tmp / p.name
    try:
        writer = Writer(
            new,
            version=Writer.VERSION_LATEST,
            storage_plugin=StoragePlugin.MCAP if storage == 'mcap' else StoragePlugin.SQLITE3,
        )
        writer.open()
        conns = {}
        for name, t in topics.items():
            try:
                conns[name] = writer.add_connection(
                    name, t.msgtype, typestore=store, offered_qos_profiles=t.qos
                )
            except Exception:  # noqa: BLE001 - type unknown to the typestore: use the bag's own
                if t.msgdef is None or not t.msgdef.data:
                    notes.append(f'topic {name}: type {t.msgtype} unknown, messages dropped')
                    continue
                conns[name] = writer.add_connection(
                    name,
                    t.msgtype,
                    msgdef=t.msgdef.data,
                    rihs01=t.digest or 'RIHS01_' + '0' * 64,
                    offered_qos_profiles=t.qos,
                )
        for name, ts, data in messages:
            if name in conns:
                writer.write(conns[name], ts, data)
        writer.set_custom_data('delan.recovered', '; '.join(notes)[:2000] or 'yes')
        writer.close()
        os.replace(p, tmp / 'orig')
        if keep_original:
            os.replace(tmp / 'orig', new / 'recovered_from')
        os.replace(new, p)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return p


# ---------------------------------------------------------------------------------------------
# Training arrays
# ---------------------------------------------------------------------------------------------


def _pick_topic(
    topics: Dict[str, str], msgtype: str, wanted: Optional[str], what: str, preferred: str
) -> Optional[str]:
    """A topic of ``msgtype``: ``wanted`` (must exist), else the only one, else ``preferred``."""
    if wanted is not None:
        name = wanted if wanted.startswith('/') else '/' + wanted
        if name not in topics:
            raise BagError(
                f'{what} topic {name} is not in the bag (topics: {_fmt_topics(topics)})'
            )
        if topics[name] != msgtype:
            raise BagError(f'{what} topic {name} has type {topics[name]}, expected {msgtype}')
        return name
    cands = sorted(t for t, ty in topics.items() if ty == msgtype)
    if len(cands) == 1:
        return cands[0]
    pref = [t for t in cands if t == preferred or t.endswith(preferred.lstrip('/'))]
    if len(pref) == 1:
        return pref[0]
    if len(cands) > 1:
        raise BagError(
            f'several {msgtype} topics {cands}: choose one with the {what} topic argument'
        )
    return None


def _fmt_topics(topics: Dict[str, str]) -> str:
    return ', '.join(f'{t} [{ty}]' for t, ty in sorted(topics.items())) or 'none'


def deserialize_cdr(store, data: Union[bytes, memoryview], msgtype: str):
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


def _stamp_ns(msg) -> int:
    return int(msg.header.stamp.sec) * 1_000_000_000 + int(msg.header.stamp.nanosec)


def read_bag_arrays(
    path: PathLike,
    joint_names: Optional[Sequence[str]] = None,
    joint_state_topic: Optional[str] = None,
    command_topic: Optional[str] = None,
    gap_factor: float = 5.0,
    *,
    joint_types: Optional[Sequence[str]] = None,
    tau_source: str = 'auto',
    strict: bool = False,
    complete: bool = True,
    match_torque: bool = True,
    min_traj_samples: int = 5,
    command_joints: Optional[Sequence[str]] = None,
) -> dict:
    """Training arrays from a joint-state bag (this logger's or ``ros2 bag record``'s).

    Args:
        path: bag directory, ``.mcap``/``.db3`` file, or a directory of bags (read together).
        joint_names: joints to extract, in this order. None: ``command_joints`` when given, else
            the joints of the bag's messages (in the first message's order); an error when
            messages name different joint sets (several robots on one topic) -- the error lists
            the sets found.
        joint_state_topic: sensor_msgs/JointState topic; default: the only one, else
            ``/joint_states``.
        command_topic: std_msgs/Float64MultiArray torque commands (data in ``command_joints``
            order); default: the only one ending in ``effort_controller/commands``. Used for tau
            when the joint states carry no effort (or ``tau_source='command'``): each state takes
            the latest command received before it (both by bag receive time).
        gap_factor: a time step above ``gap_factor`` x median step starts a new trajectory.
        joint_types: optional per-joint types ('revolute'/'prismatic'); absent when None.
        tau_source: 'auto' (effort if the states carry it, else commands), 'effort', 'command'.
        strict: raise BagError on a damaged bag instead of reading what is readable.
        complete: fill qdd (and qd when the states carry no velocity) with
            ``delan_learning.data.complete_derivatives``.
        match_torque: with ``complete``, return ``tau`` averaged with the kernel of the
            acceleration estimate, the torque that the estimated ``qdd`` answers to (what training
            wants); False returns the recorded torque. ``info['tau_matched']`` says which.
        min_traj_samples: trajectories with fewer samples are dropped (``rejected
            ['short_trajectory']``); the differentiator needs a few samples per trajectory.
        command_joints: the joint order of the recorded commands (a ros2_control
            forward_command_controller's ``joints``, see
            :func:`delan_common.command_order.command_joints_from_controllers_yaml`), which need
            not be ``joint_names`` order: commands carry no names. None: ``joint_names`` order.
            Commands of another length are dropped (``rejected['command_length']``).

    Returns:
        dict with ``q``, ``qd``, ``qdd``, ``tau`` (N x n float64), ``traj`` (N,) int64, ``t`` (N,)
        float64 seconds since the first sample (header stamps; bag receive times when any stamp
        is zero), ``joint_names`` (n,) str, ``joint_types`` only when given, plus
        ``rejected`` (dict reason -> count of dropped messages) and ``info`` (dict: topics, time
        and torque sources, t0_ns, bags, ``recovered`` notes on damaged input).

    Raises:
        BagError: missing path, unreadable bag, no joint-state topic, no effort and no commands,
            ambiguous joint sets, ``command_joints`` not the joints read, no valid sample.
    """
    if gap_factor <= 1.0 or not math.isfinite(gap_factor):
        raise ValueError(f'gap_factor must be > 1, not {gap_factor}')
    if min_traj_samples < 1:
        raise ValueError(f'min_traj_samples must be >= 1, not {min_traj_samples}')
    if tau_source not in ('auto', 'effort', 'command'):
        raise ValueError(f"tau_source must be 'auto', 'effort' or 'command', not {tau_source!r}")
    bags = list_bags(path)
    notes: List[str] = []
    sources: List[_Source] = []
    try:
        for bag in bags:
            sources.extend(_open_sources(bag, notes, strict))
        topics: Dict[str, str] = {}
        for src in sources:
            for name, t in src.topics.items():
                topics.setdefault(name, t.msgtype)
        js_topic = _pick_topic(
            topics, JOINT_STATE_TYPE, joint_state_topic, 'joint state', '/joint_states'
        )
        if js_topic is None:
            raise BagError(
                f'no {JOINT_STATE_TYPE} topic in {path} (topics: {_fmt_topics(topics)})'
            )
        cmd_error: Optional[BagError] = None
        try:
            cmd_topic = _pick_topic(
                {
                    t: ty
                    for t, ty in topics.items()
                    if command_topic is not None or t.endswith(COMMAND_TOPIC_SUFFIX)
                },
                COMMAND_TYPE,
                command_topic,
                'command',
                COMMAND_TOPIC_SUFFIX,
            )
        except BagError as exc:
            if command_topic is not None:
                raise
            cmd_topic, cmd_error = None, exc  # ambiguous: only an error if commands are needed
        store = ros2_typestore()
        rejected: Counter = Counter()
        states = []  # (recv_ns, msg)
        commands = []  # (recv_ns, data)
        wanted = [js_topic] + ([cmd_topic] if cmd_topic else [])
        for src in sources:
            for topic, ts, data in src.iter(wanted):
                try:
                    msg = deserialize_cdr(store, data, topics[topic])
                except Exception:  # noqa: BLE001 - any garbage in the payload
                    rejected['undecodable' if topic == js_topic else 'undecodable_command'] += 1
                    continue
                if topic == js_topic:
                    states.append((ts, msg))
                else:
                    commands.append((ts, np.asarray(msg.data, dtype=np.float64)))
    finally:
        for src in sources:
            src.close()
    if not states:
        raise BagError(f'{js_topic} has no readable messages in {path}')
    for note in notes:
        warnings.warn(note, BagWarning, stacklevel=2)

    # -- joint set
    if joint_names is None and command_joints is not None:
        joint_names = command_joints  # the commanded joints; a gripper is left out
    if joint_names is None:
        sets: Dict[frozenset, list] = {}
        for _, msg in states:
            names = list(msg.name)
            if names and len(set(names)) == len(names):
                entry = sets.setdefault(frozenset(names), [names, 0])
                entry[1] += 1
        if not sets:
            raise BagError(f'no message on {js_topic} names its joints')
        if len(sets) > 1:
            listing = '; '.join(
                f'{names} ({n} messages)'
                for names, n in sorted(sets.values(), key=lambda e: -e[1])
            )
            raise BagError(
                f'{js_topic} carries several joint sets '
                '(several robots on one topic?): '
                f'{listing}. Pass joint_names to pick one.'
            )
        joint_names = next(iter(sets.values()))[0]
    joint_names = [str(n) for n in joint_names]
    try:
        command_order = CommandOrder(
            joint_names,
            joint_names if command_joints is None else [str(j) for j in command_joints],
        )
    except CommandOrderError as err:
        raise BagError(f'command_joints: {err}') from None
    mapper = JointStateMapper(joint_names, allow_extra=True, require_velocity=False)
    n = len(joint_names)
    if joint_types is not None and len(joint_types) != n:
        raise ValueError(f'{len(joint_types)} joint_types for {n} joints')

    recv, stamp, q, qd, tau, has_v, has_e = [], [], [], [], [], [], []
    for ts, msg in states:
        try:
            m = mapper.map(msg)
        except JointStateError as err:
            rejected[err.reason] += 1
            continue
        recv.append(ts)
        stamp.append(_stamp_ns(msg))
        q.append(m.position)
        qd.append(m.velocity)
        has_v.append(len(msg.velocity) > 0)
        has_e.append(m.effort is not None)
        tau.append(m.effort if m.effort is not None else np.full(n, np.nan))
    if not recv:
        raise BagError(
            f'no valid joint state for joints {joint_names} on {js_topic} '
            f'(rejected: {dict(rejected)})'
        )
    recv = np.asarray(recv, dtype=np.int64)
    stamp = np.asarray(stamp, dtype=np.int64)
    q, qd, tau = np.asarray(q), np.asarray(qd), np.asarray(tau)
    has_v, has_e = np.asarray(has_v), np.asarray(has_e)
    keep = np.ones(len(recv), dtype=bool)

    # velocity: all, none (estimated from q), or mixed (drop the ones without)
    with_qd = bool(has_v.any())
    if with_qd and not has_v.all():
        rejected['no_velocity'] += int((~has_v).sum())
        keep &= has_v

    # torque
    use_effort = tau_source == 'effort' or (tau_source == 'auto' and has_e.any())
    if use_effort:
        if not has_e.any():
            raise BagError(f'{js_topic} carries no effort (tau_source=effort)')
        if not has_e.all():
            rejected['no_effort'] += int((keep & ~has_e).sum())
            keep &= has_e
        torque_from = f'{js_topic}.effort'
    else:
        if cmd_error is not None:
            raise BagError(f'{js_topic} carries no effort: {cmd_error}')
        if cmd_topic is None:
            raise BagError(
                f'{js_topic} carries no effort and the bag has no torque command topic '
                f'({COMMAND_TYPE} ending in {COMMAND_TOPIC_SUFFIX}; topics: '
                f'{_fmt_topics(topics)}); pass command_topic'
            )
        if not commands:
            raise BagError(f'command topic {cmd_topic} has no readable messages')
        commands.sort(key=lambda c: c[0])
        c_t = np.asarray([c[0] for c in commands], dtype=np.int64)
        idx = np.searchsorted(c_t, recv, side='right') - 1
        c_dt = np.diff(c_t)
        c_dt = c_dt[c_dt > 0]
        stale_ns = gap_factor * float(np.median(c_dt)) if c_dt.size else math.inf
        for i in range(len(recv)):
            if not keep[i]:
                continue
            j = idx[i]
            if j < 0:
                rejected['no_command_yet'] += 1
                keep[i] = False
                continue
            cmd = commands[j][1]
            if cmd.shape != (n,):  # n == len(command_joints), checked above
                rejected['command_length'] += 1
                keep[i] = False
            elif not np.all(np.isfinite(cmd)):
                rejected['non_finite_command'] += 1
                keep[i] = False
            elif recv[i] - c_t[j] > stale_ns:
                rejected['stale_command'] += 1
                keep[i] = False
            else:
                tau[i] = command_order.to_model(cmd)
        torque_from = f'{cmd_topic} (latest before each state)'
        if not command_order.is_model_order:
            torque_from += f', joint order {list(command_order.joints)}'

    recv, stamp, q, qd, tau = recv[keep], stamp[keep], q[keep], qd[keep], tau[keep]
    if recv.size == 0:
        raise BagError(f'no usable sample on {js_topic} (rejected: {dict(rejected)})')

    # time base: header stamps unless some are zero, then receive time for all
    if np.all(stamp > 0):
        t_ns, time_source = stamp, 'header.stamp'
    else:
        t_ns, time_source = recv, 'bag receive time (header stamps are zero)'
    order = np.argsort(t_ns, kind='stable')
    t_ns, q, qd, tau = t_ns[order], q[order], qd[order], tau[order]
    dup = np.concatenate([[False], np.diff(t_ns) == 0])
    if dup.any():
        rejected['duplicate_stamp'] += int(dup.sum())
        t_ns, q, qd, tau = t_ns[~dup], q[~dup], qd[~dup], tau[~dup]
    t0 = int(t_ns[0])
    t = (t_ns - t0).astype(np.float64) * 1e-9

    # trajectories: split where the step exceeds gap_factor x the median step
    traj = split_at_gaps(t, gap_factor=gap_factor)

    # trajectories too short to differentiate are dropped (and counted)
    ids, counts = np.unique(traj, return_counts=True)
    short = ids[counts < min_traj_samples]
    if short.size:
        drop = np.isin(traj, short)
        rejected['short_trajectory'] += int(drop.sum())
        t, q, qd, tau, traj = t[~drop], q[~drop], qd[~drop], tau[~drop], traj[~drop]
        if t.size == 0:
            raise BagError(
                f'no trajectory of at least {min_traj_samples} samples on {js_topic} '
                f'(gap_factor={gap_factor}; rejected: {dict(rejected)})'
            )
        traj = np.unique(traj, return_inverse=True)[1].astype(np.int64).reshape(-1)
        t0 += int(round(t[0] * 1e9))
        t = t - t[0]

    arrays = {
        'q': q,
        'tau': tau,
        't': t,
        'traj': traj,
        'joint_names': np.asarray(joint_names, dtype=str),
    }
    if with_qd:
        arrays['qd'] = qd
    if joint_types is not None:
        arrays['joint_types'] = np.asarray([str(x) for x in joint_types], dtype=str)
    if complete:
        try:
            arrays = dict(complete_derivatives(arrays, match_torque=match_torque))
        except ValueError as exc:
            raise BagError(f'cannot estimate derivatives: {exc}') from exc
        if joint_types is None:
            arrays.pop('joint_types', None)  # unknown: let the trainer's default apply
    result = dict(arrays)
    result['rejected'] = dict(rejected)
    result['info'] = {
        'bags': [str(b) for b in bags],
        'joint_state_topic': js_topic,
        'command_topic': cmd_topic,
        'tau_source': torque_from,
        'tau_matched': bool(complete and match_torque),
        'qd_source': f'{js_topic}.velocity' if with_qd else 'estimated from q',
        'time_source': time_source,
        't0_ns': t0,
        'messages': len(states),
        'samples': int(len(arrays['t'])),
        'trajectories': int(arrays['traj'].max() + 1),
        'recovered': notes,
    }
    return result
