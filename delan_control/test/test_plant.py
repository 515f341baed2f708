"""The plant: energy conservation, accuracy, stiff friction stability, clamping, stops, noise."""

import numpy as np
import pytest

from delan_common.robot_model import Mismatch, RobotModel
from delan_control.plant import Plant

NO_FRICTION = Mismatch(viscous=[0.0], coulomb=[0.0])
START = {
    'two_link_arm.urdf': [0.7, -0.4],
    'seven_dof_arm.urdf': [0.3, 0.8, 0.2, -1.0, 0.4, 0.7, 0.1],
}


def energy_drift(plant, seconds):
    """max |E(t) - E(0)| / max T(t): relative to the energy that actually moves around."""
    E0 = sum(plant.energy())
    drift, t_max = 0.0, 0.0
    for _ in range(int(round(seconds * 100))):
        plant.step(np.zeros(plant.n), int(plant.physics_rate / 100))
        T, V = plant.energy()
        drift = max(drift, abs(T + V - E0))
        t_max = max(t_max, T)
    return drift / t_max, t_max


@pytest.mark.parametrize('urdf', sorted(START))
def test_energy_is_conserved_without_friction_and_torque(urdf):
    plant = Plant(urdf, NO_FRICTION, physics_rate=1000.0, position_limits=False, q0=START[urdf])
    drift, t_max = energy_drift(plant, 10.0)
    assert t_max > 1.0  # the arm really swings (J)
    assert drift < 1e-3, drift
    assert plant.t == pytest.approx(10.0)


def test_semi_implicit_euler_is_the_cheaper_weaker_option():
    """Documented trade-off: 1st order, drifts percent-level without friction."""
    plant = Plant(
        'two_link_arm.urdf',
        NO_FRICTION,
        integrator='semi_implicit_euler',
        position_limits=False,
        q0=START['two_link_arm.urdf'],
    )
    drift, _ = energy_drift(plant, 3.0)
    assert 1e-3 < drift < 0.1


def reference_solution(model, q0, qd0, tau, seconds, rate):
    """Independent reference: explicit RK4 on RobotModel.forward (friction inside) at ``rate``."""
    h = 1.0 / rate
    q, v = np.array(q0, float), np.array(qd0, float)
    for _ in range(int(round(seconds * rate))):
        a1 = model.forward(q, v, tau)
        a2 = model.forward(q + h / 2 * v, v + h / 2 * a1, tau)
        a3 = model.forward(q + h / 2 * v + h * h / 4 * a1, v + h / 2 * a2, tau)
        a4 = model.forward(q + h * v + h * h / 2 * a2, v + h * a3, tau)
        q, v = q + h * v + h * h / 6 * (a1 + a2 + a3), v + h / 6 * (a1 + 2 * a2 + 2 * a3 + a4)
    return q, v


def test_rk4_matches_a_tight_reference_solution():
    m = RobotModel('two_link_arm.urdf')
    q0, qd0, tau = np.array([0.5, -0.3]), np.array([0.4, 1.0]), np.array([3.0, -1.0])
    plant = Plant(m, NO_FRICTION, position_limits=False)
    ref_q, ref_v = reference_solution(plant.truth, q0, qd0, tau, 1.0, 8000.0)
    plant.reset(q0, qd0)
    plant.run(tau, 1.0)
    assert np.abs(plant.q - ref_q).max() < 1e-8
    assert np.abs(plant.qd - ref_v).max() < 1e-7
    # with friction (explicit in the stages where it is not stiff, as on this arm): RK4's order
    ref_q, ref_v = reference_solution(m, q0, qd0, tau, 1.0, 8000.0)
    errors = []
    for rate in (1000.0, 2000.0):
        fplant = Plant(m, physics_rate=rate, position_limits=False)
        fplant.reset(q0, qd0)
        fplant.run(tau, 1.0)
        errors.append(max(np.abs(fplant.q - ref_q).max(), np.abs(fplant.qd - ref_v).max()))
    assert errors[0] < 1e-4
    assert errors[0] / errors[1] > 8.0  # at least third order


@pytest.mark.parametrize('integrator', ['rk4', 'semi_implicit_euler'])
def test_stiff_coulomb_on_a_light_wrist_is_stable(integrator):
    """dt fc / (eps I) >> 2 on wrist_roll: explicit friction would chatter or diverge."""
    nominal = RobotModel('seven_dof_arm.urdf')
    coulomb = nominal.spec.friction.copy()
    coulomb[-1] = 1.0  # 10x the URDF value on a 2.4e-4 kg m^2 wrist
    plant = Plant(nominal, Mismatch(coulomb=coulomb), integrator=integrator)
    H = plant.truth.mass_matrix(np.zeros(7))
    assert plant.dt * coulomb[-1] / (0.05 * H[-1, -1]) > 50
    qd0 = np.zeros(7)
    qd0[-1] = 3.0
    plant.reset(np.zeros(7), qd0)
    hold = plant.truth.gravity(np.zeros(7))  # hold the arm, spin the wrist down
    v = []
    for _ in range(300):
        plant.step(hold, 1)
        v.append(plant.qd[-1])
    v = np.array(v)
    assert np.all(np.isfinite(v))
    assert np.all(v >= -1e-9)  # never pushed through zero velocity
    assert np.all(np.diff(v) <= 1e-9)  # monotone decay, no chatter
    assert v[-1] < 1e-3


def test_friction_only_dissipates():
    plant = Plant(
        'seven_dof_arm.urdf',
        position_limits=False,
        q0=START['seven_dof_arm.urdf'],
        qd0=[0.5, -0.5, 1.0, 0.3, -1.0, 2.0, 3.0],
    )
    E = [sum(plant.energy())]
    for _ in range(200):
        plant.step(np.zeros(7), 10)
        E.append(sum(plant.energy()))
    assert np.all(np.diff(E) <= 1e-9)
    assert E[-1] < E[0] - 1.0


def test_torque_is_clamped_to_effort_limits():
    plant = Plant('two_link_arm.urdf')
    applied = plant.step([1e3, -1e3])
    np.testing.assert_array_equal(applied, [40.0, -20.0])
    np.testing.assert_array_equal(plant.last_torque, [40.0, -20.0])
    with pytest.raises(ValueError):
        plant.step([np.nan, 0.0])
    with pytest.raises(ValueError):
        plant.step([1.0])


def test_position_limits_are_end_stops():
    plant = Plant('two_link_arm.urdf', q0=[0.0, 2.7])
    plant.run([0.0, 20.0], 0.5)
    assert plant.q[1] == pytest.approx(2.8)
    assert plant.qd[1] == 0.0
    free = Plant('two_link_arm.urdf', q0=[0.0, 2.7], position_limits=False)
    free.run([0.0, 20.0], 0.5)
    assert free.q[1] > 2.8


def test_noise_is_seeded_and_optional():
    kw = dict(position_noise=0.01, velocity_noise=0.1, torque_noise=0.5, q0=[0.1, 0.2])
    a, b = Plant('two_link_arm.urdf', seed=3, **kw), Plant('two_link_arm.urdf', seed=3, **kw)
    a.run([1.0, 1.0], 0.2)
    b.run([1.0, 1.0], 0.2)
    np.testing.assert_array_equal(a.q, b.q)
    qa, qb = a.measure(), b.measure()
    np.testing.assert_array_equal(qa[0], qb[0])
    assert not np.array_equal(qa[0], a.q)
    clean = Plant('two_link_arm.urdf', q0=[0.1, 0.2])
    clean.run([1.0, 1.0], 0.2)
    assert not np.allclose(clean.q, a.q, atol=1e-9)  # torque noise acted
    np.testing.assert_array_equal(clean.measure()[0], clean.q)


def test_plant_integrates_the_mismatched_robot():
    mm = Mismatch(payload_mass=1.0, mass_scale=1.2)
    plant = Plant('two_link_arm.urdf', mm, q0=[0.0, 0.0])
    assert plant.truth.spec.total_mass == pytest.approx(
        plant.nominal.spec.total_mass + 1.0 + 0.2 * 3.0
    )
    # one small step from rest follows the *true* robot (friction ramps in as it moves)
    tau = np.array([5.0, 2.0])
    plant.step(tau)
    _, v_true = reference_solution(plant.truth, np.zeros(2), np.zeros(2), tau, plant.dt, 64000.0)
    _, v_nom = reference_solution(plant.nominal, np.zeros(2), np.zeros(2), tau, plant.dt, 64000.0)
    np.testing.assert_allclose(plant.qd, v_true, rtol=1e-4)
    assert not np.allclose(v_true, v_nom, rtol=0.05)


def test_measure_into_writes_what_measure_returns():
    kw = dict(position_noise=0.01, velocity_noise=0.1, seed=7, q0=[0.1, 0.2], qd0=[0.3, -0.4])
    a, b = Plant('two_link_arm.urdf', **kw), Plant('two_link_arm.urdf', **kw)
    q, qd = np.empty(2), np.empty(2)
    for _ in range(3):  # the same draws, in the same order
        qa, qda = a.measure()
        b.measure_into(q, qd)
        np.testing.assert_array_equal(q, qa)
        np.testing.assert_array_equal(qd, qda)
        assert not np.array_equal(q, b.q)
    b.position_noise = b.velocity_noise = 0.0
    b.measure_into(q, qd)
    np.testing.assert_array_equal(q, b.q)
    np.testing.assert_array_equal(qd, b.qd)


def recorded_torque_nmse(plant: Plant, nominal: RobotModel, steps: int) -> np.ndarray:
    """Per-joint nMSE of the plant's own inverse model on ``steps`` samples at 250 Hz (4
    physics steps each) of computed torque on a Fourier excitation."""
    from delan_common.excitation import random_fourier_trajectory
    from delan_learning.data import complete_derivatives

    s = nominal.spec
    ref = random_fourier_trajectory(s.lower, s.upper, s.velocity_limit, seed=1)
    rows = []
    for k in range(steps):
        qr, vr, ar = (x[0] for x in ref.sample(np.array([k / 250.0])))
        cmd = nominal.inverse(plant.q, plant.qd, ar + 400 * (qr - plant.q) + 40 * (vr - plant.qd))
        applied = plant.step(cmd, 4)
        rows.append((plant.t, plant.q.copy(), plant.qd.copy(), applied))
    t, q, qd, tau = (np.array([r[i] for r in rows]) for i in range(4))
    d = complete_derivatives({'t': t, 'q': q, 'qd': qd, 'tau': tau})
    err = plant.truth.inverse(d['q'], d['qd'], d['qdd']) - d['tau']
    return np.mean(err[20:-20] ** 2, axis=0) / np.var(d['tau'][20:-20], axis=0)


def test_torques_explain_the_motion_where_friction_is_stiff():
    """Under computed torque the 7-DoF arm's light roll joints creep against Coulomb friction
    (time constant ~20 us, far below the step): the recorded (state, torque) pairs must still
    satisfy the plant's own model, or no learner or identification can fit them."""
    mm = Mismatch(payload_mass=0.6, viscous_scale=2.0, coulomb_scale=2.0)
    nominal = RobotModel('seven_dof_arm.urdf')
    plant = Plant(nominal, mm)
    assert np.any(plant._stiff_armature > 0) and np.any(plant._stiff_armature == 0)
    nmse = recorded_torque_nmse(plant, nominal, 1000)  # 4 s
    assert np.all(nmse < 0.01), nmse


def test_a_state_gone_non_finite_is_never_kept():
    """An arm flung beyond what the step resolves (here: a torque the step cannot integrate)
    stops where it was, at rest, and the blow-up is counted; the sim never publishes NaN."""
    plant = Plant('two_link_arm.urdf', clamp_torque=False, position_limits=False)
    plant.reset([0.3, -0.2], [0.1, 0.0])
    q_before = plant.q.copy()
    plant.step([1e308, -1e308], 5)
    assert np.all(np.isfinite(plant.q)) and np.all(np.isfinite(plant.qd))
    np.testing.assert_array_equal(plant.q, q_before)
    np.testing.assert_array_equal(plant.qd, 0.0)
    assert plant.blowups == 1
    plant.step([0.0, 0.0], 5)  # and goes on from there
    assert plant.blowups == 1 and np.all(np.isfinite(plant.q))


def test_unactuated_joints_get_no_torque():
    """``actuated``: the passive joint gets zero torque whatever is commanded (reported so);
    the actuated ones are clamped as always; names or a mask select the same joints."""
    kw = dict(q0=[0.2, 0.4], qd0=[0.5, -0.3])
    under = Plant('two_link_arm.urdf', actuated=[True, False], **kw)
    np.testing.assert_array_equal(under.actuated, [True, False])
    np.testing.assert_array_equal(under.step([1e3, 15.0]), [40.0, 0.0])
    np.testing.assert_array_equal(under.last_torque, [40.0, 0.0])
    np.testing.assert_array_equal(under.clamp([-3.0, -7.0]), [-3.0, 0.0])
    # the elbow's command changes nothing: the same motion as commanding it zero
    a = Plant('two_link_arm.urdf', actuated=['shoulder'], **kw)
    b = Plant('two_link_arm.urdf', **kw)
    a.run([2.0, 9.0], 0.3)
    b.run([2.0, 0.0], 0.3)
    np.testing.assert_array_equal(a.q, b.q)
    np.testing.assert_array_equal(a.qd, b.qd)
    unclamped = Plant('two_link_arm.urdf', actuated=[False, True], clamp_torque=False)
    np.testing.assert_array_equal(unclamped.clamp([100.0, 50.0]), [0.0, 50.0])
    for bad in (['wrist'], [True], [1.0, 0.0]):
        with pytest.raises(ValueError):
            Plant('two_link_arm.urdf', actuated=bad)


def test_all_actuated_is_bitwise_the_plant_without_the_option():
    kw = dict(q0=[0.7, -0.4], qd0=[0.1, 0.2], torque_noise=0.3, seed=5)
    a = Plant('two_link_arm.urdf', **kw)
    b = Plant('two_link_arm.urdf', actuated=[True, True], **kw)
    for tau in ([5.0, -2.0], [50.0, 30.0], [-1.0, 0.5]):
        np.testing.assert_array_equal(a.step(tau, 7), b.step(tau, 7))
    np.testing.assert_array_equal(a.q, b.q)
    np.testing.assert_array_equal(a.qd, b.qd)
    assert not b._under


ICUB_LEFT_ARM = [
    'l_shoulder_pitch',
    'l_shoulder_roll',
    'l_shoulder_yaw',
    'l_elbow',
    'l_wrist_prosup',
    'l_wrist_pitch',
    'l_wrist_yaw',
]


def test_coupled_light_links_with_stiff_damping_fall_stably():
    """The iCub's left arm: URDF damping of 1 N m s/rad on every joint, a forearm and hand of
    1e-4 to 1e-3 kg m^2 whose coupling makes directions of motion lighter than any diagonal
    entry of H. Sized per joint, the armature left the RK4 stages a friction rate above their
    bound in such a direction: the arm, let go under gravity, spun up to hundreds of rad/s
    and the state went non-finite. With H + A >= dt S / STIFF_RATE_BOUND as matrices it falls
    as the implicit Euler step and a four times finer RK4 say."""
    from delan_control.plant import STIFF_RATE_BOUND

    nominal = RobotModel('icub.urdf', joints=ICUB_LEFT_ARM)
    home = 0.5 * (nominal.spec.lower + nominal.spec.upper)
    H = nominal.mass_matrix(home)
    assert np.linalg.eigvalsh(H)[0] < 0.5 * np.diag(H).min()  # the coupled light direction
    ends = {}
    for integrator, rate in (('rk4', 1000.0), ('rk4', 4000.0), ('semi_implicit_euler', 1000.0)):
        plant = Plant(nominal, integrator=integrator, physics_rate=rate)
        plant.reset(home, np.zeros(7))
        fastest = 0.0
        for _ in range(200):  # 2 s, no torque
            plant.step(np.zeros(7), int(rate / 100))
            fastest = max(fastest, float(np.abs(plant.qd).max()))
        assert plant.blowups == 0 and fastest < 5.0, (integrator, rate, fastest)
        ends[integrator, rate] = plant.q
    np.testing.assert_allclose(ends['rk4', 1000.0], ends['rk4', 4000.0], atol=0.02)
    np.testing.assert_allclose(ends['rk4', 1000.0], ends['semi_implicit_euler', 1000.0], atol=0.05)
    # the matrix bound holds on the configurations it was sized on
    plant = Plant(nominal)
    lo, hi = nominal.sample_bounds()
    q = np.random.default_rng(1).uniform(lo, hi, (20, 7))
    slack = nominal.mass_matrix(q) + np.diag(
        plant._stiff_armature - plant.dt * plant._effects.max_slope() / STIFF_RATE_BOUND
    )
    assert np.linalg.eigvalsh(slack).min() > -1e-6 * np.diag(H).min()
