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
queue (``queue_size``); one writer thread validates, writes and flushes
(:class:`delan_learning.bags.recorder.BagRecorder`). The executor never waits for the disk. A
full queue drops the newest message and counts it (``dropped`` in diagnostics, an error log,
throttled) -- never silently.

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
from typing import Dict, List

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

from delan_common.ros.diagnostics import ERROR, OK, WARN, DiagnosticsReporter, hardware_id
from delan_common.ros.params import declare_table, validating_callback
from delan_common.ros.qos import joint_states_qos, subscription_events
from delan_common.ros.spin import run_node, steady_timer
from delan_learning.bags import (
    COMMAND_TYPE,
    JOINT_STATE_TYPE,
    BagError,
    TopicSpec,
    parse_topic_entry,
    qos_profile,
    type_definition,
)
from delan_learning.bags.checks import MessageChecker
from delan_learning.bags.recorder import BagRecorder
from delan_learning.params.data_logger import TABLE

#: how often the graph is looked at for the types of ``topics`` entries given without one [s]
DISCOVERY_PERIOD_S = 0.5
#: parameters the recorder reads while it records
_RUNTIME = ('max_bag_size_mb', 'max_bag_duration_s', 'flush_period_s')
_LEVELS = {'ok': OK, 'warn': WARN, 'error': ERROR}
_CHECKED = {JOINT_STATE_TYPE: JointState, COMMAND_TYPE: Float64MultiArray}


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
        self.recorder = BagRecorder(
            self.bag_dir,
            self.get_logger(),
            queue_size=self.queue_size,
            flush_period_s=self.flush_period_s,
            prefix=self.prefix,
            storage=self.storage,
            max_bag_size_mb=self.max_bag_size_mb,
            max_bag_duration_s=self.max_bag_duration_s,
            custom_data={'delan.recorded_by': self.get_fully_qualified_name()},
            check=MessageChecker(lambda data, t: deserialize_message(data, _CHECKED[t])).problem,
        )
        self.topics: List[str] = self.recorder.topics  # resolved names, by callback index

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
        for name, msgtype in wanted:
            try:
                self._record(name, msgtype)
            except (ValueError, BagError) as err:
                raise ValueError(f'invalid parameter: topics: {err}') from None
        try:
            self.recorder.start()  # opens the first split: a bad bag_dir fails the start-up
        except Exception as exc:  # noqa: BLE001 - whatever kept the bag from opening
            raise RuntimeError(f'cannot write bags to {self.bag_dir}: {exc}') from None
        self._bags = self.recorder.bags  # the session's writer (owned by the writer thread)

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
        reliable = self.qos_reliability == 'reliable'
        spec = TopicSpec(resolved, msgtype, (qos_profile(reliable, self.qos_depth),))
        try:
            type_definition(msgtype)  # its definition for the bag, before any message
        except BagError:
            raise
        except Exception as err:  # noqa: BLE001 -- a .msg file the typestore cannot read
            raise ValueError(f'no definition of {msgtype} for the bag: {err}') from None
        # recorded first: a message may arrive as soon as the subscription exists
        callback = self._make_callback(self.recorder.add_topic(spec))
        hint = '; try qos_reliability:=best_effort' if reliable else ''

        def lost(info) -> None:
            self.recorder.lost_before(resolved, info.total_count_change)

        def subscribe(events) -> None:
            self.create_subscription(
                cls, name, callback, self._qos, raw=True, event_callbacks=events
            )

        try:
            subscribe(subscription_events(self, name, hint, message_lost=lost))
        except UnsupportedEventTypeError:  # rmw without the message-lost event
            subscribe(subscription_events(self, name, hint))

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
            if p.name in _RUNTIME:
                setattr(self, p.name, float(p.value))
                setattr(self.recorder, p.name, float(p.value))  # from its next message on

    # ------------------------------------------------------------------ callbacks (executor)
    def _make_callback(self, index: int):
        offer, clock = self.recorder.offer, self.get_clock()

        def on_message(data: bytes) -> None:
            offer(index, clock.now().nanoseconds, data)

        return on_message

    # ------------------------------------------------------------------ status
    def stats(self) -> Dict[str, object]:
        """The recording's counters (see :meth:`BagRecorder.stats`)."""
        return self.recorder.stats()

    def _diagnostics_report(self):
        """(level, message, values) of the status on /diagnostics."""
        level, message, values = self.recorder.status()
        if self._undiscovered:
            values['waiting for'] = ' '.join(sorted(self._undiscovered))
        return _LEVELS[level], message, values

    # ------------------------------------------------------------------ shutdown
    def close(self) -> None:
        """Drain the queue, close the bag (summary + metadata.yaml). Idempotent."""
        recorder = getattr(self, 'recorder', None)
        if recorder is None:
            return  # a start that failed before the recorder existed
        # after SIGINT/SIGTERM the context is shut down and the node logger's rosout publisher is
        # gone: log through a logger of another name (console only) to keep the output clean
        recorder.close(
            self.get_logger()
            if self.context.ok()
            else rclpy.logging.get_logger(f'{self.get_name()}.shutdown')
        )


def main(args=None) -> int:
    """Entry point of the ``data_logger`` node."""
    return run_node(DataLoggerNode, args)


if __name__ == '__main__':
    raise SystemExit(main())
