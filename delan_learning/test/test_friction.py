"""DeLaN's friction laws (:mod:`delan_learning.friction`): the Stribeck law is its equation and
holds the simulated plant's law, stays dissipative and smooth, evaluates alike in torch, numpy
and the C kernel, leaves the default law untouched, and fits a plant with Stribeck and
asymmetric friction clearly better than the default after a short training."""

import json

import numpy as np
import pytest
import torch

from delan_common.dynamics import COULOMB_SMOOTHING
from delan_common.joint_effects import JointEffects
from delan_learning.c_kernel import c_kernel
from delan_learning.checkpoint import load_model, save_model
from delan_learning.data import Dataset
from delan_learning.friction import (
    COEFFICIENTS,
    STRIBECK_VELOCITY_FLOOR,
    coefficients,
    friction_torque,
    softplus_inverse,
)
from delan_learning.lagrangian import DelanModel
from delan_learning.numpy_delan import NumpyDelan
from delan_learning.training import TrainConfig, train_model
from delan_testing.models import random_delan

TYPES = ['revolute', 'prismatic', 'continuous']


def model(types=TYPES, friction_model='stribeck', seed=0):
    """Random weights and scales (float64)."""
    return random_delan(
        types, seed=seed, scales=(0.5, 4.0), width=16, friction_model=friction_model
    )


def set_coefficients(m: DelanModel, coef: np.ndarray) -> None:
    """Raw parameters giving the Stribeck coefficients ``coef (5, n)``."""
    units = np.stack(
        [m.tau_scale.numpy()] * 3 + [np.ones(m.n_dof), np.full(m.n_dof, COULOMB_SMOOTHING)]
    )
    value = (coef - np.array([0, 0, 0, 0, STRIBECK_VELOCITY_FLOOR])[:, None]) / units
    with torch.no_grad():
        m.friction_raw.copy_(torch.as_tensor(np.vectorize(softplus_inverse)(value)))


def velocities(n, rng):
    """Velocities through the Stribeck region and beyond, and exactly 0: ``(400, n)``."""
    qd = np.concatenate([rng.uniform(-0.4, 0.4, (300, n)), rng.uniform(-4, 4, (99, n))])
    return np.concatenate([qd, np.zeros((1, n))])


def test_stribeck_law_is_its_equation():
    m = model()
    assert m.friction_raw.shape == (5, 3) and m.config()['friction_model'] == 'stribeck'
    raw = m.friction_raw.detach().numpy()
    softplus = np.logaddexp(0.0, raw)
    tau_scale = m.tau_scale.numpy()
    b, fp, fn = softplus[:3] * tau_scale
    s, vs = softplus[3], softplus[4] * COULOMB_SMOOTHING + STRIBECK_VELOCITY_FLOOR
    named = dict(zip(COEFFICIENTS['stribeck'], (b, fp, fn, s, vs)))
    got = [c.detach().numpy() for c in m.friction_coefficients()]
    for name, c in zip(COEFFICIENTS['stribeck'], got):
        np.testing.assert_allclose(c, named[name], rtol=1e-14, err_msg=name)
    qd = velocities(3, np.random.default_rng(0))
    t = np.tanh(qd / COULOMB_SMOOTHING)
    level = fp * (1 + t) / 2 + fn * (1 - t) / 2  # fc+ moving forward, fc- backward
    expected = b * qd + level * t + s * level * np.exp(-((qd / vs) ** 2)) * t
    with torch.no_grad():
        f = m.friction(torch.as_tensor(qd)).numpy()
    np.testing.assert_allclose(f, expected, rtol=1e-13, atol=1e-15)
    # break-away: the level just past the tanh ramp is about (1 + s) fc in each direction
    far = np.exp(-((4 * COULOMB_SMOOTHING / vs) ** 2))
    assert np.all(far < 1.0)


def test_holds_the_plant_law():
    """The ``realistic`` preset's law (delan_common.joint_effects) is one of the model's."""
    b, fc = np.array([0.3, 0.2, 0.05]), np.array([1.2, 0.4, 0.1])
    r, vs, a = np.array([1.5, 2.0, 1.2]), np.array([0.1, 0.05, 0.3]), np.array([0.25, -0.4, 0.0])
    zero = np.zeros(3)
    plant = JointEffects(
        b, fc, static_ratio=r, stribeck_velocity=vs, asymmetry=a, stiffness=zero, offset=zero
    )
    m = model()
    set_coefficients(m, np.stack([b, fc * (1 + a), fc * (1 - a), r - 1, vs]))
    qd = velocities(3, np.random.default_rng(1))
    with torch.no_grad():
        f = m.friction(torch.as_tensor(qd)).numpy()
    np.testing.assert_allclose(f, plant.friction(qd), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize('raw', [-50.0, 0.0, 30.0, 'random'])
def test_dissipative_finite_and_smooth(raw):
    m = model(seed=3)
    if raw != 'random':
        with torch.no_grad():
            m.friction_raw.fill_(raw)
    coef = torch.stack(m.friction_coefficients())
    assert bool((coef >= 0).all()) and bool((coef[4] >= STRIBECK_VELOCITY_FLOOR).all())
    qd = torch.as_tensor(velocities(3, np.random.default_rng(2)), dtype=torch.float64)
    qd.requires_grad_(True)
    f = m.friction(qd)
    (slope,) = torch.autograd.grad(f.sum(), qd)
    assert bool(torch.isfinite(f).all()) and bool(torch.isfinite(slope).all())
    assert bool(((f * qd) >= 0).all())  # dissipative
    assert torch.equal(f[-1], torch.zeros(3, dtype=torch.float64))  # no torque at rest


def test_training_gradients_equal_finite_differences():
    m = model(['revolute', 'prismatic'], seed=4)
    rng = np.random.default_rng(4)
    q, qd, qdd = (torch.as_tensor(rng.uniform(-0.3, 0.3, (5, 2))) for _ in range(3))
    p = m.friction_raw

    def f(w):
        return torch.func.functional_call(m, {'friction_raw': w}, (q, qd, qdd))

    assert torch.autograd.gradcheck(f, (p.detach().clone().requires_grad_(),))


def _relative(a, b):
    return float(np.abs(np.asarray(a) - np.asarray(b)).max() / max(np.abs(b).max(), 1e-300))


@pytest.mark.parametrize('friction_model', ['coulomb_viscous', 'stribeck'])
def test_torch_numpy_and_c_agree(friction_model):
    """Friction term and whole inverse dynamics of the three implementations, to 1e-12."""
    types = ['revolute'] * 7
    m = model(types, friction_model, seed=5)
    if friction_model == 'stribeck':  # coefficients where the bump and asymmetry show
        rng = np.random.default_rng(5)
        set_coefficients(
            m,
            np.stack(
                [rng.uniform(0.05, 0.5, 7), rng.uniform(0.5, 2, 7), rng.uniform(0.5, 2, 7)]
                + [rng.uniform(0.2, 1, 7), rng.uniform(0.05, 0.2, 7)]
            ),
        )
    rng = np.random.default_rng(6)
    qd = velocities(7, rng)
    q, qdd = rng.normal(size=(2, len(qd), 7))
    with torch.no_grad():
        ref_f = m.friction(torch.as_tensor(qd)).numpy()
        ref = m.inverse(*(torch.as_tensor(x) for x in (q, qd, qdd))).numpy()
    np_path = NumpyDelan(m, use_c=False)
    assert np_path._single_ok  # the hand-tuned one-state path is the one checked
    assert _relative(np_path.friction(qd), ref_f) <= 1e-12
    assert _relative(np_path.inverse(q, qd, qdd), ref) <= 1e-12
    single = np.stack([np_path.inverse(*x) for x in zip(q[:40], qd[:40], qdd[:40])])
    assert _relative(single, ref[:40]) <= 1e-12
    if c_kernel() is None:
        pytest.skip('no C compiler')
    c_path = NumpyDelan(m)
    assert c_path.backend == 'c'
    got = np.stack([c_path.inverse(*x) for x in zip(q, qd, qdd)])
    assert _relative(got, ref) <= 1e-12


def test_default_law_and_old_checkpoints_unchanged(tmp_path):
    """The default is the viscous + Coulomb law bit for bit, with the parameter it always had,
    and a checkpoint written before the friction model was recorded loads to the same model."""
    m = model(TYPES, 'coulomb_viscous')
    assert DelanModel(TYPES).config()['friction_model'] == 'coulomb_viscous'
    assert m.friction_raw.shape == (2, 3)
    rng = np.random.default_rng(7)
    qd = torch.as_tensor(velocities(3, rng))
    viscous, coulomb = torch.nn.functional.softplus(m.friction_raw) * m.tau_scale
    with torch.no_grad():
        assert torch.equal(
            m.friction(qd), viscous * qd + coulomb * torch.tanh(qd * (1.0 / COULOMB_SMOOTHING))
        )
    fast = NumpyDelan(m, use_c=False)
    v, c = viscous.detach().numpy(), coulomb.detach().numpy()
    assert np.array_equal(
        fast.friction(qd.numpy()),
        v * qd.numpy() + c * np.tanh(qd.numpy() * (1.0 / COULOMB_SMOOTHING)),
    )
    path = str(tmp_path / 'old.pt')
    save_model(m, path, {'joint_names': ['a', 'b', 'c']})
    recorded = load_model(path)[0]
    payload = torch.load(path, weights_only=True)
    meta = json.loads(payload['metadata_json'])
    del meta['hyperparameters']['friction_model']  # as written before the law was selectable
    payload['metadata_json'] = json.dumps(meta)
    torch.save(payload, path)
    loaded, meta = load_model(path)
    assert loaded.friction_model == 'coulomb_viscous'
    q, qdd = (torch.as_tensor(rng.normal(size=qd.shape)) for _ in range(2))
    with torch.no_grad():
        assert torch.equal(loaded.inverse(q, qd, qdd), recorded.inverse(q, qd, qdd))


def test_checkpoint_records_the_law(tmp_path):
    m = model()
    path = str(tmp_path / 'm.pt')
    save_model(m, path, {'joint_names': ['a', 'b', 'c']})
    loaded, meta = load_model(path)
    assert meta['hyperparameters']['friction_model'] == 'stribeck'
    assert loaded.friction_model == 'stribeck'
    assert torch.equal(loaded.friction_raw, m.friction_raw.float().double())  # stored float32
    with pytest.raises(ValueError, match='friction_model'):
        DelanModel(TYPES, friction_model='lugre')
    with pytest.raises(ValueError, match='rows'):
        coefficients(torch.zeros(3, 2), torch.ones(2))
    assert friction_torque(np.zeros((5, 2)) + 0.1, np.zeros(2)).tolist() == [0.0, 0.0]


# -- a short training on a plant with Stribeck and asymmetric friction -----------------------
def plant_data(arm, effects: JointEffects, seeds, speed=1.0):
    """The 2-link arm's data with ``effects``' friction in place of the URDF's."""
    d = arm.make_data(seeds, speed=speed)
    d['tau'] = d['tau'] - arm.inverse(d['q'], d['qd'], d['qdd']) + rnea(arm, d)
    d['tau'] += effects.friction(d['qd'])
    return d


def rnea(arm, d):
    pin = arm.pin
    return np.stack(
        [pin.rnea(arm.model, arm.data, *x).copy() for x in zip(d['q'], d['qd'], d['qdd'])]
    )


def nmse(m, d):
    """Held-out torque nMSE per joint ``(n,)``."""
    pred = NumpyDelan(m).inverse(d['q'], d['qd'], d['qdd'])
    return np.mean((pred - d['tau']) ** 2, axis=0) / np.var(d['tau'], axis=0)


@pytest.fixture(scope='module')
def stribeck_plant(two_link):
    """The ``realistic`` preset's friction shape (break-away 1.5 x Coulomb, vs = 0.1 rad/s,
    asymmetry +-0.25) at 4 x the URDF's friction, so that it is a sizeable share of the torque,
    as on the 7-DoF arm's wrist; models of each law trained alike on 8 trajectories."""
    zero = np.zeros(2)
    effects = JointEffects(
        4 * two_link.viscous,
        4 * two_link.coulomb,
        static_ratio=np.full(2, 1.5),
        stribeck_velocity=np.full(2, 0.1),
        asymmetry=np.array([0.25, -0.25]),
        stiffness=zero,
        offset=zero,
    )
    data = Dataset.from_arrays(plant_data(two_link, effects, range(8)))
    cfg = TrainConfig(max_steps=2000, batch_size=512, lr=1e-2, lr_schedule='cosine', patience=0)
    cfg.val_fraction = 0.0
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # batch-512 ops gain nothing from a second thread
    try:
        models = {
            fm: train_model(data, 'delan', cfg, {'width': 32, 'friction_model': fm}).model
            for fm in ('coulomb_viscous', 'stribeck')
        }
    finally:
        torch.set_num_threads(threads)
    return two_link, effects, models


def test_stribeck_law_fits_the_plant_clearly_better(stribeck_plant):
    arm, effects, models = stribeck_plant
    for speed in (1.0, 2.0):
        test = plant_data(arm, effects, (100, 101), speed=speed)
        old, new = (nmse(models[fm], test) for fm in ('coulomb_viscous', 'stribeck'))
        print(f'{speed:g}x held-out torque nMSE: coulomb_viscous {old}, stribeck {new}')
        assert np.all(new < 0.6 * old), (speed, old, new)
    coef = dict(zip(COEFFICIENTS['stribeck'], models['stribeck'].friction_coefficients()))
    np.testing.assert_allclose(coef['stribeck_velocity'].detach(), 0.1, rtol=0.3)
