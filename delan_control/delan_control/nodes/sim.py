"""Simulated plant node ``sim``: the "true" robot behind the same topics as gz_ros2_control.

Topics (relative names, so a namespace or remap applies):

* publishes ``joint_states`` (sensor_msgs/JointState) every ``1/publish_rate`` s of *sim* time:
  names in model order, position/velocity (with the configured measurement noise), effort =
  the torque the motors actually applied over the last physics step (after the effort-limit
  clamp and the command timeout; 0 on the joints that ``actuated_joints`` leaves out, which
  have no motor; the ``torque_noise`` disturbance is not included). The header stamp is the
  sim time of the state: ``/clock`` time when ``publish_clock`` is on (starting at 0, as
  Gazebo does), else the node's clock at start-up plus the elapsed sim time.
* subscribes ``effort_controller/commands`` (std_msgs/Float64MultiArray, one torque per joint
  in the order of the ``joints`` parameter; model order, as in ``joint_states``, when it is
  ``[]``) -- the interface of ros2_control's ``forward_command_controller`` with
  ``interface_name: effort``, whose ``joints`` parameter is its command order too: the
  torque_controller reads it there (``effort_controller_name: sim``). Wrong length, NaN or Inf:
  rejected and counted (:attr:`SimNode.rejected`), the previous command stays in force.
* publishes ``/clock`` (rosgraph_msgs/Clock) at ``clock_rate`` (sim time) when
  ``publish_clock`` is true, so other nodes can run with ``use_sim_time``.
* service ``~/reset`` (std_srvs/Trigger): puts the robot back to its initial state (sim time
  keeps running forward, so ``/clock`` never jumps back).
* publishes ``/diagnostics`` (diagnostic_msgs/DiagnosticArray) at 1 Hz: the rates, the real-time
  factor reached over the last second (or lockstep), blow-ups of the integration, the joint
  count, the counters of :attr:`SimNode.stats`; WARN when the integration blew up, the physics
  fell behind or a publish failed during the last second.

Timing: the physics runs in a dedicated thread, :class:`delan_control.sim_loop.SimLoop` (real
time, lockstep, the command timeout and when to publish are described there); this node gives
it the plant, the parameters, the commands and reset requests, and publishes what it asks. A
publish that fails (an RCLError under load, ...) loses that sample only: it is counted
(``stats['publish_errors']``) and logged, throttled, and the physics goes on. The physics
thread and rclpy's executor share the GIL: the executor's callbacks (commands, parameters) wait
at most Python's switch interval (5 ms) while the physics thread computes.

Parameters: :mod:`delan_control.params.sim` (docs/parameters.md lists them). The read-only
ones are fixed at start-up, the others can be set at runtime; every value is validated -- a bad
one fails the start-up with a message, or is refused at runtime with the old value kept. The
robot selection parameters (``joints``, ``locked_joint_positions``, ``effort_limits``,
``velocity_limits``, ``robot_description_timeout``) are those of every node
(``delan_common.ros.robot_param``); ``joints`` (read-only) is also the command order.
"""

from __future__ import annotations

import threading
import time
from dataclasses import fields
from typing import Dict, List, Optional

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray
from rcl_interfaces import srv as parameter_srv
from rclpy.exceptions import ParameterException
from rclpy.node import Node
from rclpy.type_support import check_for_type_support
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray
from std_srvs.srv import Trigger

from delan_common.param_table import ParamContext
from delan_common.robot_model import RobotModel
from delan_common.ros.cdr import joint_state_layout
from delan_common.ros.diagnostics import OK, WARN, DiagnosticsReporter, hardware_id
from delan_common.ros.params import declare_table, validating_callback
from delan_common.ros.qos import create_publisher, create_subscription
from delan_common.ros.realtime import set_realtime_priority
from delan_common.ros.rejections import RejectionCounter
from delan_common.ros.robot_param import declare_robot_params
from delan_common.ros.spin import run_node
from delan_common.ros.stamps import set_seconds

from ..command_order import CommandOrder
from ..params.sim import ROBOT, TABLE
from ..sim_loop import SimLoop, SimSettings
from ..sim_plant import plant_from_params
from ..sim_status import SimStatus, passive_joints
from .joint_state_out import JointStateOut

# Load the type supports now, before the node exists: rclpy otherwise imports them inside the
# constructor, widening the window in which the node is visible on the graph but not yet
# spinning (a signal arriving then would abort the start-up); every node serves the parameter
# services.
_PARAMETER_SERVICES = (
    'DescribeParameters GetParameters GetParameterTypes ListParameters SetParameters '
    'SetParametersAtomically'
).split()
for _t in (JointState, Float64MultiArray, Clock, Trigger, DiagnosticArray):
    check_for_type_support(_t)
for _name in _PARAMETER_SERVICES:
    check_for_type_support(getattr(parameter_srv, _name))

#: parameters the loop reads from its SimSettings (at runtime: those not read-only)
_SETTINGS = tuple(f.name for f in fields(SimSettings))
_RUNTIME_NOISE = ('torque_noise', 'position_noise', 'velocity_noise')
_TOPICS = {'state': 'joint_states', 'clock': '/clock'}  # what the loop publishes, where


class SimNode(Node):
    """The simulated plant node (see the module docstring for topics and timing)."""

    def __init__(self, **kwargs):
        super().__init__('sim', **kwargs)
        self._thread: Optional[threading.Thread] = None
        self.loop: Optional[SimLoop] = None
        try:
            self._setup()
        except (Exception, KeyboardInterrupt):
            if self.context.ok():
                raise
            # SIGINT/SIGTERM shut the context down while we were starting: nothing to run,
            # run_node's spin returns at once and the process exits cleanly
            if self.loop is not None:
                self.loop.stop()

    def _setup(self) -> None:
        self._validators: Dict = {}
        try:
            self._declare_and_build()
        except ParameterException as exc:  # e.g. an int where a float is expected
            raise ValueError(f'invalid parameter: {exc}') from None
        self.add_on_set_parameters_callback(validating_callback(self._validators, self._on_params))
        self.rejected = RejectionCounter(self.get_logger(), 'effort command')
        self.js_pub = create_publisher(self, JointState, 'joint_states', 10)
        self.clock_pub = (
            create_publisher(self, Clock, '/clock', 10) if self.publish_clock else None
        )
        commands = create_subscription(
            self, Float64MultiArray, 'effort_controller/commands', self._on_command, 10
        )
        self.create_service(Trigger, '~/reset', self._on_reset)
        self._epoch_ns = 0 if self.publish_clock else self.get_clock().now().nanoseconds
        self._state_out = JointStateOut(self.model.joint_names, joint_state_layout)
        self._raw = self._state_out.raw  # the serialised message (None: the message itself)
        self._clock_msg = Clock()
        self.loop = SimLoop(
            self.plant,
            self.settings,
            publish_state=self._publish_state,
            publish_clock=self._publish_clock if self.publish_clock else None,
            on_publish_error=self._on_publish_error,
            on_lag=self._on_lag,
            on_blowup=self._on_blowup,
            keep_running=self.context.ok,
            # matched in DDS, not only known to the graph
            peers_ready=lambda: (
                self.js_pub.get_subscription_count() > 0 and commands.get_publisher_count() > 0
            ),
        )
        self.stats = self.loop.stats
        self._status = SimStatus(self.loop, time.monotonic())
        self._diagnostics = DiagnosticsReporter(
            self, self._diagnostics_report, hardware_id(self, self.model.name)
        )
        self._thread = threading.Thread(target=self._physics_loop, name='sim_physics', daemon=True)
        self._thread.start()
        set_realtime_priority(self.realtime_priority, self.get_logger())

    def _startup_message(self) -> str:
        passive = passive_joints(self.plant)
        return (
            f'simulating {self.model.name} ({self.plant.n} joints: '
            f'{", ".join(self.model.joint_names)}) from {self.model.source}; physics '
            f'{self.plant.physics_rate:g} Hz ({self.plant.integrator}), joint_states at '
            f'{self.publish_rate:g} Hz, real_time_factor {self.real_time_factor:g}'
            + (', publishing /clock' if self.publish_clock else '')
            + (f', passive (no torque): {", ".join(passive)}' if passive else '')
            + (
                ''
                if self.command_order.is_model_order
                else f', commands in the order {", ".join(self.command_order.joints)}'
            )
        )

    # ------------------------------------------------------------------ parameters
    def _declare_and_build(self) -> None:
        robot = declare_robot_params(self, self._validators, **ROBOT)
        nominal = RobotModel(robot.description, **robot.selection_kwargs())
        for warning in nominal.warnings:
            self.get_logger().warning(warning)
        v = declare_table(self, TABLE, self._validators, ParamContext(nominal.n))
        self.settings = SimSettings(**{k: v[k] for k in _SETTINGS})
        self.publish_clock, self.realtime_priority = v.publish_clock, v.realtime_priority
        self.model = nominal
        self.plant = plant_from_params(nominal, v)
        self.q0, self.qd0 = self.plant.q.copy(), self.plant.qd.copy()
        self.joint_names: List[str] = list(nominal.joint_names)
        # as a forward_command_controller: commands in the order of `joints`
        self.command_order = CommandOrder(self.joint_names, robot.joints or self.joint_names)

    @property
    def publish_rate(self) -> float:
        """joint_states per sim second (``publish_rate``, as set now)."""
        return self.settings.publish_rate

    @property
    def real_time_factor(self) -> float:
        """Sim seconds per wall second (``real_time_factor``, as set now)."""
        return self.settings.real_time_factor

    def _on_params(self, params) -> None:
        for p in params:
            if p.name in _SETTINGS:
                setattr(self.settings, p.name, float(p.value))  # the loop reads it at once
            elif p.name in _RUNTIME_NOISE:
                setattr(self.plant, p.name, np.full(self.plant.n, float(p.value)))

    def _diagnostics_report(self):
        """(level, message, values) of the 1 Hz status on /diagnostics."""
        trouble, message, values = self._status.report(time.monotonic())
        return (WARN if trouble else OK), message, values

    # ------------------------------------------------------------------ callbacks
    def _on_command(self, msg: Float64MultiArray) -> None:
        data = msg.data
        n = self.plant.n
        if len(data) != n:
            self.rejected.reject(
                'wrong_length',
                f'{len(data)} values for {n} joints ({", ".join(self.command_order.joints)})',
            )
            return
        tau = np.array(data, dtype=np.float64)
        if not np.all(np.isfinite(tau)):
            self.rejected.reject('non_finite', f'NaN/Inf in command {tau.tolist()}')
            return
        self.loop.command(self.command_order.to_model(tau))

    def _on_reset(self, request, response):
        self.loop.request_reset()
        response.success = True
        response.message = 'robot reset to its initial state'
        return response

    # ------------------------------------------------------------------ physics thread
    def _on_blowup(self) -> None:
        plant = self.plant
        self.get_logger().error(
            f'the integration went non-finite at t={plant.t:.3f} s (the arm was flung '
            f'beyond what {plant.physics_rate:g} Hz physics resolves): held where it was, '
            f'at rest ({plant.blowups} times so far)',
            throttle_duration_sec=5.0,
        )

    def _on_lag(self, dropped_s: float, rtf: float) -> None:
        self.get_logger().warning(
            f'physics fell {dropped_s:.3f} s (sim) behind real time x{rtf:g}; dropped the backlog',
            throttle_duration_sec=5.0,
        )

    def _on_publish_error(self, what: str, exc: Exception, count: int) -> None:
        self.get_logger().warning(
            f'publishing {_TOPICS[what]} failed: {exc!r} ({count} failures so far); '
            'the physics goes on',
            throttle_duration_sec=5.0,
        )

    def _publish_state(self) -> None:
        plant, out = self.plant, self._state_out
        plant.measure_into(out.position, out.velocity)
        out.effort[:] = plant.last_torque
        self.js_pub.publish(out.stamped(self._epoch_ns + int(round(plant.t * 1e9))))

    def _publish_clock(self) -> None:
        set_seconds(self._clock_msg.clock, self.plant.t)
        self.clock_pub.publish(self._clock_msg)

    def _physics_loop(self) -> None:
        loop = self.loop
        try:
            # logged from here: rclpy's first log call is slow, keep it out of the constructor
            self.get_logger().info(self._startup_message())
            loop.run()
        except Exception as exc:  # noqa: BLE001 -- say why physics stopped, keep the node up
            if self.context.ok() and not loop.stopped:
                self.get_logger().error(f'physics thread stopped: {exc!r}')
        # SIGINT/SIGTERM shut the context down. The executor should wake up through the
        # context's shutdown callback, but with rclpy's Python executors a signal landing while
        # the wait set is assembled can be missed (seen about once in 25 SIGTERMs with this
        # busy thread holding the GIL), leaving the process hanging in rcl_wait: nudge the
        # executor until close() is called. (Executor.wake, not a guard condition of the node:
        # the EventsExecutor supports no guard conditions.)
        deadline = time.monotonic() + 10.0
        while not loop.stopped and not self.context.ok() and time.monotonic() < deadline:
            executor = self.executor
            if executor is not None:
                try:
                    executor.wake()
                except Exception:  # noqa: BLE001 -- already shut down: nothing left to wake
                    break
            time.sleep(0.05)

    def close(self) -> None:
        """Stop the physics thread (called by run_node at shutdown; idempotent)."""
        loop = getattr(self, 'loop', None)
        if loop is None:  # a start that failed before the physics existed
            return
        loop.stop()
        thread = self._thread
        if thread is not None and thread.is_alive() and threading.current_thread() is not thread:
            thread.join(timeout=2.0)

    def destroy_node(self):
        """Stop the physics thread (:meth:`close`) before the node goes."""
        self.close()
        return super().destroy_node()


def main(args=None) -> int:
    """Entry point of the ``sim`` node."""
    return run_node(SimNode, args)


if __name__ == '__main__':
    raise SystemExit(main())
