"""Classical identification: exact recovery from noise-free plant data, graceful degradation with
noise, physical consistency (the default estimator) on every robot and data regime, the
identified model as a DynamicsModel, safe persistence, the CLIs."""

import json
import os
import subprocess

import numpy as np
import pinocchio as pin
import pytest

from delan_common.dynamics import DynamicsModel
from delan_common.robot_model import (
    Mismatch,
    RobotDescriptionError,
    RobotModel,
    example_robot_data_files,
)
from delan_control.datagen import add_measurement_noise, generate_dataset
from delan_control.datagen import main as gen_main
from delan_control.evaluation import simulated_tracking_rms
from delan_control.sysid import (
    IdentifiedModel,
    dynamic_parameters,
    identify,
    identify_dataset,
    load_data,
    log_cholesky,
    nmse,
    nominal_parameters,
    pseudo_inertia,
    regressor,
)
from delan_control.sysid import main as sysid_main

MISMATCH_2 = Mismatch(
    mass_scale=[1.2, 0.9], payload_mass=0.5, coulomb_scale=1.5, viscous_scale=0.6
)
MISMATCH_7 = Mismatch(
    mass_scale=1.15, inertia_scale=1.2, payload_mass=0.8, coulomb_scale=1.4, viscous_scale=0.7
)


SHIPPED = example_robot_data_files()
UR5 = SHIPPED.get('ur5_joint_limited_robot.urdf', 'ur5_joint_limited_robot.urdf')
# the UR5 URDF has no friction: the plant gets some
MISMATCH_UR5 = Mismatch(
    payload_mass=1.0,
    viscous=[0.5, 0.5, 0.3, 0.1, 0.1, 0.05],
    coulomb=[1.0, 1.0, 0.6, 0.2, 0.2, 0.1],
)
PANDA = SHIPPED.get('panda.urdf', 'panda.urdf')
MISMATCH_PANDA = Mismatch(payload_mass=0.5, viscous=[0.3] * 7, coulomb=[0.5] * 7)
# what an online demo records: little data, slow, noisy
SHORT = dict(trajectories=2, duration=2.0, velocity_fraction=0.2, noise=0.01)


@pytest.fixture(scope='module')
def two_link_data():
    return generate_dataset(
        'two_link_arm.urdf', trajectories=4, duration=6.0, mismatch=MISMATCH_2, seed=11
    )


@pytest.fixture(scope='module')
def seven_dof_data():
    return generate_dataset(
        'seven_dof_arm.urdf', trajectories=3, duration=6.0, mismatch=MISMATCH_7, seed=3
    )


@pytest.fixture(scope='module')
def seven_dof_short():
    return generate_dataset('seven_dof_arm.urdf', mismatch=MISMATCH_7, seed=3, **SHORT)


def random_configurations(robot, count=50, seed=0):
    spec = robot.spec
    lo = np.where(np.isfinite(spec.lower), spec.lower, -np.pi)
    hi = np.where(np.isfinite(spec.upper), spec.upper, np.pi)
    return np.random.default_rng(seed).uniform(lo, hi, size=(count, robot.n))


def min_eig(model, q):
    return float(np.linalg.eigvalsh(model.mass_matrix(q))[:, 0].min())


def split(d, n_test=1):
    test = d['traj'] >= d['traj'].max() + 1 - n_test
    return ~test, test


def arrays(d, mask):
    return tuple(d[k][mask] for k in ('q', 'qd', 'qdd', 'tau'))


def test_regressor_reproduces_the_model():
    for urdf, mm in (('two_link_arm.urdf', MISMATCH_2), ('seven_dof_arm.urdf', MISMATCH_7)):
        nominal = RobotModel(urdf)
        truth = nominal.mismatched(mm)
        rng = np.random.default_rng(0)
        q, qd, qdd = (rng.normal(size=(20, nominal.n)) for _ in range(3))
        Phi = regressor(nominal, q, qd, qdd)
        assert Phi.shape == (20, nominal.n, 12 * nominal.n)
        # the kinematics are shared: the truth's parameters through the nominal regressor
        np.testing.assert_allclose(
            Phi @ nominal_parameters(truth), truth.inverse(q, qd, qdd), atol=1e-10
        )


@pytest.mark.parametrize('which', ['two_link', 'seven_dof'])
def test_recovers_the_perturbed_plant_from_noise_free_data(which, request):
    d = request.getfixturevalue(f'{which}_data')
    urdf = f'{"two_link_arm" if which == "two_link" else "seven_dof_arm"}.urdf'
    nominal = RobotModel(urdf)
    train, test = split(d)
    model = identify(nominal, *arrays(d, train))
    q, qd, qdd, tau = arrays(d, test)
    err = nmse(model.inverse(q, qd, qdd), tau)
    before = nmse(nominal.inverse(q, qd, qdd), tau)
    print(
        f'\n{which}: held-out torque nMSE nominal URDF {before.max():.3g} -> identified '
        f'{err.max():.3g} (rank {model.info["numerical_rank"]}/{model.info["parameters"]}, '
        f'cond {model.info["condition_number"]:.3g})'
    )
    assert before.max() > 1e-2  # the mismatch is real
    assert err.max() < 1e-6
    assert model.info['estimator'] == 'consistent' and all(model.physically_consistent())
    # the friction parameters come out right (the viscous terms of slow 7-DoF pitch joints are
    # only weakly excited: within a few percent there)
    truth = nominal.mismatched(MISMATCH_2 if which == 'two_link' else MISMATCH_7)
    np.testing.assert_allclose(model.viscous, truth.viscous, rtol=5e-2)
    np.testing.assert_allclose(model.coulomb, truth.coulomb, rtol=1e-2)
    # and the rigid-body part agrees with the true robot on the held-out states
    np.testing.assert_allclose(model.gravity(q[::50]), truth.gravity(q[::50]), atol=1e-3)


def test_degrades_gracefully_with_measurement_noise(two_link_data):
    d = two_link_data
    nominal = RobotModel('two_link_arm.urdf')
    train, test = split(d)
    clean = arrays(d, test)
    table = []
    for level in (0.0, 0.003, 0.01, 0.03, 0.1):
        noisy = add_measurement_noise(d, level, seed=5)
        model = identify(nominal, *arrays(noisy, train))
        e = float(nmse(model.inverse(*clean[:3]), clean[3]).max())
        table.append((level, e))
    print('\nnoise level (fraction of std on q, qd, qdd, tau) -> held-out nMSE vs clean torque')
    for level, e in table:
        print(f'  {level:6.3f}  {e:.3g}')
    for level, e in table:
        assert e < 0.05 * level**2 + 1e-6, (level, e)
    assert table[-1][1] > table[0][1]


def test_regularisation_pulls_toward_nominal(two_link_data):
    d = two_link_data
    nominal = RobotModel('two_link_arm.urdf')
    theta0 = nominal_parameters(nominal)
    few = slice(0, 20)  # 20 samples: far from enough to pin 24 parameters
    data = tuple(a[few] for a in arrays(d, np.ones(len(d['q']), bool)))
    for consistent in (False, True):
        weak = identify(nominal, *data, reg=1e-7, consistent=consistent)
        strong = identify(nominal, *data, reg=1e3, consistent=consistent)
        assert np.abs(strong.theta - theta0).max() < np.abs(weak.theta - theta0).max()
        assert np.abs(strong.theta - theta0).max() < 1e-2
    # unconstrained: unidentifiable directions stay at nominal (the first body's Ixx never shows
    # in the torques). The consistent estimator may spend them (at ridge cost only) to keep a
    # body physically consistent, and does here: 20 samples move its first moment
    unconstrained = identify(nominal, *data, reg=1e-7, consistent=False)
    assert unconstrained.theta[4] == pytest.approx(theta0[4], abs=1e-12)
    assert all(weak.physically_consistent())


def test_identified_model_is_a_dynamics_model(two_link_data, tmp_path):
    d = two_link_data
    nominal = RobotModel('two_link_arm.urdf')
    model = identify(nominal, *arrays(d, np.ones(len(d['q']), bool)))
    assert isinstance(model, DynamicsModel) and model.uses_pinocchio
    rng = np.random.default_rng(1)
    q, qd, qdd = (rng.normal(size=(10, 2)) for _ in range(3))
    tau = model.inverse(q, qd, qdd)
    np.testing.assert_allclose(model.forward(q, qd, tau), qdd, atol=1e-8)
    H = model.mass_matrix(q)
    np.testing.assert_allclose(
        np.einsum('bij,bj->bi', H, qdd)
        + model.coriolis(q, qd)
        + model.gravity(q)
        + model.friction(qd),
        tau,
        atol=1e-9,
    )
    assert np.all(np.linalg.eigvalsh(H)[:, 0] > 0)
    # Pinocchio path == regressor path (the algorithms are linear in the parameters)
    slow = IdentifiedModel(nominal, model.theta)
    slow.uses_pinocchio = False
    np.testing.assert_allclose(slow.inverse(q, qd, qdd), tau, atol=1e-10)
    np.testing.assert_allclose(slow.mass_matrix(q), H, atol=1e-10)
    T, V = model.energy(q, qd)
    T2, V2 = slow.energy(q, qd)
    np.testing.assert_allclose(T, T2, atol=1e-10)
    np.testing.assert_allclose(V, V2, atol=1e-10)
    h = 1e-6  # g = dV/dq
    dV = [
        (model.energy(q[0] + h * e, qd[0])[1] - model.energy(q[0] - h * e, qd[0])[1]) / (2 * h)
        for e in np.eye(2)
    ]
    np.testing.assert_allclose(dV, model.gravity(q[0]), rtol=1e-5, atol=1e-6)
    # persistence: JSON, self-contained, exact
    path = str(tmp_path / 'params.json')
    model.save(path)
    loaded = IdentifiedModel.load(path)
    np.testing.assert_array_equal(loaded.theta, model.theta)
    np.testing.assert_allclose(loaded.inverse(q, qd, qdd), tau, atol=1e-12)
    bad = tmp_path / 'bad.json'
    bad.write_text('{"format": "something else"}')
    with pytest.raises(ValueError):
        IdentifiedModel.load(str(bad))


def test_pseudo_inertia_and_log_cholesky_match_pinocchio():
    rng = np.random.default_rng(4)
    for _ in range(20):
        pi = pin.Inertia.Random().toDynamicParameters()
        J = pseudo_inertia(pi)
        np.testing.assert_allclose(
            J, pin.PseudoInertia.FromDynamicParameters(pi).toMatrix(), atol=1e-12
        )
        np.testing.assert_allclose(dynamic_parameters(J), pi, atol=1e-12)
        phi = rng.normal(size=10)
        K = pin.LogCholeskyParameters(phi).toPseudoInertia().toMatrix()
        np.testing.assert_allclose(log_cholesky(K), phi, atol=1e-9)


def test_unconstrained_fit_of_short_data_is_inconsistent_the_consistent_one_is_not(
    seven_dof_short,
):
    """Little, slow, noisy excitation (what the online demo records) of the 7-DoF arm: the
    unconstrained fit has physically inconsistent bodies (with the plant's earlier friction
    integration also an indefinite mass matrix); the consistent one never."""
    d = seven_dof_short
    nominal = RobotModel('seven_dof_arm.urdf')
    train, test = split(d)
    Q = random_configurations(nominal)
    unc = identify(nominal, *arrays(d, train), consistent=False)
    con = identify(nominal, *arrays(d, train))
    e_unc, e_con = (
        float(nmse(m.inverse(*arrays(d, test)[:3]), d['tau'][test]).max()) for m in (unc, con)
    )
    i = con.info
    print(
        f'\n7-DoF short data: unconstrained {sum(unc.physically_consistent())}/7 consistent, '
        f'min eig H {min_eig(unc, Q):.3g}, held-out nMSE {e_unc:.3g}; consistent: min eig H '
        f'{min_eig(con, Q):.3g}, held-out {e_con:.3g}, objective {i["objective"]:.4g} vs '
        f'{i["objective_unconstrained"]:.4g}, {i["iterations"]} Newton steps, '
        f'{i["seconds"]} s'
    )
    assert not all(unc.physically_consistent())
    assert all(con.physically_consistent()) and min_eig(con, Q) > 0
    assert i['min_mass_matrix_eig'] > 0 and np.all(con.theta[70:] >= 0)
    assert e_con < e_unc
    # the consistent optimum: no better than the unconstrained one, certified within the gap
    assert i['objective'] >= i['objective_unconstrained']
    assert i['consistency_cost'] == pytest.approx(
        i['objective'] - i['objective_unconstrained'], rel=1e-6
    )
    assert i['optimizer_status'] == 0 and i['duality_gap_bound'] < 1e-12
    assert i['solver'] == 'interior_point' and i['floored_bodies'] == []
    assert set(i['unconstrained_inconsistent_bodies']) == {
        name for name, ok in zip(nominal.joint_names, unc.physically_consistent()) if not ok
    }


ROBOTS = {
    'two_link': ('two_link_arm.urdf', MISMATCH_2),
    'seven_dof': ('seven_dof_arm.urdf', MISMATCH_7),
    'ur5': (UR5, MISMATCH_UR5),
    'panda': (PANDA, MISMATCH_PANDA),
}  # fingers locked (robot_model's joint selection)


@pytest.mark.parametrize('regime', ['full', 'short'])
@pytest.mark.parametrize('which', sorted(ROBOTS))
def test_consistent_on_every_robot_and_close_to_the_unconstrained_fit(which, regime, request):
    """Bound found (seeded simulated data, the mismatch in the parameter space): held-out nMSE
    of the consistent fit <= 2x the unconstrained one (full excitation: 1.0-1.7x; little noisy
    data: 0.2-1.1x, the constraint is then a prior that helps)."""
    urdf, mismatch = ROBOTS[which]
    try:
        nominal = RobotModel(urdf)
    except RobotDescriptionError as exc:  # a robot_model without joint selection
        pytest.skip(f'{which} does not load: {exc}')
    if regime == 'full' and which in ('two_link', 'seven_dof'):
        d = request.getfixturevalue(f'{which}_data')
    elif regime == 'full':
        d = generate_dataset(urdf, trajectories=3, duration=6.0, mismatch=mismatch, seed=3)
    elif which == 'seven_dof':
        d = request.getfixturevalue('seven_dof_short')
    else:
        d = generate_dataset(urdf, mismatch=mismatch, seed=3, **SHORT)
    train, test = split(d)
    unc = identify(nominal, *arrays(d, train), consistent=False)
    con = identify(nominal, *arrays(d, train))
    q, qd, qdd, tau = arrays(d, test)
    e_unc, e_con = (float(nmse(m.inverse(q, qd, qdd), tau).max()) for m in (unc, con))
    Q = random_configurations(nominal)
    print(
        f'\n{which} {regime}: held-out nMSE consistent {e_con:.3g} vs unconstrained '
        f'{e_unc:.3g} (ratio {e_con / e_unc:.2f}); min eig H {min_eig(con, Q):.3g} vs '
        f'{min_eig(unc, Q):.3g}; consistent bodies {sum(unc.physically_consistent())}/'
        f'{nominal.n} unconstrained; {con.info["seconds"]} s'
    )
    assert all(con.physically_consistent())
    assert min_eig(con, Q) > 0 and con.info['min_mass_matrix_eig'] > 0
    assert np.all(con.viscous >= 0) and np.all(con.coulomb >= 0)
    assert e_con <= 2.0 * e_unc + 1e-9
    assert con.info['optimizer_status'] == 0


HAND = """<joint name="wrist" type="revolute">
    <parent link="forearm"/>
    <child link="hand"/>
    <origin xyz="0.4 0 0" rpy="0 0 0"/>
    <axis xyz="1 0 0"/>
    <limit lower="-3" upper="3" effort="10.0" velocity="6.0"/>
    <dynamics damping="0.02" friction="0.05"/>
  </joint>
  <link name="hand">
    <inertial><origin xyz="0.05 0.02 0"/><mass value="0.4"/>
      <inertia ixx="0.0004" ixy="0" ixz="0" iyy="0.0004" iyz="0" izz="0.0004"/></inertial>
  </link>
  <joint name="tool_joint" type="fixed">
    <parent link="hand"/>
    <child link="tool"/>
    <origin xyz="0.08 0 0" rpy="0 0 0"/>"""


def _massless_forearm_arm() -> str:
    """The 2-link arm with a massless forearm link and a wrist roll joint carrying a hand."""
    with open(RobotModel('two_link_arm.urdf').source, encoding='utf-8') as fh:
        xml = fh.read()
    forearm = (
        '<inertial>\n      <origin xyz="0.2 0 0" rpy="0 0 0"/>\n      <mass value="1.0"/>'
        '\n      <inertia ixx="0.0003125" ixy="0" ixz="0" iyy="0.013490" iyz="0" '
        'izz="0.013490"/>\n    </inertial>'
    )
    tool = (
        '<joint name="tool_joint" type="fixed">\n    <parent link="forearm"/>\n'
        '    <child link="tool"/>\n    <origin xyz="0.4 0 0" rpy="0 0 0"/>'
    )
    assert forearm in xml and tool in xml
    return xml.replace(forearm, '').replace(tool, HAND)


def test_a_massless_body_is_floored_not_a_crash():
    xml = _massless_forearm_arm()
    nominal = RobotModel(xml)
    assert [nominal.model.inertias[j].mass for j in nominal._jids] == [2.0, 0.0, 0.4]
    mismatch = Mismatch(payload_mass=0.2, coulomb_scale=1.3)
    d = generate_dataset(xml, trajectories=3, duration=4.0, mismatch=mismatch, seed=3)
    train, test = split(d)
    model = identify(nominal, *arrays(d, train))
    err = float(nmse(model.inverse(*arrays(d, test)[:3]), d['tau'][test]).max())
    print(f'\nmassless forearm: held-out nMSE {err:.3g}, floored {model.info["floored_bodies"]}')
    assert model.info['floored_bodies'] == ['elbow']
    assert all(model.physically_consistent()) and model.uses_pinocchio
    assert min_eig(model, random_configurations(nominal)) > 0
    assert err < 1e-6
    # a handful of samples, and the unconstrained estimator: no crash either
    few = identify(nominal, *(a[:5] for a in arrays(d, train)))
    assert all(few.physically_consistent()) and few.info['floored_bodies'] == ['elbow']
    identify(nominal, *arrays(d, train), consistent=False)


@pytest.mark.parametrize('regime', ['full', 'short'])
def test_log_cholesky_solver_reaches_a_consistent_fit_no_better_than_the_barrier(
    regime, two_link_data
):
    d = (
        two_link_data
        if regime == 'full'
        else generate_dataset('two_link_arm.urdf', mismatch=MISMATCH_2, seed=3, **SHORT)
    )
    nominal = RobotModel('two_link_arm.urdf')
    train, _ = split(d)
    ip = identify(nominal, *arrays(d, train))
    lc = identify(nominal, *arrays(d, train), solver='log_cholesky')
    print(
        f'\n2-link {regime}: objective barrier {ip.info["objective"]:.8g} '
        f'({ip.info["iterations"]} Newton steps, {ip.info["seconds"]} s), log-Cholesky '
        f'{lc.info["objective"]:.8g} ({lc.info["iterations"]} Jacobians, '
        f'{lc.info["seconds"]} s); unconstrained {ip.info["objective_unconstrained"]:.8g}'
    )
    assert all(lc.physically_consistent()) and lc.info['solver'] == 'log_cholesky'
    assert lc.info['objective'] >= ip.info['objective'] * (1 - 1e-9)
    # (with trf's default-like tolerances it once stopped at 500x the optimal objective)
    assert lc.info['objective'] <= ip.info['objective'] * 1.02
    with pytest.raises(ValueError):
        identify(nominal, *arrays(d, train), solver='cvx')


def test_json_round_trip_keeps_everything(seven_dof_short, tmp_path):
    d = seven_dof_short
    nominal = RobotModel('seven_dof_arm.urdf')
    train, test = split(d)
    model = identify(nominal, *arrays(d, train))
    path = str(tmp_path / 'consistent.json')
    model.save(path)
    loaded = IdentifiedModel.load(path)
    np.testing.assert_array_equal(loaded.theta, model.theta)
    assert loaded.info == json.loads(json.dumps(model.info))
    assert loaded.info['estimator'] == 'consistent'
    assert loaded.physically_consistent() == [True] * 7
    q, qd, qdd, _ = arrays(d, test)
    np.testing.assert_array_equal(
        loaded.inverse(q[:20], qd[:20], qdd[:20]), model.inverse(q[:20], qd[:20], qdd[:20])
    )
    np.testing.assert_array_equal(loaded.mass_matrix(q[:5]), model.mass_matrix(q[:5]))
    # a file of the unconstrained-only version (its fit info) still loads
    with open(path, encoding='utf-8') as fh:
        doc = json.load(fh)
    doc['fit'] = {
        k: doc['fit'][k]
        for k in (
            'reg',
            'samples',
            'parameters',
            'numerical_rank',
            'condition_number',
            'seconds',
            'nmse_train',
            'physically_consistent',
            'min_mass_matrix_eig',
        )
    }
    old = tmp_path / 'old.json'
    old.write_text(json.dumps(doc))
    np.testing.assert_array_equal(IdentifiedModel.load(str(old)).theta, model.theta)


def test_computed_torque_on_the_consistent_fit_of_short_data_tracks():
    d = generate_dataset(UR5, mismatch=MISMATCH_UR5, seed=3, **SHORT)
    nominal = RobotModel(UR5)
    train, _ = split(d)

    def rms(model):
        return simulated_tracking_rms(model, nominal, MISMATCH_UR5, duration=2.0)

    truth = rms(nominal.mismatched(MISMATCH_UR5))
    con = rms(identify(nominal, *arrays(d, train)))
    unc = rms(identify(nominal, *arrays(d, train), consistent=False))
    print(
        f'\nUR5 computed torque, RMS error: true parameters {truth:.3g} rad, consistent fit '
        f'{con:.3g}, unconstrained fit {unc:.3g}'
    )
    assert con < 1e-2
    assert con < unc


def test_cli_round_trip(tmp_path, capsys):
    data = str(tmp_path / 'data.npz')
    assert (
        gen_main(
            [
                '--urdf',
                'two_link_arm.urdf',
                '--out',
                data,
                '--trajectories',
                '3',
                '--duration',
                '3',
                '--seed',
                '2',
                '--mismatch-payload',
                '0.4',
                '--mismatch-mass-scale',
                '1.1,0.95',
            ]
        )
        == 0
    )
    gen = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert gen['samples'] == 3 * 1500
    with np.load(data, allow_pickle=False) as f:
        for key in ('q', 'qd', 'qdd', 'tau'):
            assert f[key].shape == (4500, 2)
        assert f['traj'].shape == (4500,) and f['t'].shape == (4500,)
        assert f['joint_names'].tolist() == ['shoulder', 'elbow']
        assert f['joint_types'].tolist() == ['revolute', 'revolute']
    out = str(tmp_path / 'params.json')
    assert sysid_main(['--data', data, '--urdf', 'two_link_arm.urdf', '--out', out]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report['n_test'] == 1500 and report['n_train'] == 3000
    assert max(report['nmse_test'].values()) < 1e-6
    assert report['estimator'] == 'consistent' and all(report['physically_consistent'])
    assert report['min_mass_matrix_eig'] > 0
    assert (
        sysid_main(
            ['--data', data, '--urdf', 'two_link_arm.urdf', '--out', out, '--unconstrained']
        )
        == 0
    )
    unconstrained = json.loads(capsys.readouterr().out)
    assert unconstrained['estimator'] == 'unconstrained'
    assert unconstrained['objective'] <= report['objective']
    assert set(report['nmse_test']) == {'shoulder', 'elbow'}
    assert IdentifiedModel.load(out).joint_names == ['shoulder', 'elbow']
    # errors are reported, not raised
    assert (
        sysid_main(
            ['--data', str(tmp_path / 'none.npz'), '--urdf', 'two_link_arm.urdf', '--out', out]
        )
        == 2
    )


def test_missing_accelerations_are_estimated(two_link_data, tmp_path):
    d = {k: v for k, v in two_link_data.items() if k not in ('qdd', 'meta')}
    path = str(tmp_path / 'no_qdd.npz')
    np.savez(path, **d)
    loaded = load_data(path)
    assert loaded['qdd'].shape == d['q'].shape
    model, report = identify_dataset(RobotModel('two_link_arm.urdf'), loaded)
    # Savitzky-Golay accelerations: not exact, but the fit is still good
    assert max(report['nmse_test'].values()) < 1e-2


def test_installed_console_scripts_run(tmp_path):
    data, out = str(tmp_path / 'd.npz'), str(tmp_path / 'p.json')
    r = subprocess.run(
        [
            'delan-gen-data',
            '--urdf',
            'two_link_arm.urdf',
            '--out',
            data,
            '--trajectories',
            '2',
            '--duration',
            '1',
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    r = subprocess.run(
        [
            'delan-sysid',
            '--data',
            data,
            '--urdf',
            'two_link_arm.urdf',
            '--out',
            out,
            '--reg',
            '1e-6',
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)['reg'] == 1e-6 and os.path.isfile(out)


def test_json_keeps_the_joint_selection(tmp_path):
    """A Panda identified with a finger locked open and only five arm joints free comes back
    with the same joints, locks and limits (not the description's default selection)."""
    if not os.path.exists(PANDA):
        pytest.skip('example-robot-data not installed')
    free = [f'panda_joint{i}' for i in range(1, 6)]
    locked = {'panda_joint6': 1.5, 'panda_joint7': 0.3, 'panda_finger_joint1': 0.03}
    robot = RobotModel(
        PANDA,
        joints=free,
        locked=locked,
        effort_limits=[80.0, 0, 0, 0, 0],
        velocity_limits=[0, 0, 0, 0, 1.0],
    )
    theta = nominal_parameters(robot) * 1.1
    model = IdentifiedModel(robot, theta)
    path = str(tmp_path / 'panda5.json')
    model.save(path)
    loaded = IdentifiedModel.load(path)
    assert loaded.joint_names == free
    assert loaded.robot.selection_kwargs() == robot.selection_kwargs()
    q = np.random.default_rng(0).uniform(-1, 1, (4, 5))
    np.testing.assert_allclose(loaded.mass_matrix(q), model.mass_matrix(q), rtol=1e-12)
    np.testing.assert_allclose(loaded.gravity(q), model.gravity(q), rtol=1e-12, atol=1e-12)
    doc = json.load(open(path))
    for bad in ({'unknown': 1}, {'effort_limits': 3}, {'joints': ['no_such_joint']}):
        with open(path, 'w') as fh:
            json.dump(dict(doc, selection=dict(doc['selection'], **bad)), fh)
        with pytest.raises(ValueError, match='joint selection'):
            IdentifiedModel.load(path)
