"""The data logger's rosbag2 writer: one recording session as a series of complete bag
directories, split by size and duration, with crash-safe flushes (see the package overview)."""

from __future__ import annotations

import os
import re
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from rosbags.interfaces import Connection, Qos
from rosbags.rosbag2 import StoragePlugin, Writer

from delan_learning.bags.types import STORAGES, PathLike, type_definition

# bytes a message costs in the storage besides its payload (mcap: record 31 + index entry 16)
RECORD_OVERHEAD = 47


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
        self.topic_counts: Counter[str] = Counter()
        self._writer: Optional[Writer] = None
        self._conns: Dict[str, Connection] = {}
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
        """Whether a split is open for writing (from :meth:`open` or the first :meth:`write` until
        :meth:`close` or :meth:`abort`)."""
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
            _storage(writer).conn.commit()
        return path

    def add_topic(self, spec: TopicSpec) -> None:
        """Record ``spec`` too, from now on: in the open split and every later one."""
        if any(t.name == spec.name for t in self.topics):
            raise ValueError(f'topic {spec.name} is recorded already')
        if self._writer is not None:
            self._conns[spec.name] = self._add_connection(self._writer, spec)
        self.topics.append(spec)

    @staticmethod
    def _add_connection(writer: Writer, spec: TopicSpec) -> Connection:
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
        if self._writer is None or self._needs_split(timestamp, len(data)):
            self.open()
        writer, conn = self._writer, self._conns.get(topic)
        assert writer is not None  # opened above
        if conn is None:
            raise KeyError(f'topic {topic!r} is not recorded (have {list(self._conns)})')
        writer.write(conn, int(timestamp), data)
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
        storage = _storage(writer)
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


def _storage(writer: Writer) -> Any:
    """The open storage plugin of ``writer``: rosbags' mcap writer (``bio``, ``chunk``,
    ``close_chunk``) or sqlite3 writer (``conn``), typed there only as the common protocol."""
    return writer.storage


def glob_escape(name: str) -> str:
    """``name`` as a glob pattern that matches only itself."""
    return re.sub(r'([\[\]*?])', r'[\1]', name)
