"""Bad robots, checkpoints and parameters given to the real nodes: refused with a reason, the
node keeps its old model / value; unusual but valid URDFs (fixed, continuous, prismatic joints,
a robot_description string) work end to end over DDS."""

import math
import os
import pickle
import time

import numpy as np
import pytest
import rclpy
import torch
from rclpy.executors import MultiThreadedExecutor
from rclpy.parameter import Parameter
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray

from delan_common.robot_model import RobotModel
from delan_common.urdf_joints import RobotDescription, actuated_joints
from delan_control.model_loader import ModelLoadError
from delan_control.nodes.reference import ReferenceNode
from delan_control.nodes.torque_controller import TorqueControllerNode
from delan_learning.checkpoint import FORMAT_VERSION, save_model
from delan_learning.models import build_model
from delan_learning.nodes.learner import LearnerNode
from delan_testing.bad_parameters import torque_controller_bad_values
from delan_testing.ros import ros_context, spin_in_thread

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
URDF = os.path.join(ROOT, 'delan_bringup', 'urdf', 'two_link_arm.urdf')
SEVEN = os.path.join(ROOT, 'delan_bringup', 'urdf', 'seven_dof_arm.urdf')

_INERTIAL = (
    '<inertial><origin xyz="0 0 0.1"/><mass value="{m}"/><inertia ixx="0.02" ixy="0" '
    'ixz="0" iyy="0.02" iyz="0" izz="0.01"/></inertial>'
)


def _link(name, m=1.0):
    return f'<link name="{name}">{_INERTIAL.format(m=m)}</link>'


def _joint(name, kind, parent, child, axis='0 1 0', limit=True):
    lim = (
        '<limit lower="-1.5" upper="1.5" effort="30" velocity="3"/>'
        if limit
        else '<limit effort="30" velocity="3"/>'
    )
    return (
        f'<joint name="{name}" type="{kind}"><parent link="{parent}"/>'
        f'<child link="{child}"/><origin xyz="0 0 0.3"/><axis xyz="{axis}"/>'
        f'{lim if kind != "fixed" else ""}</joint>'
    )


MIXED = (
    '<robot name="mixed"><link name="world"/>'
    + _link('base')
    + _link('upper')
    + _link('slider', 0.5)
    + _link('flange', 0.1)
    + _link('tool', 0.2)
    + _joint('mount', 'fixed', 'world', 'base')
    + _joint('hinge', 'revolute', 'base', 'upper')
    + _joint('extend', 'prismatic', 'upper', 'slider', axis='0 0 1')
    + _joint('spin', 'continuous', 'slider', 'flange', axis='0 0 1', limit=False)
    + _joint('tool_fix', 'fixed', 'flange', 'tool')
    + '</robot>'
)
MIXED_NAMES = ['hinge', 'extend', 'spin']


def _spin(ctx, nodes):
    ex = MultiThreadedExecutor(num_threads=2, context=ctx)
    for n in nodes:
        ex.add_node(n)
    spin_in_thread(ex)
    return ex


def _wait(pred, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.005)
    return pred()


def test_fixed_continuous_prismatic_urdf_from_robot_description(tmp_path):
    model = RobotModel.from_xml(MIXED)
    assert model.joint_names == MIXED_NAMES and model.n == 3
    joints = actuated_joints(MIXED)
    assert [(j.name, j.type) for j in joints] == [
        ('hinge', 'revolute'),
        ('extend', 'prismatic'),
        ('spin', 'continuous'),
    ]
    q, qd, qdd = np.array([0.3, 0.1, 2.0]), np.array([0.2, -0.1, 1.0]), np.array([1.0, 0, -1])
    tau = model.inverse(q, qd, qdd)
    assert np.all(np.isfinite(tau))
    # a full turn of the continuous joint is the same configuration
    np.testing.assert_allclose(model.inverse(q + [0, 0, 2 * np.pi], qd, qdd), tau, atol=1e-9)
    with ros_context() as ctx:
        learner = LearnerNode(
            context=ctx,
            parameter_overrides=[
                Parameter('robot_description', value=MIXED),
                Parameter('resume', value=False),
                Parameter('checkpoint_dir', value=str(tmp_path / 'ckpt')),
                Parameter('estimate_publish_rate', value=0.0),
            ],
        )
        ctl = TorqueControllerNode(
            context=ctx,
            parameter_overrides=[
                Parameter('robot_description', value=MIXED),
                Parameter('model', value='pinocchio'),
                Parameter('watchdog_timeout', value=10.0),
                Parameter('command_joints', value=MIXED_NAMES),
            ],
        )
        probe = rclpy.create_node('mixed_probe', context=ctx)
        commands = []
        probe.create_subscription(
            Float64MultiArray,
            'effort_controller/commands',
            lambda m: commands.append(list(m.data)),
            100,
        )
        pub = probe.create_publisher(JointState, 'joint_states', 100)
        ex = _spin(ctx, [learner, ctl, probe])
        try:
            assert learner.robot.joint_types == ['revolute', 'prismatic', 'continuous']
            assert _wait(lambda: pub.get_subscription_count() >= 2)
            for k in range(40):
                msg = JointState(
                    name=MIXED_NAMES[::-1],
                    position=q[::-1].tolist(),
                    velocity=qd[::-1].tolist(),
                    effort=(tau[::-1] * 0.5).tolist(),
                )
                msg.header.stamp.sec, msg.header.stamp.nanosec = 5, 10_000_000 * (k + 1)
                pub.publish(msg)
                # the controller's loop thread may have answered already: wait for k + 1
                assert _wait(lambda: ctl.commands_sent > k and learner.samples_seen > k), (
                    f'state {k}: controller received {ctl.loop_stats.states}, sent '
                    f'{ctl.commands_sent}, rejected {dict(ctl.rejected.counts)}; learner saw '
                    f'{learner.samples_seen}'
                )
            assert _wait(lambda: len(commands) >= 40)
            assert all(len(c) == 3 and np.all(np.isfinite(c)) for c in commands)
            assert learner.rejected.total == 0 and ctl.rejected.total == 0
            assert learner.train_buf.size + learner.val_buf.size > 0
        finally:
            ex.shutdown(timeout_sec=10.0)  # before the learner destroys what it spins on
            learner.close()


@pytest.mark.parametrize('node_cls', [LearnerNode, TorqueControllerNode, ReferenceNode])
@pytest.mark.parametrize(
    'xml, match',
    [
        ('<robot name="x"><link name="a">', 'parse'),
        ('<robot name="x"><link name="a"/></robot>', 'no actuated'),
    ],
)
def test_unusable_robot_description_fails_start_up_clearly(node_cls, xml, match, tmp_path):
    with ros_context() as ctx:
        with pytest.raises(ValueError, match=match):
            node_cls(
                context=ctx,
                parameter_overrides=[
                    Parameter('robot_description', value=xml),
                    Parameter('checkpoint_dir', value=str(tmp_path)),
                ],
            )


NO_INERTIA = (
    '<robot name="x"><link name="base"/><link name="arm"/>'
    '<joint name="j" type="revolute"><parent link="base"/><child link="arm"/>'
    '<axis xyz="0 0 1"/><limit lower="-1" upper="1" effort="1" velocity="1"/>'
    '</joint></robot>'
)


def test_urdf_without_inertias_pd_only_and_model_switch_refused():
    with ros_context() as ctx:
        with pytest.raises(ModelLoadError, match='arm'):
            TorqueControllerNode(
                context=ctx,
                parameter_overrides=[
                    Parameter('robot_description', value=NO_INERTIA),
                    Parameter('model', value='pinocchio'),
                ],
            )
        ctl = TorqueControllerNode(
            context=ctx,
            parameter_overrides=[
                Parameter('robot_description', value=NO_INERTIA),
                Parameter('model', value='pd'),
            ],
        )
        res = ctl.set_parameters([Parameter('model', value='pinocchio')])[0]
        assert not res.successful and 'arm' in res.reason
        assert ctl.get_parameter('model').value == 'pd' and ctl._model is None
        ctl.destroy_node()


def _delan_ckpt(path, urdf, **meta):
    robot = RobotDescription.load(urdf)
    torch.manual_seed(0)
    model = build_model('delan', robot.joint_types, width=16, depth=1)
    save_model(model, str(path), {'joint_names': robot.joint_names, **meta})
    return str(path)


class _Payload:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, 'w'))


def test_controller_refuses_bad_checkpoints_and_keeps_its_model(tmp_path):
    good = _delan_ckpt(tmp_path / 'good.pt', URDF)
    data = open(good, 'rb').read()
    (tmp_path / 'truncated.pt').write_bytes(data[: len(data) // 2])
    payload = torch.load(good, weights_only=True)
    payload['format_version'] = FORMAT_VERSION + 1
    torch.save(payload, tmp_path / 'newer.pt')
    _delan_ckpt(tmp_path / 'other.pt', SEVEN)
    marker = tmp_path / 'PWNED'
    evil = {
        'format_version': FORMAT_VERSION,
        'metadata_json': '{}',
        'state_dict': _Payload(str(marker)),
    }
    torch.save(evil, tmp_path / 'evil_torch.pt')
    with open(tmp_path / 'evil_pickle.pt', 'wb') as fh:
        pickle.dump(evil, fh)
    with ros_context() as ctx:
        ctl = TorqueControllerNode(
            context=ctx,
            parameter_overrides=[
                Parameter('urdf_path', value=URDF),
                Parameter('model', value='delan'),
                Parameter('delan_checkpoint', value=good),
            ],
        )
        try:
            active = ctl._model
            assert active is not None
            for bad, why in [
                ('truncated.pt', 'readable'),
                ('newer.pt', 'newer'),
                ('other.pt', 'joints'),
                ('evil_torch.pt', ''),
                ('evil_pickle.pt', ''),
                ('absent.pt', 'no such'),
            ]:
                res = ctl.set_parameters(
                    [Parameter('delan_checkpoint', value=str(tmp_path / bad))]
                )[0]
                assert not res.successful, bad
                assert res.reason and why in res.reason, (bad, res.reason)
                assert ctl.get_parameter('delan_checkpoint').value == good
                assert ctl._model is active and ctl.model_kind == 'delan'
            assert not marker.exists(), 'a checkpoint ran code on load'
        finally:
            ctl.destroy_node()


NAN = math.nan


def _same(a, b) -> bool:
    """Equal parameter values; a float [nan] (a derived-value default) equals itself."""
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype.kind == 'f' and b.dtype.kind == 'f':
        return np.array_equal(a, b, equal_nan=True)
    return np.array_equal(a, b)


@pytest.mark.parametrize(
    'node_cls, bad',
    [
        (TorqueControllerNode, torque_controller_bad_values(SEVEN)),
        (
            LearnerNode,
            [
                ('learning_rate', -1e-3),
                ('learning_rate', NAN),
                ('batch_size', 0),
                ('learning_rate_final', 0.0),
                ('learning_rate_halflife', -1),
                ('steps_per_round', -5),
                ('publish_period', -1.0),
                ('range_factor', 0.5),
                ('min_samples', 1),
                ('divergence_factor', 1.0),
                ('keep_versions', 0),
                ('divergence_floor', -1.0),
                ('divergence_floor', NAN),
                ('buffer_capacity', 1000),
                ('status_rate', 5.0),
                ('width', 8),
                ('estimate_publish_rate', -5.0),
                ('estimate_publish_rate', NAN),
                ('loss', 'sideways'),
                ('horizon', 0),
                ('integrator', 'leapfrog'),
                ('torque_timing', 'middle'),
            ],
        ),
        (
            ReferenceNode,
            [
                ('speed', -1.0),
                ('speed', 0.0),
                ('trajectory', 'spiral'),
                ('point_rate', -10.0),
                ('duration', 0.0),
                ('period', NAN),
                ('approach_time', -1.0),
                ('seed', -1),
            ],
        ),
    ],
    ids=['torque_controller', 'learner', 'reference'],
)
def test_bad_parameters_refused_old_value_kept(node_cls, bad, tmp_path):
    with ros_context() as ctx:
        node = node_cls(
            context=ctx,
            parameter_overrides=[
                Parameter('urdf_path', value=URDF),
                Parameter('checkpoint_dir', value=str(tmp_path)),
                Parameter('resume', value=False),
            ],
        )
        try:
            names = sorted({name for name, _ in bad})
            before = {n: node.get_parameter(n).value for n in names}
            for name, value in bad:
                res = node.set_parameters([Parameter(name, value=value)])[0]
                assert not res.successful, (name, value)
                assert res.reason, (name, value)
            after = {n: node.get_parameter(n).value for n in names}
            for n in names:
                assert _same(after[n], before[n]), n
            # a valid change is still accepted afterwards
            good = {
                TorqueControllerNode: ('kp', [30.0]),
                LearnerNode: ('learning_rate', 1e-3),
                ReferenceNode: ('speed', 0.5),
            }[node_cls]
            assert node.set_parameters([Parameter(good[0], value=good[1])])[0].successful
        finally:
            if hasattr(node, 'close'):
                node.close()
            node.destroy_node()
