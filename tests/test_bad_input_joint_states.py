"""Bad joint states sent over real DDS to a real learner and a real torque_controller (no sim):
each one is rejected and counted (ModelStatus.samples_rejected, the controller's diagnostics),
reordered names are accepted and mapped, and both nodes keep working on good messages after."""

import math
import os
import time

import numpy as np
import pytest
import rclpy
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.executors import MultiThreadedExecutor
from rclpy.parameter import Parameter
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from delan_common.joint_state import JointStateError, StampGate
from delan_common.ros.qos import LATCHED
from delan_control.nodes.torque_controller import TorqueControllerNode
from delan_learning.nodes.learner import LearnerNode
from delan_msgs.msg import ModelStatus
from delan_testing.bad_joint_states import BAD_JOINT_STATES
from delan_testing.ros import ros_context, spin_in_thread

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
URDF = os.path.join(ROOT, 'delan_bringup', 'urdf', 'two_link_arm.urdf')
NAMES = ['shoulder', 'elbow']
Q = [0.1, 0.2]
QD = [0.3, -0.4]
TAU = [1.5, -0.5]
DT = 0.01
WAIT = 30.0  # generous: a shared, loaded machine


def _wait(pred, timeout=WAIT):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.005)
    return pred()


class Bench:
    def __init__(self, ctx, tmp_path):
        self.learner = LearnerNode(
            context=ctx,
            parameter_overrides=[
                Parameter('urdf_path', value=URDF),
                Parameter('resume', value=False),
                Parameter('checkpoint_dir', value=str(tmp_path / 'ckpt')),
                Parameter('min_samples', value=10_000_000),
                Parameter('estimate_publish_rate', value=0.0),
                Parameter('status_rate', value=20.0),
            ],
        )
        self.ctl = TorqueControllerNode(
            context=ctx,
            parameter_overrides=[
                Parameter('urdf_path', value=URDF),
                Parameter('model', value='pd'),
                Parameter('law', value='feedforward_pd'),
                Parameter('watchdog_timeout', value=10.0),
                Parameter('command_joints', value=list(NAMES)),
            ],
        )
        self.probe = rclpy.create_node('bad_input_probe', context=ctx)
        self.pub = self.probe.create_publisher(JointState, 'joint_states', 100)
        self.ref_pub = self.probe.create_publisher(
            JointTrajectory, 'reference_trajectory', LATCHED
        )
        self.commands, self.status, self.diags = [], [], []
        self.probe.create_subscription(
            Float64MultiArray,
            'effort_controller/commands',
            lambda m: self.commands.append(list(m.data)),
            1000,
        )
        self.probe.create_subscription(ModelStatus, 'learner/status', self.status.append, 100)
        self.probe.create_subscription(DiagnosticArray, '/diagnostics', self._on_diag, 100)
        self.ex = MultiThreadedExecutor(num_threads=2, context=ctx)
        for n in (self.learner, self.ctl, self.probe):
            self.ex.add_node(n)
        self._thread = spin_in_thread(self.ex)
        self.t = 1000.0
        assert _wait(
            lambda: (
                self.pub.get_subscription_count() >= 2
                and self.probe.count_publishers('effort_controller/commands') >= 1
            )
        )

    def _on_diag(self, msg):
        for st in msg.status:
            if 'torque_controller' in st.name:
                self.diags.append({kv.key: kv.value for kv in st.values})

    def close(self):
        # the executor first: the learner's close destroys its subscription's event handlers,
        # which an executor still spinning may be adding to its wait set (InvalidHandle there)
        self.ex.shutdown(timeout_sec=10.0)
        self.learner.close()
        for n in (self.learner, self.ctl, self.probe):
            n.destroy_node()

    # every joint state ends up either rejected or used, in both nodes
    def _handled(self):
        return (
            self.learner.rejected.total + self.learner.samples_seen,
            self.ctl.rejected.total + self.ctl.commands_sent,
        )

    def send(self, name=NAMES, position=Q, velocity=QD, effort=TAU, t=None, advance=True):
        if t is None:
            self.t += DT if advance else 0.0
            t = self.t
        msg = JointState(
            name=list(name),
            position=[float(x) for x in position],
            velocity=[float(x) for x in velocity],
            effort=[float(x) for x in effort],
        )
        ns = int(round(t * 1e9))
        msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(ns, 1_000_000_000)
        before = self._handled()
        self.pub.publish(msg)
        assert _wait(lambda: all(a > b for a, b in zip(self._handled(), before))), (
            f'message not handled by both nodes: {before} -> {self._handled()}'
        )

    def good(self, k):
        for _ in range(k):
            self.send()


@pytest.fixture
def bench(tmp_path):
    with ros_context() as ctx:
        b = Bench(ctx, tmp_path)
        try:
            yield b
        finally:
            b.close()


#: id, fields of the message, reason in the learner, reason in the controller (the same)
BAD = [(kind, fields, reason, reason) for kind, (fields, reason) in BAD_JOINT_STATES.items()]


@pytest.mark.parametrize(
    'fields, learner_reason, ctl_reason', [b[1:] for b in BAD], ids=[b[0] for b in BAD]
)
def test_bad_joint_state_rejected_counted_and_nodes_keep_working(
    bench, fields, learner_reason, ctl_reason
):
    bench.good(25)  # the learner has sized its differentiator: samples flow
    seen = bench.learner.samples_seen
    sent = bench.ctl.commands_sent
    for _ in range(3):
        bench.send(**fields)
    assert dict(bench.learner.rejected.counts) == {learner_reason: 3}
    assert dict(bench.ctl.rejected.counts) == {ctl_reason: 3}
    assert bench.learner.samples_seen == seen and bench.ctl.commands_sent == sent
    bench.good(30)
    assert bench.learner.samples_seen == seen + 30 and bench.ctl.commands_sent == sent + 30
    assert bench.learner.train_buf.size + bench.learner.val_buf.size > 0
    assert all(np.all(np.isfinite(c)) and len(c) == 2 for c in bench.commands)
    # the counters are published: ModelStatus.samples_rejected and the diagnostics
    assert _wait(lambda: bench.status and bench.status[-1].samples_rejected == 3)
    assert _wait(lambda: bench.diags and bench.diags[-1]['rejected_joint_states'] == '3')


def test_effort_free_state_is_control_input_but_not_training_data(bench):
    bench.good(5)
    sent = bench.ctl.commands_sent
    before = bench.learner.rejected.total
    bench.send(effort=[])
    assert bench.learner.rejected.counts['no_effort'] == 1
    assert bench.learner.rejected.total == before + 1
    assert bench.ctl.commands_sent == sent + 1 and bench.ctl.rejected.total == 0


def test_state_at_an_end_stop_is_control_input_but_not_training_data(bench):
    """A joint at its position limit is pushed by an end stop, a force no model has: the learner
    drops the state (and restarts its estimator), the controller still acts on it."""
    bench.good(25)
    seen, sent = bench.learner.samples_seen, bench.ctl.commands_sent
    bench.send(position=[Q[0], 2.8])  # the elbow's upper limit
    bench.send(position=[-3.1 + 5e-4, Q[1]])  # within end_stop_margin of the shoulder's
    assert bench.learner.rejected.counts['at_end_stop'] == 2
    assert bench.learner.samples_seen == seen
    assert bench.ctl.commands_sent == sent + 2 and bench.ctl.rejected.total == 0
    bench.send(position=[-3.1 + 2e-3, Q[1]])  # outside the margin: a sample
    assert bench.learner.samples_seen == seen + 1
    bench.learner.set_parameters([Parameter('end_stop_margin', value=0.0)])
    bench.send(position=[Q[0], 2.8])  # 0: kept
    assert bench.learner.rejected.counts['at_end_stop'] == 2
    assert bench.learner.samples_seen == seen + 2


def test_reordered_and_extra_names_accepted_and_mapped(bench):
    bench.good(25)
    ordered_cmd = None
    for k in range(40):
        if k % 2:
            bench.send(
                name=['elbow', 'shoulder'], position=Q[::-1], velocity=QD[::-1], effort=TAU[::-1]
            )
        else:  # an extra joint (a gripper) is ignored
            bench.send(
                name=['gripper', 'shoulder', 'elbow'],
                position=[9.0] + Q,
                velocity=[9.0] + QD,
                effort=[9.0] + TAU,
            )
        assert _wait(lambda: len(bench.commands) >= bench.ctl.commands_sent)
        if ordered_cmd is None:
            ordered_cmd = bench.commands[-1]
        # the same physical state in any name order gives the same command (model order)
        np.testing.assert_allclose(bench.commands[-1], ordered_cmd, rtol=0, atol=1e-12)
    assert bench.learner.rejected.total == 0 and bench.ctl.rejected.total == 0
    s = bench.learner._latest_sample
    np.testing.assert_allclose(s.q, Q)
    np.testing.assert_allclose(s.qd, QD)
    np.testing.assert_allclose(s.tau, TAU)


def test_stamps_backwards_repeated_and_far_future(bench):
    # a reference whose end is far from the state: a stamp evaluated there would command it
    ref = JointTrajectory(joint_names=NAMES)
    start = int(round((bench.t + 0.5) * 1e9))
    ref.header.stamp.sec, ref.header.stamp.nanosec = divmod(start, 1_000_000_000)
    ref.points = [JointTrajectoryPoint(positions=Q), JointTrajectoryPoint(positions=[2.5, -2.5])]
    ref.points[1].time_from_start.sec = 5
    bench.ref_pub.publish(ref)
    assert _wait(lambda: bench.ctl.tracker.received)
    bench.good(30)
    sent, seen = bench.ctl.commands_sent, bench.learner.samples_seen
    restarts = bench.learner.diff.restarts

    bench.send(t=bench.t + 1e6)  # far future: rejected by both
    assert bench.ctl.rejected.counts['stamp_jump'] == 1
    assert bench.learner.rejected.counts['stamp_jump'] == 1
    assert bench.ctl.commands_sent == sent
    bench.good(5)  # the stream goes on: accepted at once
    assert bench.ctl.commands_sent == sent + 5 and bench.learner.samples_seen == seen + 5
    # no command ever steered to the end of the reference (PD to [2.5, -2.5] would saturate)
    limits = bench.ctl.limits
    assert all(np.all(np.abs(c) < 0.5 * limits) for c in bench.commands)

    bench.send(advance=False)  # a repeated stamp
    bench.send(t=bench.t - 0.5)  # a stale, out-of-order state
    assert bench.ctl.rejected.counts['stamp_backwards'] == 1
    assert bench.learner.rejected.counts['stamp_backwards'] == 2  # strict: repeats too
    assert bench.ctl.commands_sent == sent + 6
    bench.good(5)
    assert bench.ctl.commands_sent == sent + 11 and bench.learner.samples_seen == seen + 10
    assert bench.learner.diff.restarts == restarts  # rejected stamps never reach it

    # the sender's clock restarts (a sim restart, a looping bag): one message lost, then on
    bench.t -= 100.0
    bench.good(30)
    assert bench.ctl.rejected.counts['stamp_backwards'] == 2
    assert bench.learner.rejected.counts['stamp_backwards'] == 3
    assert bench.ctl.commands_sent == sent + 11 + 29
    assert bench.learner.diff.restarts == restarts + 1  # the estimator restarts once
    n = bench.learner.train_buf.total_added + bench.learner.val_buf.total_added
    bench.good(20)
    assert bench.learner.train_buf.total_added + bench.learner.val_buf.total_added == n + 20
    assert _wait(
        lambda: (
            bench.status and bench.status[-1].samples_rejected == bench.learner.rejected.total == 4
        )
    )


def test_stamp_gate_unit():
    g = StampGate(max_jump=1.0)
    g.check(10.0)
    g.check(10.0)  # not strict: a repeat is fine
    for bad, reason in ((1e9, 'stamp_jump'), (9.0, 'stamp_backwards'), (math.nan, 'bad_stamp')):
        with pytest.raises(JointStateError) as err:
            g.check(bad)
        assert err.value.reason == reason
    g.check(10.01)  # continues the last accepted stamp
    with pytest.raises(JointStateError):
        g.check(50.0)  # a jump ...
    g.check(50.01)  # ... that is then continued: the new timeline is adopted
    assert g.last == 50.01
    strict = StampGate(strict=True)
    strict.check(1.0)
    with pytest.raises(JointStateError):
        strict.check(1.0)
