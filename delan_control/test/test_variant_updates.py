"""A learner may learn the variants (mlp, blackbox_lagrangian, hamiltonian) for comparison; a
controller commands with delan and delan_residual only. A version of another kind is refused
with the reason, counted, and the running model stays: as a learner update, and as the
controller's own checkpoint file."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from delan_common.robot_model import find_urdf
from delan_common.urdf_joints import RobotDescription
from delan_control.model_loader import ModelLoadError, load_dynamics_model
from delan_control.model_switch import ModelSwitch

VARIANTS = ('blackbox_lagrangian', 'hamiltonian', 'mlp')


@pytest.fixture(scope='module')
def checkpoints(tmp_path_factory):
    """``{kind: path}``: a small model of each kind for the 2-link arm, as the learner's v3."""
    from delan_testing.models import small_checkpoints

    robot = RobotDescription.load(find_urdf('two_link_arm.urdf'))
    folder = tmp_path_factory.mktemp('variants')
    paths = small_checkpoints(folder, robot, ('delan',) + VARIANTS, width=8)
    return robot, paths


@pytest.mark.parametrize('kind', VARIANTS)
def test_a_variant_is_never_loaded_for_control(checkpoints, kind):
    robot, paths = checkpoints
    for as_kind in ('delan', 'delan_residual'):
        with pytest.raises(ModelLoadError, match=f"'{kind}' model, which no controller"):
            load_dynamics_model(as_kind, robot, checkpoint=paths[kind])


def test_a_variants_learner_version_is_refused_counted_and_the_model_stays(checkpoints):
    robot, paths = checkpoints
    switch = ModelSwitch(robot, 'delan', 'feedforward_pd', 0.5)
    switch.start(lambda _: None)
    # a delan version is followed
    v3 = SimpleNamespace(checkpoint_path=paths['delan'], model_version=3)
    request = switch.update_request(v3)
    assert request is not None
    assert switch.adopt_update(request, switch.load_update(request))
    running = switch.model
    assert running is not None and switch.version == 3 and switch.updates_refused == 0
    # a learner on model:=hamiltonian (or another variant): each version refused, counted
    for k, kind in enumerate(VARIANTS, start=4):
        update = SimpleNamespace(checkpoint_path=paths[kind], model_version=k)
        request = switch.update_request(update)
        assert request is not None  # the announcement does not say the kind: it is loaded
        with pytest.raises(ModelLoadError, match='no controller commands with'):
            switch.load_update(request)
        assert switch.updates_refused == k - 3
        assert switch.model is running and switch.kind == 'delan' and switch.version == 3
    # the controller's own file: refused as the parameter's value, with the reason
    check = switch.checks(lambda law: None)['delan_checkpoint']
    why = check(paths['hamiltonian'])
    assert why is not None and 'no controller commands with' in why
    assert switch.model is running
