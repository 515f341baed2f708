"""The data logger's recording pipeline, free of ROS: a bounded queue and one writer thread in
front of :class:`~delan_learning.bags.writer.SplitBagWriter`.

The callbacks that receive messages only :meth:`BagRecorder.offer` them: counted, stamped and
queued, never waiting for the disk. A full queue drops the newest message and counts it (an
error log, throttled) -- never silently. The writer thread owns the bag (sqlite3 connections are
bound to their thread): it checks each message (:class:`~delan_learning.bags.checks.
MessageChecker`; malformed ones are recorded anyway and counted by reason), writes it, flushes
every ``flush_period_s`` and splits by size and duration. A write or flush that fails closes the
split; the messages of the next second are lost and counted, then a new split starts.
:meth:`BagRecorder.close` drains the queue and closes the bag (mcap summary, ``metadata.yaml``).
"""

from __future__ import annotations

import queue
import threading
import time
from collections import Counter
from typing import Any, Callable, Dict, List, Optional, Protocol, Sequence, Tuple

from delan_learning.bags.checks import MessageChecker
from delan_learning.bags.types import PathLike
from delan_learning.bags.writer import SplitBagWriter, TopicSpec

_STOP = object()
BATCH = 1000  # messages written between looks at the flush deadline
RETRY_S = 1.0  # after a write error, messages are counted as lost this long before a new split
LOG_PERIOD_S = 2.0  # one log line per kind of trouble at most this often


class Log(Protocol):
    """Where the recorder reports (an rclpy logger, a ``logging.Logger``)."""

    def info(self, message: str) -> Any:
        """Report an informational message."""

    def warning(self, message: str) -> Any:
        """Report a warning."""

    def error(self, message: str) -> Any:
        """Report an error."""


class BagRecorder:
    """Records serialised messages of :meth:`add_topic`'s topics into split bags.

    ``bag_dir``, ``prefix``, ``storage``, ``custom_data`` and the limits are those of
    :class:`SplitBagWriter`; ``max_bag_size_mb``, ``max_bag_duration_s`` and
    ``flush_period_s`` may be changed while it records. ``check(msgtype, data)`` says why a
    message is malformed, ``(reason, detail)``, or None (default: a :class:`MessageChecker`
    of its own). ``log`` gets the reports. :meth:`offer` may be called from any thread;
    :meth:`add_topic` also while recording (the next message of that topic adds it to the
    bag)."""

    def __init__(
        self,
        bag_dir: PathLike,
        log: Log,
        *,
        queue_size: int,
        flush_period_s: float,
        prefix: str = 'delan',
        storage: str = 'mcap',
        max_bag_size_mb: float = 0.0,
        max_bag_duration_s: float = 0.0,
        custom_data: Optional[Dict[str, str]] = None,
        check: Optional[Callable[[str, bytes], Optional[Tuple[str, str]]]] = None,
    ):
        self.bag_dir, self.log, self.queue_size = bag_dir, log, queue_size
        self.flush_period_s = flush_period_s
        self.prefix, self.storage, self.custom_data = prefix, storage, custom_data
        self.max_bag_size_mb, self.max_bag_duration_s = max_bag_size_mb, max_bag_duration_s
        self._check = check or MessageChecker().problem
        self.topics: List[str] = []  # by index, as given to offer()
        self._specs: List[TopicSpec] = []
        self._in_bag = 0  # specs the writer thread has given the bag (its own)
        self._queue: 'queue.Queue' = queue.Queue(maxsize=queue_size)
        self._lock = threading.Lock()
        self.received: Counter = Counter()  # per topic, by offer()
        self.written: Counter = Counter()  # per topic, by the writer thread
        self.malformed: Counter = Counter()  # per reason (recorded anyway)
        self.dropped = 0  # queue full: not recorded
        self.dds_lost = 0  # reported lost before reaching us
        self.lost = 0  # write errors: not recorded
        self.write_errors = 0
        self._last_log: Dict[str, float] = {}
        self.bags: Optional[SplitBagWriter] = None
        self._open_error: Optional[BaseException] = None
        self._opened = threading.Event()
        self._stop = threading.Event()
        self._closed = False
        self._thread: Optional[threading.Thread] = None

    # ------------------------------------------------------------------ topics and messages
    def add_topic(self, spec: TopicSpec) -> int:
        """Record ``spec`` too; returns its index for :meth:`offer`."""
        self._specs.append(spec)
        self.topics.append(spec.name)  # last: offer() may see the index from now on
        return len(self.topics) - 1

    def offer(self, index: int, stamp_ns: int, data: bytes) -> bool:
        """Queue a message of topic ``index`` received at ``stamp_ns`` (the bag's timestamp);
        False when the queue was full and it was dropped (counted)."""
        topic = self.topics[index]
        with self._lock:
            self.received[topic] += 1
        try:
            self._queue.put_nowait((index, stamp_ns, data))
            return True
        except queue.Full:
            with self._lock:
                self.dropped += 1
                n = self.dropped
            self._throttled(
                'error',
                'dropped',
                f'writer queue full ({self.queue_size}): dropped a message on {topic} '
                f'({n} so far)',
            )
            return False

    def lost_before(self, topic: str, count: int) -> None:
        """``count`` messages on ``topic`` were lost before reaching the recorder (the
        middleware says so)."""
        with self._lock:
            self.dds_lost += count
            n = self.dds_lost
        self._throttled(
            'error',
            'dds_lost',
            f'the middleware reports {n} messages on {topic} '
            'lost before reaching the logger (publisher too fast for qos_depth?)',
        )

    def _throttled(self, level: str, key: str, text: str) -> None:
        now = time.monotonic()
        with self._lock:
            if now - self._last_log.get(key, -1e9) < LOG_PERIOD_S:
                return
            self._last_log[key] = now
        getattr(self.log, level)(text)

    # ------------------------------------------------------------------ lifecycle
    def start(self, timeout_s: float = 30.0) -> None:
        """Start the writer thread, which opens the first split now: a bag directory that
        cannot be written raises here (the error of the open, or TimeoutError), not at the
        first message."""
        self._in_bag = len(self._specs)
        self._thread = threading.Thread(
            target=self._writer_main, args=(list(self._specs),), name='bag_writer', daemon=True
        )
        self._thread.start()
        if not self._opened.wait(timeout=timeout_s):
            self._stop.set()
            raise TimeoutError(f'no bag opened within {timeout_s} s')
        if self._open_error is not None:
            raise self._open_error

    @property
    def alive(self) -> bool:
        """Whether the writer thread runs."""
        return self._thread is not None and self._thread.is_alive()

    def close(self, log: Optional[Log] = None, timeout_s: float = 120.0) -> None:
        """Drain the queue, close the bag (summary + metadata.yaml) and report what was
        recorded to ``log`` (default: the recorder's). Idempotent."""
        if self._closed or self._thread is None:
            return
        self._closed = True
        self._stop.set()
        try:
            self._queue.put_nowait(_STOP)
        except queue.Full:
            pass  # the writer drains the full queue, then sees the stop flag
        self._thread.join(timeout=timeout_s)
        log = log or self.log
        s = self.stats()
        where = ', '.join(p.name for p in self.bags.paths) if self.bags else '-'
        if self._thread.is_alive():
            log.error(
                f'bag writer did not finish within {timeout_s:g} s; bag {where} may '
                'need delan_learning.bags.recover_bag'
            )
        log.info(
            f'closed: {sum(s["written"].values())} messages in {self.bag_dir}/[{where}]; '
            f'dropped {s["dropped"]}, lost {s["lost"]} (+{s["dds_lost"]} in DDS), '
            f'malformed {sum(s["malformed"].values())}'
        )

    # ------------------------------------------------------------------ writer thread
    def _writer_main(self, specs: Sequence[TopicSpec]) -> None:
        try:
            self.bags = SplitBagWriter(
                self.bag_dir,
                specs,
                prefix=self.prefix,
                storage=self.storage,
                max_bag_size_mb=self.max_bag_size_mb,
                max_bag_duration_s=self.max_bag_duration_s,
                custom_data=self.custom_data,
            )
            self.bags.open()
        except Exception as exc:  # noqa: BLE001 - raised by start()
            self._open_error = exc
            self._opened.set()
            return
        self._opened.set()
        bags = self.bags
        self.log.info(
            f'recording {", ".join(self.topics)} to {bags.path} ({self.storage}; split at '
            f'{self.max_bag_size_mb or "-"} MB / {self.max_bag_duration_s or "-"} s; flush every '
            f'{self.flush_period_s} s)'
        )
        try:
            self._write_until_stopped(bags)
        finally:
            try:
                bags.close()
            except Exception as exc:  # noqa: BLE001
                self.log.error(
                    f'could not close bag {bags.path}: {exc}; '
                    'run delan_learning.bags.recover_bag on it'
                )

    def _write_until_stopped(self, bags: SplitBagWriter) -> None:
        next_flush = time.monotonic() + self.flush_period_s
        retry_after = 0.0
        while True:
            timeout = max(0.0, next_flush - time.monotonic())
            try:
                item = self._queue.get(timeout=timeout)
            except queue.Empty:
                item = None
            batch = 0
            while item is not None and item is not _STOP:
                index, stamp, data = item
                problem = self._check(self._specs[index].msgtype, data)
                if problem is not None:
                    self._count_malformed(index, *problem)
                if time.monotonic() < retry_after:
                    with self._lock:
                        self.lost += 1
                elif not self._write(bags, index, stamp, data):
                    retry_after = time.monotonic() + RETRY_S
                batch += 1
                if batch >= BATCH or time.monotonic() >= next_flush:
                    break
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    item = None
            now = time.monotonic()
            if now >= next_flush:
                try:
                    bags.flush()
                except Exception as exc:  # noqa: BLE001
                    self._write_failed(bags, exc, flushing=True)
                    retry_after = now + RETRY_S
                next_flush = now + self.flush_period_s
            if self._stop.is_set() and self._queue.empty():
                return

    def _write(self, bags: SplitBagWriter, index: int, stamp: int, data: bytes) -> bool:
        """Write one message; False after a failure (counted and reported)."""
        try:
            bags.max_bag_size_mb = self.max_bag_size_mb
            bags.max_bag_duration_s = self.max_bag_duration_s
            while self._in_bag <= index:  # a topic added since
                bags.add_topic(self._specs[self._in_bag])
                self._in_bag += 1
            bags.write(self.topics[index], stamp, data)
        except Exception as exc:  # noqa: BLE001 - disk full, permissions ...
            self._write_failed(bags, exc)
            return False
        with self._lock:
            self.written[self.topics[index]] += 1
        return True

    def _count_malformed(self, index: int, reason: str, detail: str) -> None:
        with self._lock:
            self.malformed[reason] += 1
            n = self.malformed[reason]
        self._throttled(
            'warning',
            'malformed:' + reason,
            f'malformed message on {self.topics[index]} recorded anyway '
            f'({reason}, {n} so far): {detail}',
        )

    def _write_failed(self, bags: SplitBagWriter, exc: Exception, flushing: bool = False) -> None:
        with self._lock:
            self.write_errors += 1
            if not flushing:
                self.lost += 1
        self.log.error(
            f'{"flushing" if flushing else "writing"} bag {bags.path} failed ({exc}); closing '
            'it and continuing in a new split in 1 s (messages until then are lost and counted)'
        )
        try:
            bags.close()
        except Exception:  # noqa: BLE001
            bags.abort()

    # ------------------------------------------------------------------ status
    def stats(self) -> Dict[str, Any]:
        """The counters at one instant (copies)."""
        with self._lock:
            return {
                'received': dict(self.received),
                'written': dict(self.written),
                'malformed': dict(self.malformed),
                'dropped': self.dropped,
                'dds_lost': self.dds_lost,
                'lost': self.lost,
                'write_errors': self.write_errors,
            }

    def status(self) -> Tuple[str, str, Dict[str, Any]]:
        """``(level, message, values)`` for diagnostics: level ``'error'`` when messages were
        lost to write errors or the writer stopped, ``'warn'`` when the queue overflowed, the
        middleware lost messages or malformed ones were recorded, else ``'ok'``."""
        s = self.stats()
        bags = self.bags
        current = (bags.path or (bags.paths[-1] if bags.paths else '')) if bags else ''
        values: Dict[str, Any] = {
            'bag': current,
            'bags': len(bags.paths) if bags else 0,
            'storage': self.storage,
            'dropped': s['dropped'],
            'lost': s['lost'],
            'dds_lost': s['dds_lost'],
            'write_errors': s['write_errors'],
            'queue': f'{self._queue.qsize()}/{self.queue_size}',
            'malformed': sum(s['malformed'].values()),
        }
        for topic in list(self.topics):
            values[f'received {topic}'] = s['received'].get(topic, 0)
            values[f'written {topic}'] = s['written'].get(topic, 0)
        for reason, n in sorted(s['malformed'].items()):
            values[f'malformed {reason}'] = n
        if s['write_errors'] or not self.alive:
            return 'error', 'write errors: messages lost', values
        if s['dropped']:
            return 'warn', 'queue overflow: messages dropped', values
        if s['dds_lost']:
            return 'warn', 'middleware reports lost messages', values
        if s['malformed']:
            return 'warn', 'recording; malformed input seen', values
        return 'ok', 'recording', values
