"""TorqueControl: what goes on between the torque controller's parts -- which reference a cycle
tracks, the rejoin after a restart, where a parameter change goes, the status -- without a node."""

from types import SimpleNamespace

import numpy as np
import pytest

from delan_common.command_order import CommandOrder
from delan_common.joint_state import MappedJointState
from delan_common.robot_model import find_urdf
from delan_common.urdf_joints import RobotDescription
from delan_control.params.torque_controller import TABLE
from delan_control.reference_tracking import reference_from_points
from delan_control.swing_up import FURUTA, FURUTA_UPRIGHT
from delan_control.torque_control import TorqueControl, actuated_joints, energy_law
from delan_testing.logs import Log

ARM = RobotDescription.load(find_urdf('two_link_arm.urdf'))
JOINTS = list(ARM.joint_names)


def _values(**given):
    """The node's parameter values: the table's defaults, with ``given``."""
    values = {p.name: p.default for p in TABLE}
    values.update(given)
    return values


def _control(robot=ARM, **given):
    log = Log()
    return TorqueControl.from_params(robot, _values(**given), log), log


def _furuta_energy():
    """A Furuta pendulum under law energy, on the URDF's model."""
    furuta = RobotDescription.load(find_urdf(FURUTA))
    control, _ = _control(
        furuta,
        model='pinocchio',
        law='energy',
        actuated_joints=[furuta.joint_names[0]],
        upright_position=list(FURUTA_UPRIGHT),
    )
    return control, furuta


def _state(q, qd=(0.0, 0.0)):
    return MappedJointState(np.array(q, float), np.array(qd, float), None)


def _orders(order=None, source='pending', status=('warning', 'waiting for the order')):
    return SimpleNamespace(order=order, source=source, status=lambda: status)


def _set_reference(control, q, t0=0.0, duration=10.0):
    """A reference holding ``q`` from ``t0`` for ``duration`` [s]."""
    control.tracker.set_reference(
        reference_from_points(JOINTS, JOINTS, t0, [0.0, duration], [q, q], [[], []], [[], []])
    )


def test_actuated_joints_are_every_joint_or_those_named():
    assert actuated_joints([], JOINTS).tolist() == [True, True]
    assert actuated_joints([JOINTS[1]], JOINTS).tolist() == [False, True]
    with pytest.raises(ValueError, match='invalid parameter: actuated_joints'):
        actuated_joints(['elbow_of_another_arm'], JOINTS)


def test_law_energy_unavailable_is_a_reason_not_an_error():
    limits = np.array([5.0, 5.0])
    law, why = energy_law(np.array([True, True]), limits, _values())
    assert law is None and why  # a fully actuated arm with no upright given
    law, why = energy_law(
        np.array([True, False]), limits, _values(upright_position=list(FURUTA_UPRIGHT))
    )
    assert law is not None and why == ''
    np.testing.assert_allclose(law.reference()[0], FURUTA_UPRIGHT)


def test_parameters_the_parts_refuse_are_invalid_parameters():
    with pytest.raises(ValueError, match='invalid parameter: actuated_joints'):
        _control(actuated_joints=['nope'])
    with pytest.raises(ValueError, match='invalid parameter: '):
        _control(law='energy')  # on model pd: there is no energy to build it on


def test_the_first_state_restarts_and_holds_where_the_arm_is():
    control, log = _control()
    s = control.command(0.0, 1.0, _state([0.1, -0.2]))
    assert log.said('info', 'joint states fresh: commanding')
    assert s.holding and s.model == 'pd' and s.stamp == 1.0
    np.testing.assert_allclose(s.q_ref, [0.1, -0.2])
    np.testing.assert_allclose(s.command, 0.0, atol=1e-12)  # at the hold position, at rest
    log.lines.clear()
    control.command(0.004, 1.004, _state([0.1, -0.2]))
    assert log.lines == []  # no restart: nothing to say


def test_a_stall_rejoins_a_near_reference_and_drops_a_far_one():
    control, log = _control(resume_tolerance=0.5)
    _set_reference(control, [0.0, 0.0])
    control.command(0.0, 0.0, _state([0.0, 0.0]))
    s = control.command(0.004, 0.004, _state([0.0, 0.0]))
    assert not s.holding
    control.continuity.expire(1.0, lambda: None)  # the states went stale
    log.lines.clear()
    control.command(1.0, 1.0, _state([0.2, 0.0]))  # back, 0.2 from the reference
    assert log.lines[0][0] == 'info' and log.lines[0][1].startswith('rejoining the reference')
    assert log.lines[-1] == ('info', 'joint states fresh: commanding')
    control.continuity.expire(2.0, lambda: None)
    log.lines.clear()
    s = control.command(2.0, 2.0, _state([1.0, 0.0]))  # back, beyond resume_tolerance
    assert log.lines[0][0] == 'warning' and log.lines[0][1].startswith('reference dropped')
    assert s.holding and control.tracker.dropped == 1 and control.tracker.rejoined == 1


def test_law_energy_tracks_the_upright_not_the_reference():
    control, furuta = _furuta_energy()
    s = control.command(0.0, 0.0, _state([0.0, 0.3]))
    assert s.law == 'energy' and not s.holding
    np.testing.assert_allclose(s.q_ref, FURUTA_UPRIGHT)
    assert control.passive_joints() == [furuta.joint_names[1]]
    assert s.command[1] == 0.0  # the passive joint is never commanded


def test_parameter_changes_reach_their_part_and_the_law_switches_last():
    control, _ = _control()
    limits = control.cycle.limits.copy()
    messages = control.apply(
        {
            'kp': [33.0],
            'watchdog_timeout': 0.5,
            'effort_limit_scale': 0.5,
            'state_publish_rate': 10.0,
            'resume_tolerance': 0.25,
            'resume_time': 2.0,
            'switch_blend_time': 0.0,
            'law': 'feedforward_pd',
        }
    )
    np.testing.assert_allclose(control.cycle.gains.kp, 33.0)
    assert control.continuity.timeout == 0.5 and control.state_rate.rate_hz == 10.0
    np.testing.assert_allclose(control.cycle.limits, 0.5 * limits)
    assert control.tracker.resume_tolerance == 0.25 and control.tracker.resume_time == 2.0
    assert control.models.blend_time == 0.0 and control.models.law == 'feedforward_pd'
    assert messages  # the switch says what it did
    assert control.apply({'kd': [2.0]}) == [] and control.models.law == 'feedforward_pd'


def test_status_is_the_orders_then_stale_states_warn_once_commanding():
    control, _ = _control(actuated_joints=[JOINTS[0]])
    loop = (('loop_latency_max_us', '0'),)
    level, message, values = control.status(_orders(), 0, (0, 0), loop)
    assert (level, message) == ('warning', 'waiting for the order')  # no order: not stale yet
    assert list(values)[:4] == ['model', 'model_version', 'law', 'commands_sent']
    assert values['command_joints'] == '' and values['passive_joints'] == JOINTS[1]
    assert values['loop_latency_max_us'] == '0' and 'energy_mode' not in values
    ordered = _orders(CommandOrder(JOINTS, JOINTS[::-1]), '/sim', ('info', 'ok'))
    level, message, values = control.status(ordered, 3, (1, 2), ())
    assert (level, message) == ('warning', 'joint states stale: not commanding')
    assert values['command_joints'] == ' '.join(JOINTS[::-1])
    assert values['command_order'] == '/sim' and values['commands_sent'] == 3
    assert (values['rejected_joint_states'], values['rejected_references']) == (1, 2)
    control.command(0.0, 0.0, _state([0.0, 0.0]))
    assert control.status(ordered, 4, (1, 2), ())[:2] == ('info', 'ok')
    refused = _orders(None, 'refused: /sim', ('error', 'refusing to command'))
    assert control.status(refused, 4, (1, 2), ())[0] == 'error'


def test_status_shows_law_energy_only_under_it():
    control, _ = _furuta_energy()
    values = control.status(_orders(), 0, (0, 0), ())[2]
    assert values['energy_mode'] == 'swing'
    control.apply({'law': 'feedforward_pd'})
    assert 'energy_mode' not in control.status(_orders(), 0, (0, 0), ())[2]
