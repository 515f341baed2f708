"""Torque controller node: joint_states + reference in, ros2_control effort commands out.

One command per received joint state (the ros2_control loop drives the rate). The dynamics model
(``pd`` | ``pinocchio`` | ``identified`` | ``delan``) and the law are parameters, switchable at
runtime with ``ros2 param set``; a switch cross-fades the torque (bumpless). Safety: URDF effort
limits, a watchdog that sends zero torque once when joint states go stale (when they return, the
command rejoins the reference smoothly from where the arm is, or holds the arm if the reference is
beyond ``resume_tolerance``), and a fall-back to PD when the model returns non-finite torque.

Commands go out in the joint order of the controller that applies them (a Float64MultiArray
names no joints): ``command_joints``, or else the ``joints`` parameter of the node
``effort_controller_name``, read once at start-up without blocking; no commands until it is
known, the model's order (with a warning) when it cannot be read in time, and none at all
(diagnostics ERROR) when those joints are not the model's (see :mod:`delan_control.command_order`).

What a cycle computed goes out on ``~/controller_state`` (delan_msgs/ControllerState: reference,
feedback, error, the model's torque and the command), at most ``state_publish_rate`` times a
second: when one is due the loop only hands its arrays over, a worker thread of normal priority
builds and publishes the message. Health on ``/diagnostics`` at 1 Hz.

The node is wiring: what goes on between the parts (a cycle's reference, a restart, a parameter
change, the status) is :mod:`delan_control.torque_control`'s; the models and their switches are
:mod:`delan_control.model_switch`'s, each cycle's command :mod:`delan_control.control_cycle`'s,
the reference :mod:`delan_control.reference_tracking`'s.
"""

from __future__ import annotations

import sys
import time
from typing import Dict, List

import numpy as np
from rclpy.node import Node
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray
from trajectory_msgs.msg import JointTrajectory

from delan_common.joint_state import JointStateError, JointStateMapper, StampGate
from delan_common.param_table import ParamContext
from delan_common.ros.cdr import CommandBytes, JointStateReader
from delan_common.ros.diagnostics import ERROR, OK, WARN, DiagnosticsReporter, hardware_id
from delan_common.ros.params import declare_table, validating_callback
from delan_common.ros.qos import LATCHED, create_publisher, create_subscription
from delan_common.ros.realtime import python_thread_ids, set_realtime_priority
from delan_common.ros.rejections import RejectionCounter
from delan_common.ros.robot_param import declare_robot
from delan_common.ros.spin import run_node, steady_timer
from delan_common.ros.stamps import seconds
from delan_common.ros.state_taker import JointStateTaker, Taken, decode_joint_state
from delan_control.control_cycle import FALLBACK_GAINS, CycleState
from delan_control.loop_stats import LoopStats
from delan_control.model_loader import LatestLoader, preload_model_libraries
from delan_control.model_switch import UpdateRequest
from delan_control.params.torque_controller import TABLE
from delan_control.reference_tracking import reference_from_points
from delan_control.torque_control import TorqueControl
from delan_msgs.msg import ControllerState, ModelUpdate

from .command_order_client import CommandOrderClient, node_name_error
from .controller_state_message import controller_state_message

__all__ = ['FALLBACK_GAINS', 'TorqueControllerNode', 'main']

# A control callback waiting for the GIL while another thread (model loading, diagnostics) runs
# Python code gets it after at most the switch interval: 5 ms by default, 5 control cycles.
GIL_SWITCH_INTERVAL_S = 2e-4
# joint states the loop's subscription keeps; each wake-up takes them all, answers the newest
STATE_QUEUE_DEPTH = 10
#: diagnostic level of a decision's log level
LEVELS = {'info': OK, 'warning': WARN, 'error': ERROR}


class TorqueControllerNode(Node):
    """Joint torques from a dynamics model and a control law, with the safety of a real arm."""

    # the state of the parts, as the node's users (tests, benchmarks) read it
    model_kind = property(lambda self: self.models.kind)
    law = property(lambda self: self.models.law)
    fallbacks = property(lambda self: self.control.cycle.fallbacks)
    limits = property(lambda self: self.control.cycle.limits)
    _model = property(lambda self: self.models.model)
    _model_version = property(lambda self: self.models.version)
    _energy = property(lambda self: self.models.energy)
    _latest_update = property(lambda self: self.models.latest_update)
    _order_source = property(lambda self: self.orders.source)
    watchdog_trips = property(lambda self: self.continuity.trips)

    def __init__(self, **kwargs):
        # before the node appears on the graph: a signal during the ~2 s of imports then ends
        # the start-up cleanly (run_node) instead of hitting a half-built node
        learned_unavailable = preload_model_libraries()
        # process-wide: a process hosting a controller wants its callbacks served promptly
        sys.setswitchinterval(min(sys.getswitchinterval(), GIL_SWITCH_INTERVAL_S))
        super().__init__('torque_controller', **kwargs)
        log = self.get_logger()
        if learned_unavailable:
            log.warning(
                f'learned models (delan, delan_residual) unavailable: {learned_unavailable}; '
                'pd, pinocchio and identified work without delan_learning and torch'
            )
        reg: Dict = {}
        self.robot = declare_robot(self, reg)
        self.joint_names = list(self.robot.joint_names)
        n = len(self.joint_names)
        v = declare_table(self, TABLE, reg, ParamContext(n))
        # resolved in this node's namespace: a check the ROS-free table cannot make
        error = node_name_error(self, v.effort_controller_name)
        if error:
            raise ValueError(f'invalid parameter: {error}')
        receiver, timeout = v.effort_controller_name, v.effort_controller_timeout
        self.orders = CommandOrderClient(self, self.robot, v.command_joints, receiver, timeout)
        c = self.control = TorqueControl.from_params(self.robot, v, log)
        self.models, self.tracker, self.continuity = c.models, c.tracker, c.continuity
        self.gains = c.cycle.gains
        self.mapper = JointStateMapper(self.joint_names)
        self.stamps = StampGate()
        self.rejected = RejectionCounter(log, 'joint state')
        self.rejected_refs = RejectionCounter(log, 'reference')
        self.commands_sent = 0
        self.loop_stats = LoopStats()
        self._reader = JointStateReader()
        # learner versions are loaded (and law energy built on them) off the executor thread
        self._update_loader = LatestLoader(
            self.models.load_update,
            self._update_loaded,
            self._update_failed,
            name='model_update_loader',
        )
        reg.update(self.models.checks(reg['law']))  # the table's check of law comes first
        self.add_on_set_parameters_callback(self.models.validated(validating_callback(reg)))
        self.add_post_set_parameters_callback(self._apply_params)

        self.cmd_pub = create_publisher(self, Float64MultiArray, 'effort_controller/commands', 10)
        # commands go out as pre-serialised bytes, joint states come in as bytes (read with
        # numpy): ~90 us less per cycle than message objects
        self._command_bytes = CommandBytes.create(n)
        self.state_pub = create_publisher(self, ControllerState, '~/controller_state', 10)
        self._state_worker = LatestLoader(
            self._publish_state, lambda *_: None, self._state_failed, name='controller_state'
        )
        self._diagnostics = DiagnosticsReporter(
            self, self._diagnostics_report, hardware_id(self, self.robot.name)
        )
        # Joint states are taken by a thread of their own, not by the executor: as the
        # real-time loop of ros2_control, it is never queued behind parameter services, model
        # updates or diagnostics, and it reads each sample's source timestamp to time itself.
        self._taker = JointStateTaker(self, self._on_states, STATE_QUEUE_DEPTH, 'control_loop')
        create_subscription(
            self, JointTrajectory, 'reference_trajectory', self._on_reference, LATCHED
        )
        create_subscription(
            self, ModelUpdate, 'learner/model_update', self._on_model_update, LATCHED
        )
        # Staleness is wall time (time.monotonic), so the checks run on the steady clock: with
        # use_sim_time a ROS-time timer stops with /clock -- exactly when the sim is gone.
        self._watchdog_timer = steady_timer(self, v.watchdog_timeout / 2.0, self._watchdog)
        passive = self.control.passive_joints()
        log.info(
            f'controlling {self.joint_names} with model={self.model_kind} law={self.law}'
            + (f'; passive (never commanded): {passive}' if passive else '')
        )
        # last: the middleware's and the loop's threads exist now; the model loader and the
        # state publisher stay at normal priority
        set_realtime_priority(
            v.realtime_priority,
            log,
            exclude=python_thread_ids(self._update_loader.thread, self._state_worker.thread),
        )

    # ---------------------------------------------------------------- parameters and models
    def _apply_params(self, params) -> None:
        changes = {p.name: p.value for p in params}
        if 'watchdog_timeout' in changes:
            self.destroy_timer(self._watchdog_timer)
            period = changes['watchdog_timeout'] / 2.0
            self._watchdog_timer = steady_timer(self, period, self._watchdog)
        for message in self.control.apply(changes):
            self.get_logger().info(message)

    def _on_model_update(self, msg: ModelUpdate) -> None:
        if list(msg.joint_names) != self.joint_names:
            self.get_logger().error(
                f'model update for joints {list(msg.joint_names)} ignored '
                f'(controller has {self.joint_names})'
            )
            return
        request = self.models.update_request(msg)
        if request is not None:  # loaded in the background: a load takes 3-10 ms
            self._update_loader.submit(request)

    def _update_loaded(self, request: UpdateRequest, loaded) -> None:
        """Loader thread: switch to a learner version unless the user switched away meanwhile."""
        adopted = self.models.adopt_update(request, loaded)
        if adopted:
            self.get_logger().info(adopted)

    def _update_failed(self, request: UpdateRequest, err: Exception) -> None:
        self.get_logger().error(
            f'model update v{request.update.model_version} unusable as {request.kind} '
            f'(law {request.law}): {err}'
        )

    # ---------------------------------------------------------------- reference
    def _on_reference(self, msg: JointTrajectory) -> None:
        points = msg.points
        t0 = seconds(msg.header.stamp) or self.get_clock().now().nanoseconds * 1e-9
        try:
            ref = reference_from_points(
                self.joint_names,
                msg.joint_names,
                t0,
                [seconds(p.time_from_start) for p in points],
                [p.positions for p in points],
                [p.velocities for p in points],
                [p.accelerations for p in points],
            )
        except ValueError as err:
            self.rejected_refs.reject('bad_reference', str(err))
            return
        self.tracker.set_reference(ref)

    # ---------------------------------------------------------------- control
    def _on_states(self, batch: List[Taken]) -> None:
        """Everything queued, answering only the newest: a loop that fell behind (a stall, a
        loaded machine) catches up at once instead of commanding from a backlog of old states
        (as ros2_control, which reads the latest state)."""
        self.loop_stats.received([info['source_timestamp'] for _, info in batch])
        data, info = batch[-1]
        decoded = decode_joint_state(self._reader, data, self.rejected)
        if decoded is not None and self._control(*decoded):
            self.loop_stats.command(info['source_timestamp'], time.time_ns())

    def _on_joint_state(self, msg: JointState) -> None:
        """A JointState message (in-process callers, tests)."""
        self._control(msg, seconds(msg.header.stamp))

    def _control(self, msg, t: float) -> bool:
        """One cycle: map, gate, command; False when the state was rejected (no command)."""
        t = t or self.get_clock().now().nanoseconds * 1e-9
        try:
            js = self.mapper.map(msg)
            # the reference is evaluated at the stamp: one far ahead (or behind) must not
            # command the end (or start) of the trajectory
            self.stamps.check(t)
        except JointStateError as err:
            self.rejected.reject(err.reason, err.detail)
            return False
        order = self.orders.order
        if order is None:
            return False
        now = time.monotonic()
        state = self.control.command(now, t, js)
        self._publish_command(order.to_command(state.command))
        self.commands_sent += 1
        if self.control.state_rate.due(now):
            self._state_worker.submit(state)
        return True

    def _publish_command(self, tau: np.ndarray) -> None:
        """``tau`` in the receiver's order. Control loop thread only (the pre-serialised buffer
        is its own)."""
        if self._command_bytes is not None:
            self.cmd_pub.publish(self._command_bytes.pack(tau))
        else:
            self.cmd_pub.publish(Float64MultiArray(data=np.asarray(tau, float).tolist()))

    def _publish_state(self, s: CycleState) -> None:
        """State worker thread: ``~/controller_state`` of one cycle."""
        self.state_pub.publish(
            controller_state_message(s, self.joint_names, self.robot.joint_types)
        )

    def _state_failed(self, state: CycleState, err: Exception) -> None:
        if self.context.ok():
            self.get_logger().error(
                f'publishing the controller state failed: {err!r}', throttle_duration_sec=10.0
            )

    def _watchdog(self) -> None:
        self.continuity.expire(time.monotonic(), self._zero_command)

    def _zero_command(self) -> None:
        """A ForwardCommandController keeps applying the last command: replace it by zero, the
        same in every joint order (without an order no command went out: no trip)."""
        self.cmd_pub.publish(Float64MultiArray(data=[0.0] * len(self.joint_names)))
        self.get_logger().error(
            f'joint states stale for > {self.continuity.timeout:.3f} s: '
            'zero torque sent, commanding stopped'
        )

    # ---------------------------------------------------------------- diagnostics
    def _diagnostics_report(self):
        """The 1 Hz status on /diagnostics (TorqueControl.status)."""
        rejected = (self.rejected.total, self.rejected_refs.total)
        loop = self.loop_stats.diagnostics(self._taker.errors)
        level, message, values = self.control.status(
            self.orders, self.commands_sent, rejected, loop
        )
        return LEVELS[level], message, values

    def close(self) -> None:
        """Stop the control loop and the loader (run_node calls it; idempotent)."""
        for worker in ('_taker', '_update_loader', '_state_worker'):
            if getattr(self, worker, None) is not None:
                getattr(self, worker).close()

    def destroy_node(self):
        """Stop the control loop and the loader (:meth:`close`) before the node goes."""
        self.close()
        return super().destroy_node()


def main(args=None) -> int:
    """Entry point of the ``torque_controller`` node."""
    return run_node(TorqueControllerNode, args)


if __name__ == '__main__':
    raise SystemExit(main())
