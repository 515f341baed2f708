"""torque_controller over real DDS: its commands go out in the joint order of the controller that
applies them (a Float64MultiArray names no joints), read from that node's ``joints`` parameter.

A stand-in receiver (a plain node declaring ``joints``, as ros2_control's effort controller does)
orders the 7-DoF arm's joints otherwise than the model; the controller runs model=pd with
kd = 1 and no reference, so it holds the arm where the first state puts it and each command is
``-qd`` joint by joint: with a distinct velocity per joint, every value says which joint it was
computed for. Then the sim, whose ``joints`` is its command order, under the controller.
"""

from __future__ import annotations

import os
import time
from typing import Dict, List, Optional, Sequence

import numpy as np
import pytest
import rclpy
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from rclpy.parameter import Parameter
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray

from delan_common.robot_model import RobotModel
from delan_common.urdf_joints import RobotDescription
from delan_control.nodes.sim import SimNode
from delan_control.nodes.torque_controller import TorqueControllerNode
from delan_testing.ros import make_executor, ros_context, spin_in_thread

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), '..', '..'))
URDF7 = os.path.join(ROOT, 'delan_bringup', 'urdf', 'seven_dof_arm.urdf')
URDF2 = os.path.join(ROOT, 'delan_bringup', 'urdf', 'two_link_arm.urdf')
MODEL = RobotDescription.load(URDF7).joint_names
SCRAMBLED = [MODEL[i] for i in (3, 0, 6, 1, 5, 2, 4)]
REVERSED = MODEL[::-1]
Q = [0.1, -0.2, 0.3, -0.4, 0.5, -0.6, 0.7]
QD = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7]
TAU = dict(zip(MODEL, -np.array(QD)))  # the holding command, kd = 1: -qd per joint
WAIT = 60.0  # generous: a shared, loaded machine


def expected(order: Sequence[str]) -> List[float]:
    return [float(TAU[j]) for j in order]


def _wait(pred, timeout: float = WAIT) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.01)
    return pred()


class Setup:
    """A torque_controller in ``namespace``, stand-in receivers (node name -> the ``joints``
    they declare), and a probe there that publishes joint states and records the commands and
    the controller's diagnostics; its log is read from the captured console. One executor, spun
    by a background thread."""

    def __init__(
        self,
        ctx,
        capfd,
        receivers: Dict[str, Sequence[str]],
        ctl: Optional[Dict] = None,
        namespace: str = '',
    ):
        self.ctx, self.capfd, self.namespace = ctx, capfd, namespace
        self.nodes = []
        self.ex = make_executor(ctx, [])
        spin_in_thread(self.ex)
        for name, joints in receivers.items():
            self.add_receiver(name, joints)
        params = dict(urdf_path=URDF7, model='pd', kd=[1.0], watchdog_timeout=10.0, **(ctl or {}))
        self.ctl = TorqueControllerNode(
            context=ctx,
            namespace=namespace,
            parameter_overrides=[Parameter(k, value=v) for k, v in params.items()],
        )
        self.probe = rclpy.create_node('order_probe', namespace=namespace, context=ctx)
        self.commands: List[List[float]] = []
        self.diags: List[tuple] = []  # (level, message, values)
        self.console = ''  # the controller's log lines (stderr)
        self.probe.create_subscription(
            Float64MultiArray,
            'effort_controller/commands',
            lambda m: self.commands.append(list(m.data)),
            1000,
        )
        self.probe.create_subscription(DiagnosticArray, '/diagnostics', self._on_diag, 100)
        self.pub = self.probe.create_publisher(JointState, 'joint_states', 100)
        self.t = 100.0
        for node in (self.ctl, self.probe):
            self._add(node)

    def _add(self, node) -> None:
        self.nodes.append(node)
        self.ex.add_node(node)

    def add_receiver(self, name: str, joints: Sequence[str]) -> None:
        """A node ``name`` (a path: relative to this set-up's namespace) declaring ``joints``."""
        path = name if name.startswith('/') else f'{self.namespace}/{name}'
        ns, _, base = path.rpartition('/')
        node = rclpy.create_node(base, namespace=ns or '/', context=self.ctx)
        node.declare_parameter('joints', list(joints))
        self._add(node)

    def _on_diag(self, msg: DiagnosticArray) -> None:
        for st in msg.status:
            if st.name == f'{self.namespace}/torque_controller':
                self.diags.append((st.level, st.message, {kv.key: kv.value for kv in st.values}))

    def close(self) -> None:
        self.ctl.close()
        self.ex.shutdown(timeout_sec=10.0)
        for node in self.nodes:
            node.destroy_node()

    def send(self) -> None:
        self.t += 0.01
        msg = JointState(name=MODEL, position=Q, velocity=QD)
        msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(
            int(round(self.t * 1e9)), 1_000_000_000
        )
        self.pub.publish(msg)
        time.sleep(0.01)

    def stream_until(self, pred, what: str) -> None:
        """Joint states at ~100 Hz until ``pred()``."""
        deadline = time.monotonic() + WAIT
        while not pred():
            assert time.monotonic() < deadline, f'never: {what}'
            self.send()

    def stream_states(self, count: int) -> None:
        """``count`` more joint states taken by the controller's loop."""
        start = self.ctl.loop_stats.states
        self.stream_until(
            lambda: self.ctl.loop_stats.states >= start + count, f'{count} states taken'
        )

    def diag_where(self, pred):
        """The first diagnostics status (arriving from now on) for which ``pred`` holds."""
        seen = len(self.diags)
        self.stream_until(lambda: any(pred(d) for d in self.diags[seen:]), 'diagnostics')
        return next(d for d in self.diags[seen:] if pred(d))

    def logged(self, level: str, text: str) -> List[str]:
        """The controller's console log lines of ``level`` ('INFO', 'WARN', 'ERROR') that hold
        ``text``, waiting up to WAIT for the first. (Its /rosout, read by a probe node, lost a
        message now and then where several controllers of one name had lived in this one test
        process.)"""

        def found() -> List[str]:
            self.console += self.capfd.readouterr().err
            return [
                line
                for line in self.console.splitlines()
                if line.startswith(f'[{level}]')
                and 'torque_controller]: ' in line
                and text in line
            ]

        _wait(lambda: bool(found()))
        return found()


@pytest.fixture
def setup(capfd):
    made = []
    with ros_context() as ctx:

        def make(*args, **kwargs) -> Setup:
            made.append(Setup(ctx, capfd, *args, **kwargs))
            return made[-1]

        yield make
        for s in made:
            s.close()


@pytest.mark.parametrize('namespace', ['', '/arm1'])
def test_commands_arrive_in_the_receivers_joint_order(setup, namespace):
    """Under a namespace the receiver's name resolves there: a decoy of the same name in the
    root namespace, ordered otherwise, is not asked."""
    decoy = {'/effort_controller': REVERSED} if namespace else {}
    s = setup({'effort_controller': SCRAMBLED, **decoy}, namespace=namespace)
    s.stream_until(lambda: len(s.commands) >= 20, '20 commands')
    assert expected(SCRAMBLED) != expected(MODEL)  # the check below can fail
    assert all(c == pytest.approx(expected(SCRAMBLED)) for c in s.commands), s.commands[:3]
    level, _, values = s.diag_where(lambda d: d[2]['commands_sent'] != '0')
    assert level == DiagnosticStatus.OK
    assert values['command_order'] == f'{namespace}/effort_controller'
    assert values['command_joints'].split() == SCRAMBLED
    assert s.logged('INFO', f'joint order of {namespace}/effort_controller')


@pytest.mark.parametrize(
    'joints, reason',
    [
        (SCRAMBLED[:-1], f"missing ['{SCRAMBLED[-1]}']"),
        (SCRAMBLED + ['gripper'], "extra ['gripper']"),
        (SCRAMBLED[:-1] + [SCRAMBLED[0]], f"repeated ['{SCRAMBLED[0]}']"),
    ],
    ids=['missing', 'extra', 'repeated'],
)
def test_receiver_joints_that_differ_are_refused(setup, joints, reason):
    s = setup({'effort_controller': joints})
    level, message, values = s.diag_where(lambda d: d[0] == DiagnosticStatus.ERROR)
    assert message.startswith('refusing to command') and reason in message, message
    assert values['command_order'] == 'refused: /effort_controller'
    s.stream_states(50)
    assert s.commands == [] and s.ctl.commands_sent == 0
    assert s.ctl.watchdog_trips == 0
    assert s.logged('ERROR', reason)


def test_without_a_receiver_the_model_order_with_a_warning(setup):
    s = setup({}, ctl={'effort_controller_timeout': 1.0})
    s.stream_until(lambda: len(s.commands) >= 20, '20 commands')
    assert all(c == pytest.approx(expected(MODEL)) for c in s.commands), s.commands[:3]
    warnings = s.logged('WARN', 'commanding in the model joint order')
    assert warnings and 'no joints from /effort_controller within 1 s' in warnings[0]
    level, message, values = s.diag_where(lambda d: d[2]['commands_sent'] != '0')
    assert level == DiagnosticStatus.WARN and 'model joint order' in message
    assert values['command_order'] == 'model order (fallback)'


def test_nothing_is_commanded_until_a_late_receiver_answers(setup):
    """A receiver that comes up after the controller (a controller manager still loading) is
    waited for; the states before are not answered in a guessed order."""
    s = setup({}, ctl={'effort_controller_timeout': 600.0})
    level, message, _ = s.diag_where(lambda d: 'waiting' in d[1])
    assert level == DiagnosticStatus.WARN and '/effort_controller' in message
    s.stream_states(50)
    assert s.commands == [] and s.ctl.commands_sent == 0
    s.add_receiver('effort_controller', SCRAMBLED)
    s.stream_until(lambda: len(s.commands) >= 20, '20 commands')
    assert all(c == pytest.approx(expected(SCRAMBLED)) for c in s.commands), s.commands[:3]


def test_explicit_command_joints_win(setup):
    s = setup({'effort_controller': SCRAMBLED}, ctl={'command_joints': REVERSED})
    s.stream_until(lambda: len(s.commands) >= 20, '20 commands')
    assert all(c == pytest.approx(expected(REVERSED)) for c in s.commands), s.commands[:3]
    _, _, values = s.diag_where(lambda d: d[2]['commands_sent'] != '0')
    assert values['command_order'] == 'command_joints'
    assert values['command_joints'].split() == REVERSED


@pytest.mark.parametrize(
    'name, value, match',
    [
        ('command_joints', MODEL[:-1], 'command_joints.*missing'),
        ('command_joints', MODEL + ['gripper'], 'command_joints.*extra'),
        ('effort_controller_name', 'effort controller', 'not a node name'),
        ('effort_controller_name', '', 'must name'),
    ],
)
def test_bad_order_parameters_fail_the_start_up(name, value, match):
    with ros_context() as ctx:
        with pytest.raises(ValueError, match=match):
            TorqueControllerNode(
                context=ctx,
                parameter_overrides=[
                    Parameter('urdf_path', value=URDF7),
                    Parameter(name, value=value),
                ],
            )


def test_the_sim_is_commanded_in_the_order_of_its_joints():
    """The sim takes commands in the order of its ``joints`` (here not the model's); the
    controller, told ``effort_controller_name: sim`` as in delan_bringup's sim_params.yaml,
    reads it there. Computed torque with the exact model holds the two-link arm against gravity;
    the shoulder's holding torque sent to the elbow would drop it."""
    q0 = np.array([0.3, -0.2])
    with ros_context() as ctx:
        sim = SimNode(
            context=ctx,
            parameter_overrides=[
                Parameter(k, value=v)
                for k, v in dict(
                    urdf_path=URDF2,
                    joints=['elbow', 'shoulder'],
                    lockstep=True,
                    lockstep_timeout=1.0,
                    real_time_factor=0.0,
                    initial_position=q0.tolist(),
                ).items()
            ],
        )
        ctl = TorqueControllerNode(
            context=ctx,
            parameter_overrides=[
                Parameter(k, value=v)
                for k, v in dict(
                    urdf_path=URDF2,
                    model='pinocchio',
                    law='computed_torque',
                    watchdog_timeout=10.0,
                    effort_controller_name='sim',
                ).items()
            ],
        )
        probe = rclpy.create_node('sim_order_probe', context=ctx)
        states: List[JointState] = []
        commands: List[List[float]] = []
        probe.create_subscription(JointState, 'joint_states', states.append, 10000)
        probe.create_subscription(
            Float64MultiArray,
            'effort_controller/commands',
            lambda m: commands.append(list(m.data)),
            10000,
        )
        ex = make_executor(ctx, [sim, ctl, probe])
        spin_in_thread(ex)
        try:
            assert _wait(lambda: len(commands) >= 500 and len(states) >= 500), (
                f'{len(commands)} commands, {len(states)} states; sim {sim.stats}'
            )
            assert ctl._order_source == '/sim'
            # held still (where the arm was when the first command came: before, the sim
            # stepped once uncommanded, the controller still asking for the order)
            q = np.array([s.position for s in states[-250:]])
            drift = np.ptp(q, axis=0).max()
            print(
                f'\n{len(states)} states, {len(commands)} commands: the arm moved '
                f'{drift:.2e} rad over the last 250 states, is {np.abs(q[-1] - q0).max():.2e} '
                'rad from where it started'
            )
            assert drift < 1e-4 and np.abs(q[-1] - q0).max() < 1e-2
            # the holding torque is gravity's, and it reaches the sim in [elbow, shoulder]
            gravity = RobotModel(URDF2).gravity(q[-1])
            assert commands[-1] == pytest.approx(gravity[::-1].tolist(), abs=0.1)
            assert abs(gravity[0] - gravity[1]) > 1.0  # the check above can fail
        finally:
            sim.close()
            ctl.close()
            ex.shutdown(timeout_sec=10.0)
            for node in (sim, ctl, probe):
                node.destroy_node()
