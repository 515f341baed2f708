"""ControlCycle: the command of one joint state -- cross-faded between two models, PD where a
model fails, clamped to the effort limits and 0 on the passive joints."""

import math

import numpy as np
import pytest

from delan_common.joint_state import MappedJointState
from delan_common.robot_model import RobotModel, find_urdf
from delan_common.urdf_joints import RobotDescription
from delan_control.control_cycle import (
    FALLBACK_GAINS,
    FALLBACK_NONE,
    FALLBACK_PD_MODEL_FAILED,
    FALLBACK_PD_NO_MODEL,
    ControlCycle,
    fallback_reason,
)
from delan_control.control_laws import robot_gains
from delan_control.model_switch import Slot
from delan_testing.logs import Log

GIVEN = {'ct_kp': [100.0], 'ct_kd': [20.0], 'kp': [10.0], 'kd': [1.0]}


class Constant:
    """A model whose inverse dynamics is one torque, whatever the state (or a failure)."""

    def __init__(self, tau=None, error=None):
        self.tau, self.error = tau, error

    def inverse(self, q, qd, qdd):
        if self.error is not None:
            raise self.error
        return np.array(self.tau, dtype=float)


def _robot(name='two_link_arm.urdf'):
    return RobotDescription.load(find_urdf(name))


def _cycle(robot=None, actuated=(True, True), given=GIVEN, scale=1.0):
    log = Log()
    robot = robot or _robot()
    cycle = ControlCycle(robot, np.array(actuated), dict(given), 250.0, scale, log)
    return cycle, log


def _slot(model, old=None, weight=None, kind='pinocchio', law='computed_torque'):
    return Slot(kind, 0, law, model, None, old, None, weight)


STILL = MappedJointState(np.zeros(2), np.zeros(2), None)
AT_REST = (np.zeros(2), np.zeros(2), np.zeros(2))


def test_the_command_is_the_models_and_blends_from_the_old_one():
    cycle, _ = _cycle()
    new, old = Constant([4.0, -2.0]), Constant([2.0, 2.0])
    s = cycle.run(1.5, _slot(new), STILL, AT_REST, False)
    np.testing.assert_array_equal(s.command, [4.0, -2.0])
    np.testing.assert_array_equal(s.feedforward, [4.0, -2.0])
    assert s.fallback == FALLBACK_NONE and s.stamp == 1.5 and s.model == 'pinocchio'
    s = cycle.run(1.5, _slot(new, old, weight=0.25), STILL, AT_REST, False)
    np.testing.assert_allclose(s.command, [2.5, 1.0])  # 0.25 new + 0.75 old
    np.testing.assert_allclose(s.feedforward, [2.5, 1.0])
    # from no model (PD, zero at rest on the reference): the model's torque fades in
    s = cycle.run(1.5, _slot(new, None, weight=0.5), STILL, AT_REST, False)
    np.testing.assert_allclose(s.command, [2.0, -1.0])
    assert cycle.fallbacks == 0


@pytest.mark.parametrize(
    'model, logged',
    [
        (Constant([np.nan, 1.0]), 'returned non-finite torque'),
        (Constant(error=ValueError('singular')), 'failed: singular'),
        (Constant(error=FloatingPointError('overflow')), 'failed: overflow'),
    ],
)
def test_a_failing_model_falls_back_to_pd(model, logged):
    cycle, log = _cycle()
    q_ref = np.array([0.1, -0.2])
    ref = (q_ref, np.zeros(2), np.zeros(2))
    s = cycle.run(0.0, _slot(model), STILL, ref, False)
    np.testing.assert_allclose(s.command, 10.0 * q_ref)  # kp e: the PD alone
    assert s.feedforward is None and s.fallback == FALLBACK_PD_MODEL_FAILED
    assert cycle.fallbacks == 1
    assert any(level == 'error' and logged in text for level, text in log.lines)
    # the fading-out model failing counts too, its share is PD as well
    s = cycle.run(0.0, _slot(Constant([0.0, 0.0]), model, weight=0.5), STILL, ref, False)
    np.testing.assert_allclose(s.command, 0.5 * 10.0 * q_ref)
    assert s.fallback == FALLBACK_NONE and cycle.fallbacks == 2


def test_commands_are_clamped_to_the_scaled_limits_and_passive_joints_get_zero():
    cycle, _ = _cycle()
    far = (np.array([100.0, -100.0]), np.zeros(2), np.zeros(2))
    s = cycle.run(0.0, _slot(None, kind='pd', law='feedforward_pd'), STILL, far, False)
    np.testing.assert_array_equal(s.command, [40.0, -20.0])  # the URDF's effort limits
    cycle.set_effort_scale(0.5)
    s = cycle.run(0.0, _slot(Constant([1e3, 1e3])), STILL, AT_REST, False)
    np.testing.assert_array_equal(s.command, [20.0, 10.0])
    # the Furuta pendulum's pendulum has no motor: never commanded, whatever the law wants
    furuta, _ = _cycle(_robot('furuta_pendulum.urdf'), actuated=(True, False))
    s = furuta.run(0.0, _slot(Constant([0.1, 5.0])), STILL, AT_REST, False)
    assert s.command[1] == 0.0 and s.command[0] == pytest.approx(0.1)
    s = furuta.run(0.0, _slot(None, kind='pd', law='feedforward_pd'), STILL, far, False)
    np.testing.assert_array_equal(s.command, [0.5, 0.0])


def test_the_urdf_feedback_laws_use_the_urdfs_mass_matrix():
    cycle, _ = _cycle()
    q_ref = np.array([0.1, 0.0])
    ref = (q_ref, np.zeros(2), np.zeros(2))
    s = cycle.run(0.0, _slot(Constant([0.0, 0.0]), law='feedforward_urdf_pd'), STILL, ref, False)
    h = RobotModel(find_urdf('two_link_arm.urdf')).mass_matrix(np.zeros(2))
    np.testing.assert_allclose(s.command, h @ (100.0 * q_ref))


def test_fallback_reason():
    assert fallback_reason('pd', None, False) == FALLBACK_NONE
    assert fallback_reason('delan', None, False) == FALLBACK_PD_NO_MODEL
    assert fallback_reason('delan', Constant([0.0]), True) == FALLBACK_PD_MODEL_FAILED


def test_the_fallback_values_are_the_messages():
    from delan_msgs.msg import ControllerState

    assert FALLBACK_NONE == ControllerState.FALLBACK_NONE
    assert FALLBACK_PD_NO_MODEL == ControllerState.FALLBACK_PD_NO_MODEL
    assert FALLBACK_PD_MODEL_FAILED == ControllerState.FALLBACK_PD_MODEL_FAILED


def test_gains_not_given_are_derived_from_the_urdf_and_can_be_set_back():
    robot = _robot()
    cycle, log = _cycle(given={**GIVEN, 'kd': [math.nan]})
    expected, _ = robot_gains(RobotModel(robot.xml), robot, 1.0 / 250.0)
    np.testing.assert_allclose(cycle.gains.kd, expected.kd)
    np.testing.assert_array_equal(cycle.gains.kp, [10.0, 10.0])  # as given
    assert any(text.startswith('gains not given: kd') for _, text in log.lines)
    cycle.set_gain('kp', [3.0, 4.0])
    np.testing.assert_array_equal(cycle.gains.kp, [3.0, 4.0])
    cycle.set_gain('kp', [math.nan])
    np.testing.assert_allclose(cycle.gains.kp, expected.kp)
    assert FALLBACK_GAINS['kp'] != pytest.approx(expected.kp[0])
