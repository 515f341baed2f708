"""Forward-model learning and multi-step prediction (:mod:`delan_learning.rollout`).

The integrator and the torque timing are checked against Pinocchio on a plant simulated here
under held torques; the loss by real (small, seeded) training whose held-out N-step error must
fall; the CLIs in process.
"""

import json

import numpy as np
import pytest
import torch

from delan_learning import rollout as ro
from delan_learning.cli import eval_main, train_main
from delan_learning.data import Dataset, save_npz
from delan_learning.models import build_model
from delan_learning.training import TrainConfig, Trainer


class PinocchioArm(torch.nn.Module):
    """The conftest arm's true forward dynamics (ABA + its friction) behind the model API."""

    def __init__(self, arm):
        super().__init__()
        self.arm = arm
        self.joint_types = list(arm.joint_types)

    def forward_dynamics(self, q, qd, tau):
        from delan_common.dynamics import friction_torque

        pin, a = self.arm.pin, self.arm
        net = tau.numpy() - friction_torque(qd.numpy(), a.viscous, a.coulomb)
        return torch.as_tensor(
            np.stack(
                [
                    pin.aba(a.model, a.data, x, v, u).copy()
                    for x, v, u in zip(q.numpy(), qd.numpy(), net)
                ]
            )
        )


def simulate_held_torques(arm, rate=100.0, duration=1.0, substeps=20, seed=3):
    """States at ``t_k`` of the arm driven by the reference's torque at ``t_k`` held over
    ``[t_k, t_k+1)`` (fine RK4 in between): the 'start' timing, exactly."""
    ref = arm.trajectory(seed)
    t = np.arange(0.0, duration, 1.0 / rate)
    q_ref, qd_ref, qdd_ref = ref.sample(t)
    tau = arm.inverse(q_ref, qd_ref, qdd_ref)
    plant = PinocchioArm(arm)
    q, qd = torch.as_tensor(q_ref[:1]), torch.as_tensor(qd_ref[:1])
    Q, QD = [q], [qd]
    h = torch.full((1, substeps), 1.0 / (rate * substeps), dtype=torch.float64)
    for k in range(len(t) - 1):
        u = torch.as_tensor(tau[k : k + 1]).unsqueeze(1).expand(1, substeps, -1)
        qs, qds = ro.rollout(plant, q, qd, u, h, 'rk4')
        q, qd = qs[:, -1], qds[:, -1]
        Q.append(q)
        QD.append(qd)
    return (torch.cat(Q), torch.cat(QD), torch.as_tensor(tau), t)


def test_rollout_of_the_true_model_matches_the_plant(two_link):
    q, qd, tau, t = simulate_held_torques(two_link)
    index, dt = ro.window_index(np.zeros(len(t), dtype=np.int64), t, horizon=8)
    index, dt = index[::6], dt[::6]
    true = PinocchioArm(two_link)
    err = {}
    for integrator, timing in (('rk4', 'start'), ('rk4', 'end'), ('euler', 'start')):
        eq, ev = ro.rollout_errors(true, q, qd, tau, index, dt, integrator, timing)
        err[integrator, timing] = (float(eq.abs().max()), float(ev.abs().max()))
    # RK4 at the data rate reproduces the finely integrated plant (to within the stiff
    # smoothed Coulomb friction near zero velocity: 7e-6 rad, 7e-4 rad/s over 8 steps)
    assert err['rk4', 'start'][0] < 2e-5 and err['rk4', 'start'][1] < 2e-3, err
    # a torque one sample late, or first-order integration, is far worse (75x, 35x)
    assert err['rk4', 'end'][1] > 20 * err['rk4', 'start'][1], err
    assert 10 * err['rk4', 'start'][1] < err['euler', 'start'][1] < 0.1, err


def test_windows_never_cross_a_trajectory_or_a_gap():
    dt = 0.01
    t_a = np.r_[np.arange(10), np.arange(12, 22)] * dt  # a gap of two dropped samples
    t_b = np.arange(7) * dt
    t = np.r_[t_a[:5], t_b, t_a[5:]]  # trajectories interleaved in the data
    traj = np.r_[np.zeros(5), np.ones(7), np.zeros(15)].astype(np.int64)
    index, steps = ro.window_index(traj, t, horizon=3)
    # a: runs of 10 and 10 samples -> 7 + 7 windows; b: 7 samples -> 4 windows
    assert index.shape == (18, 4) and steps.shape == (18, 3)
    for w, s in zip(index, steps):
        assert len(set(traj[w])) == 1
        assert np.all(np.diff(t[w]) > 0) and np.allclose(np.diff(t[w]), s)
        assert np.all(s < 1.5 * dt)
    assert len(ro.window_index(traj, t, horizon=9)[0]) == 2  # one per 10-sample run of a


@pytest.fixture(autouse=True)
def one_thread():
    """One torch thread: a rollout's ops are tiny, and a second thread stalls on a busy CPU."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope='module')
def arm_data(two_link):
    return (
        Dataset.from_arrays(two_link.make_data(range(3), duration=4.0)),
        Dataset.from_arrays(two_link.make_data([40], duration=4.0)),
    )


def _trainer(data, loss, seed=0, **kw):
    torch.manual_seed(seed)
    cfg = TrainConfig(
        loss=loss, horizon=5, integrator='euler', batch_size=64, lr=5e-3, seed=seed, **kw
    )
    return Trainer(build_model('delan', data.joint_types, width=16), cfg)


def test_forward_loss_training_reduces_held_out_multistep_error(arm_data):
    train, test = arm_data
    trainer = _trainer(train, 'forward')
    trainer.train_steps(train, 1)
    before = trainer.evaluate(test)
    losses = [trainer.train_steps(train, 20) for _ in range(3)]
    after = trainer.evaluate(test)
    assert losses[-1] < losses[0]
    assert after['forward_loss'] < 0.5 * before['forward_loss'], (before, after)
    assert after['rollout']['q_rms_mean'] < 0.5 * before['rollout']['q_rms_mean']
    assert after['loss'] == after['forward_loss']


def test_both_adds_the_inverse_term(arm_data):
    train, test = arm_data
    trainer = _trainer(train, 'both', forward_weight=2.0)
    assert np.isfinite(trainer.train_steps(train, 3))
    ev = trainer.evaluate(test)
    assert ev['loss'] == pytest.approx(ev['inverse_loss'] + 2.0 * ev['forward_loss'])


def test_forward_loss_needs_time_stamps(arm_data):
    train, _ = arm_data
    arrays = {k: v for k, v in train.arrays().items() if k != 't'}
    with pytest.raises(ValueError, match='time stamps'):
        _trainer(train, 'forward').train_steps(arrays, 1)


def test_forward_loss_with_the_mlp_is_a_clear_error(arm_data, capsys):
    with pytest.raises(ValueError, match='mlp.*inverse model only'):
        Trainer(build_model('mlp', ['revolute'] * 2), TrainConfig(loss='forward'))
    with pytest.raises(ValueError, match='unknown loss'):
        Trainer(build_model('delan', ['revolute'] * 2), TrainConfig(loss='sideways'))
    assert (
        train_main(['--data', 'none.npz', '--out', 'x.pt', '--model', 'mlp', '--loss', 'forward'])
        == 2
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and 'delan-train: error: --loss forward' in err[0] and 'mlp' in err[0]


def test_cli_forward_training_and_horizon_metric(arm_data, tmp_path, capsys):
    train, test = arm_data
    save_npz(tmp_path / 'train.npz', train)
    save_npz(tmp_path / 'test.npz', test)
    out = tmp_path / 'model.pt'
    assert (
        train_main(
            [
                '--data',
                str(tmp_path / 'train.npz'),
                '--out',
                str(out),
                '--loss',
                'both',
                '--horizon',
                '3',
                '--integrator',
                'euler',
                '--torque-timing',
                'start',
                '--max-steps',
                '4',
                '--width',
                '8',
                '--batch',
                '64',
                '--quiet',
            ]
        )
        == 0
    )
    summary = json.loads(capsys.readouterr().out)
    assert summary['loss'] == 'both' and summary['val_rollout']['horizon_steps'] == 3
    assert (
        eval_main(
            ['--checkpoint', str(out), '--data', str(tmp_path / 'test.npz'), '--horizon', '7']
        )
        == 0
    )
    res = json.loads(capsys.readouterr().out)
    roll = res['rollout']
    assert roll['horizon_steps'] == 7 and roll['n_windows'] == len(test) - 7
    assert roll['horizon_s'] == pytest.approx(0.07)
    assert set(roll['q_rms']) == set(res['joint_names']) and roll['qd_rms_mean'] > 0
    assert 'inverse' in res
    assert (
        eval_main(
            ['--checkpoint', str(out), '--data', str(tmp_path / 'test.npz'), '--horizon', '0']
        )
        == 2
    )
