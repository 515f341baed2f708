import numpy as np
import pytest

from delan_control.control_laws import (
    CT_OMEGA,
    GRAVITY_MARGIN,
    BumplessBlend,
    Gains,
    clamp_torque,
    control_torque,
    ct_gains,
    gravity_stiffness,
    pd_gains,
    position_error,
)


class Pendulum:
    """1-DoF pendulum m l^2 qdd + m g l sin q + b qd = tau, as a DynamicsModel."""

    joint_names = ['j']

    def __init__(self, m=1.0, l=0.5, b=0.1):
        self.ml2, self.mgl, self.b = m * l * l, m * 9.81 * l, b

    def inverse(self, q, qd, qdd):
        return self.ml2 * qdd + self.mgl * np.sin(q) + self.b * qd

    def forward(self, q, qd, tau):
        return (tau - self.mgl * np.sin(q) - self.b * qd) / self.ml2


GAINS = Gains(
    ct_kp=np.array([100.0]), ct_kd=np.array([20.0]), kp=np.array([30.0]), kd=np.array([3.0])
)


def simulate(model_ctrl, law, plant, t_end=3.0, dt=1e-3):
    q, qd = np.array([0.0]), np.array([0.0])
    errs = []
    for k in range(int(t_end / dt)):
        t = k * dt
        q_ref, qd_ref, qdd_ref = (
            np.sin(t) * np.ones(1),
            np.cos(t) * np.ones(1),
            -np.sin(t) * np.ones(1),
        )
        tau = control_torque(model_ctrl, law, GAINS, q, qd, q_ref, qd_ref, qdd_ref)
        qd = qd + dt * plant.forward(q, qd, tau)
        q = q + dt * qd
        errs.append(float(q_ref[0] - q[0]))
    return np.sqrt(np.mean(np.square(errs[len(errs) // 2 :])))


@pytest.mark.parametrize('law', ['computed_torque', 'feedforward_pd'])
def test_exact_model_tracks_far_better_than_pd(law):
    plant = Pendulum()
    rms_model = simulate(Pendulum(), law, plant)
    rms_pd = simulate(None, law, plant)
    assert rms_model < 0.01 * rms_pd, (rms_model, rms_pd)
    assert rms_model < 1e-3


@pytest.mark.parametrize('law', ['computed_torque', 'feedforward_pd'])
@pytest.mark.parametrize('model', [None, Pendulum()])
def test_continuous_joint_error_is_wrapped_not_a_turn(law, model):
    """A continuous joint reported wrapped at +-pi: the reference just across the seam is 0.02
    rad away, and the torque is what 0.02 rad asks for, not what 2 pi - 0.02 would."""
    q, q_ref, zero = np.array([-np.pi + 0.01]), np.array([np.pi - 0.01]), np.zeros(1)
    cont = np.array([True])
    assert position_error(q_ref, q, cont)[0] == pytest.approx(-0.02)
    assert position_error(q_ref, q)[0] == pytest.approx(2 * np.pi - 0.02)
    wrapped = control_torque(model, law, GAINS, q, zero, q_ref, zero, zero, continuous=cont)
    near = control_torque(model, law, GAINS, q, zero, q - 0.02, zero, zero)
    assert wrapped == pytest.approx(near, abs=1e-9)
    # a revolute joint is not wrapped: 2 pi - 0.02 is what it asks for
    assert position_error(q_ref, q, np.array([False]))[0] == pytest.approx(2 * np.pi - 0.02)


def test_unknown_law_is_an_error():
    with pytest.raises(ValueError, match='unknown control law'):
        control_torque(Pendulum(), 'bang_bang', GAINS, *[np.zeros(1)] * 5)


def test_clamp_and_blend():
    assert clamp_torque(np.array([5.0, -50.0, 1.0]), np.array([4.0, 40.0, 2.0])).tolist() == [
        4.0,
        -40.0,
        1.0,
    ]
    blend = BumplessBlend(0.2)
    assert blend.weight(0.0) is None
    blend.start(1.0)
    assert blend.weight(1.1) == pytest.approx(0.5)
    assert blend.weight(1.25) is None and blend.weight(1.1) is None  # over, and stays over
    blend.start()  # from the time of the next weight() call
    assert blend.weight(7.0) == 0.0 and blend.weight(7.05) == pytest.approx(0.25)
    assert blend.weight(6.9) is None  # the clock went back (a sim reset): the blend ends
    BumplessBlend(0.0).start()  # no blend at all


class PendulumInertia(Pendulum):
    def mass_matrix(self, q):
        return np.array([[self.ml2]])


def _track(model, law, plant, feedback=None, t_end=3.0, dt=4e-3):
    q, qd = np.array([0.0]), np.array([0.0])
    errs = []
    for k in range(int(t_end / dt)):
        t = k * dt
        ref = np.sin(t) * np.ones(1), np.cos(t) * np.ones(1), -np.sin(t) * np.ones(1)
        tau = control_torque(model, law, GAINS, q, qd, *ref, feedback_model=feedback)
        for _ in range(4):  # held over the control period, as a motor does
            qd = qd + dt / 4 * plant.forward(q, qd, tau)
            q = q + dt / 4 * qd
        errs.append(float(ref[0][0] - q[0]))
    return np.sqrt(np.mean(np.square(errs[len(errs) // 2 :])))


def test_urdf_feedback_keeps_a_model_with_a_wrong_inertia_stable():
    """A learned model whose inertia is poorly excited: far too large makes computed torque's
    loop too stiff for 250 Hz, far too small leaves it without feedback; through the URDF's
    inertia the same model only feeds forward."""
    plant, urdf = Pendulum(), PendulumInertia()

    def with_inertia(factor):
        m = Pendulum()
        m.ml2 = plant.ml2 * factor  # inertia wrong, gravity and friction right
        return m

    with np.errstate(all='ignore'):
        for factor, ct_bound in ((50.0, 1.0), (0.01, 0.1)):
            ct = _track(with_inertia(factor), 'computed_torque', plant)
            urdf_fb = _track(
                with_inertia(factor), 'computed_torque_urdf_feedback', plant, feedback=urdf
            )
            assert not ct < ct_bound, (factor, ct)  # unstable / lost
            assert urdf_fb < 0.5 and (not np.isfinite(ct) or urdf_fb < 0.5 * ct), (
                factor,
                urdf_fb,
                ct,
            )
    assert _track(plant, 'computed_torque_urdf_feedback', plant, feedback=urdf) < 1e-2
    with pytest.raises(ValueError, match='needs the URDF model'):
        control_torque(plant, 'computed_torque_urdf_feedback', GAINS, *[np.zeros(1)] * 5)


def test_feedforward_on_the_reference_survives_an_overestimated_friction():
    """A learned viscous friction far above the true one is negative damping when the model
    sees the measured velocity (computed torque through the URDF feedback goes unstable); on the
    reference it only biases the feed-forward, and the loop keeps the URDF's damping."""
    plant, urdf = Pendulum(), PendulumInertia()
    steep = Pendulum()
    steep.b = plant.b + 1.6 * plant.ml2 * GAINS.ct_kd[0]  # beyond the feedback's damping
    with np.errstate(all='ignore'):
        ct = _track(steep, 'computed_torque_urdf_feedback', plant, feedback=urdf)
        ff = _track(steep, 'feedforward_urdf_pd', plant, feedback=urdf)
    assert not ct < 1.0, ct
    assert ff < 0.5, ff
    assert _track(plant, 'feedforward_urdf_pd', plant, feedback=urdf) < 1e-2
    with pytest.raises(ValueError, match='needs the URDF model'):
        control_torque(plant, 'feedforward_urdf_pd', GAINS, *[np.zeros(1)] * 5)


def _hold(model, kp, kd, q_goal, rate=250.0, t_end=2.0, substeps=4):
    """Largest joint error [rad] over the last 0.5 s of holding ``q_goal`` (from 0.05 rad off)
    under gravity compensation + PD, the PD commanded at ``rate``, the arm integrated finer."""
    q, qd = q_goal + 0.05, np.zeros_like(q_goal)
    dt = 1.0 / (rate * substeps)
    worst = []
    for k in range(int(t_end * rate)):
        tau = np.clip(model.gravity(q) + kp * (q_goal - q) - kd * qd, -1e4, 1e4)
        for _ in range(substeps):
            qd = qd + dt * model.forward(q, qd, tau)
            q = q + dt * qd
        if not np.all(np.isfinite(q)) or np.max(np.abs(q - q_goal)) > 10.0:
            return np.inf
        if k >= (t_end - 0.5) * rate:
            worst.append(np.max(np.abs(q - q_goal)))
    return max(worst)


def test_pd_gains_are_the_classic_ones_where_the_joints_do_not_couple():
    h = np.diag([2.0, 0.5])
    kp, kd = pd_gains(h, dt=1e-3, omega=10.0)
    assert np.allclose(kp, 100.0 * np.diag(h)) and np.allclose(kd, 20.0 * np.diag(h))
    # too stiff for the rate: lowered until the sampled loop is stable
    kp, kd = pd_gains(h, dt=1e-3, omega=2000.0)
    assert np.all(kd < 4000.0 * np.diag(h)) and np.all(kp > 0)


def test_pd_gains_hold_a_panda_where_two_axes_line_up():
    """At mid range a Panda's joints 1 and 3 are collinear: gains from the diagonal of H drive
    their common mode unstable at 250 Hz; the gains of ``pd_gains`` hold the arm (slowly where
    the two turn together: that mode's inertia is large for the gains it gets)."""
    from delan_common.robot_model import RobotModel, find_urdf

    model = RobotModel(find_urdf('panda.urdf'))
    lo, hi = model.sample_bounds()
    q_mid = 0.5 * (lo + hi)
    h = model.mass_matrix(q_mid)
    kp, kd = pd_gains(h, dt=1.0 / 250.0, omega=12.0)
    assert _hold(model, kp, kd, q_mid, t_end=8.0) < 0.02  # from 0.05 rad off
    diag = np.diag(h)
    assert _hold(model, 144.0 * diag, 24.0 * diag, q_mid) == np.inf


class _Gravity:
    def __init__(self, pend: Pendulum):
        self.pend = pend

    def gravity(self, q):
        return self.pend.mgl * np.sin(q)


def test_ct_gains_stiffer_than_an_upright_pendulum_pulls():
    """Upright, a pendulum's gravity pulls with g / l [1/s^2] per unit of inertia; the
    computed-torque gains keep GRAVITY_MARGIN times that, and no less than CT_OMEGA^2."""
    for length, upright in ((0.5, True), (0.01, True), (0.01, False)):
        pend = Pendulum(l=length)
        q = np.array([np.pi if upright else 0.0])
        g = gravity_stiffness(_Gravity(pend), q)
        assert np.isclose(g[0, 0], -pend.mgl if upright else pend.mgl, rtol=1e-6)
        kp, kd, stiff = ct_gains(np.array([[pend.ml2]]), g, dt=1e-3)
        pull = 9.81 / length if upright else 0.0
        assert stiff and np.isclose(kp[0], max(CT_OMEGA**2, GRAVITY_MARGIN * pull))
        assert np.isclose(kd[0], 2.0 * np.sqrt(kp[0]))
        if upright:
            assert kp[0] * pend.ml2 > pend.mgl  # the feedback holds it up


def test_ct_gains_say_when_the_rate_cannot_be_stiff_enough():
    pend = Pendulum(l=1e-4)  # pull 98100 / s^2: omega 626 rad/s at least
    g = np.array([[-pend.mgl]])
    kp, kd, stiff = ct_gains(np.array([[pend.ml2]]), g, dt=1.0 / 250.0)
    assert not stiff and kp[0] < GRAVITY_MARGIN * 9.81 / 1e-4
    kp_fast, _, stiff_fast = ct_gains(np.array([[pend.ml2]]), g, dt=1e-5)
    assert stiff_fast and kp_fast[0] > kp[0]
