"""delan_residual: a DeLaN fitted to what the nominal (URDF) model misses, added to it."""

import numpy as np
import pytest
import torch

from delan_common.residual_dynamics import NominalPlusResidual
from delan_common.robot_model import Mismatch, RobotModel, find_urdf
from delan_learning.checkpoint import load_model, save_model
from delan_learning.fastpath import dynamics_model
from delan_learning.models import build_model
from delan_learning.online import ReplayBuffer, Sample, evaluate_total, fit_targets
from delan_learning.training import TorqueNormalizer, TrainConfig, Trainer


def _motion(model, n_samples, seed):
    rng = np.random.default_rng(seed)
    lo, hi = model.sample_bounds()
    n = model.n
    return (
        rng.uniform(lo, hi, (n_samples, n)),
        rng.normal(0, 1.5, (n_samples, n)),
        rng.normal(0, 4, (n_samples, n)),
    )


def _nmse(pred, tau):
    return np.mean((pred - tau) ** 2, axis=0) / np.var(tau, axis=0)


@pytest.mark.parametrize('urdf', ['panda.urdf', 'ur5_joint_limited_robot.urdf'])
def test_untrained_residual_is_the_nominal_model(urdf):
    nominal = RobotModel(find_urdf(urdf))
    q, qd, qdd = _motion(nominal, 256, 0)
    tau_nom = nominal.inverse(q, qd, qdd)
    torch.manual_seed(0)
    res = build_model('delan_residual', nominal.joint_types)
    # scales from a residual a tenth of the torque: the size a payload gives
    res.init_scales(*(torch.as_tensor(x) for x in (q, qd, qdd, 0.1 * tau_nom)))
    both = NominalPlusResidual(nominal, dynamics_model(res.double(), nominal.joint_names))
    rel = np.abs(both.inverse(q, qd, qdd) - tau_nom).max(axis=0) / tau_nom.std(axis=0)
    assert rel.max() < 0.02, rel
    assert np.linalg.eigvalsh(both.mass_matrix(q)).min() > 0


def test_the_residual_mass_matrix_is_never_lighter_than_the_urdfs():
    """``H_URDF + L L^T``: whatever the weights, the residual only adds inertia, so a URDF that
    overstates the arm's cannot be corrected (docs/demo.md, "What it cannot learn")."""
    nominal = RobotModel(find_urdf('panda.urdf'))
    q, qd, qdd = _motion(nominal, 64, 1)
    torch.manual_seed(1)
    res = build_model('delan_residual', nominal.joint_types)
    res.init_scales(*(torch.as_tensor(x) for x in (q, qd, qdd, nominal.inverse(q, qd, qdd))))
    with torch.no_grad():
        for w in res.parameters():
            w.add_(torch.randn_like(w))  # any trained state
    both = NominalPlusResidual(nominal, dynamics_model(res.double(), nominal.joint_names))
    added = both.mass_matrix(q) - nominal.mass_matrix(q)
    assert np.abs(added).max() > 1e-3  # the residual does add inertia
    assert np.linalg.eigvalsh(added).min() > -1e-9


def test_residual_learns_a_payload_and_friction_the_urdf_lacks(tmp_path):
    urdf = find_urdf('two_link_arm.urdf')
    nominal = RobotModel(urdf)
    true = nominal.mismatched(Mismatch(payload_mass=0.6, viscous_scale=2.0, coulomb_scale=2.0))
    rng = np.random.default_rng(1)

    def data(n_samples, seed):
        q, qd, qdd = _motion(nominal, n_samples, seed)
        tau = true.inverse(q, qd, qdd)
        tau = tau + 0.01 * tau.std(axis=0) * rng.standard_normal(tau.shape)
        return {'q': q, 'qd': qd, 'qdd': qdd, 'tau': tau, 'tau_prior': nominal.inverse(q, qd, qdd)}

    train, val = data(4000, 2), data(1000, 3)
    torch.manual_seed(0)
    model = build_model('delan_residual', nominal.joint_types, width=32, depth=2)
    trainer = Trainer(
        model,
        TrainConfig(lr=3e-3, seed=0),
        TorqueNormalizer.from_torques(train['tau']),
        dtype=torch.float64,
    )
    before = evaluate_total(trainer, val)
    trainer.train_steps(fit_targets(train), 1500, batch_size=256)
    after = evaluate_total(trainer, val)
    nominal_nmse = _nmse(val['tau_prior'], val['tau'])
    assert np.allclose(before['nmse'], nominal_nmse, rtol=0.1)  # starts as the nominal model
    assert np.all(np.asarray(after['nmse']) < 0.1 * nominal_nmse), (after['nmse'], nominal_nmse)
    # the checkpoint keeps the kind; the composed model predicts what evaluate_total measured
    path = str(tmp_path / 'res.pt')
    save_model(trainer.model.double(), path, {'joint_names': nominal.joint_names})
    loaded, meta = load_model(path)
    assert meta['model_kind'] == 'delan_residual' and loaded.kind == 'delan_residual'
    both = NominalPlusResidual(nominal, dynamics_model(loaded, nominal.joint_names))
    pred = both.inverse(val['q'], val['qd'], val['qdd'])
    assert np.allclose(_nmse(pred, val['tau']), after['nmse'], rtol=1e-3)
    assert np.linalg.eigvalsh(both.mass_matrix(val['q'])).min() > 0


def test_residual_buffer_needs_the_prior_and_nmse_is_of_the_measured_torque():
    buf = ReplayBuffer(10, 2, prior=True)
    s = Sample(0.0, np.zeros(2), np.zeros(2), np.zeros(2), np.array([1.0, 2.0]))
    with pytest.raises(ValueError, match='tau_prior'):
        buf.add(s)
    buf.add(
        Sample(
            0.0,
            np.zeros(2),
            np.zeros(2),
            np.zeros(2),
            np.array([1.0, 2.0]),
            tau_prior=np.array([0.5, 0.5]),
        )
    )
    data = buf.all()
    assert np.allclose(fit_targets(data)['tau'], [[0.5, 1.5]])
    assert np.allclose(data['tau'], [[1.0, 2.0]])  # the buffer keeps the measured torque
    assert 'tau_prior' not in ReplayBuffer(10, 2).all()


def test_acceleration_metric_loss_weighs_errors_by_the_inverse_inertia():
    """With a metric W per sample (W = H^-1: W e is the acceleration the error e causes), the
    loss is |W e|^2 over its typical size: an error along a light direction costs more than the
    same torque along a heavy one, by the square of their inertias' ratio."""
    nominal = RobotModel(find_urdf('panda.urdf'))
    q, qd, qdd = _motion(nominal, 64, 4)
    tau = nominal.inverse(q, qd, qdd)
    W = nominal.acceleration_metric(q)
    H = nominal.mass_matrix(q)
    assert np.allclose(W @ H, np.eye(H.shape[-1]), atol=1e-9)
    norm = TorqueNormalizer.from_torques(tau, W)
    a = np.einsum('bij,bj->bi', W, tau - tau.mean(axis=0))
    assert norm.accel_scale == pytest.approx(np.mean(a * a))
    assert TorqueNormalizer.from_dict(norm.to_dict()).accel_scale == norm.accel_scale
    torch.manual_seed(0)
    model = build_model('delan', nominal.joint_types, width=16, depth=1)
    trainer = Trainer(
        model, TrainConfig(seed=0, loss_metric='acceleration'), norm, dtype=torch.float64
    )
    data = {'q': q, 'qd': qd, 'qdd': qdd, 'tau': tau, 'metric': W}
    ev = trainer.evaluate(data)
    with torch.no_grad():
        err = model(*(torch.as_tensor(x) for x in (q, qd, qdd))).numpy() - tau
    e_w = np.einsum('bij,bj->bi', W, err)
    assert ev['loss'] == pytest.approx(np.mean(e_w * e_w) / norm.accel_scale, rel=1e-9)
    # the same torque error costs more along the lightest direction of H than the heaviest
    lam, vec = np.linalg.eigh(nominal.mass_matrix(q[0]))
    cost = [np.sum((W[0] @ vec[:, k]) ** 2) for k in (0, -1)]
    assert cost[0] > 10 * cost[1]
    assert cost[0] / cost[1] == pytest.approx((lam[-1] / lam[0]) ** 2, rel=1e-6)
    # a normaliser without the scale is refused, not silently used

    def fresh():
        return build_model('delan', nominal.joint_types, width=16, depth=1)

    plain = Trainer(
        fresh(),
        TrainConfig(seed=0, loss_metric='acceleration'),
        TorqueNormalizer.from_torques(tau),
        dtype=torch.float64,
    )
    with pytest.raises(ValueError, match='accel_scale'):
        plain.evaluate(data)
    with pytest.raises(ValueError, match='needs a metric'):
        Trainer(fresh(), TrainConfig(seed=0, loss_metric='both'), norm).evaluate(
            {k: v for k, v in data.items() if k != 'metric'}
        )
    # 'both' adds the torque loss; 'torque' ignores the metric
    both = Trainer(model, TrainConfig(seed=0, loss_metric='both'), norm, dtype=torch.float64)
    torque = Trainer(model, TrainConfig(seed=0), norm, dtype=torch.float64)
    assert both.evaluate(data)['loss'] == pytest.approx(
        ev['loss'] + torque.evaluate(data)['loss'], rel=1e-9
    )
    # the forward loss measures motion itself: a metric with it is a clear error
    with pytest.raises(ValueError, match='loss_metric'):
        Trainer(fresh(), TrainConfig(seed=0, loss='forward', loss_metric='acceleration'))
