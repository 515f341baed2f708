"""Plant joint effects (Stribeck / asymmetric friction, springs, the ``realistic`` preset): each
against its equation, energy bookkeeping, stability at 1 kHz, plant == truth model, nothing
changed with them off, and a residual rigid-body identification cannot remove."""

import numpy as np
import pytest

from delan_common.dynamics import COULOMB_SMOOTHING, friction_torque
from delan_common.robot_model import JOINT_EFFECT_FIELDS, Mismatch, RobotModel
from delan_control.datagen import generate_dataset
from delan_control.datagen import main as datagen_main
from delan_control.plant import Plant
from delan_control.sysid import identify_dataset

ARMS = ('two_link_arm.urdf', 'seven_dof_arm.urdf')
START = {
    'two_link_arm.urdf': [0.7, -0.4],
    'seven_dof_arm.urdf': [0.3, 0.8, 0.2, -1.0, 0.4, 0.7, 0.1],
}
NO_FRICTION = dict(viscous=[0.0], coulomb=[0.0])
EPS = COULOMB_SMOOTHING
FRICTION = dict(
    viscous=[0.1, 0.05],
    coulomb=[0.4, 0.2],
    stribeck_static_ratio=[1.5, 2.0],
    stribeck_velocity=[0.1, 0.3],
    coulomb_asymmetry=[0.3, -0.2],
)


@pytest.fixture(scope='module')
def models():
    return {urdf: RobotModel(urdf) for urdf in ARMS}


def stribeck(qd, b, fc, fs_ratio, vs, a):
    """The issue's law, written out independently: ``(fc_dir + (fs - fc_dir) exp(-(qd /
    vs)^2)) tanh(qd / eps) + b qd`` with ``fc_dir = fc (1 + a tanh(qd / eps))`` and ``fs = r
    fc_dir``."""
    fc_dir = fc * (1.0 + a * np.tanh(qd / EPS))
    fs = fs_ratio * fc_dir
    return (fc_dir + (fs - fc_dir) * np.exp(-((qd / vs) ** 2))) * np.tanh(qd / EPS) + b * qd


def test_friction_follows_its_equation(models):
    m = models['two_link_arm.urdf'].mismatched(Mismatch(**FRICTION))
    fx = m.effects
    assert fx.shaped and not fx.sprung
    qd = np.linspace(-3.0, 3.0, 6001)[:, None] * np.ones(2)
    f = m.friction(qd)
    want = np.stack(
        [
            stribeck(
                qd[:, i],
                *(
                    np.asarray(FRICTION[k])[i]
                    for k in (
                        'viscous',
                        'coulomb',
                        'stribeck_static_ratio',
                        'stribeck_velocity',
                        'coulomb_asymmetry',
                    )
                ),
            )
            for i in range(2)
        ],
        axis=1,
    )
    np.testing.assert_allclose(f, want, rtol=1e-12, atol=1e-15)
    np.testing.assert_array_equal(m.friction(np.zeros(2)), 0.0)
    assert np.all(qd * f >= 0.0)  # dissipative
    # away from rest the Coulomb level is fc (1 + a) forward, fc (1 - a) backward
    fc, a, b = (np.asarray(FRICTION[k]) for k in ('coulomb', 'coulomb_asymmetry', 'viscous'))
    np.testing.assert_allclose(f[-1] - b * 3.0, fc * (1 + a), rtol=1e-9)
    np.testing.assert_allclose(f[0] + b * 3.0, -fc * (1 - a), rtol=1e-9)
    # break-away: at low speed the level rises above it, then decays (Stribeck)
    coulomb_part = f - b * qd
    fwd = qd[:, 0] > 0
    peak = coulomb_part[fwd].max(axis=0)
    assert np.all(peak > 1.1 * fc * (1 + a))
    assert np.all(qd[fwd][coulomb_part[fwd].argmax(axis=0), [0, 1]] < 3 * np.array([0.1, 0.3]))
    # secant slope: tau_f = S qd, S > 0, b + r fc / eps at rest; max_slope bounds the tangent
    S = fx.slope(qd)
    np.testing.assert_allclose(S * qd, f, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(fx.slope(np.zeros(2)), b + np.array([1.5, 2.0]) * fc / EPS)
    assert np.all(S > 0)
    tangent = np.gradient(f, qd[:, 0], axis=0)
    assert np.all(tangent <= fx.max_slope() * (1 + 1e-6))
    np.testing.assert_allclose(tangent.max(axis=0), fx.max_slope(), rtol=1e-3)


def test_spring_follows_its_equation(models):
    nom = models['two_link_arm.urdf']
    k, q0 = np.array([3.0, 0.5]), np.array([0.4, -0.2])
    m = nom.mismatched(Mismatch(spring_stiffness=k, spring_offset=q0))
    assert m.effects.sprung and not m.effects.shaped
    rng = np.random.default_rng(1)
    q, qd, qdd = (rng.uniform(-2, 2, (6, 2)) for _ in range(3))
    np.testing.assert_allclose(m.gravity(q) - nom.gravity(q), k * (q - q0), atol=1e-12)
    np.testing.assert_allclose(
        m.inverse(q, qd, qdd) - nom.inverse(q, qd, qdd), k * (q - q0), atol=1e-12
    )
    np.testing.assert_allclose(m.nonlinear(q, qd) - nom.nonlinear(q, qd), k * (q - q0), atol=1e-12)
    np.testing.assert_allclose(m.coriolis(q, qd), nom.coriolis(q, qd), atol=1e-12)
    dV = m.energy(q, qd)[1] - nom.energy(q, qd)[1]
    np.testing.assert_allclose(dV, 0.5 * np.sum(k * (q - q0) ** 2, axis=1), atol=1e-12)
    # g = dV/dq, spring included
    h = 1e-6
    for qi in q[:2]:
        grad = [
            (m.energy(qi + h * e, qi)[1] - m.energy(qi - h * e, qi)[1]) / (2 * h)
            for e in np.eye(2)
        ]
        np.testing.assert_allclose(grad, m.gravity(qi), rtol=1e-6, atol=1e-6)


def energy_series(plant, seconds, every=1):
    E, T, Vs = [], [], []
    for _ in range(int(round(seconds * plant.physics_rate / every))):
        plant.step(np.zeros(plant.n), every)
        t, v = plant.energy()
        E.append(t + v)
        T.append(t)
        Vs.append(float(plant.truth.effects.spring_energy(plant.q)))
    return np.array(E), np.array(T), np.array(Vs)


@pytest.mark.parametrize('urdf', ARMS)
def test_energy_with_springs_is_conserved(urdf, models):
    """No friction, no torque: kinetic + gravity + spring energy stays put at 1 kHz; without
    the spring's potential in the books it would not."""
    nom = models[urdf]
    k = np.zeros(nom.n)
    k[:2] = 0.5 * nom.gravity_scale()[:2].max()  # springs that matter on both arms
    plant = Plant(
        nom,
        Mismatch(spring_stiffness=k, spring_offset=0.3, **NO_FRICTION),
        position_limits=False,
        q0=START[urdf],
    )
    E0 = sum(plant.energy())
    E, T, Vs = energy_series(plant, 3.0, every=10)
    assert T.max() > 1.0 and np.ptp(Vs) > 1.0  # it swings, the springs work
    drift = np.abs(E - E0).max() / T.max()
    assert drift < 1e-4, drift
    assert np.abs(E - Vs - (E0 - Vs[0])).max() / T.max() > 100 * drift


@pytest.mark.parametrize('integrator', ['rk4', 'semi_implicit_euler'])
@pytest.mark.parametrize('urdf', ARMS)
def test_friction_with_effects_only_dissipates(urdf, integrator):
    """The realistic preset without input: total energy (springs included) never rises."""
    plant = Plant(
        urdf,
        Mismatch(preset='realistic'),
        integrator=integrator,
        position_limits=False,
        q0=START[urdf],
        qd0=np.linspace(-1.0, 1.5, len(START[urdf])),
    )
    E0 = sum(plant.energy())
    E, _, _ = energy_series(plant, 2.0)
    assert np.all(np.diff(np.concatenate([[E0], E])) <= 1e-9)
    assert E[-1] < E0 - 0.5


@pytest.mark.parametrize('integrator', ['rk4', 'semi_implicit_euler'])
@pytest.mark.parametrize('urdf', ARMS)
def test_realistic_preset_is_stable_at_1khz(urdf, integrator, models):
    nom = models[urdf]
    plant = Plant(nom, Mismatch(preset='realistic'), integrator=integrator, q0=START[urdf])
    vmax = 0.0
    for _ in range(200):  # 2 s falling freely (end stops on)
        plant.step(np.zeros(nom.n), 10)
        vmax = max(vmax, float(np.abs(plant.qd).max()))
    assert plant.blowups == 0 and np.all(np.isfinite(plant.q)) and vmax < 30.0
    # PD hold on the nominal gravity at 1 kHz: comes to rest off the target by what the payload
    # and springs pull, creeping the last bit (smooth Coulomb friction never sticks), no chatter
    target = np.asarray(START[urdf])
    m = 1.0 / np.diag(np.linalg.inv(nom.mass_matrix(target)))
    kp, kd = 400.0 * m, 40.0 * m
    plant.reset(target + 0.1, np.zeros(nom.n))
    speed = []
    for _ in range(2000):
        q, qd = plant.q, plant.qd
        plant.step(nom.gravity(q) + kp * (target - q) - kd * qd)
        speed.append(np.abs(plant.qd).max())
    assert plant.blowups == 0
    assert np.abs(plant.q - target).max() < 0.5
    assert max(speed[-500:]) < min(0.02, max(speed[-1000:-500]))


@pytest.mark.parametrize('urdf', ARMS)
def test_plant_and_truth_model_agree(urdf, models):
    nom = models[urdf]
    plant = Plant(nom, Mismatch(preset='realistic'))
    truth = plant.truth
    assert truth.effects.shaped and truth.effects.sprung
    rng = np.random.default_rng(4)
    lo, hi = nom.sample_bounds()
    q = rng.uniform(lo, hi, (20, nom.n))
    qd = rng.normal(size=(20, nom.n)) * np.array([0.02, 0.3, 2.0] * 7)[: nom.n]
    tau = rng.normal(size=(20, nom.n)) * 5.0
    a = truth.forward(q, qd, tau)
    for i in range(3):
        np.testing.assert_array_equal(plant.acceleration(q[i], qd[i], tau[i]), a[i])
    np.testing.assert_allclose(truth.inverse(q, qd, a), tau, rtol=0, atol=1e-9)
    # the truth model is a different robot from the nominal one
    assert not np.allclose(nom.inverse(q, qd, a), tau, atol=1e-3)


def test_plant_integrates_the_effects():
    """On the 2-link arm (no stiff-friction armature) the plant's step follows a tight RK4 of
    the truth model's ``forward``: the same friction law and spring, stage by stage."""
    plant = Plant('two_link_arm.urdf', Mismatch(preset='realistic'), position_limits=False)
    assert np.all(plant._stiff_armature == 0)
    truth = plant.truth
    q0, qd0, tau = np.array([0.5, -0.3]), np.array([0.05, -0.4]), np.array([4.0, -1.0])
    h = 1.0 / 8000.0
    q, v = q0.copy(), qd0.copy()
    for _ in range(2000):  # 0.25 s
        a1 = truth.forward(q, v, tau)
        a2 = truth.forward(q + h / 2 * v, v + h / 2 * a1, tau)
        a3 = truth.forward(q + h / 2 * v + h * h / 4 * a1, v + h / 2 * a2, tau)
        a4 = truth.forward(q + h * v + h * h / 2 * a2, v + h * a3, tau)
        q, v = q + h * v + h * h / 6 * (a1 + a2 + a3), v + h / 6 * (a1 + 2 * a2 + 2 * a3 + a4)
    # semi-implicit Euler: 1st order (the same error without the effects)
    for integrator, tol in (('rk4', 1e-7), ('semi_implicit_euler', 5e-3)):
        plant = Plant(
            'two_link_arm.urdf',
            Mismatch(preset='realistic'),
            integrator=integrator,
            position_limits=False,
            q0=q0,
            qd0=qd0,
        )
        plant.run(tau, 0.25)
        np.testing.assert_allclose(plant.q, q, atol=tol)
        np.testing.assert_allclose(plant.qd, v, atol=20 * tol)


def test_torques_explain_the_motion_with_the_realistic_preset():
    """Computed torque on the 7-DoF arm with the preset (light joints creeping against a
    stiffer, break-away friction): the recorded data satisfy the truth model."""
    from test_plant import recorded_torque_nmse

    nominal = RobotModel('seven_dof_arm.urdf')
    nmse = recorded_torque_nmse(Plant(nominal, Mismatch(preset='realistic')), nominal, 750)
    assert np.all(nmse < 0.01), nmse


@pytest.mark.parametrize('integrator', ['rk4', 'semi_implicit_euler'])
def test_effects_off_change_nothing(integrator, models):
    """Off values (whatever the parameters that only matter when on) give the plain law: the
    same trajectory bit for bit, on the inline friction path."""
    off = Mismatch(
        stribeck_static_ratio=1.0,
        stribeck_velocity=0.7,
        coulomb_asymmetry=0.0,
        spring_stiffness=0.0,
        spring_offset=0.4,
    )
    # Stribeck on a joint without Coulomb friction changes nothing either
    frictionless = Mismatch(coulomb=[0.0] * 7, stribeck_static_ratio=2.0, coulomb_asymmetry=0.5)
    for urdf, mm in (
        ('two_link_arm.urdf', off),
        ('seven_dof_arm.urdf', off),
        ('seven_dof_arm.urdf', frictionless),
    ):
        base = Mismatch(coulomb=mm.coulomb)
        runs = []
        for m in (base, mm):
            plant = Plant(
                models[urdf],
                m,
                integrator=integrator,
                torque_noise=0.1,
                seed=2,
                q0=START[urdf],
                qd0=np.full(len(START[urdf]), 0.5),
            )
            assert not plant._extra
            plant.run(plant.truth.gravity(np.zeros(plant.n)) * 0.5 + 0.3, 0.3)
            runs.append((plant.q, plant.qd, plant._stiff_armature))
        for x, y in zip(*runs):
            np.testing.assert_array_equal(x, y)
        q = np.random.default_rng(0).normal(size=(4, plant.n))
        truths = [models[urdf].mismatched(m) for m in (base, mm)]
        for fn in ('friction', 'gravity'):
            np.testing.assert_array_equal(getattr(truths[0], fn)(q), getattr(truths[1], fn)(q))
        np.testing.assert_array_equal(truths[0].forward(q, q, q), truths[1].forward(q, q, q))
        np.testing.assert_array_equal(truths[0].energy(q, q)[1], truths[1].energy(q, q)[1])
        np.testing.assert_array_equal(
            truths[1].friction(q), friction_torque(q, truths[1].viscous, truths[1].coulomb)
        )


def test_realistic_preset_values(models):
    two, seven = models['two_link_arm.urdf'], models['seven_dof_arm.urdf']
    mm = Mismatch.from_preset('realistic', two)
    assert mm.preset == '' and mm.payload_mass == 0.6
    assert mm.viscous_scale == mm.coulomb_scale == 2.0
    assert mm.stribeck_static_ratio == 1.5 and mm.stribeck_velocity == 0.1
    assert mm.coulomb_asymmetry == [0.25, -0.25]
    np.testing.assert_allclose(mm.spring_stiffness, 0.15 * two.gravity_scale())
    # the 7-DoF base axis is vertical (no gravity load): springs on joints 2 and 3
    k7 = np.asarray(Mismatch.from_preset('realistic', seven).spring_stiffness)
    assert np.flatnonzero(k7).tolist() == [1, 2]
    np.testing.assert_allclose(k7[1:3], 0.15 * seven.gravity_scale()[1:3])
    # a truth model built from the preset name holds the expanded values
    truth = two.mismatched(Mismatch(preset='realistic'))
    assert truth.mismatch == mm and truth.mismatch.is_identity() is False
    spec_ratio = truth.spec.friction / two.spec.friction
    np.testing.assert_allclose(spec_ratio, 2.0)
    # fields away from their defaults win over the preset
    mine = two.mismatched(
        Mismatch(preset='realistic', payload_mass=0.2, coulomb_asymmetry=[0.1, 0.1])
    ).mismatch
    assert mine.payload_mass == 0.2 and mine.coulomb_asymmetry == [0.1, 0.1]
    assert mine.stribeck_static_ratio == 1.5
    with pytest.raises(ValueError):
        Mismatch(preset='unrealistic')


def test_from_params_reads_the_effects(models):
    nom = models['two_link_arm.urdf']
    p = {
        'stribeck_static_ratio': [1.4],
        'stribeck_velocity': [0.05, 0.2],
        'coulomb_asymmetry': -0.1,
        'spring_stiffness': [2.0, 0.0],
        'spring_offset': [0.3],
        'mismatch_preset': '',
    }
    m = nom.mismatched(Mismatch.from_params(p))
    fx = m.effects
    np.testing.assert_array_equal(fx.static_ratio, [1.4, 1.4])  # scalar broadcast
    np.testing.assert_array_equal(fx.stribeck_velocity, [0.05, 0.2])
    np.testing.assert_array_equal(fx.asymmetry, [-0.1, -0.1])
    np.testing.assert_array_equal(fx.stiffness, [2.0, 0.0])
    np.testing.assert_array_equal(fx.offset, [0.3, 0.3])
    assert Mismatch.from_params({}).is_identity() is True
    assert Mismatch(mass_scale=[1.0, 1.2]).is_identity() is False  # a bool, not numpy's
    # the sim declares every parameter: its off defaults keep the preset's values
    defaults = {name: [getattr(Mismatch(), name)] for name in JOINT_EFFECT_FIELDS}
    preset = Mismatch.from_params(
        {
            **defaults,
            'payload_mass': 0.0,
            'friction_scale': 1.0,
            'viscous': [-1.0],
            'coulomb': [-1.0],
            'mismatch_preset': 'realistic',
        }
    )
    assert nom.mismatched(preset).mismatch == Mismatch.from_preset('realistic', nom)
    over = Mismatch.from_params(
        {'mismatch_preset': 'realistic', 'friction_scale': 3.0, 'spring_stiffness': [0.5]}
    )
    got = nom.mismatched(over).mismatch
    assert got.coulomb_scale == 3.0 and got.spring_stiffness == [0.5]
    assert got.payload_mass == 0.6
    for bad in (
        {'stribeck_static_ratio': 0.5},
        {'stribeck_velocity': 0.0},
        {'coulomb_asymmetry': [1.5]},
        {'spring_stiffness': -1.0},
        {'spring_offset': [0.0, 0.0, 0.0]},
    ):
        with pytest.raises(ValueError):
            nom.mismatched(Mismatch.from_params(bad))


def test_rigid_body_identification_cannot_fit_the_preset(tmp_path):
    """The payload mismatch lies in the rigid-body parameter space (held-out residual ~0); the
    preset's friction shapes and springs do not."""
    nom = RobotModel('two_link_arm.urdf')
    worst = {}
    for name, mm in (
        ('payload', Mismatch(payload_mass=0.6, viscous_scale=2.0, coulomb_scale=2.0)),
        ('realistic', Mismatch(preset='realistic')),
    ):
        data = generate_dataset(
            'two_link_arm.urdf', trajectories=3, duration=3.0, seed=3, mismatch=mm
        )
        _, report = identify_dataset(nom, data)
        worst[name] = max(report['nmse_test'].values())
    assert worst['payload'] < 1e-8
    assert worst['realistic'] > 1e-3
    # the generator's CLI takes the preset and records the values it simulated
    out = tmp_path / 'd.npz'
    assert (
        datagen_main(
            [
                '--urdf',
                'two_link_arm.urdf',
                '--out',
                str(out),
                '--trajectories',
                '1',
                '--duration',
                '0.2',
                '--mismatch-preset',
                'realistic',
            ]
        )
        == 0
    )
    import json

    meta = json.loads(str(np.load(out)['meta']))
    assert meta['mismatch']['preset'] == '' and meta['mismatch']['payload_mass'] == 0.6
