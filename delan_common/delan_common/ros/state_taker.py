"""Joint states taken as serialised bytes by a thread of their own, outside the executor.

At 1 kHz the executor is the expensive part of a Python subscriber: a message through rclpy's
EventsExecutor ``spin_once`` costs ~0.3 ms of CPU before the callback runs (the learner measured
385 us per message in all, 58 us of it its own work), and the executor cannot hand the message
info (the DDS source timestamp) to a callback. A wait set on a subscription the executor does not
serve takes every queued message in one wake-up, with its info, and the CDR bytes are read with
numpy (:mod:`delan_common.ros.cdr`) instead of building a message object. The subscription
belongs to the node (remapping, namespace and the graph as for any other)."""

from __future__ import annotations

import threading
from typing import Callable, List, Optional, Tuple

from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy
from rclpy.serialization import deserialize_message
from rclpy.type_support import check_is_valid_msg_type
from sensor_msgs.msg import JointState

from delan_common.ros.cdr import CdrError, JointStateReader
from delan_common.ros.qos import joint_states_qos, unwatch, watch_subscription
from delan_common.ros.rejections import RejectionCounter
from delan_common.ros.stamps import seconds

Taken = Tuple[bytes, dict]  # serialised JointState, message info (source_timestamp, ...)


class JointStateTaker:
    """Calls ``on_batch(batch)`` in its thread with everything queued on ``topic`` (at most
    ``depth`` messages, oldest first) after each wake-up; an exception in it is counted in
    ``errors`` and logged, and the thread goes on. The subscription has the QoS of
    :func:`~delan_common.ros.qos.joint_states_qos` (best effort: it hears reliable and
    best-effort drivers alike); its QoS events are served by the node's executor.

    ``period_s`` > 0 takes the queue at most that often, for consumers that need throughput, not
    latency (the learner): on a small VM a thread woken for every message at 1 kHz runs on cold
    caches each time and spends several times the CPU of the same work done in batches."""

    def __init__(
        self,
        node,
        on_batch: Callable[[List[Taken]], None],
        depth: int,
        name: str,
        topic: str = 'joint_states',
        period_s: float = 0.0,
    ):
        check_is_valid_msg_type(JointState)  # imports its type support
        self._node, self._on_batch, self._depth = node, on_batch, depth
        self._period_s = period_s
        with node.handle:
            self._sub = _rclpy.Subscription(
                node.handle, JointState, topic, joint_states_qos(depth).get_c_qos_profile(), None
            )
        self._events = watch_subscription(node, self._sub, topic)
        self.errors = 0
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        sub, context = self._sub, self._node.context
        wait_set = _rclpy.WaitSet(1, 0, 0, 0, 0, 0, context.handle)
        # a node never destroyed must not leave this thread in the middleware at exit
        while not self._stop.is_set() and context.ok():
            try:
                wait_set.clear_entities()
                wait_set.add_subscription(sub)
                wait_set.wait(50_000_000)  # 50 ms: notice close() promptly
                batch = []
                while len(batch) < self._depth:
                    taken = sub.take_message(JointState, True)
                    if taken is None:
                        break
                    batch.append(taken)
                if batch and not self._stop.is_set():
                    self._on_batch(batch)
                if self._period_s > 0:
                    self._stop.wait(self._period_s)
            except Exception as err:  # noqa: BLE001 -- the thread must outlive one bad batch
                if self._stop.is_set() or not context.ok():
                    return
                self.errors += 1
                self._node.get_logger().error(
                    f'{self.thread.name}: handling joint states failed: {err!r} '
                    f'({self.errors} so far)',
                    throttle_duration_sec=2.0,
                )

    def close(self, timeout: float = 2.0) -> None:
        """Stop the thread; the subscription goes once the thread is out of the middleware."""
        self._stop.set()
        if self.thread.is_alive() and threading.current_thread() is not self.thread:
            self.thread.join(timeout=timeout)
        if self._sub is not None and not self.thread.is_alive():
            unwatch(self._node, self._events)
            self._sub.destroy_when_not_in_use()
            self._sub = None


def decode_joint_state(
    reader: JointStateReader, data: bytes, rejected: RejectionCounter
) -> Optional[Tuple[object, float]]:
    """``(message, stamp [s])`` of serialised JointState bytes: read with numpy for plain CDR,
    else by the middleware. Bytes that are not a JointState give None, counted and logged in
    ``rejected`` as ``undecodable``. The message is a :class:`cdr.RawJointState` or a
    JointState, both of which :class:`delan_common.joint_state.JointStateMapper` maps."""
    try:
        if reader.supports(data):
            msg = reader.read(data)
            return msg, seconds(msg)
        msg = deserialize_message(data, JointState)
        return msg, seconds(msg.header.stamp)
    except (CdrError, ValueError, TypeError) as err:
        rejected.reject('undecodable', str(err))
        return None
