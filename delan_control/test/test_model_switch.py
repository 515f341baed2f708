"""ModelSwitch: a switch loads the new model before it is accepted, cross-fades to it, and a
refused one (or one loaded for a change that was refused) leaves the running model in force."""

from types import SimpleNamespace

import numpy as np
import pytest

from delan_common.robot_model import RobotModel, find_urdf
from delan_common.urdf_joints import RobotDescription
from delan_control.control_laws import EnergyLaw
from delan_control.model_loader import ModelLoadError
from delan_control.model_switch import ModelSwitch
from delan_control.swing_up import FURUTA, FURUTA_ACTUATED, FURUTA_UPRIGHT


@pytest.fixture(scope='module')
def arm():
    return RobotDescription.load(find_urdf('two_link_arm.urdf'))


def _change(switch, validate_ok=True, **params):
    """One parameter change through the switch's validators, as the node runs it; whether it
    was accepted (``validate_ok``: what the other parameters' checks say)."""
    checks = switch.checks(lambda law: None)

    def validate(ps):
        errors = [checks[p.name](p.value) for p in ps if p.name in checks]
        return validate_ok and not any(errors)

    accepted = switch.validated(validate)(
        [SimpleNamespace(name=k, value=v) for k, v in params.items()]
    )
    if accepted:
        return switch.apply(params.get('law'))
    return None


def test_a_model_switch_loads_first_then_cross_fades_over_the_blend_time(arm):
    switch = ModelSwitch(arm, 'pd', 'feedforward_pd', blend_time=0.5)
    switch.start(pytest.fail)
    assert switch.model is None and switch.slot(0.0).weight is None
    assert _change(switch, model='pinocchio') == [
        'switched model pd -> pinocchio (bumpless, 0.50 s blend)'
    ]
    assert switch.kind == 'pinocchio' and isinstance(switch.model, RobotModel)
    first = switch.slot(10.0)  # the blend starts at the next state's stamp
    assert first.weight == 0.0 and first.old_model is None and first.model is switch.model
    assert switch.slot(10.25).weight == pytest.approx(0.5)
    assert switch.slot(10.5).weight is None  # over: the new model alone
    assert switch.slot(10.6).weight is None


def test_a_refused_switch_keeps_the_running_model(arm):
    switch = ModelSwitch(arm, 'pinocchio', 'feedforward_pd', blend_time=0.5)
    switch.start(pytest.fail)
    running = switch.model
    # identified without its file does not load: refused with the reason
    assert 'cannot be used' in switch.check_model('identified')
    assert switch.check_model('nonsense').startswith("model='nonsense' is not one of")
    assert _change(switch, model='identified') is None
    assert switch.kind == 'pinocchio' and switch.model is running
    # loaded for a change that the other parameters' checks refused: never switched to
    assert _change(switch, validate_ok=False, model='pd') is None
    assert _change(switch, switch_blend_time=1.0) == []
    assert switch.kind == 'pinocchio' and switch.model is running
    assert switch.slot(0.0).weight is None


def test_a_law_switch_takes_the_model_at_once_and_energy_is_refused_without_its_setup(arm):
    switch = ModelSwitch(
        arm, 'pd', 'feedforward_pd', 0.5, energy_law=None, energy_unavailable='no passive joint'
    )
    switch.start(pytest.fail)
    assert _change(switch, law='energy') is None  # refused, with the reason
    assert switch.check_law('energy') == 'law=energy cannot be used: no passive joint'
    assert switch.law == 'feedforward_pd'
    # law and model together: no blend (the old torque is another law's)
    assert _change(switch, law='computed_torque', model='pinocchio') == ['law computed_torque']
    assert switch.kind == 'pinocchio' and switch.slot(0.0).weight is None


def test_law_energy_is_built_on_each_model_and_refused_on_pd():
    furuta = RobotDescription.load(find_urdf(FURUTA))
    law = EnergyLaw(np.array(FURUTA_ACTUATED), FURUTA_UPRIGHT, furuta.effort_limits)
    switch = ModelSwitch(furuta, 'pinocchio', 'energy', 0.5, energy_law=law)
    switch.start(pytest.fail)
    assert switch.energy is not None and switch.energy.model is switch.model
    assert 'has none' in switch.check_model('pd')  # no energies to swing up on
    before = switch.energy
    assert _change(switch, model='pinocchio')  # a fresh instance, the law built on it anew
    assert switch.energy is not before and switch.energy.model is switch.model


def test_start_pd_until_the_learner_publishes_and_a_broken_kind_fails(arm):
    warnings = []
    switch = ModelSwitch(arm, 'delan', 'feedforward_pd', 0.5)
    switch.start(warnings.append)
    assert switch.model is None and 'no usable checkpoint yet' in warnings[0]
    with pytest.raises(ModelLoadError):
        ModelSwitch(arm, 'identified', 'feedforward_pd', 0.5).start(pytest.fail)


def test_learner_versions_are_followed_unless_the_switch_moved_on(arm):
    switch = ModelSwitch(arm, 'delan', 'feedforward_pd', 0.5)
    switch.start(lambda _: None)
    v3 = SimpleNamespace(checkpoint_path='/tmp/v3.pt', model_version=3)
    request = switch.update_request(v3)
    assert request is not None and switch.latest_update is v3
    loaded = SimpleNamespace(model_version=3)
    assert switch.adopt_update(request, (loaded, None)) == 'DeLaN model v3 from /tmp/v3.pt'
    assert switch.model is loaded and switch.version == 3
    assert switch.slot(1.0).weight == 0.0  # blended in
    # a newer version announced while this one loaded: this one is dropped
    old = switch.update_request(SimpleNamespace(checkpoint_path='/tmp/v4.pt', model_version=4))
    switch.update_request(SimpleNamespace(checkpoint_path='/tmp/v5.pt', model_version=5))
    assert switch.adopt_update(old, (SimpleNamespace(), None)) is None
    assert switch.model is loaded
    # a checkpoint file set: the learner is no longer followed
    switch.delan_checkpoint = '/tmp/mine.pt'
    assert not switch.follows_learner()
    assert switch.update_request(SimpleNamespace(checkpoint_path='x', model_version=6)) is None
