"""rosbag2 data logger: records joint states (and the commanded torques) for offline training.

Topics (relative, so namespaces and remapping apply):
    sub ``joint_states`` (sensor_msgs/JointState)
    sub ``effort_controller/commands`` (std_msgs/Float64MultiArray), when ``record_commands``
    sub every entry of ``topics``: ``name`` (its type is taken from the graph once a publisher
        appears; until then it is listed as waiting in the diagnostics) or ``name:pkg/msg/Type``
        (subscribed at once), e.g. ``/torque_controller/controller_state`` and
        ``/learner/dynamics_estimate`` for a bag to replay into PlotJuggler or Foxglove
    pub ``/diagnostics`` (diagnostic_msgs/DiagnosticArray): messages received / written / dropped
        (queue full) / lost (write errors) / dds_lost (reported lost by the middleware), malformed
        messages by reason, current bag, queue fill

Every subscription has the logger's QoS (``qos_reliability``, ``qos_depth``). ``reliable`` (the
default) makes a reliable publisher resend what the network lost, which a recording needs; it
does not hear best-effort publishers (sensor-data QoS): that is logged as a warning naming the
topic, and ``qos_reliability:=best_effort`` hears every publisher (as the other nodes' joint-state
subscriptions do, ``delan_common.ros.qos.JOINT_STATES``), without resends.

The bag is written through ``rosbags`` (see :mod:`delan_learning.bags`): mcap (default) or
sqlite3, CDR payloads exactly as received (the subscriptions are raw), topic names as resolved by
the node (e.g. ``/joint_states``), bag timestamp = receive time on the node's clock (ROS time:
sim time with ``use_sim_time``), header stamps untouched inside the messages.

Design: the subscription callbacks only stamp the serialised message and put it on a bounded
queue (``queue_size``); one writer thread validates, writes and flushes. The executor never waits
for the disk. A full queue drops the newest message and counts it (``dropped`` in diagnostics,
an error log, throttled) -- never silently.

Splits: ``max_bag_size_mb`` / ``max_bag_duration_s`` (0 = no limit) end the current bag and start
the next complete bag directory ``<bag_dir>/<prefix>_<YYYY_MM_DD-HH_MM_SS>_<NNN>/`` (NNN = split
index from 000, one session stamp per run).

Shutdown: on SIGINT/SIGTERM, ``close()`` (called by ``run_node``) drains the queue and closes the
bag (mcap summary, ``metadata.yaml``): every message the executor took before the signal is in
the bag; in practice everything received more than a few ms before it.

Crash bound (SIGKILL, power loss): the writer flushes every ``flush_period_s`` (mcap: closes the
current chunk and fsyncs; sqlite3: commits). A crash loses at most the messages received in the
last ``flush_period_s`` plus those still queued for the writer thread at that moment (normally
none; at most ``queue_size``). What survives is made readable by
``delan_learning.bags.recover_bag(<bag dir>)`` and is read as is by ``read_bag_arrays``.

Bad input: the logger is a recorder, so malformed messages (arrays whose lengths do not match the
names, non-finite values, duplicate or missing names, undecodable payloads) are recorded anyway,
counted by reason in the diagnostics and logged throttled.
"""

from __future__ import annotations

import importlib
import os
import queue
import threading
import time
from collections import Counter, OrderedDict
from typing import Dict, List, Optional

import numpy as np
import rclpy.logging
from diagnostic_msgs.msg import DiagnosticArray
from rcl_interfaces.msg import ParameterEvent
from rclpy.event_handler import UnsupportedEventTypeError
from rclpy.exceptions import ParameterException
from rclpy.node import Node
from rclpy.qos import ReliabilityPolicy
from rclpy.serialization import deserialize_message
from rclpy.type_support import check_for_type_support
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray

from delan_common.joint_state import JointStateError, JointStateMapper
from delan_common.ros.diagnostics import ERROR, OK, WARN, DiagnosticsReporter, hardware_id
from delan_common.ros.params import declare_table, validating_callback
from delan_common.ros.qos import joint_states_qos, subscription_events
from delan_common.ros.spin import run_node, steady_timer
from delan_learning.bags import (
    COMMAND_TYPE,
    JOINT_STATE_TYPE,
    BagError,
    SplitBagWriter,
    TopicSpec,
    parse_topic_entry,
    qos_profile,
    type_definition,
)
from delan_learning.params.data_logger import TABLE

_STOP = object()
_MAPPER_CACHE = 64


#: how often the graph is looked at for the types of ``topics`` entries given without one [s]
DISCOVERY_PERIOD_S = 0.5


def message_class(msgtype: str):
    """The Python class of ``pkg/msg/Type`` (its package imported); ValueError if none."""
    pkg, _, name = msgtype.split('/')
    try:
        return getattr(importlib.import_module(f'{pkg}.msg'), name)
    except (ImportError, AttributeError) as err:
        raise ValueError(f'message type {msgtype} cannot be imported: {err}') from None


class DataLoggerNode(Node):
    """Records joint states (and commands) into rosbag2 files for training."""

    def __init__(self, **kwargs):
        # The slow first-time work (typestore, message definitions, type supports) before the
        # node exists: it appears on the graph in Node.__init__, and a signal between that and
        # the executor's creation is what a short start-up window keeps unlikely.
        for type_name in (JOINT_STATE_TYPE, COMMAND_TYPE):
            type_definition(type_name)
        for msg_type in (JointState, Float64MultiArray, DiagnosticArray, ParameterEvent):
            check_for_type_support(msg_type)
        super().__init__('data_logger', **kwargs)
        self._validators: Dict = {}
        try:
            self._declare_parameters()
        except ParameterException as exc:  # e.g. max_bag_size_mb:=1 (an int for a double)
            raise ValueError(f'invalid parameter: {exc}') from exc
        self.add_on_set_parameters_callback(validating_callback(self._validators, self._on_params))

        self._lock = threading.Lock()
        self.received: Counter = Counter()  # per topic, in the callbacks
        self.written: Counter = Counter()  # per topic, by the writer thread
        self.malformed: Counter = Counter()  # per reason (recorded anyway)
        self.dropped = 0  # queue full: not recorded
        self.dds_lost = 0  # reported lost by the middleware
        self.lost = 0  # write errors: not recorded
        self.write_errors = 0
        self._last_log: Dict[str, float] = {}
        self._mappers: 'OrderedDict[tuple, object]' = OrderedDict()

        self._queue: 'queue.Queue' = queue.Queue(maxsize=self.queue_size)
        self._stop = threading.Event()
        self._closed = False

        # the joint states' profile; reliable unless asked otherwise (see the module docstring)
        self._qos = joint_states_qos(self.qos_depth)
        if self.qos_reliability == 'reliable':
            self._qos.reliability = ReliabilityPolicy.RELIABLE
        wanted = [('joint_states', JOINT_STATE_TYPE)]
        if self.record_commands:
            wanted.append(('effort_controller/commands', COMMAND_TYPE))
        # resolved name -> entry, for the entries whose type the graph is to tell
        self._undiscovered: Dict[str, str] = {}
        for name, msgtype in self.extra_topics:
            if msgtype is None:
                self._undiscovered[self.resolve_topic_name(name)] = name
            else:
                wanted.append((name, msgtype))
        # parallel lists, indexed by the callbacks; appended to when a topic is discovered
        self.topics: List[str] = []
        self._kinds: List[str] = []
        self._specs: List[TopicSpec] = []
        for name, msgtype in wanted:
            try:
                self._record(name, msgtype)
            except (ValueError, BagError) as err:
                raise ValueError(f'invalid parameter: topics: {err}') from None
        specs = list(self._specs)
        self._in_bag = len(specs)  # specs the writer thread has given the bag (its own)

        # The writer thread owns the bag (sqlite3 connections are bound to their thread): it opens
        # the first split now, so a bad bag_dir fails the start-up instead of the first message.
        self._bags: Optional[SplitBagWriter] = None
        self._open_error: Optional[BaseException] = None
        self._opened = threading.Event()
        self._thread = threading.Thread(
            target=self._writer_main, args=(specs,), name='bag_writer', daemon=True
        )
        self._thread.start()
        if not self._opened.wait(timeout=30.0) or self._open_error is not None:
            self._stop.set()
            raise RuntimeError(f'cannot write bags to {self.bag_dir}: {self._open_error}')

        self._diagnostics = DiagnosticsReporter(
            self,
            self._diagnostics_report,
            hardware_id(self),
            period_s=self.diagnostics_period_s,
            name=f'{self.get_name()}: bag recording',
        )
        self._discovery = (
            steady_timer(self, DISCOVERY_PERIOD_S, self._discover) if self._undiscovered else None
        )

    # ------------------------------------------------------------------ topics
    def _record(self, name: str, msgtype: str) -> None:
        """Subscribe to ``name`` (raw) and record it as ``msgtype`` (a topic already recorded is
        left alone). ValueError / BagError when the type is unknown here."""
        resolved = self.resolve_topic_name(name)
        if resolved in self.topics:
            return
        cls = message_class(msgtype)
        check_for_type_support(cls)
        spec = TopicSpec(
            resolved, msgtype, (qos_profile(self.qos_reliability == 'reliable', self.qos_depth),)
        )
        try:
            type_definition(msgtype)  # its definition for the bag, before any message
        except BagError:
            raise
        except Exception as err:  # noqa: BLE001 -- a .msg file the typestore cannot read
            raise ValueError(f'no definition of {msgtype} for the bag: {err}') from None
        index = len(self.topics)
        # the lists first: a message may arrive as soon as the subscription exists
        self._specs.append(spec)
        self._kinds.append(msgtype)
        self.topics.append(resolved)
        hint = '; try qos_reliability:=best_effort' if self.qos_reliability == 'reliable' else ''
        lost = self._make_lost_counter(resolved)
        try:
            self.create_subscription(
                cls,
                name,
                self._make_callback(index),
                self._qos,
                raw=True,
                event_callbacks=subscription_events(self, name, hint, message_lost=lost),
            )
        except UnsupportedEventTypeError:  # rmw without the message-lost event
            self.create_subscription(
                cls,
                name,
                self._make_callback(index),
                self._qos,
                raw=True,
                event_callbacks=subscription_events(self, name, hint),
            )

    def _discover(self) -> None:
        """Executor (timer): subscribe to the ``topics`` entries whose type the graph now
        tells; stops looking once none is left."""
        types = dict(self.get_topic_names_and_types())
        for resolved, entry in list(self._undiscovered.items()):
            found = types.get(resolved)
            if not found:
                continue
            del self._undiscovered[resolved]
            if len(found) > 1:
                self.get_logger().error(
                    f'{resolved} has several types {found}: not recorded '
                    f'(give one: topics entry {entry}:<type>)'
                )
                continue
            try:
                self._record(entry, found[0])
            except (ValueError, BagError) as err:
                self.get_logger().error(f'{resolved} not recorded: {err}')
                continue
            self.get_logger().info(f'recording {resolved} ({found[0]}) too')
        if not self._undiscovered:
            self._discovery.cancel()

    # ------------------------------------------------------------------ parameters
    def _declare_parameters(self) -> None:
        v = declare_table(self, TABLE, self._validators)
        self.bag_dir = os.path.expanduser(v.bag_dir)
        self.prefix, self.storage = v.prefix, v.storage
        self.record_commands = v.record_commands
        self.extra_topics = [parse_topic_entry(e) for e in v.topics]  # checked by the table
        self.max_bag_size_mb, self.max_bag_duration_s = v.max_bag_size_mb, v.max_bag_duration_s
        self.flush_period_s, self.queue_size = v.flush_period_s, v.queue_size
        self.qos_depth, self.qos_reliability = v.qos_depth, v.qos_reliability
        self.diagnostics_period_s = v.diagnostics_period_s

    def _on_params(self, params) -> None:
        for p in params:
            if p.name in ('max_bag_size_mb', 'max_bag_duration_s', 'flush_period_s'):
                setattr(self, p.name, float(p.value))

    # ------------------------------------------------------------------ callbacks (executor)
    def _make_callback(self, index: int):
        put = self._queue.put_nowait
        clock = self.get_clock()

        def on_message(data: bytes) -> None:
            stamp = clock.now().nanoseconds
            with self._lock:
                self.received[self.topics[index]] += 1
            try:
                put((index, stamp, data))
            except queue.Full:
                with self._lock:
                    self.dropped += 1
                    n = self.dropped
                self._throttled(
                    'error',
                    'dropped',
                    f'writer queue full ({self.queue_size}): '
                    f'dropped a message on {self.topics[index]} ({n} so far)',
                )

        return on_message

    def _make_lost_counter(self, name: str):
        def lost(info) -> None:
            with self._lock:
                self.dds_lost += info.total_count_change
                n = self.dds_lost
            self._throttled(
                'error',
                'dds_lost',
                f'the middleware reports {n} messages on {name} '
                'lost before reaching the logger (publisher too fast for qos_depth?)',
            )

        return lost

    def _throttled(self, level: str, key: str, text: str, period: float = 2.0) -> None:
        now = time.monotonic()
        with self._lock:
            if now - self._last_log.get(key, -1e9) < period:
                return
            self._last_log[key] = now
        getattr(self.get_logger(), level)(text)

    # ------------------------------------------------------------------ writer thread
    def _check(self, index: int, data: bytes) -> None:
        """Count a malformed message (it is recorded anyway)."""
        try:
            if self._kinds[index] == JOINT_STATE_TYPE:
                msg = deserialize_message(data, JointState)
                names = tuple(msg.name)
                if not names:
                    raise JointStateError('empty', 'joint state has no names')
                mapper = self._mappers.get(names)
                if mapper is None:
                    if len(set(names)) != len(names):
                        raise JointStateError('duplicate_names', f'joint names repeat: {names}')
                    mapper = JointStateMapper(names, require_velocity=False)
                    self._mappers[names] = mapper
                    if len(self._mappers) > _MAPPER_CACHE:
                        self._mappers.popitem(last=False)
                mapper.map(msg)
            elif self._kinds[index] == COMMAND_TYPE:
                msg = deserialize_message(data, Float64MultiArray)
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
        except JointStateError as err:
            self._count_malformed(index, err.reason, err.detail)
        except Exception as exc:  # noqa: BLE001 - undecodable payload
            self._count_malformed(index, 'undecodable', str(exc))

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

    def _writer_main(self, specs) -> None:
        try:
            self._bags = SplitBagWriter(
                self.bag_dir,
                specs,
                prefix=self.prefix,
                storage=self.storage,
                max_bag_size_mb=self.max_bag_size_mb,
                max_bag_duration_s=self.max_bag_duration_s,
                custom_data={'delan.recorded_by': self.get_fully_qualified_name()},
            )
            self._bags.open()
        except Exception as exc:  # noqa: BLE001 - reported by the constructor
            self._open_error = exc
            self._opened.set()
            return
        self._opened.set()
        bags = self._bags
        self.get_logger().info(
            f'recording {", ".join(self.topics)} to {bags.path} ({self.storage}; split at '
            f'{self.max_bag_size_mb or "-"} MB / {self.max_bag_duration_s or "-"} s; flush every '
            f'{self.flush_period_s} s)'
        )
        next_flush = time.monotonic() + self.flush_period_s
        retry_after = 0.0
        try:
            while True:
                timeout = max(0.0, next_flush - time.monotonic())
                try:
                    item = self._queue.get(timeout=timeout)
                except queue.Empty:
                    item = None
                batch = 0
                while item is not None and item is not _STOP:
                    index, stamp, data = item
                    self._check(index, data)
                    if time.monotonic() < retry_after:
                        with self._lock:
                            self.lost += 1
                    else:
                        try:
                            bags.max_bag_size_mb = self.max_bag_size_mb
                            bags.max_bag_duration_s = self.max_bag_duration_s
                            while self._in_bag <= index:  # a topic discovered since
                                bags.add_topic(self._specs[self._in_bag])
                                self._in_bag += 1
                            bags.write(self.topics[index], stamp, data)
                            with self._lock:
                                self.written[self.topics[index]] += 1
                        except Exception as exc:  # noqa: BLE001 - disk full, permissions ...
                            self._write_failed(exc)
                            retry_after = time.monotonic() + 1.0
                    batch += 1
                    if batch >= 1000 or time.monotonic() >= next_flush:
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
                        self._write_failed(exc, flushing=True)
                        retry_after = now + 1.0
                    next_flush = now + self.flush_period_s
                if self._stop.is_set() and self._queue.empty():
                    break
        finally:
            try:
                bags.close()
            except Exception as exc:  # noqa: BLE001
                self.get_logger().error(
                    f'could not close bag {bags.path}: {exc}; '
                    'run delan_learning.bags.recover_bag on it'
                )

    def _write_failed(self, exc: Exception, flushing: bool = False) -> None:
        bags = self._bags
        with self._lock:
            self.write_errors += 1
            if not flushing:
                self.lost += 1
        path = bags.path if bags else None
        self.get_logger().error(
            f'{"flushing" if flushing else "writing"} bag {path} failed ({exc}); closing it and '
            'continuing in a new split in 1 s (messages until then are lost and counted)'
        )
        try:
            bags.close()
        except Exception:  # noqa: BLE001
            bags.abort()

    # ------------------------------------------------------------------ status
    def stats(self) -> Dict[str, object]:
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

    def _diagnostics_report(self):
        """(level, message, values) of the status on /diagnostics."""
        s = self.stats()
        bags = self._bags
        current = (bags.path or (bags.paths[-1] if bags.paths else '')) if bags else ''
        values = {
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
        if self._undiscovered:
            values['waiting for'] = ' '.join(sorted(self._undiscovered))
        if s['write_errors'] or not self._thread.is_alive():
            return ERROR, 'write errors: messages lost', values
        if s['dropped'] or s['dds_lost']:
            return (
                WARN,
                (
                    'queue overflow: messages dropped'
                    if s['dropped']
                    else 'middleware reports lost messages'
                ),
                values,
            )
        if s['malformed']:
            return WARN, 'recording; malformed input seen', values
        return OK, 'recording', values

    # ------------------------------------------------------------------ shutdown
    def close(self) -> None:
        """Drain the queue, close the bag (summary + metadata.yaml). Idempotent."""
        if getattr(self, '_closed', True) or not hasattr(self, '_thread'):
            return  # closed, or a start that failed before the writer existed
        self._closed = True
        self._stop.set()
        try:
            self._queue.put_nowait(_STOP)
        except queue.Full:
            pass  # the writer drains the full queue, then sees the stop flag
        self._thread.join(timeout=120.0)
        # after SIGINT/SIGTERM the context is shut down and the node logger's rosout publisher is
        # gone: log through a logger of another name (console only) to keep the output clean
        log = (
            self.get_logger()
            if self.context.ok()
            else rclpy.logging.get_logger(f'{self.get_name()}.shutdown')
        )
        s = self.stats()
        bags = self._bags
        where = ', '.join(p.name for p in bags.paths) if bags else '-'
        if self._thread.is_alive():
            log.error(
                f'bag writer did not finish within 120 s; bag {where} may '
                'need delan_learning.bags.recover_bag'
            )
        log.info(
            f'closed: {sum(s["written"].values())} messages in {self.bag_dir}/[{where}]; '
            f'dropped {s["dropped"]}, lost {s["lost"]} (+{s["dds_lost"]} in DDS), '
            f'malformed {sum(s["malformed"].values())}'
        )


def main(args=None) -> int:
    """Entry point of the ``data_logger`` node."""
    return run_node(DataLoggerNode, args)


if __name__ == '__main__':
    raise SystemExit(main())
