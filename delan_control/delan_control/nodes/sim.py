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

Timing. Physics runs in a dedicated thread, not a timer: a 1 kHz rclpy timer on a loaded 2-core
machine fires late and in bursts, and the physics would inherit that jitter. The thread keeps
sim time locked to a monotonic clock: it wakes up, runs every physics step that is due
(``(now - start) * real_time_factor``), publishes at the publish instants on the way, then
sleeps until the next step is due. Every step has exactly ``dt = 1/physics_rate``, so the sim
is deterministic given the command sequence; only *when* (in wall time) states are published
jitters by up to a wake-up (~0.1-1 ms). Commands are picked up between physics steps (every
1 ms of sim time when paced). If the thread falls more than 0.2 s behind (an overloaded
machine, or a ``real_time_factor`` the CPU cannot reach), the backlog is dropped -- the sim then
runs slower than asked rather than in bursts -- and :attr:`SimNode.stats` counts it. A publish
that fails (an RCLError under load, ...) loses that sample only: it is counted
(``stats['publish_errors']``) and logged, throttled, and the physics goes on.
``real_time_factor = 0`` runs as fast as the CPU allows, picking up commands once per publish
period (a controller cannot keep up then; use it for open-loop or offline runs). The physics
thread and rclpy's executor share the GIL: the executor's callbacks (commands, parameters) wait
at most Python's switch interval (5 ms) while the physics thread computes.

The command timeout (``command_timeout``, sim seconds; 0 = never) zeroes the torque when no
valid command arrived for that long, like a motor driver's watchdog.

Parameters: :mod:`delan_control.params.sim` (docs/parameters.md lists them). The read-only
ones are fixed at start-up, the others can be set at runtime; every value is validated -- a bad
one fails the start-up with a message, or is refused at runtime with the old value kept. The
robot selection parameters (``joints``, ``locked_joint_positions``, ``effort_limits``,
``velocity_limits``, ``robot_description_timeout``) are those of every node
(``delan_common.ros.robot_param``); ``joints`` (read-only) is also the command order.
"""

from __future__ import annotations

import math
import threading
import time
from typing import Dict, List, Optional

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.exceptions import ParameterException
from rclpy.node import Node
from rclpy.type_support import check_for_type_support
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray
from std_srvs.srv import Trigger

from delan_common.param_table import ParamContext
from delan_common.robot_model import Mismatch, RobotModel
from delan_common.ros.cdr import STAMP, joint_state_layout
from delan_common.ros.diagnostics import OK, WARN, DiagnosticsReporter, hardware_id
from delan_common.ros.params import declare_table, validating_callback
from delan_common.ros.qos import create_publisher, create_subscription
from delan_common.ros.realtime import set_realtime_priority
from delan_common.ros.rejections import RejectionCounter
from delan_common.ros.robot_param import declare_robot_params
from delan_common.ros.spin import run_node
from delan_common.ros.stamps import set_seconds
from delan_common.urdf_joints import middle_of_limits

from ..command_order import CommandOrder
from ..pacing import MAX_WAIT_S, RealTimePacer
from ..params.sim import MISMATCH, ROBOT, TABLE
from ..plant import Plant

# Load the type supports now, before the node exists: rclpy otherwise imports them inside the
# constructor, widening the window in which the node is visible on the graph but not yet
# spinning (a signal arriving then would abort the start-up).
for _t in (JointState, Float64MultiArray, Clock, Trigger, DiagnosticArray):
    check_for_type_support(_t)
try:
    from rcl_interfaces.srv import (
        DescribeParameters,
        GetParameters,
        GetParameterTypes,
        ListParameters,
        SetParameters,
        SetParametersAtomically,
    )

    for _t in (
        DescribeParameters,
        GetParameters,
        GetParameterTypes,
        ListParameters,
        SetParameters,
        SetParametersAtomically,
    ):
        check_for_type_support(_t)
except ImportError:  # pragma: no cover
    pass

MAX_LAG_S = 0.2  # wall seconds behind schedule before the backlog is dropped
COMMAND_CHECK_S = 1e-3  # sim seconds between looks at the latest command


class SimNode(Node):
    """The simulated plant node (see the module docstring for topics and timing)."""

    def __init__(self, **kwargs):
        super().__init__('sim', **kwargs)
        self._thread: Optional[threading.Thread] = None
        self._stop = threading.Event()
        try:
            self._setup()
        except (Exception, KeyboardInterrupt):
            if self.context.ok():
                raise
            # SIGINT/SIGTERM shut the context down while we were starting: nothing to run,
            # run_node's spin returns at once and the process exits cleanly
            self._stop.set()

    def _setup(self) -> None:
        self._validators: Dict = {}
        try:
            self._declare_and_build()
        except ParameterException as exc:  # e.g. an int where a float is expected
            raise ValueError(f'invalid parameter: {exc}') from None
        self.add_on_set_parameters_callback(validating_callback(self._validators, self._on_params))
        n = self.plant.n
        self.rejected = RejectionCounter(self.get_logger(), 'effort command')
        self.stats = {
            'steps': 0,
            'published': 0,
            'commands': 0,
            'timeouts': 0,
            'blowups': 0,
            'dropped_backlog_s': 0.0,
            'lag_events': 0,
            'lockstep_timeouts': 0,
            'publish_errors': 0,
        }
        self._cmd_seq = 0
        self._cmd_event = threading.Event()
        self._zero = np.zeros(n)
        self._cmd = (self._zero, -math.inf)  # (clamped torque, sim time received)
        self._timed_out = True
        self._reset_requested = threading.Event()
        self._rebase = threading.Event()
        self.js_pub = create_publisher(self, JointState, 'joint_states', 10)
        self.clock_pub = (
            create_publisher(self, Clock, '/clock', 10) if self.publish_clock else None
        )
        create_subscription(
            self, Float64MultiArray, 'effort_controller/commands', self._on_command, 10
        )
        self.create_service(Trigger, '~/reset', self._on_reset)
        self._epoch_ns = 0 if self.publish_clock else self.get_clock().now().nanoseconds
        # One joint state, reused: each publish writes the state in place through numpy views
        # -- of its serialised bytes (see joint_state_layout), or of the message's own arrays if
        # the middleware's layout is not found -- with no per-publish lists or field checks.
        # publish() serialises or copies at once, so the next write cannot touch one in flight.
        self._msg = msg = JointState()
        msg.name = list(self.model.joint_names)
        msg.position, msg.velocity, msg.effort = [0.0] * n, [0.0] * n, [0.0] * n
        self._stamp = msg.header.stamp
        layout = joint_state_layout(msg)
        if layout is None:
            self._raw: Optional[bytearray] = None
            arrays = [
                np.frombuffer(a, np.float64) for a in (msg.position, msg.velocity, msg.effort)
            ]
        else:
            self._raw, self._raw_stamp_at, offsets = layout
            arrays = [np.frombuffer(self._raw, np.float64, n, off) for off in offsets]
        self._js_position, self._js_velocity, self._js_effort = arrays
        self._clock_msg = Clock()
        self._diag_last = (time.monotonic(), self.plant.t, dict(self.stats))
        self._diagnostics = DiagnosticsReporter(
            self, self._diagnostics_report, hardware_id(self, self.model.name)
        )
        self._thread = threading.Thread(target=self._physics_loop, name='sim_physics', daemon=True)
        self._thread.start()
        set_realtime_priority(self.realtime_priority, self.get_logger())

    def _startup_message(self) -> str:
        return (
            f'simulating {self.model.name} ({self.plant.n} joints: '
            f'{", ".join(self.model.joint_names)}) from {self.model.source}; physics '
            f'{self.plant.physics_rate:g} Hz ({self.plant.integrator}), joint_states at '
            f'{self.publish_rate:g} Hz, real_time_factor {self.real_time_factor:g}'
            + (', publishing /clock' if self.publish_clock else '')
            + (f', passive (no torque): {", ".join(self._passive())}' if self._passive() else '')
            + (
                ''
                if self.command_order.is_model_order
                else f', commands in the order {", ".join(self.command_order.joints)}'
            )
        )

    def _passive(self) -> List[str]:
        """The joints without a motor (``actuated_joints``)."""
        return [j for j, a in zip(self.joint_names, self.plant.actuated) if not a]

    # ------------------------------------------------------------------ parameters
    def _declare_and_build(self) -> None:
        robot = declare_robot_params(self, self._validators, **ROBOT)
        nominal = RobotModel(robot.description, **robot.selection_kwargs())
        for warning in nominal.warnings:
            self.get_logger().warning(warning)
        v = declare_table(self, TABLE, self._validators, ParamContext(nominal.n))
        self.publish_rate, self.real_time_factor = v.publish_rate, v.real_time_factor
        self.publish_clock, self.lockstep = v.publish_clock, v.lockstep
        self.hold_until_commanded = v.hold_until_commanded
        self.realtime_priority, self.lockstep_timeout = v.realtime_priority, v.lockstep_timeout
        self.clock_rate, self.command_timeout = v.clock_rate, v.command_timeout
        q0 = list(v.initial_position)
        if len(q0) == 1 and math.isnan(q0[0]):
            spec = nominal.spec
            q0 = middle_of_limits(spec.lower, spec.upper).tolist()
        try:
            mismatch = Mismatch.from_params(
                {k: v[k] if isinstance(v[k], (str, float)) else list(v[k]) for k in MISMATCH}
            )
        except ValueError as err:
            raise ValueError(f'invalid parameter: {err}') from None
        self.model = nominal
        actuated = list(v.actuated_joints)
        unknown = [j for j in actuated if j not in nominal.joint_names]
        if unknown:
            raise ValueError(
                f'invalid parameter: actuated_joints: {unknown} are not joints of the robot '
                f'({", ".join(nominal.joint_names)})'
            )
        self.plant = Plant(
            nominal,
            mismatch,
            physics_rate=v.physics_rate,
            integrator=v.integrator,
            torque_noise=v.torque_noise,
            position_noise=v.position_noise,
            velocity_noise=v.velocity_noise,
            seed=v.seed,
            q0=q0,
            qd0=list(v.initial_velocity),
            position_limits=v.position_limits,
            actuated=actuated or None,
        )
        self.q0, self.qd0 = self.plant.q.copy(), self.plant.qd.copy()
        self.joint_names: List[str] = list(nominal.joint_names)
        # as a forward_command_controller: commands in the order of `joints`
        self.command_order = CommandOrder(self.joint_names, robot.joints or self.joint_names)

    def _on_params(self, params) -> None:
        for p in params:
            if p.name in ('publish_rate', 'clock_rate', 'command_timeout', 'lockstep_timeout'):
                setattr(self, p.name, float(p.value))
            elif p.name == 'real_time_factor':
                self.real_time_factor = float(p.value)
                self._rebase.set()
            elif p.name == 'torque_noise':
                self.plant.torque_noise = np.full(self.plant.n, float(p.value))
            elif p.name == 'position_noise':
                self.plant.position_noise = np.full(self.plant.n, float(p.value))
            elif p.name == 'velocity_noise':
                self.plant.velocity_noise = np.full(self.plant.n, float(p.value))

    def _diagnostics_report(self):
        """(level, message, values) of the 1 Hz status on /diagnostics."""
        now, t, stats = time.monotonic(), self.plant.t, dict(self.stats)
        then, t_then, before = self._diag_last
        self._diag_last = (now, t, stats)
        rtf = (t - t_then) / max(now - then, 1e-9)
        new = {k: stats[k] - before.get(k, 0) for k in ('blowups', 'lag_events', 'publish_errors')}
        trouble = [f'{n} {k.replace("_", " ")}' for k, n in new.items() if n]
        level, message = (
            (WARN, 'in the last period: ' + ', '.join(trouble))
            if trouble
            else (OK, 'lockstep' if self.lockstep else f'running at {rtf:.2f}x real time')
        )
        return (
            level,
            message,
            {
                'joints': self.plant.n,
                'passive_joints': ' '.join(self._passive()),
                'physics_rate': self.plant.physics_rate,
                'publish_rate': self.publish_rate,
                'real_time_factor_set': self.real_time_factor,
                'real_time_factor': f'{rtf:.3f}',
                'lockstep': self.lockstep,
                'sim_time': f'{t:.3f}',
                **stats,
            },
        )

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
        tau = self.command_order.to_model(tau)
        self._cmd = (self.plant.clamp(tau), self.plant.t)  # one atomic tuple swap
        self.stats['commands'] += 1
        self._cmd_seq += 1
        self._cmd_event.set()

    def _on_reset(self, request, response):
        self._reset_requested.set()
        response.success = True
        response.message = 'robot reset to its initial state'
        return response

    def _torque(self) -> np.ndarray:
        tau, t_cmd = self._cmd
        timeout = self.command_timeout
        if timeout > 0 and self.plant.t - t_cmd > timeout:
            if not self._timed_out and t_cmd > -math.inf:
                self.stats['timeouts'] += 1
            self._timed_out = True
            return self._zero
        self._timed_out = False
        return tau

    # ------------------------------------------------------------------ physics thread
    def _publish(self) -> None:
        plant = self.plant
        if plant.blowups != self.stats['blowups']:
            self.stats['blowups'] = plant.blowups
            self.get_logger().error(
                f'the integration went non-finite at t={plant.t:.3f} s (the arm was flung '
                f'beyond what {plant.physics_rate:g} Hz physics resolves): held where it was, '
                f'at rest ({plant.blowups} times so far)',
                throttle_duration_sec=5.0,
            )
        plant.measure_into(self._js_position, self._js_velocity)
        self._js_effort[:] = plant.last_torque
        sec, nanosec = divmod(self._epoch_ns + int(round(plant.t * 1e9)), 1_000_000_000)
        raw = self._raw
        if raw is None:
            self._stamp.sec, self._stamp.nanosec = sec, nanosec
        else:
            STAMP.pack_into(raw, self._raw_stamp_at, sec, nanosec)
        if self._send(self.js_pub, self._msg if raw is None else bytes(raw), 'joint_states'):
            self.stats['published'] += 1

    def _publish_clock(self) -> None:
        clock = self._clock_msg.clock
        set_seconds(clock, self.plant.t)
        self._send(self.clock_pub, self._clock_msg, '/clock')

    def _send(self, publisher, msg, topic: str) -> bool:
        """Publish; a failure (RCLError under load, a destroyed publisher, ...) is counted in
        ``stats['publish_errors']`` and logged (throttled), and the physics goes on: a lost
        sample must not stop the robot. During shutdown it is ignored (the loop ends)."""
        try:
            publisher.publish(msg)
            return True
        except Exception as exc:  # noqa: BLE001 -- any failure of one publish
            if self._stop.is_set() or not self.context.ok():
                return False
            self.stats['publish_errors'] += 1
            self.get_logger().warning(
                f'publishing {topic} failed: {exc!r} '
                f'({self.stats["publish_errors"]} failures so far); the physics goes on',
                throttle_duration_sec=5.0,
            )
            return False

    def _physics_loop(self) -> None:
        try:
            # logged from here: rclpy's first log call is slow, keep it out of the constructor
            self.get_logger().info(self._startup_message())
            self._physics_loop_inner()
        except Exception as exc:  # noqa: BLE001 -- say why physics stopped, keep the node up
            if self.context.ok() and not self._stop.is_set():
                self.get_logger().error(f'physics thread stopped: {exc!r}')
        # SIGINT/SIGTERM shut the context down. The executor should wake up through the
        # context's shutdown callback, but with rclpy's Python executors a signal landing while
        # the wait set is assembled can be missed (seen about once in 25 SIGTERMs with this
        # busy thread holding the GIL), leaving the process hanging in rcl_wait: nudge the
        # executor until close() is called. (Executor.wake, not a guard condition of the node:
        # the EventsExecutor supports no guard conditions.)
        deadline = time.monotonic() + 10.0
        while not self._stop.is_set() and not self.context.ok() and time.monotonic() < deadline:
            executor = self.executor
            if executor is not None:
                try:
                    executor.wake()
                except Exception:  # noqa: BLE001 -- already shut down: nothing left to wake
                    break
            self._stop.wait(0.05)

    def _lockstep_loop(self) -> None:
        """Publish a state, wait for the command that answers it, step to the next state.

        Like Gazebo with ros2_control in lockstep: the controller sees every state and its
        command acts for exactly one publish period, however slow the CPU. ``/clock`` ticks
        with every state."""
        plant = self.plant
        pacer = self._pacer()
        while not self._stop.is_set() and self.context.ok():
            if self._reset_requested.is_set():
                self._reset_requested.clear()
                plant.reset(self.q0, self.qd0, t=plant.t)
            seq = self._cmd_seq
            self._cmd_event.clear()
            if self.clock_pub is not None:
                self._publish_clock()
            self._publish()
            deadline = time.monotonic() + self.lockstep_timeout
            while self._cmd_seq == seq and not self._stop.is_set():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    self.stats['lockstep_timeouts'] += 1
                    break
                self._cmd_event.wait(min(remaining, 0.01))
            if self.hold_until_commanded and self._cmd_seq == 0:
                continue  # nobody commands the arm yet
            # in short waits, so a new real_time_factor applies at once (a wait computed with
            # the new factor on the old schedule could last for hours)
            while not self._stop.is_set():
                if self._rebase.is_set():
                    self._rebase.clear()
                    pacer.rebase(time.monotonic(), plant.t)
                ahead = pacer.ahead_s(time.monotonic(), plant.t, self.real_time_factor)
                if ahead <= 0:
                    break
                self._stop.wait(min(ahead, MAX_WAIT_S))
            k = max(1, int(round(1.0 / (self.publish_rate * plant.dt))))
            plant.advance(self._torque(), k)
            self.stats['steps'] += k

    def _pacer(self) -> RealTimePacer:
        check_steps = max(1, int(round(COMMAND_CHECK_S / self.plant.dt)))
        return RealTimePacer(self.plant.dt, MAX_LAG_S, check_steps, time.monotonic(), self.plant.t)

    def _physics_loop_inner(self) -> None:
        if self.lockstep:
            return self._lockstep_loop()
        plant = self.plant
        dt = plant.dt
        eps = 1e-9
        next_pub = plant.t
        next_clock = plant.t
        pacer = self._pacer()
        check_steps = pacer.resume_steps  # steps between looks at the latest command

        def publish_due():
            nonlocal next_pub, next_clock
            if self.clock_pub is not None and plant.t >= next_clock - eps:
                self._publish_clock()
                next_clock = max(next_clock + 1.0 / self.clock_rate, plant.t + 0.5 * dt)
            if plant.t >= next_pub - eps:
                self._publish()
                next_pub = max(next_pub + 1.0 / self.publish_rate, plant.t + 0.5 * dt)

        publish_due()  # the initial state, at t = 0
        context = self.context
        stopped, advance, torque, stats = (
            self._stop.is_set,
            plant.advance,
            self._torque,
            self.stats,
        )
        clock = self.clock_pub is not None
        while not self._stop.is_set() and context.ok():
            if self._reset_requested.is_set():
                self._reset_requested.clear()
                plant.reset(self.q0, self.qd0, t=plant.t)
            rtf = self.real_time_factor
            if self._rebase.is_set():
                self._rebase.clear()
                pacer.rebase(time.monotonic(), plant.t)
            pace = pacer.pace(time.monotonic(), plant.t, rtf)
            if pace.steps == 0:
                self._stop.wait(pace.wait_s)
                continue
            if pace.dropped_s > 0:
                self.stats['dropped_backlog_s'] += pace.dropped_s
                self.stats['lag_events'] += 1
                self.get_logger().warning(
                    f'physics fell {pace.dropped_s:.3f} s (sim) behind real time x{rtf:g}; '
                    f'dropped the backlog',
                    throttle_duration_sec=5.0,
                )
            due = pace.steps
            # commands are looked at every ms of sim time when paced; flat out, once per
            # publish period (a controller cannot keep up with rtf = 0 anyway)
            chunk = check_steps if rtf > 0 else due
            while due > 0 and not stopped():
                k = min(due, chunk, max(1, math.ceil((next_pub - plant.t) / dt - eps)))
                if clock:
                    k = min(k, max(1, math.ceil((next_clock - plant.t) / dt - eps)))
                advance(torque(), k)
                due -= k
                stats['steps'] += k
                publish_due()

    def close(self) -> None:
        """Stop the physics thread (called by run_node at shutdown; idempotent)."""
        stop = getattr(self, '_stop', None)
        if stop is None:  # a start that failed before the physics existed
            return
        stop.set()
        if (
            getattr(self, '_thread', None) is not None
            and self._thread.is_alive()
            and threading.current_thread() is not self._thread
        ):
            self._thread.join(timeout=2.0)

    def destroy_node(self):
        self.close()
        return super().destroy_node()


def main(args=None) -> int:
    """Entry point of the ``sim`` node."""
    return run_node(SimNode, args)


if __name__ == '__main__':
    raise SystemExit(main())
