"""The online learner's training rounds (ROS-free, real training of a small DeLaN on the 2-link
arm): versions published to the folder and announced once their file is complete, resumed
from disk after a restart (past a corrupt newest file), a rollback to the last good weights
when training diverges, a loss change, the reset and load requests and a failing round, all
as the learner node drives them."""

from __future__ import annotations

import math
import os
import time

import numpy as np
import pytest
import torch

from delan_common.urdf_joints import RobotDescription
from delan_learning.checkpoint import load_model
from delan_learning.online import Sample, SplitBuffers
from delan_learning.online_lr import OnlineLearningRate
from delan_learning.online_trainer import OnlineTrainer, TrainingParams
from delan_learning.publication import PublicationParams, PublicationPolicy
from delan_learning.version_store import VersionStore
from delan_testing.logs import Log

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..'))
URDF = os.path.join(ROOT, 'delan_bringup', 'urdf', 'two_link_arm.urdf')


class Intake:
    """The intake as the trainer sees it: a count and a restart."""

    def __init__(self):
        self.samples_seen, self.restarts = 1234, 0

    def restart(self):
        self.restarts += 1


class Rig:
    """An OnlineTrainer on a checkpoint folder, as the learner node wires it."""

    def __init__(self, folder, keep_versions=10, publication=None, buffers=None, **params):
        self.robot = RobotDescription.load(URDF)
        self.log, self.intake, self.announced = Log(), Intake(), []
        base = dict(width=16, depth=1, batch_size=64, steps_per_round=20, min_samples=200, seed=0)
        self.params = TrainingParams(**dict(base, **params))
        self.buffers = buffers or SplitBuffers(4000, 5, 2)
        self.store = VersionStore(
            str(folder), keep_versions, self.robot.joint_names, self.params.model, self.log
        )
        self.clock_calls = 0
        self.trainer = OnlineTrainer(
            self.params,
            self.robot,
            self.buffers,
            self.store,
            self.intake,
            OnlineLearningRate(3e-3, 3e-3, 0),
            PublicationPolicy(
                PublicationParams(
                    **dict(dict(publish_period=0.0, publish_max_nmse=1e9), **(publication or {}))
                )
            ),
            self.log,
            self._announce,
            self._clock,
        )

    def _clock(self):
        self.clock_calls += 1
        return f'stamp{self.clock_calls}'

    def _announce(self, a):
        # announced only once the version's file is complete
        meta = load_model(a.checkpoint_path)[1]
        self.announced.append((a, meta['model_version']))

    def fill(self, data, scale=1.0):
        for i in range(len(data['q'])):
            self.buffers.add(
                Sample(
                    float(data['t'][i]),
                    data['q'][i],
                    data['qd'][i],
                    data['qdd'][i],
                    scale * data['tau'][i],
                    metric=data['metric'][i] if 'metric' in data else None,
                )
            )

    def rounds_until(self, done, max_rounds=40):
        rng = np.random.default_rng(0)
        for k in range(max_rounds):
            self.trainer.train_once(rng, now=float(k))
            if done():
                return k + 1
        return -1


@pytest.fixture(scope='module')
def data(two_link):
    d = two_link.make_data([0, 1], rate=100.0, duration=12.0)
    d['t'] = np.arange(len(d['q'])) / 100.0  # one stream of stamps
    return d


def _published(rig, versions):
    return rig.rounds_until(lambda: rig.trainer.lineage.version >= versions)


def test_versions_are_published_to_the_folder_and_announced(tmp_path, data):
    rig = Rig(tmp_path, keep_versions=2)
    rig.fill(data)
    assert rig.trainer.lineage.version == 0 and rig.trainer.lineage.snapshot is None
    assert _published(rig, 3) > 0, rig.log.lines
    lineage = rig.trainer.lineage
    assert [v for v, _ in rig.store.versions()] == [lineage.version - 1, lineage.version]
    assert lineage.checkpoint_path == rig.store.path(lineage.version)
    assert lineage.stamp == f'stamp{lineage.version}'  # stamped when it went out
    assert [(a.version, v) for a, v in rig.announced] == [(k, k) for k in (1, 2, 3)]
    a = rig.announced[-1][0]
    assert a.model_id == lineage.model_id and a.stamp == lineage.stamp
    assert len(a.validation_nmse) == 2 and a.validation_nmse == rig.trainer.policy.good_nmse
    model, meta = load_model(lineage.checkpoint_path)
    assert meta['model_id'] == lineage.model_id and meta['online']['samples_seen'] == 1234
    assert meta['online']['steps'] == rig.trainer.training_steps
    assert meta['online']['loss'] == {'loss': 'inverse'}
    # the shoulder moves the whole arm: H is learned independent of it (inertia_invariance)
    assert meta['hyperparameters']['inertia_invariant_joints'] == [0]
    assert model.inertia_invariant_joints == [0]
    # the published weights are the policy's last good ones
    good = rig.trainer.policy.good_state
    for k, v in model.state_dict().items():
        assert torch.equal(v, good[k].double()), k
    assert rig.trainer.state == 'training' and rig.trainer.training_steps >= 60


def test_a_restarted_learner_resumes_the_newest_version_on_disk(tmp_path, data):
    first = Rig(tmp_path)
    first.fill(data)
    assert _published(first, 2) > 0
    before = first.trainer.lineage
    (tmp_path / 'model_v00009.pt').write_bytes(b'cut short')  # unreadable: skipped

    again = Rig(tmp_path)
    assert again.trainer.lineage.version == 9  # numbering goes on past every file
    assert again.trainer.resume()
    lineage = again.trainer.lineage
    assert (
        lineage.model_id == before.model_id and lineage.checkpoint_path == before.checkpoint_path
    )
    assert lineage.version == 9 and lineage.stamp is None
    for k, v in lineage.snapshot.state_dict().items():
        assert torch.equal(v, before.snapshot.state_dict()[k]), k
    ((a, _),) = again.announced
    assert (a.model_id, a.version, a.validation_nmse, a.stamp) == (before.model_id, 2, [], None)
    assert again.log.said('warning', 'skipping') and again.log.said('info', 'resumed model')
    # training goes on from the resumed weights, in the same lineage, numbered after v9
    again.fill(data)
    assert _published(again, 10) > 0
    assert again.trainer.lineage.model_id == before.model_id
    assert load_model(again.store.path(10))[1]['model_id'] == before.model_id


def test_without_resume_a_new_lineage_numbers_after_the_folder(tmp_path, data):
    first = Rig(tmp_path, keep_versions=1)
    first.fill(data)
    assert _published(first, 2) > 0
    again = Rig(tmp_path, keep_versions=1)
    again.fill(data)
    assert _published(again, 3) > 0
    assert again.trainer.lineage.model_id != first.trainer.lineage.model_id
    assert [v for v, _ in again.store.versions()] == [3]  # pruning kept the new version


def test_an_empty_folder_resumes_nothing(tmp_path):
    rig = Rig(tmp_path)
    assert not rig.trainer.resume() and rig.announced == []


@pytest.mark.parametrize('weights', ['non_finite', 'far_off'])
def test_a_diverged_round_rolls_back_to_the_last_good_weights(tmp_path, data, weights):
    rig = Rig(tmp_path)
    rig.fill(data)
    assert _published(rig, 1) > 0
    trainer = rig.trainer
    good = {k: v.clone() for k, v in trainer.policy.good_state.items()}
    version = trainer.lineage.version
    # weights gone astray: a non-finite loss, or a validation loss divergence_factor times
    # that of the last good weights
    with torch.no_grad():
        for p in trainer.trainer.model.parameters():
            p.fill_(math.nan) if weights == 'non_finite' else p.add_(torch.randn_like(p) * 3.0)
    old = trainer.trainer
    trainer.train_once(np.random.default_rng(1), now=100.0)
    assert trainer.state == 'diverged' and 'rolled back' in trainer.message, trainer.message
    why = 'non-finite loss' if weights == 'non_finite' else 'of the published v1'
    assert why in trainer.message
    assert trainer.policy.rollbacks == 1 and rig.log.said('error', 'diverged')
    assert trainer.trainer is not old  # a fresh optimiser around the restored weights
    for k, v in trainer.trainer.model.state_dict().items():
        assert torch.equal(v, good[k]), k
    assert trainer.lineage.version == version  # nothing published
    # and training goes on from there
    trainer.train_once(np.random.default_rng(2), now=101.0)
    assert trainer.state == 'training'


def test_a_divergence_before_any_good_weights_starts_afresh(tmp_path, data):
    rig = Rig(tmp_path)
    rig.fill(data, scale=math.nan)
    rig.trainer.train_once(np.random.default_rng(0), now=0.0)
    assert rig.trainer.state == 'diverged' and rig.trainer.trainer is None
    assert rig.trainer.lineage.version == 0 and rig.store.versions() == []


def test_a_loss_change_rebuilds_the_trainer_around_the_same_weights(tmp_path, data):
    rig = Rig(tmp_path)
    rig.fill(data)
    rng = np.random.default_rng(0)
    rig.trainer.train_once(rng, now=0.0)
    old = rig.trainer.trainer
    restarts = []
    restart = rig.trainer.policy.restart
    rig.trainer.policy.restart = lambda state: (restarts.append(state), restart(state))
    rig.trainer.train_once(rng, now=1.0)
    assert rig.trainer.trainer is old and restarts == []  # nothing changed: trained on
    rig.params.horizon = 5  # a loss parameter: applies from the next round
    weights = {k: v.clone() for k, v in old.model.state_dict().items()}
    rig.trainer.train_once(rng, now=2.0)
    assert rig.log.said('info', 'training loss now loss inverse, horizon 5')
    new = rig.trainer.trainer
    assert new is not old and new.config.horizon == 5
    assert new.model is old.model and new.normalizer is old.normalizer  # same weights
    (state,) = restarts  # the policy forgot its losses, with these weights as the last good
    for k, v in weights.items():
        assert torch.equal(state[k], v), k


def test_a_switch_to_a_rollout_loss_drops_the_acceleration_metric(tmp_path, data):
    """loss_metric auto resolved to both for the inverse loss; a runtime switch to the forward
    loss trains the rollout with the torque metric (the metric weighs the inverse loss only),
    and back to inverse with both again."""
    from delan_common.robot_model import RobotModel

    buffers = SplitBuffers(4000, 5, 2, metric=True, windows=True)
    rig = Rig(tmp_path, buffers=buffers, loss_metric='both', horizon=3)  # auto, resolved
    metric = RobotModel(URDF).acceleration_metric(data['q'])
    rig.fill(dict(data, metric=metric))
    rng = np.random.default_rng(0)
    rig.trainer.train_once(rng, now=0.0)
    assert rig.trainer.trainer.config.loss_metric == 'both'
    rig.params.loss = 'forward'
    rig.trainer.train_once(rng, now=1.0)
    cfg = rig.trainer.trainer.config
    assert (cfg.loss, cfg.loss_metric) == ('forward', 'torque') and rig.trainer.state != 'error'
    rig.params.loss = 'inverse'
    rig.trainer.train_once(rng, now=2.0)
    assert rig.trainer.trainer.config.loss_metric == 'both'


def _wait(until, timeout=30.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if until():
            return True
        time.sleep(0.02)
    return False


def test_reset_and_load_requests_are_served_by_the_training_thread(tmp_path, data):
    rig = Rig(tmp_path, training_enabled=False)
    rig.fill(data)
    assert _published(rig, 1) > 0
    first = rig.trainer.lineage
    rig.trainer.start()
    try:
        assert _wait(lambda: rig.trainer.state == 'paused')
        rig.trainer.request_reset()
        assert _wait(lambda: rig.trainer.lineage.model_id != first.model_id)
        lineage = rig.trainer.lineage
        assert lineage.snapshot is None and lineage.checkpoint_path == ''
        assert lineage.version == first.version  # file names go on from the newest on disk
        assert rig.buffers.sizes() == (0, 0) and rig.intake.restarts == 1
        assert rig.trainer.trainer is None and rig.trainer.training_steps == 0
        assert rig.trainer.val_nmse == [] and math.isnan(rig.trainer.train_loss)
        # a load: the checkpoint's lineage, weights and normaliser
        loaded = rig.store.read(first.checkpoint_path)
        rig.trainer.request_load(first.checkpoint_path, loaded)
        assert _wait(lambda: rig.trainer.lineage.model_id == first.model_id)
        assert rig.trainer.lineage.checkpoint_path == first.checkpoint_path
        assert rig.trainer.trainer is not None and rig.log.said('info', 'adopted model')
    finally:
        rig.trainer.close()
    assert not rig.trainer._thread.is_alive()


def test_the_thread_collects_then_trains_and_reports_a_failing_round(tmp_path, data):
    rig = Rig(tmp_path)
    rig.fill({k: v[100:250] for k, v in data.items()})  # below min_samples
    assert 0 < rig.buffers.sizes()[0] < 200
    rig.trainer.train_round = _failing
    rig.trainer.start()
    try:
        assert _wait(lambda: rig.trainer.state == 'collecting'), rig.trainer.state
        assert rig.trainer.message.startswith('collecting: ')
        rig.fill(data)
        assert _wait(lambda: rig.trainer.state == 'error'), rig.trainer.state
        assert rig.trainer.message == 'training failed: RuntimeError: out of memory'
        assert rig.log.said('error', 'Traceback')
    finally:
        t0 = time.monotonic()
        rig.trainer.close()
    assert time.monotonic() - t0 < 2.0  # the wait after a failure ends with close()


def _failing(rng, now=None):
    raise RuntimeError('out of memory')


def test_without_inertia_invariance_h_depends_on_every_joint(tmp_path, data):
    rig = Rig(tmp_path, inertia_invariance=False)
    rig.fill(data)
    assert _published(rig, 1) > 0, rig.log.lines
    model, meta = load_model(rig.trainer.lineage.checkpoint_path)
    assert meta['hyperparameters']['inertia_invariant_joints'] == []
    assert torch.count_nonzero(model.weights[0][0, model.features.columns(0)]) > 0


def test_training_params_resolve_the_loss_metric():
    """auto: both for the kinds a controller follows (the acceleration their errors cause is
    what it tracks with), torque for a rollout loss and for the variants."""
    values = {f: getattr(TrainingParams(), f) for f in TrainingParams.__dataclass_fields__}
    auto = dict(values, loss_metric='auto')

    def resolved(**kw):
        return TrainingParams.from_values(dict(auto, **kw)).loss_metric

    assert resolved(model='delan') == 'both'
    assert resolved(model='delan_residual') == 'both'
    assert resolved(model='delan', loss='forward') == 'torque'
    assert resolved(model='delan', loss='both') == 'torque'
    assert resolved(model='hamiltonian') == 'torque'
    assert resolved(model='mlp') == 'torque'
    assert TrainingParams.from_values(dict(values, loss_metric='acceleration')).loss_metric == (
        'acceleration'
    )
