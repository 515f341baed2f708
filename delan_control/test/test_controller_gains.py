"""The torque controller's gains when the parameter file gives none: derived from the URDF of
whatever arm it controls (control_laws.robot_gains, for control_rate), so one set of
numbers tuned on one arm never makes another's light wrist unstable."""

import math

import numpy as np
import pytest
from rclpy.parameter import Parameter

from delan_common.robot_model import RobotModel, find_urdf
from delan_common.urdf_joints import RobotDescription
from delan_control.control_laws import robot_gains
from delan_control.nodes.torque_controller import FALLBACK_GAINS, TorqueControllerNode
from delan_testing.ros import ros_context


def _controller(ctx, **params):
    node = TorqueControllerNode(
        context=ctx, parameter_overrides=[Parameter(k, value=v) for k, v in params.items()]
    )
    return node


@pytest.mark.parametrize('urdf', ['panda.urdf', 'seven_dof_arm.urdf'])
def test_gains_not_given_are_the_arms_own_and_stable_at_the_rate(urdf):
    path = find_urdf(urdf)
    robot = RobotDescription.load(path)
    model = RobotModel(path)
    expected, _ = robot_gains(model, robot, 1.0 / 250.0)
    with ros_context() as ctx:
        node = _controller(ctx, urdf_path=path, control_rate=250.0, kp=[80.0])
        try:
            gains = node.gains
            assert gains.kp.tolist() == [80.0] * len(robot.joint_names)  # as given
            for name in ('kd', 'ct_kp', 'ct_kd'):
                assert getattr(gains, name) == pytest.approx(getattr(expected, name))
            # the fixed numbers of a 2-link arm would be unstable on this wrist: kd dt / H > 2
            h = np.diag(model.mass_matrix(robot.home()))
            assert np.all(gains.kd / 250.0 / h < 2.0)
            assert FALLBACK_GAINS['kd'] / 250.0 / h.min() > 2.0
            # set back to [nan] at runtime: derived again
            assert node.set_parameters([Parameter('kp', value=[math.nan])])[0].successful
            assert node.gains.kp == pytest.approx(expected.kp)
        finally:
            node.close()
            node.destroy_node()
