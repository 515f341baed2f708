"""A node started without urdf_path / robot_description gets its robot from the latched
``robot_description`` topic (as robot_state_publisher publishes it), with the joint selection of
its parameters; no robot within robot_description_timeout, or a bad selection, is a clear error.
Real rclpy, in-process."""

from __future__ import annotations

import os
import time

import pytest
import rclpy
from rclpy.executors import SingleThreadedExecutor
from rclpy.parameter import Parameter
from std_msgs.msg import String
from trajectory_msgs.msg import JointTrajectory

from delan_common.ros.qos import LATCHED
from delan_common.ros.robot_param import parse_locked
from delan_control.nodes.reference import ReferenceNode
from delan_testing.ros import ros_context, spin_in_thread

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), '..', '..'))
with open(
    os.path.join(ROOT, 'delan_bringup', 'urdf', 'seven_dof_arm.urdf'), encoding='utf-8'
) as _fh:
    SEVEN = _fh.read()


def _publisher(ctx, xml: str):
    """A robot_state_publisher stand-in: publishes the URDF once, latched, and is not spun."""
    node = rclpy.create_node('fake_robot_state_publisher', context=ctx)
    node.create_publisher(String, 'robot_description', LATCHED).publish(String(data=xml))
    return node


def test_reference_node_gets_its_robot_and_selection_from_the_latched_topic():
    with ros_context() as ctx:
        rsp = _publisher(ctx, SEVEN)
        ref = ReferenceNode(
            context=ctx,
            parameter_overrides=[
                Parameter('wait_for_joint_states', value=0.0),
                Parameter('joints', value=['wrist_flex', 'shoulder_pan', 'shoulder_lift']),
                Parameter('locked_joint_positions', value=['elbow_flex=0.5']),
                Parameter('effort_limits', value=[0.0, 40.0, 0.0]),
            ],
        )
        received = []
        listener = rclpy.create_node('listener', context=ctx)
        listener.create_subscription(
            JointTrajectory, 'reference_trajectory', received.append, LATCHED
        )
        ex = SingleThreadedExecutor(context=ctx)
        for node in (ref, listener):
            ex.add_node(node)
        spin_in_thread(ex)
        try:
            robot = ref.robot
            assert robot.joint_names == ['shoulder_pan', 'shoulder_lift', 'wrist_flex']
            assert robot.source == 'topic /robot_description'
            assert robot.locked['elbow_flex'] == 0.5 and robot.locked['wrist_roll'] == 0.0
            assert robot.effort_limits[1] == 40.0
            assert ref.get_parameter('urdf_path').value == ''
            deadline = time.monotonic() + 20.0
            while not received and time.monotonic() < deadline:
                time.sleep(0.02)
            assert received and list(received[0].joint_names) == robot.joint_names
        finally:
            ex.shutdown()
            for node in (ref, listener, rsp):
                node.destroy_node()


def test_no_robot_within_the_timeout_is_a_clear_error():
    with ros_context() as ctx:
        start = time.monotonic()
        with pytest.raises(ValueError, match='no robot.*/robot_description.*0.3 s'):
            ReferenceNode(
                context=ctx,
                parameter_overrides=[Parameter('robot_description_timeout', value=0.3)],
            )
        assert time.monotonic() - start < 5.0


@pytest.mark.parametrize(
    'overrides, match',
    [
        ([('joints', ['shoulder_pan', 'no_such_joint'])], "unknown joints \\['no_such_joint'\\]"),
        ([('locked_joint_positions', ['elbow_flex'])], 'name=value'),
        ([('joints', [1, 2])], 'array of str'),
        ([('effort_limits', [1.0, 2.0])], '2 values for the 7 joints'),
    ],
)
def test_bad_selection_parameters_fail_the_node_clearly(overrides, match):
    with ros_context() as ctx:
        params = [Parameter('robot_description', value=SEVEN)]
        params += [Parameter(k, value=v) for k, v in overrides]
        with pytest.raises(ValueError, match=match):
            ReferenceNode(context=ctx, parameter_overrides=params)


def test_parse_locked():
    assert parse_locked(['a=0.5', ' b = -1e-3']) == {'a': 0.5, 'b': -0.001}
    for bad in (['a'], ['=1'], ['a=x'], ['a=inf']):
        with pytest.raises(ValueError, match='name=value'):
            parse_locked(bad)
