"""The launch arguments' names and their deprecated aliases (delan_bringup.launch_args): what a
user types maps to the parameters the nodes get, and contradictions stop the launch."""

import pytest

from delan_bringup.launch_args import DEFAULT_URDF, resolve_arguments


def test_new_names_set_what_they_say_without_warnings():
    args, warnings = resolve_arguments(
        {'urdf': 'panda.urdf', 'model': 'delan', 'delan_checkpoint': '/ck/model.pt'}
    )
    assert args == ('panda.urdf', 'delan', '/ck/model.pt', 'delan')
    assert warnings == []


def test_defaults():
    args, warnings = resolve_arguments(
        {'urdf': '', 'robot': '', 'model': 'pd', 'controller': '', 'delan_checkpoint': ''}
    )
    assert args == (DEFAULT_URDF, 'pd', '', 'delan')
    assert warnings == []


def test_first_release_names_still_work_with_a_warning_each():
    # ros2 launch ... robot:=arm.urdf controller:=delan model:=/ck/model.pt
    args, warnings = resolve_arguments(
        {'robot': 'arm.urdf', 'controller': 'delan', 'model': '/ck/model.pt'}
    )
    assert args == ('arm.urdf', 'delan', '/ck/model.pt', 'delan')
    assert len(warnings) == 3
    assert any('use urdf:=arm.urdf' in w for w in warnings)
    assert any('use model:=delan' in w for w in warnings)
    assert any('use delan_checkpoint:=/ck/model.pt' in w for w in warnings)


@pytest.mark.parametrize(
    'model,learner',
    [('delan_residual', 'delan_residual'), ('delan', 'delan'), ('pinocchio', 'delan')],
)
def test_the_learner_learns_what_the_controller_follows(model, learner):
    args, _ = resolve_arguments({'model': model})
    assert args.learner_model == learner
    args, _ = resolve_arguments({'model': 'pd', 'learner_model': 'delan_residual'})
    assert args.learner_model == 'delan_residual'


def test_old_checkpoint_name_alone_keeps_pd():
    args, warnings = resolve_arguments({'model': 'out/model.pt'})
    assert args == (DEFAULT_URDF, 'pd', 'out/model.pt', 'delan')
    assert len(warnings) == 1


@pytest.mark.parametrize(
    'values,message',
    [
        ({'model': 'fast'}, 'model:=fast is not a model kind'),
        ({'controller': 'fast'}, 'controller:=fast is not a model kind'),
        ({'model': 'delan', 'controller': 'pinocchio'}, 'disagree'),
        ({'urdf': 'a.urdf', 'robot': 'b.urdf'}, 'disagree'),
        ({'controller': 'delan', 'model': 'a.pt', 'delan_checkpoint': 'b.pt'}, 'two checkpoints'),
        ({'model': 'delan_residual', 'learner_model': 'delan'}, 'cannot follow'),
        ({'model': 'delan', 'learner_model': 'hamiltonian'}, 'cannot follow'),
    ],
)
def test_contradictions_are_clear_errors(values, message):
    with pytest.raises(ValueError, match=message):
        resolve_arguments(values)
