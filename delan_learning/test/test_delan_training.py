"""The Trainer API: online steps, epochs with metrics, early stopping, budgets, seeding."""

import numpy as np
import pytest
import torch

from delan_learning.data import JOINT_TYPES as DATA_JOINT_TYPES
from delan_learning.data import Dataset, split_by_trajectory
from delan_learning.features import JOINT_TYPES
from delan_learning.lagrangian import DelanModel
from delan_learning.training import Batch, TorqueNormalizer, TrainConfig, Trainer, train_model

EPOCH_KEYS = {
    'round',
    'epoch',
    'steps',
    'train_loss',
    'val_loss',
    'val_nmse',
    'lr',
    'elapsed_s',
    'samples_per_s',
    'best',
}


@pytest.fixture(scope='module')
def small(two_link):
    return Dataset.from_arrays(two_link.make_data(range(6), duration=3.0))


def test_joint_type_lists_agree():
    assert JOINT_TYPES == DATA_JOINT_TYPES


def test_online_steps_keep_optimiser_state(small):
    torch.manual_seed(0)
    tr = Trainer(DelanModel(small.joint_types, width=32), TrainConfig(lr=1e-2, batch_size=128))
    arrays = {'q': small.q, 'qd': small.qd, 'qdd': small.qdd, 'tau': small.tau}
    first = tr.step({k: v[:64] for k, v in arrays.items()})
    assert isinstance(first, float) and tr.steps == 1
    assert bool(tr.model.scales_initialised) and tr.normalizer is not None
    state = tr.optimizer.state_dict()['state']
    assert state and all(int(s['step']) == 1 for s in state.values())
    losses = [tr.train_steps(arrays, 60) for _ in range(3)]
    assert tr.steps == 181
    assert all(int(s['step']) == 181 for s in tr.optimizer.state_dict()['state'].values())
    assert losses[-1] < 0.2 * first
    ev = tr.evaluate(arrays)
    assert set(ev) == {'loss', 'mse', 'nmse'} and len(ev['nmse']) == 2


def test_online_steps_end_early_when_asked_to_stop(small):
    tr = Trainer(DelanModel(small.joint_types, width=16), TrainConfig(batch_size=64))
    arrays = {'q': small.q, 'qd': small.qd, 'qdd': small.qdd, 'tau': small.tau}
    asked = []

    def stop() -> bool:
        asked.append(tr.steps)
        return tr.steps >= 7

    tr.train_steps(arrays, 100, stop=stop)
    assert tr.steps == 7 and asked == list(range(8))
    assert np.isnan(tr.train_steps(arrays, 5, stop=lambda: True)) and tr.steps == 7


def test_fit_metrics_callback_and_stop(small):
    torch.manual_seed(0)
    train, val = split_by_trajectory(small, 0.34, seed=0)
    tr = Trainer(
        DelanModel(small.joint_types, width=16),
        TrainConfig(epochs=50, batch_size=256, patience=0, lr_schedule='cosine', round_steps=0),
    )
    seen = []

    def callback(m):
        seen.append(m['epoch'])
        return m['epoch'] == 4  # ask to stop

    hist = tr.fit(train, val, callback=callback)
    assert seen == [1, 2, 3, 4] and len(hist) == 4
    for m in hist:
        assert set(m) == EPOCH_KEYS and len(m['val_nmse']) == 2
    assert hist[0]['lr'] > hist[-1]['lr']  # cosine decay
    assert all(np.isfinite(m['train_loss']) for m in hist)


def test_early_stopping_restores_best(small):
    torch.manual_seed(1)
    train, val = split_by_trajectory(small, 0.34, seed=0)
    # a large constant learning rate makes the validation loss noisy, so it stops early
    cfg = TrainConfig(
        epochs=400, batch_size=64, lr=3e-2, lr_schedule='constant', patience=3, round_steps=0
    )
    tr = Trainer(DelanModel(small.joint_types, width=16), cfg)
    hist = tr.fit(train, val)
    assert len(hist) < 400
    best = min(m['val_loss'] for m in hist)
    assert hist[-1]['val_loss'] > best or len(hist) == 400
    assert tr.evaluate(val)['loss'] == pytest.approx(best, rel=1e-5)
    assert not tr.model.training


def test_time_budget_stops_training(small):
    torch.manual_seed(0)
    tr = Trainer(
        DelanModel(small.joint_types, width=16),
        TrainConfig(epochs=10_000, batch_size=32, time_budget=0.2, patience=0),
    )
    hist = tr.fit(small)
    assert 1 <= len(hist) < 10_000
    assert hist[-1]['val_loss'] is None  # no validation set given


def test_train_model_is_seeded(small):
    cfg = TrainConfig(epochs=3, batch_size=256, seed=7)
    a = train_model(small, 'delan', cfg, {'width': 16})
    b = train_model(small, 'delan', cfg, {'width': 16})
    for (k, va), vb in zip(a.model.state_dict().items(), b.model.state_dict().values()):
        assert torch.equal(va, vb), k
    assert [m['train_loss'] for m in a.history] == [m['train_loss'] for m in b.history]
    c = train_model(small, 'delan', TrainConfig(epochs=3, batch_size=256, seed=8), {'width': 16})
    assert not torch.equal(c.model.head_weight, a.model.head_weight)
    # metadata for the checkpoint
    assert a.metadata['joint_names'] == small.joint_names
    assert a.model.joint_names == small.joint_names and a.model.dtype == torch.float64
    val_ids = a.metadata['training']['val_trajectories']
    assert val_ids and set(val_ids) <= set(int(i) for i in small.trajectory_ids)


def test_torque_normalisation_is_per_joint():
    tau = np.stack([np.linspace(-100, 100, 50), np.linspace(-1, 1, 50)], axis=1)
    norm = TorqueNormalizer.from_torques(tau)
    assert norm.std[0] == pytest.approx(100 * norm.std[1])
    again = TorqueNormalizer.from_dict(norm.to_dict())
    assert np.array_equal(again.std, norm.std)
    # the loss weighs a relative error the same on both joints
    m = DelanModel(['revolute'] * 2, width=8).double()
    tr = Trainer(m, TrainConfig(), norm, dtype=torch.float64)
    q = torch.zeros(4, 2, dtype=torch.float64)
    with torch.no_grad():
        pred = m(q, q, q)
        l1 = tr.loss(Batch(q, q, q, pred + torch.tensor([norm.std[0], 0.0])))
        l2 = tr.loss(Batch(q, q, q, pred + torch.tensor([0.0, norm.std[1]])))
    assert float(l1) == pytest.approx(float(l2))


def test_a_passive_joint_counts_as_much_as_the_others():
    """A joint whose torque is 0 throughout (a Furuta pendulum's) gets the largest spread for
    its loss and nMSE, not a floor that would weigh its equation ~1000x."""
    from delan_learning.data import constant_torque

    tau = np.stack([np.linspace(-1, 1, 50), np.zeros(50), np.linspace(0, 0.1, 50)], axis=1)
    np.testing.assert_array_equal(constant_torque(tau.std(0)), [False, True, False])
    assert not constant_torque(np.zeros(3)).any()
    norm = TorqueNormalizer.from_torques(tau)
    assert norm.std[1] == norm.std[0] == tau[:, 0].std()
    assert norm.std[2] == pytest.approx(tau[:, 2].std())
    m = DelanModel(['revolute'] * 3, width=8).double()
    tr = Trainer(m, TrainConfig(), norm, dtype=torch.float64)
    q = torch.zeros(50, 3, dtype=torch.float64)
    with torch.no_grad():
        pred = m(q, q, q).numpy()
    # the passive joint's torque is constant (the model's at rest, off by 0.05): its nMSE is
    # its error over the largest spread
    data = tau + pred + np.array([0.0, 0.05, 0.0])
    ev = tr.evaluate({'q': q.numpy(), 'qd': q.numpy(), 'qdd': q.numpy(), 'tau': data})
    assert ev['mse'][1] > 1e-4
    assert ev['nmse'][1] == pytest.approx(ev['mse'][1] / tau[:, 0].var())


def test_plateau_schedule_lowers_the_rate_and_stops_by_itself(small):
    torch.manual_seed(0)
    train, val = split_by_trajectory(small, 0.34, seed=0)
    cfg = TrainConfig(batch_size=256, round_steps=20, plateau_patience=2, lr=1e-2)
    assert cfg.lr_schedule == 'plateau' and cfg.epochs is None  # the defaults
    tr = Trainer(DelanModel(small.joint_types, width=16), cfg)
    hist = tr.fit(train, val)
    assert tr.stop_reason == 'plateau' and tr.steps < cfg.max_steps
    steps_per_epoch = -(-len(train) // 256)
    rounds = [m['epoch'] for m in hist]
    per_round = -(-20 // steps_per_epoch)
    assert rounds == list(range(per_round, per_round * len(hist) + 1, per_round))
    lrs = sorted({m['lr'] for m in hist}, reverse=True)
    assert lrs[0] == cfg.lr and len(lrs) >= 2
    np.testing.assert_allclose(np.array(lrs[1:]) / np.array(lrs[:-1]), cfg.plateau_factor)
    assert lrs[-1] * cfg.plateau_factor < cfg.lr * cfg.final_lr_fraction <= lrs[-1]
    assert tr.evaluate(val)['loss'] == pytest.approx(min(m['val_loss'] for m in hist), rel=1e-5)


def test_max_steps_and_epochs_cap_the_plateau(small):
    tr = Trainer(DelanModel(small.joint_types, width=8), TrainConfig(batch_size=256, max_steps=7))
    tr.fit(small)
    assert tr.steps == 7 and tr.stop_reason == 'max_steps'
    tr = Trainer(DelanModel(small.joint_types, width=8), TrainConfig(batch_size=256, epochs=2))
    hist = tr.fit(small)
    assert tr.stop_reason == 'epochs' and hist[-1]['epoch'] == 2
    assert tr.steps == 2 * -(-len(small) // 256)
    with pytest.raises(ValueError, match='lr_schedule'):
        Trainer(DelanModel(small.joint_types, width=8), TrainConfig(lr_schedule='step')).fit(small)
