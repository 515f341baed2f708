"""The online learner's training rounds for the kinds besides DeLaN (ROS-free, real training on
the 2-link arm): the black-box MLP and the variants of Lutter & Peters (2021) are learned,
validated past the learner's quality gate and published as versions that load back as the same
kind; their estimates hold the terms each kind has; the loss weighed by the URDF's inverse
inertia trains them too; and the settings a kind cannot have are refused with the reason."""

from __future__ import annotations

import math
import os
from typing import Any, List

import numpy as np
import pytest
import torch

from delan_common.model_kinds import FORWARD_KINDS, ONLINE_KINDS
from delan_common.param_table import ParamContext
from delan_common.urdf_joints import RobotDescription
from delan_learning.c_export import weights_path
from delan_learning.checkpoint import load_model
from delan_learning.learner_estimates import SnapshotEstimator
from delan_learning.models import model_config
from delan_learning.online import Sample, SplitBuffers
from delan_learning.online_lr import OnlineLearningRate
from delan_learning.online_trainer import Announcement, OnlineTrainer, TrainingParams
from delan_learning.params.learner import TABLE, loss_error
from delan_learning.publication import PublicationParams, PublicationPolicy
from delan_learning.version_store import VersionStore

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..'))
URDF = os.path.join(ROOT, 'delan_bringup', 'urdf', 'two_link_arm.urdf')
VARIANTS = ('blackbox_lagrangian', 'hamiltonian', 'mlp')
GATE = 0.25  # the learner's publish_max_nmse (its default)


class _Log:
    def __init__(self) -> None:
        self.lines: List[str] = []

    def info(self, message: str) -> None:
        self.lines.append(message)

    warning = error = info


class _Intake:
    samples_seen = 2400

    def restart(self) -> None:
        pass


def _trainer(folder: Any, kind: str, metric: bool = False, **params: Any):
    """An OnlineTrainer of ``kind`` on a fresh checkpoint folder, as the learner node wires it
    (small networks, a fast rate); its announcements."""
    robot = RobotDescription.load(URDF)
    log, announced = _Log(), []  # type: ignore[var-annotated]
    base = dict(width=32, depth=1, batch_size=64, steps_per_round=20, min_samples=200)
    p = TrainingParams(model=kind, **dict(base, **params))
    buffers = SplitBuffers(4000, 5, 2, metric=metric, windows=kind in FORWARD_KINDS)
    store = VersionStore(str(folder), 3, robot.joint_names, kind, log)
    policy = PublicationPolicy(PublicationParams(publish_period=0.0, publish_max_nmse=GATE))
    trainer = OnlineTrainer(
        p,
        robot,
        buffers,
        store,
        _Intake(),
        OnlineLearningRate(1e-2, 1e-2, 0),
        policy,
        log,
        announced.append,
        lambda: None,
    )
    return trainer, announced


@pytest.fixture(scope='module', autouse=True)
def one_thread():
    """One torch thread, as the learner's ``torch_threads`` default: on a busy 2-core machine
    the tiny batches here run many times slower on more (the black-box Lagrangian's autograd
    passes most of all)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope='module')
def stream(two_link):
    """24 s of the arm at 100 Hz, one stream of stamps; the URDF's acceleration metric."""
    from delan_common.robot_model import RobotModel

    d = two_link.make_data([0, 1], rate=100.0, duration=12.0)
    d['t'] = np.arange(len(d['q'])) / 100.0
    d['metric'] = np.stack([RobotModel(URDF).acceleration_metric(q) for q in d['q']])
    return d


def _fill(trainer: OnlineTrainer, d, metric: bool = False) -> None:
    for i in range(len(d['q'])):
        trainer.buffers.add(
            Sample(
                float(d['t'][i]),
                d['q'][i],
                d['qd'][i],
                d['qdd'][i],
                d['tau'][i],
                metric=d['metric'][i] if metric else None,
            )
        )


def _first_version(trainer: OnlineTrainer, max_rounds: int = 40) -> List[float]:
    """Rounds until a version goes out; the validation nMSE after the first round."""
    rng = np.random.default_rng(0)
    first: List[float] = []
    for k in range(max_rounds):
        trainer.train_once(rng, now=float(k))
        first = first or list(trainer.val_nmse)
        if trainer.lineage.version:
            return first
    pytest.fail(f'no version after {max_rounds} rounds: {trainer.val_nmse} {trainer.message}')


@pytest.mark.parametrize('kind', VARIANTS)
def test_a_variant_is_learned_published_and_loads_back_as_its_kind(tmp_path, stream, kind):
    trainer, announced = _trainer(tmp_path, kind)
    _fill(trainer, stream)
    first = _first_version(trainer)
    lineage = trainer.lineage
    published = trainer.policy.good_nmse
    assert max(published) <= GATE and np.mean(published) < np.mean(first), (first, published)
    assert [a.version for a in announced] == [lineage.version]
    assert isinstance(announced[0], Announcement)
    # the version on disk, read back through the checkpoint: the same kind and weights
    model, meta = load_model(lineage.checkpoint_path)
    assert model.kind == kind and meta['model_kind'] == kind
    assert meta['model_version'] == lineage.version and meta['online']['steps'] > 0
    q, qd, qdd = (torch.as_tensor(stream[k][:50]) for k in ('q', 'qd', 'qdd'))
    torch.testing.assert_close(model.inverse(q, qd, qdd), lineage.snapshot.inverse(q, qd, qdd))
    # no weights for the compiled controller: the C kernel evaluates DeLaN only
    assert not os.path.exists(weights_path(lineage.checkpoint_path))
    # a restarted learner of the same kind goes on from it
    again, resumed = _trainer(tmp_path, kind)
    assert again.resume() and resumed[0].version == lineage.version
    assert again.trainer is not None and again.trainer.model.kind == kind

    # what ~/dynamics_estimate carries of it: the terms the kind has, NaN energies otherwise
    samples = [
        Sample(0.0, stream['q'][i], stream['qd'][i], stream['qdd'][i], stream['tau'][i])
        for i in range(0, 40, 10)
    ]
    est = SnapshotEstimator(trainer.robot.joint_names)(lineage.snapshot, samples)
    with torch.no_grad():
        tau = lineage.snapshot.inverse(q[:40:10], qd[:40:10], qdd[:40:10]).numpy()
    np.testing.assert_allclose(est.predicted, tau, atol=1e-8 * (1 + np.abs(tau).max()))
    fields = est.fields(0)
    if kind == 'mlp':
        assert fields['mass_matrix'] == fields['gravity_torque'] == []
        assert math.isnan(fields['kinetic_energy']) and math.isnan(fields['potential_energy'])
    else:
        assert len(fields['mass_matrix']) == 4 and len(fields['coriolis_torque']) == 2
        # no split of a black-box Lagrangian's energy into kinetic and potential
        assert math.isnan(fields['kinetic_energy']) == (kind == 'blackbox_lagrangian')


def test_a_variant_learns_with_the_loss_weighed_by_the_urdfs_inverse_inertia(tmp_path, stream):
    """loss_metric both (the learner's acceleration metric does not depend on the kind)."""
    trainer, _ = _trainer(tmp_path, 'mlp', metric=True, loss_metric='both')
    _fill(trainer, stream, metric=True)
    first = _first_version(trainer)
    assert trainer.trainer is not None and trainer.trainer.config.loss_metric == 'both'
    assert np.mean(trainer.policy.good_nmse) < np.mean(first)


def test_a_variant_with_a_differentiable_forward_model_learns_through_rollouts(tmp_path, stream):
    """loss both on the black-box Lagrangian: rollout windows of the stream (its forward model
    solves with the learned H, which nothing keeps invertible) besides the inverse loss."""
    trainer, _ = _trainer(
        tmp_path, 'blackbox_lagrangian', loss='both', horizon=3, integrator='euler'
    )
    _fill(trainer, stream)
    first = _first_version(trainer)
    assert trainer.trainer is not None and trainer.trainer.uses_windows
    assert np.mean(trainer.policy.good_nmse) < np.mean(first)
    meta = load_model(trainer.lineage.checkpoint_path)[1]
    assert meta['online']['loss'] == {
        'loss': 'both',
        'horizon': 3,
        'integrator': 'euler',
        'torque_timing': 'end',
    }


def test_what_a_kind_cannot_be_trained_with_is_refused_with_the_reason():
    assert set(next(p for p in TABLE if p.name == 'model').choices) == set(ONLINE_KINDS)
    for loss in ('forward', 'both'):
        why = loss_error(loss, 'mlp', 'torque')
        assert why is not None and "'mlp'" in why and 'differentiable' in why
        assert 'black-box inverse model' in why
        for kind in ('blackbox_lagrangian', 'hamiltonian'):
            assert loss_error(loss, kind, 'torque') is None
    assert loss_error('inverse', 'mlp', 'acceleration') is None
    # a friction law only the kinds on DeLaN's networks have
    law = next(p for p in TABLE if p.name == 'friction_model')
    for kind, refused in (('mlp', True), ('blackbox_lagrangian', True), ('hamiltonian', False)):
        why = law.validate('stribeck', ParamContext(2, {'model': kind}))
        assert (why is not None) == refused, (kind, why)
        assert law.validate('coulomb_viscous', ParamContext(2, {'model': kind})) is None
    with pytest.raises(ValueError, match="friction_model 'stribeck'"):
        model_config('mlp', 16, 1, friction_model='stribeck')
    assert 'friction' not in model_config('mlp', 16, 1)  # the MLP has no friction term
    assert model_config('hamiltonian', 16, 1)['friction_model'] == 'coulomb_viscous'
