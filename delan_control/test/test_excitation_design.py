"""Excitation designed for the identification regressor, and references joined without stops."""

import numpy as np

from delan_common.excitation import random_fourier_trajectory
from delan_common.robot_model import RobotModel, find_urdf
from delan_control.excitation_design import (
    RegressorConditioning,
    designed_excitation,
    robot_excitation,
)
from delan_control.trajectories import make_reference


def _cond(robot, rc, traj):
    t = np.linspace(0.0, traj.period, 100, endpoint=False)
    return rc.condition_number(robot, *traj.sample(t))


def test_designed_excitation_is_better_conditioned_seeded_and_inside_the_limits():
    robot = RobotModel('seven_dof_arm.urdf')
    s = robot.spec
    rc = RegressorConditioning.of(robot)
    assert 0 < len(rc.columns) < 12 * robot.n  # some parameters never show in torques
    designed = designed_excitation(
        robot, s.lower, s.upper, s.velocity_limit, seed=3, candidates=8, conditioning=rc
    )
    first = random_fourier_trajectory(s.lower, s.upper, s.velocity_limit, seed=3 * 1009)
    assert _cond(robot, rc, designed) <= _cond(robot, rc, first)
    again = designed_excitation(
        robot, s.lower, s.upper, s.velocity_limit, seed=3, candidates=8, conditioning=rc
    )
    assert np.array_equal(designed.a, again.a)
    q, qd, _ = designed.sample(np.linspace(0, designed.period, 500))
    assert np.all(q >= s.lower) and np.all(q <= s.upper)
    assert np.all(np.abs(qd) <= 0.6 * s.velocity_limit + 1e-9)


def test_an_excitation_is_designed_even_when_the_model_gives_nan_torques():
    class NanTorques(RobotModel):
        def inverse(self, q, qd, qdd):
            return np.full(np.shape(q), np.nan)

    robot = NanTorques('two_link_arm.urdf')
    s = robot.spec
    designed = designed_excitation(robot, s.lower, s.upper, s.velocity_limit, seed=1, candidates=4)
    q, _, _ = designed.sample(np.linspace(0, designed.period, 100))
    assert np.all(np.isfinite(q)) and np.all(q >= s.lower) and np.all(q <= s.upper)


def test_a_continued_excitation_starts_where_the_last_one_ended():
    lo, hi, vmax = np.full(2, -2.0), np.full(2, 2.0), np.full(2, 3.0)
    t, q, qd, qdd = make_reference('excitation', lo, hi, vmax, np.zeros(2), seed=0, duration=5.0)
    end = (q[-1], qd[-1], qdd[-1])
    assert np.any(np.abs(qd[-1]) > 0.05)  # the first one ends moving
    t2, q2, qd2, qdd2 = make_reference(
        'excitation', lo, hi, vmax, q[-1] + 0.01, seed=1, duration=5.0, start=end
    )
    assert np.allclose(q2[0], end[0]) and np.allclose(qd2[0], end[1])
    assert np.allclose(qdd2[0], end[2])
    # from rest when no start is given
    _, q3, qd3, _ = make_reference('excitation', lo, hi, vmax, q[-1], seed=1, duration=5.0)
    assert np.allclose(qd3[0], 0.0) and np.allclose(q3[0], q[-1])
    # an approach that would leave the limits starts from rest instead
    wild = (np.full(2, 1.95), np.full(2, 3.0), np.zeros(2))
    _, q4, qd4, _ = make_reference(
        'excitation', lo, hi, vmax, np.full(2, 1.9), seed=1, duration=5.0, start=wild
    )
    assert np.allclose(qd4[0], 0.0)
    assert np.all(q4 <= 2.0)


def test_a_fast_continuation_toward_a_limit_brakes_instead_of_stepping_the_velocity():
    """Moving fast toward a limit, a direct 2 s approach to the next excitation would overshoot
    the margin; the reference brakes to rest first, continuous in q, qd and qdd (starting from
    rest at the arm's position would step the velocity: a feedback kick that saturates)."""
    lo, hi, vmax = np.full(2, -2.0), np.full(2, 2.0), np.full(2, 3.0)
    start = (np.array([1.0, 0.0]), np.array([4.0, 0.0]), np.zeros(2))
    t, q, qd, qdd = make_reference(
        'excitation', lo, hi, vmax, start[0], seed=1, duration=5.0, start=start
    )
    assert np.allclose(q[0], start[0]) and np.allclose(qd[0], start[1])
    assert np.allclose(qdd[0], start[2])
    assert np.all(q <= hi - 0.2 + 1e-9) and np.all(q >= lo + 0.2 - 1e-9)
    # braking from 4 rad/s within the 0.8 rad left: about v^2 / (2 * 0.8) = 10 rad/s^2, no step
    dt = np.diff(t)
    assert np.max(np.abs(np.diff(qd, axis=0)) / dt[:, None]) < 20.0
    assert t[-1] > 5.0 + 2.0  # brake, then approach


def test_figure_eight_is_sized_to_the_effort_limits_at_the_fastest_speed():
    from delan_control.trajectories import figure_eight, fit_figure_eight, sample_points

    robot = RobotModel('seven_dof_arm.urdf')
    s = robot.spec
    fig = figure_eight(s.lower, s.upper, s.velocity_limit, period=6.0)
    lim = s.effort_limit * 0.5  # motors half as strong: 2x would not be feasible

    def need(f):
        _, q, qd, qdd = sample_points(f.at_speed(2.0), 6.0, 0.01)
        return np.max(np.abs(robot.inverse(q, qd, qdd)) / lim)

    assert need(fig) > 0.8
    fitted = fit_figure_eight(fig, robot.inverse, lim, speed=2.0)
    assert 0.75 < need(fitted) <= 0.8 * 1.02  # between the fit's sample points
    assert np.allclose(fitted.center, fig.center) and np.all(fitted.amplitude < fig.amplitude)
    # feasible already: unchanged
    assert fit_figure_eight(fig, robot.inverse, s.effort_limit * 10, speed=2.0) is fig


def test_figure_eight_stays_inside_the_velocities_the_excitation_covers():
    """At 2x the 7-DoF arm's figure eight (ramp-in included) would move faster than its
    velocity limits; fitted, no joint passes the excitation's share of them."""
    from delan_control.trajectories import (
        EXCITATION_VELOCITY_FRACTION,
        figure_eight,
        fit_figure_eight,
        sample_points,
    )

    robot = RobotModel('seven_dof_arm.urdf')
    s = robot.spec
    fig = figure_eight(s.lower, s.upper, s.velocity_limit, period=6.0)

    def peak(f):
        _, _, qd, _ = sample_points(f.at_speed(2.0), 6.0, 0.005)
        return np.max(np.abs(qd) / s.velocity_limit)

    assert peak(fig) > 1.0
    fitted = fit_figure_eight(
        fig, robot.inverse, s.effort_limit * 10, speed=2.0, max_velocity=s.velocity_limit
    )
    assert 0.97 * EXCITATION_VELOCITY_FRACTION < peak(fitted) <= EXCITATION_VELOCITY_FRACTION
    # an excitation reaches that share of the limits
    from delan_control.trajectories import make_reference

    _, _, qd, _ = make_reference(
        'excitation', s.lower, s.upper, s.velocity_limit, None, seed=3, duration=20.0
    )
    assert np.max(np.abs(qd) / s.velocity_limit) > 0.7 * EXCITATION_VELOCITY_FRACTION


def test_the_excitations_fundamental_can_be_chosen():
    """``base_freq`` sets the Fourier series' period (the reference node keeps 0.1 Hz), for the
    designed and the plain excitation alike, within the same velocity bound."""
    from delan_common.urdf_joints import RobotDescription

    desc = RobotDescription.load(find_urdf('seven_dof_arm.urdf'))
    robot = RobotModel('seven_dof_arm.urdf')
    design = (robot, RegressorConditioning.of(robot))
    for candidates in (1, 4):
        slow = robot_excitation(desc, 2, 0.6, candidates, design)
        fast = robot_excitation(desc, 2, 0.6, candidates, design, base_freq=0.2)
        assert slow.period == 10.0 and fast.period == 5.0
        _, qd, _ = fast.sample(np.linspace(0, fast.period, 500))
        assert np.all(np.abs(qd) <= 0.6 * desc.planning_velocity_limits + 1e-9)


def test_a_joint_its_motor_cannot_move_that_fast_is_slowed_and_the_others_are_not():
    """The iCub's wrist: 0.45-0.65 N m motors against 1 N m s/rad of URDF damping, so every
    random series at the other joints' speed needs up to twice a wrist limit. The excitation
    used to go out anyway (the least demanding candidate) and the motors saturated for most of
    it; now the joints that need too much move less, within the 60 % of the limits, and the
    shoulder and elbow keep their motion."""
    from delan_control.excitation_design import EXCITATION_EFFORT_FRACTION, slowed_to_effort
    from delan_control.trajectories import effort_share

    joints = ['l_shoulder_pitch', 'l_shoulder_roll', 'l_shoulder_yaw', 'l_elbow']
    joints += ['l_wrist_prosup', 'l_wrist_pitch', 'l_wrist_yaw']
    robot = RobotModel('icub.urdf', joints=joints)
    s, lim = robot.spec, robot.operating_effort_limit()
    vmax = np.full(7, 2.0)  # no velocity limit given: the planning default

    def need(traj):
        t = np.linspace(0.0, traj.period, 100, endpoint=False)
        return effort_share(robot.inverse, lim, *traj.sample(t))

    raw = random_fourier_trajectory(s.lower, s.upper, vmax, seed=0)
    assert need(raw) > 1.0
    slowed = slowed_to_effort(raw, robot.inverse, lim)
    assert need(slowed) <= EXCITATION_EFFORT_FRACTION
    factor = np.linalg.norm(slowed.a, axis=1) / np.linalg.norm(raw.a, axis=1)
    np.testing.assert_allclose(factor[:4], 1.0)  # shoulder and elbow untouched
    assert np.all(factor[4:] <= 1.0) and factor[4] < 0.5  # the wrist's roll slowed most
    np.testing.assert_array_equal(slowed.q0, raw.q0)
    designed = designed_excitation(robot, s.lower, s.upper, vmax, seed=0, candidates=4)
    assert need(designed) <= EXCITATION_EFFORT_FRACTION
