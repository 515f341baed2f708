"""What the torque controller shows while it runs, over real DDS, in one rig:
``~/controller_state`` at its configured rate (joint names, error = reference - feedback, the
command it sent, the model's torque), with the controller driven by a *best-effort* joint-state
publisher; a subscription asking for QoS the state publisher does not offer is logged (topic and
policy), not silent; ``/diagnostics`` carries the controller's and the sim's status with the
robot as ``hardware_id``."""

from __future__ import annotations

import os
import time
from typing import Dict, List

import numpy as np
import pytest
import rclpy
from diagnostic_msgs.msg import DiagnosticArray
from rcl_interfaces.msg import Log
from rclpy.parameter import Parameter
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from delan_common.ros.qos import LATCHED
from delan_common.urdf_joints import RobotDescription
from delan_control.nodes.sim import SimNode
from delan_control.nodes.torque_controller import TorqueControllerNode
from delan_msgs.msg import ControllerState
from delan_testing.ros import make_executor, ros_context, spin_in_thread

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), '..', '..'))
URDF = os.path.join(ROOT, 'delan_bringup', 'urdf', 'two_link_arm.urdf')
NAMES = RobotDescription.load(URDF).joint_names
CONTROLLER_STATE = '/torque_controller/controller_state'
STATE_RATE = 50.0  # [Hz] asked of the controller
STATES_RATE = 250.0  # [Hz] joint states sent
Q, QD = [0.3, -0.2], [0.1, -0.1]
Q_REF = [0.35, -0.2]
ROSOUT = QoSProfile(
    depth=1000, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL
)
WAIT = 60.0


def _wait(what: str, pred, timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, f'never: {what}'
        time.sleep(0.02)


@pytest.fixture
def rig():
    with ros_context() as ctx:
        nodes, ex = [], None
        try:
            nodes.append(
                TorqueControllerNode(
                    context=ctx,
                    parameter_overrides=[
                        Parameter('urdf_path', value=URDF),
                        Parameter('model', value='pinocchio'),
                        Parameter('command_joints', value=NAMES),
                        Parameter('watchdog_timeout', value=5.0),
                        Parameter('state_publish_rate', value=STATE_RATE),
                        Parameter('resume_time', value=0.2),
                    ],
                )
            )
            # a sim on topics of its own: only its diagnostics are looked at here
            nodes.append(
                SimNode(
                    context=ctx,
                    cli_args=[
                        '--ros-args',
                        '-r',
                        'joint_states:=sim/joint_states',
                        '-r',
                        'effort_controller/commands:=sim/commands',
                    ],
                    parameter_overrides=[
                        Parameter('urdf_path', value=URDF),
                        Parameter('publish_rate', value=100.0),
                    ],
                )
            )
            probe = rclpy.create_node('state_probe', context=ctx)
            nodes.append(probe)
            ex = make_executor(ctx, nodes)
            spin_in_thread(ex)
            yield nodes[0], nodes[1], probe
        finally:
            if ex is not None:
                ex.shutdown(timeout_sec=10.0)
            for node in nodes:
                node.destroy_node()


def test_controller_state_qos_warning_and_diagnostics(rig):
    ctl, sim, probe = rig
    states: List[ControllerState] = []
    commands: List[List[float]] = []
    diags: Dict[str, object] = {}
    logs: List[str] = []
    probe.create_subscription(ControllerState, CONTROLLER_STATE, states.append, 1000)
    probe.create_subscription(
        Float64MultiArray,
        'effort_controller/commands',
        lambda m: commands.append(list(m.data)),
        1000,
    )
    probe.create_subscription(
        DiagnosticArray, '/diagnostics', lambda m: diags.update({s.name: s for s in m.status}), 100
    )
    probe.create_subscription(
        Log,
        '/rosout',
        lambda m: (
            logs.append(m.msg) if m.level == Log.WARN and m.name == 'torque_controller' else None
        ),
        ROSOUT,
    )
    # asks for the last state on joining (transient local): the publisher offers no such thing
    probe.create_subscription(ControllerState, CONTROLLER_STATE, lambda m: None, LATCHED)
    ref = JointTrajectory(joint_names=NAMES, points=[JointTrajectoryPoint(positions=Q_REF)])
    probe.create_publisher(JointTrajectory, 'reference_trajectory', LATCHED).publish(ref)
    pub = probe.create_publisher(JointState, 'joint_states', qos_profile_sensor_data)
    assert pub.qos_profile.reliability == qos_profile_sensor_data.reliability  # best effort
    assert ctl.state_pub.topic_name == CONTROLLER_STATE
    _wait('the reference', lambda: ctl.tracker.received and pub.get_subscription_count())

    t, sent = 100.0, {}
    next_send = time.monotonic()
    for k in range(int(2.0 * STATES_RATE)):  # 2 s of joint states
        t += 1.0 / STATES_RATE
        msg = JointState(name=NAMES, position=Q, velocity=QD, effort=[1.0, -2.0])
        msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(round(t * 1e9), 1_000_000_000)
        pub.publish(msg)
        sent[(msg.header.stamp.sec, msg.header.stamp.nanosec)] = k
        next_send += 1.0 / STATES_RATE
        time.sleep(max(0.0, next_send - time.monotonic()))
    _wait('the last commands', lambda: len(commands) >= ctl.commands_sent > 0, 10.0)
    time.sleep(0.2)

    # the best-effort stream drove the controller, and the state went out at ~STATE_RATE
    answered = ctl.commands_sent
    assert answered >= 0.5 * len(sent), f'{answered} of {len(sent)} joint states answered'
    got = [s for s in states if (s.header.stamp.sec, s.header.stamp.nanosec) in sent]
    assert len(got) == len(states) and got, 'a state for a joint state never sent'
    span = (
        sent[(got[-1].header.stamp.sec, got[-1].header.stamp.nanosec)]
        - sent[(got[0].header.stamp.sec, got[0].header.stamp.nanosec)]
    ) / STATES_RATE
    print(
        f'\n{answered} of {len(sent)} joint states answered, {len(got)} controller states '
        f'over {span:.2f} s of stamps'
    )
    # decimated on wall time, counted on stamps sent on a wall-time schedule: never more than
    # the rate; fewer when the loop stalls on a loaded machine (states answered late are
    # superseded by newer ones)
    assert 0.6 * STATE_RATE * span <= len(got) - 1 <= 1.05 * STATE_RATE * span + 1
    # from the arm onto the reference (over resume_time), then on it
    np.testing.assert_allclose(got[0].reference.positions, Q, atol=0.01)
    np.testing.assert_allclose(got[-1].reference.positions, Q_REF)
    for s in got:
        assert list(s.joint_names) == NAMES
        np.testing.assert_allclose(s.feedback.positions, Q)
        np.testing.assert_allclose(s.feedback.velocities, QD)
        np.testing.assert_allclose(s.feedback.effort, [1.0, -2.0])
        np.testing.assert_allclose(
            s.error.positions, np.subtract(s.reference.positions, s.feedback.positions)
        )
        np.testing.assert_allclose(
            s.error.velocities, np.subtract(s.reference.velocities, s.feedback.velocities)
        )
        assert (s.model, s.law, s.fallback, s.holding) == (
            'pinocchio',
            'computed_torque',
            ControllerState.FALLBACK_NONE,
            False,
        )
        # computed torque: the model's torque is the command (within the effort limits)
        np.testing.assert_allclose(s.command, s.feedforward)
        assert np.any(np.abs(s.feedforward) > 0.1)
    # the command it reported is one it sent (model order = command order here)
    assert any(np.allclose(c, got[-1].command, rtol=0, atol=1e-12) for c in commands[-50:])

    _wait('the QoS warning', lambda: any('DURABILITY' in m for m in logs), 10.0)
    warning = next(m for m in logs if 'DURABILITY' in m)
    assert CONTROLLER_STATE in warning, warning

    _wait(
        'both statuses',
        lambda: {ctl.get_fully_qualified_name(), sim.get_fully_qualified_name()} <= set(diags),
        10.0,
    )
    for node in (ctl, sim):
        status = diags[node.get_fully_qualified_name()]
        assert status.hardware_id == 'two_link_arm', status
    sim_values = {kv.key: kv.value for kv in diags[sim.get_fully_qualified_name()].values}
    assert sim_values['joints'] == '2' and 'real_time_factor' in sim_values
    ctl_values = {kv.key: kv.value for kv in diags[ctl.get_fully_qualified_name()].values}
    assert ctl_values['model'] == 'pinocchio'
    assert float(ctl_values['state_publish_rate']) == STATE_RATE
