"""Energy control (issue 15): the Furuta pendulum, the under-actuated plant, the energy law,
the LQR switch, and swing-up on the plant with the analytic and a learned DeLaN model."""

import os

import numpy as np
import pytest

from delan_common.robot_model import Mismatch, RobotModel, find_urdf
from delan_control.energy_control import (
    EnergyControlConfig,
    EnergySwingUp,
    actuated_mask,
    linearize,
    wrap_angle,
)
from delan_control.plant import Plant
from delan_control.swing_up import (
    FURUTA,
    FURUTA_ACTUATED,
    FURUTA_UPRIGHT,
    excitation_data,
    in_upright_set,
    run_swing_up,
    train_delan,
)

NO_FRICTION = Mismatch(viscous=[0.0], coulomb=[0.0])
#: the stated bound: upright (|angle| < 0.1 rad, |rate| < 0.5 rad/s, held 2 s) within this [s]
SWING_UP_TIME = 12.0
START = [0.0, 0.05]  # near rest, hanging down


@pytest.fixture(scope='module')
def robot():
    return RobotModel(FURUTA)


@pytest.fixture(scope='module')
def learned(robot):
    """A DeLaN trained on 32 x 2.5 s of excitation data of the plant (seeded; ~20 s)."""
    torch = pytest.importorskip('torch')
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        plant = Plant(robot, actuated=FURUTA_ACTUATED)
        data = excitation_data(
            plant, trajectories=32, duration=2.5, rate=200.0, seed=0, upright=FURUTA_UPRIGHT
        )
        return train_delan(data, seed=0, width=64, steps=3000)
    finally:
        torch.set_num_threads(threads)


def law_for(model, **gains):
    return EnergySwingUp(model, FURUTA_ACTUATED, FURUTA_UPRIGHT, 0.5, EnergyControlConfig(**gains))


# ---------------------------------------------------------------------------- the robot
def test_furuta_pendulum_loads_installed_and_valid(robot):
    path = find_urdf(FURUTA)
    src = os.path.join(os.path.dirname(__file__), '..', '..', 'delan_bringup', 'urdf', FURUTA)
    assert os.path.samefile(path, src) or open(path).read() == open(src).read()
    assert robot.joint_names == ['arm', 'pendulum']
    assert robot.joint_types == ['revolute', 'continuous']
    s = robot.spec
    np.testing.assert_array_equal(s.lower[:1], [-2.5])
    np.testing.assert_array_equal(s.upper[:1], [2.5])
    assert s.effort_limit[0] == 0.5 and s.velocity_limit[0] == 12.0
    assert not s.effort_given[1] and s.effort_limit[1] == np.inf  # the passive bearing
    for a in np.linspace(-np.pi, np.pi, 13):
        for arm in (-2.0, 0.0, 1.0):
            assert np.linalg.eigvalsh(robot.mass_matrix(np.array([arm, a])))[0] > 1e-3
    # the pendulum hangs at 0: lifting it to the top costs 2 m g l = 2 * 0.1 * 9.81 * 0.15
    zero = np.zeros(2)
    rise = robot.energy(np.array([0.0, np.pi]), zero)[1] - robot.energy(zero, zero)[1]
    assert rise == pytest.approx(0.2943, rel=1e-3)
    np.testing.assert_allclose(robot.gravity(np.array([0.7, np.pi])), 0.0, atol=1e-12)


def test_plant_gives_the_passive_pendulum_no_torque(robot):
    kw = dict(actuated=FURUTA_ACTUATED, q0=[0.1, 0.4], qd0=[0.0, 1.0])
    a, b = Plant(robot, **kw), Plant(robot, **kw)
    np.testing.assert_array_equal(a.step([0.3, 2.0], 50), [0.3, 0.0])
    b.step([0.3, 0.0], 50)
    np.testing.assert_array_equal(a.q, b.q)  # the pendulum's command did nothing
    np.testing.assert_array_equal(a.last_torque, [0.3, 0.0])
    full = Plant(robot, q0=[0.1, 0.4], qd0=[0.0, 1.0])
    full.step([0.3, 0.05], 50)  # a motor on the pendulum would have moved it differently
    assert not np.allclose(full.q, a.q)


# ---------------------------------------------------------------------------- the law
def test_law_api_and_validation(robot):
    law = law_for(robot)
    assert law.m == 1 and law.a_idx.tolist() == [0] and law.p_idx.tolist() == [1]
    assert law.e_target == pytest.approx(
        float(robot.energy(np.array(FURUTA_UPRIGHT), 0 * law.upright)[1])
    )
    tau = law.command(np.array([0.0, 0.3]), np.array([0.0, 2.0]))
    assert tau.shape == (2,) and tau[1] == 0.0 and abs(tau[0]) <= 0.5 and law.mode == 'swing'
    tau = law.command(np.array([2.4, np.pi - 0.2]), np.array([-3.0, 1.0]))  # balance, clipped
    assert law.mode == 'balance' and abs(tau[0]) == 0.5 and tau[1] == 0.0
    with pytest.raises(ValueError):
        law.command(np.zeros(3), np.zeros(3))
    with pytest.raises(ValueError):
        EnergyControlConfig(catch_angle=0.5, release_angle=0.4)  # no hysteresis
    with pytest.raises(ValueError):
        EnergySwingUp(robot, [True, True], FURUTA_UPRIGHT, 0.5)  # nothing to swing up
    with pytest.raises(ValueError):
        EnergySwingUp(robot, ['elbow'], FURUTA_UPRIGHT, 0.5)
    np.testing.assert_array_equal(actuated_mask(['arm'], robot.joint_names), [True, False])
    np.testing.assert_allclose(wrap_angle(np.array([np.pi + 0.1, -0.2])), [-np.pi + 0.1, -0.2])


def test_energy_law_of_the_controller(robot):
    """control_laws.EnergyLaw (what the torque_controller holds for law energy): refuses what
    it cannot run on, and its law is EnergySwingUp's, 0 on the passive joint."""
    from delan_control.control_laws import ENERGY_LAW, EnergyLaw, Gains, control_terms

    mask = np.array(FURUTA_ACTUATED)
    spec = EnergyLaw(mask, FURUTA_UPRIGHT, [0.5, 0.0])
    q_ref, qd_ref, qdd_ref = spec.reference()
    np.testing.assert_array_equal(q_ref, FURUTA_UPRIGHT)
    assert not qd_ref.any() and not qdd_ref.any()
    law = spec.build(robot, 'pinocchio')
    q, qd = np.array([0.1, 0.3]), np.array([0.2, 2.0])
    gains = Gains(*(np.ones(2),) * 4)
    tau, ff = control_terms(robot, ENERGY_LAW, gains, q, qd, q_ref, qd_ref, qdd_ref, energy=law)
    np.testing.assert_array_equal(tau, law_for(robot).command(q, qd))
    assert tau[1] == 0.0 and ff is tau
    with pytest.raises(ValueError, match='needs the swing-up law'):
        control_terms(robot, ENERGY_LAW, gains, q, qd, q_ref, qd_ref, qdd_ref)
    # no model: the PD towards the upright (the node clamps the passive joint's share to 0)
    tau, ff = control_terms(None, ENERGY_LAW, gains, q, qd, q_ref, qd_ref, qdd_ref)
    np.testing.assert_allclose(tau, q_ref - q - qd) and ff is None
    with pytest.raises(ValueError, match='model=pd has none'):
        spec.build(None, 'pd')

    class NoEnergies:
        """The URDF's dynamics without energies (a black-box model's kind)."""

        joint_names = robot.joint_names
        mass_matrix, forward, friction = robot.mass_matrix, robot.forward, robot.friction

        def energy(self, q, qd):
            raise NotImplementedError('a black box')

    with pytest.raises(ValueError, match='no energies'):
        spec.build(NoEnergies(), 'mlp')
    with pytest.raises(ValueError, match='actuated_joints'):
        EnergyLaw(np.ones(2, bool), FURUTA_UPRIGHT, 0.5)
    with pytest.raises(ValueError, match='upright_position'):
        EnergyLaw(mask, [np.nan, np.nan], 0.5)


def test_linearisation_and_lqr_at_the_top(robot):
    law = law_for(robot)
    up, zero = np.array(FURUTA_UPRIGHT), np.zeros(2)
    Hinv = np.linalg.inv(robot.mass_matrix(up))
    dg = np.array(
        [(robot.gravity(up + 1e-6 * e) - robot.gravity(up - 1e-6 * e)) / 2e-6 for e in np.eye(2)]
    ).T
    np.testing.assert_allclose(law.A[2:, :2], -Hinv @ dg, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(law.A[2:, 2:], 0.0, atol=1e-6)  # rigid body: friction left out
    np.testing.assert_allclose(law.B[2:, 0], Hinv[:, 0], rtol=1e-6)
    assert np.max(np.linalg.eigvals(law.A).real) > 1.0  # the top is unstable ...
    assert np.max(np.linalg.eigvals(law.A - law.B @ law.K).real) < -0.5  # ... LQR holds it
    A, B = linearize(robot, up, zero, zero, np.array([True, False]), rigid=False)
    assert A[2, 2] < -1.0  # the Coulomb term's slope at rest, when friction is kept
    np.testing.assert_allclose(law.u_eq, 0.0, atol=1e-9)


def test_switch_has_hysteresis(robot):
    law = law_for(robot, catch_angle=0.3, release_angle=0.6)
    slow = np.array([0.0, 0.5])

    def at(angle):
        return law.update_mode(np.array([0.0, np.pi + angle]), slow)

    assert at(0.45) == 'swing'  # between the thresholds: stays
    assert at(0.25) == 'balance' and law.catches == 1
    assert at(0.45) == 'balance' and at(-0.55) == 'balance'  # no chatter back
    assert at(0.65) == 'swing' and law.releases == 1
    assert at(0.45) == 'swing'
    assert law.update_mode(np.array([0.0, np.pi + 0.1]), np.array([0.0, 6.0])) == 'swing'  # fast
    assert at(-0.2) == 'balance' and law.catches == 2


def test_pumping_raises_the_passive_energy_on_the_plant(robot):
    """Pumping alone (no PD): at a state with the arm still, one short plant step changes the
    pendulum's true energy E_p towards E*: up when below it, down when above; unsaturated at
    the rate ``dE_p/dt = s^T qdd_a = k_E (E* - E_p) s^2`` the law commands."""
    frictionless = robot.mismatched(NO_FRICTION)  # law and plant: the same exact model
    law = law_for(frictionless, kp=0.0, kd=0.0, pump_accel=1e3)
    plant = Plant(robot, NO_FRICTION, actuated=FURUTA_ACTUATED, physics_rate=1e6)
    rng = np.random.default_rng(0)
    below = above = exact = 0
    for _ in range(200):
        q = np.array([rng.uniform(-1, 1), rng.uniform(-np.pi, np.pi)])
        qd = np.array([0.0, rng.uniform(-12.0, 12.0)])
        s = -robot.mass_matrix(q)[0, 1] * qd[1]
        if abs(s) < 2e-3 or abs(wrap_angle(q[1] - np.pi)) < 0.7:
            continue  # no coupling to pump with / the law would balance there
        gap = law.e_target - law.passive_energy(q, qd)
        plant.reset(q, qd)
        applied = plant.step(law.command(q, qd))
        assert applied[1] == 0.0
        e0 = sum(robot.energy(q, qd * [0, 1]))
        e1 = sum(robot.energy(plant.q, plant.qd * [0, 1]))
        rate = (e1 - e0) / plant.dt
        if abs(applied[0]) < 0.5:  # unsaturated: exactly the commanded s^T v
            assert rate == pytest.approx(law.config.k_energy * gap * s * s, rel=1e-2)
            exact += 1
        assert np.sign(rate) == np.sign(gap), (q, qd, gap, rate)
        below += gap > 0
        above += gap < 0
    assert below > 40 and above > 15 and exact > 20


def check_swing_up(robot, law, run):
    assert run.time_to_upright is not None and run.time_to_upright < SWING_UP_TIME
    assert run.final_error < 0.01 and abs(run.qd[-1, 1]) < 0.05
    assert run.catches == 1 and run.releases == 0  # no chatter between the modes
    assert run.max_excursion < 1.0  # the arm stays well inside its +-2.5 rad stops
    assert np.all(np.abs(run.tau[:, 0]) <= 0.5) and np.all(run.tau[:, 1] == 0.0)
    # energy bookkeeping: the true energy changed by the motor's work less the friction's
    np.testing.assert_allclose(
        run.energy - run.energy[0], run.work - run.friction_loss, rtol=0, atol=1e-4
    )
    # the pumping fills the energy gap: each swing's peak of the passive energy is higher
    # than the one before, up to the catch, where it is close to E*
    k_catch = int(np.argmax(run.balance))
    T, V = robot.energy(run.q, run.qd * [0.0, 1.0])  # the pendulum's true energy E_p
    e_p = T + V
    gap = run.e_target_true - e_p[:k_catch]
    window = 50  # 0.2 s, about a quarter of the pendulum's period
    peaks = [gap[i : i + 4 * window].min() for i in range(0, k_catch - 4 * window, 4 * window)]
    assert peaks[0] > 0.25 and all(b < a + 2e-3 for a, b in zip(peaks, peaks[1:])), peaks
    assert abs(run.catch_energy_error_true) < 0.02 and abs(run.catch_energy_error) < 0.02
    after = in_upright_set(law, run.q, run.qd)[int(run.time_to_upright * 250) :]
    assert after.all()


def test_swing_up_with_the_analytic_model(robot):
    law = law_for(robot)
    run = run_swing_up(law, Plant(robot, actuated=FURUTA_ACTUATED), q0=START, duration=20.0)
    check_swing_up(robot, law, run)


def test_learned_target_energy_is_its_own_potential(robot, learned):
    law = law_for(learned)
    up, down, zero = np.array(FURUTA_UPRIGHT), np.zeros(2), np.zeros(2)
    v_up = float(learned.energy(up, zero)[1])
    assert law.e_target == v_up
    offset = v_up - float(robot.energy(up, zero)[1])
    assert abs(offset) > 1e-3  # a learned V has its own zero ...
    rise = v_up - float(learned.energy(down, zero)[1])
    assert rise == pytest.approx(0.2943, rel=0.1)  # ... its differences are the robot's


def test_learned_lqr_holds_the_true_linearisation(robot, learned):
    """The gain designed on the learned model's linearisation stabilises the true one."""
    true, law = law_for(robot), law_for(learned)
    assert np.max(np.linalg.eigvals(true.A - true.B @ law.K).real) < -0.5
    assert np.all(np.sign(law.B[2:, 0]) == np.sign(true.B[2:, 0]))


def test_swing_up_with_the_learned_model(robot, learned):
    law = law_for(learned)
    run = run_swing_up(law, Plant(robot, actuated=FURUTA_ACTUATED), q0=START, duration=20.0)
    check_swing_up(robot, law, run)
