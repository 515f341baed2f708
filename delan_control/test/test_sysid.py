"""Classical identification: exact recovery from noise-free plant data, graceful degradation with
noise, the identified model as a DynamicsModel, safe persistence, the CLIs."""
import json
import os
import subprocess

import numpy as np
import pytest

from delan_control.datagen import add_measurement_noise, generate_dataset, main as gen_main
from delan_control.robot_model import Mismatch, RobotModel
from delan_control.sysid import (IdentifiedModel, identify, identify_dataset, load_data,
                                 main as sysid_main, nmse, nominal_parameters, regressor)
from delan_learning.dynamics import DynamicsModel

MISMATCH_2 = Mismatch(mass_scale=[1.2, 0.9], payload_mass=0.5, coulomb_scale=1.5,
                      viscous_scale=0.6)
MISMATCH_7 = Mismatch(mass_scale=1.15, inertia_scale=1.2, payload_mass=0.8, coulomb_scale=1.4,
                      viscous_scale=0.7)


@pytest.fixture(scope='module')
def two_link_data():
    return generate_dataset('two_link_arm.urdf', trajectories=4, duration=6.0,
                            mismatch=MISMATCH_2, seed=11)


@pytest.fixture(scope='module')
def seven_dof_data():
    return generate_dataset('seven_dof_arm.urdf', trajectories=3, duration=6.0,
                            mismatch=MISMATCH_7, seed=3)


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
        np.testing.assert_allclose(Phi @ nominal_parameters(truth), truth.inverse(q, qd, qdd),
                                   atol=1e-10)


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
    print(f'\n{which}: held-out torque nMSE nominal URDF {before.max():.3g} -> identified '
          f'{err.max():.3g} (rank {model.info["numerical_rank"]}/{model.info["parameters"]}, '
          f'cond {model.info["condition_number"]:.3g})')
    assert before.max() > 1e-2          # the mismatch is real
    assert err.max() < 1e-6
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
        assert e < 0.05 * level ** 2 + 1e-6, (level, e)
    assert table[-1][1] > table[0][1]


def test_regularisation_pulls_toward_nominal(two_link_data):
    d = two_link_data
    nominal = RobotModel('two_link_arm.urdf')
    theta0 = nominal_parameters(nominal)
    few = slice(0, 20)  # 20 samples: far from enough to pin 24 parameters
    data = tuple(a[few] for a in arrays(d, np.ones(len(d['q']), bool)))
    weak = identify(nominal, *data, reg=1e-7)
    strong = identify(nominal, *data, reg=1e3)
    assert np.abs(strong.theta - theta0).max() < np.abs(weak.theta - theta0).max()
    assert np.abs(strong.theta - theta0).max() < 1e-2
    # unidentifiable directions stay at nominal: the first body's Ixx never shows in torques
    assert weak.theta[4] == pytest.approx(theta0[4], abs=1e-12)


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
    np.testing.assert_allclose(np.einsum('bij,bj->bi', H, qdd) + model.coriolis(q, qd)
                               + model.gravity(q) + model.friction(qd), tau, atol=1e-9)
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
    h = 1e-6    # g = dV/dq
    dV = [(model.energy(q[0] + h * e, qd[0])[1] - model.energy(q[0] - h * e, qd[0])[1]) / (2 * h)
          for e in np.eye(2)]
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


def test_cli_round_trip(tmp_path, capsys):
    data = str(tmp_path / 'data.npz')
    assert gen_main(['--urdf', 'two_link_arm.urdf', '--out', data, '--trajectories', '3',
                     '--duration', '3', '--seed', '2', '--mismatch-payload', '0.4',
                     '--mismatch-mass-scale', '1.1,0.95']) == 0
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
    assert set(report['nmse_test']) == {'shoulder', 'elbow'}
    assert IdentifiedModel.load(out).joint_names == ['shoulder', 'elbow']
    # errors are reported, not raised
    assert sysid_main(['--data', str(tmp_path / 'none.npz'), '--urdf', 'two_link_arm.urdf',
                       '--out', out]) == 2


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
    r = subprocess.run(['delan-gen-data', '--urdf', 'two_link_arm.urdf', '--out', data,
                        '--trajectories', '2', '--duration', '1'], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    r = subprocess.run(['delan-sysid', '--data', data, '--urdf', 'two_link_arm.urdf', '--out',
                        out, '--reg', '1e-6'], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)['reg'] == 1e-6 and os.path.isfile(out)
