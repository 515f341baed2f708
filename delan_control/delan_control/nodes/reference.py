"""Reference trajectory node: publishes excitation (for learning) or test trajectories (figure
eight at 1x/2x speed) as ``trajectory_msgs/JointTrajectory`` on ``reference_trajectory``.

Each trajectory starts from the arm's current position (from ``joint_states``) with a smooth
approach; setting ``trajectory``, ``speed`` or ``seed`` at runtime publishes a new one at once,
or, while no joint state has come yet, once one has (at most ``wait_for_joint_states`` later:
then it starts at its own first point, wherever the arm is).
With ``repeat`` an excitation is followed by the next seed without stopping, so learning data
keeps coming: the next one is made during the current one and sent ``HANDOVER_S`` before it ends,
beginning with the current one's last stretch (``trajectories.splice``).

References are stamped, and handed over, in the time of the joint states (their header
stamps), the time the controller evaluates them at, not by this node's clock: a simulated
arm's time may run from 0, or faster or slower than the clock.
"""

from __future__ import annotations

import math
import time
from typing import Dict, List, Optional

import numpy as np
from builtin_interfaces.msg import Duration
from rclpy.node import Node
from rclpy.serialization import deserialize_message
from sensor_msgs.msg import JointState
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from delan_common.joint_state import JointStateError, JointStateMapper
from delan_common.ros.params import declare_table, validating_callback
from delan_common.ros.qos import LATCHED, create_publisher
from delan_common.ros.rejections import RejectionCounter
from delan_common.ros.robot_param import declare_robot
from delan_common.ros.spin import run_node, steady_timer
from delan_common.ros.state_taker import JointStateTaker, Taken
from delan_control.params.reference import TABLE
from delan_control.trajectories import make_reference, splice

#: A continued excitation is sent this long [s] before the current one ends (at most half
#: of a trajectory): time enough for a node starved of CPU by the learner and the sim.
HANDOVER_S = 1.0
#: joint states are taken this often [s], up to STATE_DEPTH queued (only the newest is used)
STATE_PERIOD_S = 0.02
STATE_DEPTH = 10
#: a newest joint state older than this [s of wall time] no longer tells the arm's time
STATE_STALE_S = 0.5


def to_msg(joint_names, t0_ns: int, t, q, qd, qdd) -> JointTrajectory:
    """A ``JointTrajectory`` of the sampled trajectory, starting at ``t0_ns``."""
    msg = JointTrajectory()
    msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(int(t0_ns), 1_000_000_000)
    msg.joint_names = list(joint_names)
    for k in range(t.size):
        sec, nsec = divmod(int(round(t[k] * 1e9)), 1_000_000_000)
        msg.points.append(
            JointTrajectoryPoint(
                positions=q[k].tolist(),
                velocities=qd[k].tolist(),
                accelerations=qdd[k].tolist(),
                time_from_start=Duration(sec=sec, nanosec=nsec),
            )
        )
    return msg


class ReferenceNode(Node):
    """Publishes reference trajectories (hold, excitation, figure eight) for the controller."""

    def __init__(self, **kwargs):
        super().__init__('reference', **kwargs)
        reg: Dict = {}
        self.robot = declare_robot(self, reg)
        v = declare_table(self, TABLE, reg)
        self.kind, self.speed, self.seed = v.trajectory, v.speed, v.seed
        self.duration, self.period, self.point_rate = v.duration, v.period, v.point_rate
        self.approach_time, self.repeat = v.approach_time, v.repeat
        self.candidates, self.max_test_speed = v.excitation_candidates, v.max_test_speed
        self.wait_for_state = v.wait_for_joint_states
        self.add_on_set_parameters_callback(validating_callback(reg))
        self.add_post_set_parameters_callback(self._on_params)
        self.mapper = JointStateMapper(self.robot.joint_names)
        self.rejected = RejectionCounter(self.get_logger(), 'joint state')
        self.q_now: Optional[np.ndarray] = None
        self._state_ns: Optional[int] = None  # stamp of the newest good joint state
        self._last_state: Optional[bytes] = None  # the newest joint state, serialised
        self._last_arrival = -math.inf  # time.monotonic() when it was taken
        self._parsed: Optional[bytes] = None  # the one q_now and _state_ns were read from
        self.published = 0
        #: when a new reference from the arm's position was asked for (the start, a parameter
        #: change) and is not out yet: it waits for the arm's position [ns of the node's clock]
        self._wanted_ns: Optional[int] = self.get_clock().now().nanoseconds
        self._t0_ns: Optional[int] = None  # stamp of the reference in force
        self._end_ns: Optional[int] = None
        self._last = None  # its waypoints (t, q, qd, qdd)
        self._next = None  # the continued excitation, made ahead
        self._design = None  # (RobotModel, RegressorConditioning), built once
        self.pub = create_publisher(self, JointTrajectory, 'reference_trajectory', LATCHED)
        # taken as bytes by a thread of its own, not by the executor: the newest state (and its
        # stamp, the time a reference is stamped in) stays current while a callback designs an
        # excitation, and only that one is ever deserialised
        self._taker = JointStateTaker(
            self, self._on_states, STATE_DEPTH, 'reference_states', period_s=STATE_PERIOD_S
        )
        steady_timer(self, 0.05, self._tick)

    def _on_states(self, batch: List[Taken]) -> None:
        self._last_state, self._last_arrival = batch[-1][0], time.monotonic()

    def _current_position(self) -> Optional[np.ndarray]:
        """The newest joint state's positions; a bad one is counted and the last good kept."""
        raw = self._last_state
        if raw is not None and raw is not self._parsed:
            self._parsed = raw
            try:
                msg = deserialize_message(raw, JointState)
                self.q_now = self.mapper.map(msg).position
                stamp_ns = msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec
                if stamp_ns > 0:
                    self._state_ns = stamp_ns
            except JointStateError as err:
                self.rejected.reject(err.reason, err.detail)
        return self.q_now

    def _now_ns(self) -> int:
        """The time references are stamped and handed over in: the newest joint state's stamp,
        the time the controller evaluates them at, read when the reference is sent (after it was
        made). The node's clock, even on ``/clock``, is as old as the last message the executor
        served, and designing an excitation holds the executor while the arm's time runs on
        (faster than the clock while a lockstep sim catches up after a pause): a reference
        stamped by it would be entered late, past its approach. The node's clock while no
        stamped state has come, and the later of the two while the states are stale (a driver
        down: its time, the clock's, runs on; a paused sim: the clock waits with it)."""
        self._current_position()
        if self._state_ns is None:
            return self.get_clock().now().nanoseconds
        if time.monotonic() - self._last_arrival > STATE_STALE_S:
            return max(self._state_ns, self.get_clock().now().nanoseconds)
        return self._state_ns

    def _on_params(self, params) -> None:
        changed = False
        for p in params:
            if p.name in (
                'trajectory',
                'speed',
                'seed',
                'duration',
                'period',
                'point_rate',
                'approach_time',
                'repeat',
            ):
                setattr(self, {'trajectory': 'kind'}.get(p.name, p.name), p.value)
                changed = changed or p.name not in ('repeat',)
        if changed:
            # made at the next tick: rclpy applies the parameters of one request one by one,
            # each with this callback, and a request that sets the kind, speed and duration
            # of a figure eight wants one reference, not one per parameter (three new
            # references for the controller to take up, the first at the old speed)
            self._wanted_ns = self.get_clock().now().nanoseconds

    def close(self) -> None:
        """Stop taking joint states (run_node calls it; idempotent; also after a failed
        start)."""
        taker = getattr(self, '_taker', None)
        if taker is not None:
            taker.close()

    def destroy_node(self):
        """Stop taking joint states (:meth:`close`) before the node goes."""
        self.close()
        return super().destroy_node()

    def _publish_wanted(self) -> None:
        """The reference asked for, once the arm's position is known: one made without it
        starts at its own first point, a step for the arm wherever that is. After
        ``wait_for_joint_states`` it goes out anyway (a reference for an arm not yet
        publishing), with a warning."""
        if self._wanted_ns is None:
            return
        if self._current_position() is None:
            waited = (self.get_clock().now().nanoseconds - self._wanted_ns) * 1e-9
            if waited < self.wait_for_state:
                return
            self.get_logger().warning(
                f'no joint state within wait_for_joint_states ({self.wait_for_state:g} s): '
                f'the {self.kind} starts at its own first point, not from the arm'
            )
        self._wanted_ns = None
        self.publish_reference()

    def _tick(self) -> None:
        if self._wanted_ns is not None:
            self._publish_wanted()
        elif self.repeat and self.kind == 'excitation' and self._end_ns is not None:
            if self._next is None:
                # made a tick after the current one went out: when it is due, only the splice
                # is left to do
                self._next = self._make(self.seed + 1, start=tuple(a[-1] for a in self._last[1:]))
            if self._states_stopped():
                return
            now = self._now_ns()
            if now >= self._end_ns - int(self._handover() * 1e9):
                # spliced on time; too late (the arm already holds the last point), from rest
                # where it is
                self.seed += 1
                self.publish_reference(self._next if now < self._end_ns else None)

    def _states_stopped(self) -> bool:
        """Joint states came and stopped: the arm's time is not known, so the next excitation
        waits for them (its splice is stamped in the current one's time; a sim paused with its
        clock, or one whose time lags this node's clock, would otherwise get a restart from rest
        in the clock's time, a step in its reference, on a mere pause)."""
        self._current_position()
        return self._state_ns is not None and time.monotonic() - self._last_arrival > STATE_STALE_S

    def _handover(self) -> float:
        return min(HANDOVER_S, 0.5 * float(self._last[0][-1]))

    def _model(self):
        """``(RobotModel, RegressorConditioning)`` of the URDF, built once; None when Pinocchio
        cannot load it (then excitations are random and the figure eight is not sized)."""
        if self._design is None:
            r = self.robot
            try:
                from delan_common.robot_model import RobotModel
                from delan_control.excitation_design import RegressorConditioning

                model = RobotModel(r.xml, **r.selection_kwargs())
                self._design = (model, RegressorConditioning.of(model))
            except (ValueError, RuntimeError) as err:
                self.get_logger().warning(
                    f'no Pinocchio model of the robot: excitation not '
                    f'designed, figure eight not sized ({err})'
                )
                self._design = False
        return self._design or None

    def _fit(self, fig):
        model = self._model()
        if model is None:
            return fig
        from delan_control.trajectories import fit_figure_eight

        fitted = fit_figure_eight(
            fig,
            model[0].inverse,
            model[0].operating_effort_limit(),
            speed=self.max_test_speed,
            max_velocity=self.robot.planning_velocity_limits,
        )
        if fitted is not fig:
            self.get_logger().info(
                f'figure eight scaled to '
                f'{np.max(fitted.amplitude) / np.max(fig.amplitude):.2f} of its amplitude to '
                f"stay within 80 % of the effort limits and the excitation's share of the "
                f'velocity limits at {self.max_test_speed}x',
                once=True,
            )
        return fitted

    def _excitation(self, seed: int, velocity_fraction: float):
        """The seed's excitation, designed for the robot's regressor when Pinocchio loads it
        (delan_control.excitation_design); a plain random one otherwise."""
        from delan_control.excitation_design import robot_excitation

        design = self._model() if self.candidates > 1 else None
        return robot_excitation(self.robot, seed, velocity_fraction, self.candidates, design)

    def _make(self, seed: int, start=None):
        """Waypoints ``(t, q, qd, qdd)`` of the reference for the parameters and ``seed``;
        ``start = (q, qd, qdd)``: an excitation continuing from that moving state."""
        r = self.robot
        return make_reference(
            self.kind,
            r.lower,
            r.upper,
            r.planning_velocity_limits,
            start[0] if start is not None else self._current_position(),
            speed=self.speed,
            seed=seed,
            duration=self.duration,
            period=self.period,
            dt=1.0 / self.point_rate,
            approach_time=self.approach_time,
            excitation=self._excitation,
            fit=self._fit,
            start=start,
        )

    def publish_reference(self, following=None) -> None:
        """``following``: the waypoints of the next excitation, spliced to the end of the one
        in force (sent before that one ends); None: a new reference from the arm's position,
        at once."""
        if following is not None:
            offset, (t, q, qd, qdd) = splice(self._last, following, self._handover())
            t0 = self._t0_ns + int(round(offset * 1e9))
        else:
            t, q, qd, qdd = self._make(self.seed)
            t0 = self._now_ns() + 20_000_000  # 20 ms lead for transport
        self._next = None
        self.pub.publish(to_msg(self.robot.joint_names, t0, t, q, qd, qdd))
        self._t0_ns, self._last = t0, (t, q, qd, qdd)
        self._end_ns = t0 + int(t[-1] * 1e9)
        self.published += 1
        self.get_logger().info(
            f'published {self.kind} (speed {self.speed}, seed {self.seed}, '
            f'{t[-1]:.1f} s, {t.size} points)'
        )


def main(args=None) -> int:
    """Entry point of the ``reference`` node."""
    return run_node(ReferenceNode, args)


if __name__ == '__main__':
    raise SystemExit(main())
