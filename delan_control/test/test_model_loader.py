"""LatestLoader: loads off the caller's thread, newest request wins, failures are reported and
the thread lives on."""

from __future__ import annotations

import threading

import pytest

from delan_control.model_loader import LatestLoader, ModelLoadError


def test_newest_request_wins_and_failures_do_not_stop_the_loader():
    gate, started = threading.Event(), threading.Event()
    loaded, failed, finished = [], [], threading.Event()

    def load(request):
        if request == 'first':
            started.set()
            gate.wait(10.0)  # a slow load; requests pile up meanwhile
        if request == 'corrupt':
            raise ModelLoadError('truncated checkpoint')
        if request == 'bug':
            raise RuntimeError('unexpected')
        return f'model:{request}'

    def done(request, model):
        loaded.append((request, model))
        if request == 'last':
            finished.set()

    loader = LatestLoader(load, done, lambda r, e: failed.append((r, str(e))))
    try:
        loader.submit('first')
        assert started.wait(10.0)
        for request in ('skipped_1', 'skipped_2', 'corrupt'):
            loader.submit(request)
        gate.set()
        # 'corrupt' (the newest while 'first' loaded) fails; the loader goes on
        loader.submit('bug')
        loader.submit('last')
        assert finished.wait(10.0)
    finally:
        loader.close()
    assert loaded[0] == ('first', 'model:first')
    assert ('last', 'model:last') in loaded
    assert not any(r.startswith('skipped') for r, _ in loaded + failed)
    assert all(r in ('corrupt', 'bug') for r, _ in failed)
    assert len(loaded) + len(failed) <= 4


def test_close_stops_an_idle_loader():
    loader = LatestLoader(lambda r: r, lambda r, m: None, lambda r, e: None)
    loader.close(timeout=5.0)
    assert not loader.thread.is_alive()


def test_pinocchio_and_identified_models_keep_the_robots_joint_selection(tmp_path):
    """The controller's robot (urdf_joints) selects and locks joints: the models it loads use
    the same selection, an identified model's kinematics the robot's locked positions (an
    identified file holds the default selection of its robot_description)."""
    from test_robot_descriptions import PANDA, PANDA_ARM

    from delan_common.robot_model import RobotModel
    from delan_common.urdf_joints import RobotDescription
    from delan_control.model_loader import load_dynamics_model
    from delan_control.sysid import IdentifiedModel, nominal_parameters

    default = RobotModel(PANDA)
    path = str(tmp_path / 'identified.json')
    IdentifiedModel(default, nominal_parameters(default)).save(path)
    for lock in ({}, {'panda_finger_joint1': 0.04}):
        robot = RobotDescription.load(PANDA, locked=lock)
        pinocchio = load_dynamics_model('pinocchio', robot)
        identified = load_dynamics_model('identified', robot, identified_params=path)
        assert pinocchio.joint_names == identified.joint_names == PANDA_ARM
        assert pinocchio.locked == identified.robot.locked == robot.locked
    assert identified.robot.locked == {'panda_finger_joint1': 0.04, 'panda_finger_joint2': 0.04}
    other = RobotDescription.load(PANDA, joints=PANDA_ARM[:6])
    with pytest.raises(ModelLoadError, match='joints'):
        load_dynamics_model('identified', other, identified_params=path)


@pytest.mark.parametrize('urdf', ['panda.urdf', 'two_link_arm.urdf'])
def test_delan_residual_is_the_urdf_model_plus_the_checkpoint_and_kinds_do_not_mix(tmp_path, urdf):
    """model=delan_residual: the URDF's model plus the residual of the checkpoint; a residual is
    never loaded as a whole model, nor a whole model as a residual."""
    import numpy as np
    import torch

    from delan_common.model_kinds import LEARNED_KINDS
    from delan_common.robot_model import RobotModel, find_urdf
    from delan_common.urdf_joints import RobotDescription
    from delan_control.model_loader import load_dynamics_model
    from delan_learning.fastpath import dynamics_model
    from delan_learning.models import build_model
    from delan_testing.models import small_checkpoints

    robot = RobotDescription.load(find_urdf(urdf))
    paths = small_checkpoints(tmp_path, robot, LEARNED_KINDS, width=16)
    model = load_dynamics_model('delan_residual', robot, checkpoint=paths['delan_residual'])
    assert model.model_version == 3 and model.joint_names == robot.joint_names
    nominal = RobotModel.from_description(robot)
    rng = np.random.default_rng(0)
    lo, hi = nominal.sample_bounds()
    q = rng.uniform(lo, hi, (8, nominal.n))
    qd, qdd = rng.normal(size=q.shape), rng.normal(size=q.shape)
    torch.manual_seed(0)
    residual = dynamics_model(
        build_model('delan_residual', robot.joint_types, width=16, depth=1).double(),
        robot.joint_names,
    )
    assert np.allclose(
        model.inverse(q, qd, qdd), nominal.inverse(q, qd, qdd) + residual.inverse(q, qd, qdd)
    )
    assert np.linalg.eigvalsh(model.mass_matrix(q)).min() > 0
    with pytest.raises(ModelLoadError, match="'delan_residual' model, not 'delan'"):
        load_dynamics_model('delan', robot, checkpoint=paths['delan_residual'])
    with pytest.raises(ModelLoadError, match="'delan' model, not 'delan_residual'"):
        load_dynamics_model('delan_residual', robot, checkpoint=paths['delan'])
