"""Excitation designed for the identification regressor, and references joined without stops."""
import numpy as np

from delan_control.excitation_design import RegressorConditioning, designed_excitation
from delan_control.robot_model import RobotModel
from delan_control.trajectories import make_reference
from delan_learning.excitation import random_fourier_trajectory


def _cond(robot, rc, traj):
    t = np.linspace(0.0, traj.period, 100, endpoint=False)
    return rc.condition_number(robot, *traj.sample(t))


def test_designed_excitation_is_better_conditioned_seeded_and_inside_the_limits():
    robot = RobotModel('seven_dof_arm.urdf')
    s = robot.spec
    rc = RegressorConditioning.of(robot)
    assert 0 < len(rc.columns) < 12 * robot.n     # some parameters never show in torques
    designed = designed_excitation(robot, s.lower, s.upper, s.velocity_limit, seed=3,
                                   candidates=8, conditioning=rc)
    first = random_fourier_trajectory(s.lower, s.upper, s.velocity_limit, seed=3 * 1009)
    assert _cond(robot, rc, designed) <= _cond(robot, rc, first)
    again = designed_excitation(robot, s.lower, s.upper, s.velocity_limit, seed=3,
                                candidates=8, conditioning=rc)
    assert np.array_equal(designed.a, again.a)
    q, qd, _ = designed.sample(np.linspace(0, designed.period, 500))
    assert np.all(q >= s.lower) and np.all(q <= s.upper)
    assert np.all(np.abs(qd) <= 0.6 * s.velocity_limit + 1e-9)


def test_a_continued_excitation_starts_where_the_last_one_ended():
    lo, hi, vmax = np.full(2, -2.0), np.full(2, 2.0), np.full(2, 3.0)
    t, q, qd, qdd = make_reference('excitation', lo, hi, vmax, np.zeros(2), seed=0,
                                   duration=5.0)
    end = (q[-1], qd[-1], qdd[-1])
    assert np.any(np.abs(qd[-1]) > 0.05)          # the first one ends moving
    t2, q2, qd2, qdd2 = make_reference('excitation', lo, hi, vmax, q[-1] + 0.01, seed=1,
                                       duration=5.0, start=end)
    assert np.allclose(q2[0], end[0]) and np.allclose(qd2[0], end[1])
    assert np.allclose(qdd2[0], end[2])
    # from rest when no start is given
    _, q3, qd3, _ = make_reference('excitation', lo, hi, vmax, q[-1], seed=1, duration=5.0)
    assert np.allclose(qd3[0], 0.0) and np.allclose(q3[0], q[-1])
    # an approach that would leave the limits starts from rest instead
    wild = (np.full(2, 1.95), np.full(2, 3.0), np.zeros(2))
    _, q4, qd4, _ = make_reference('excitation', lo, hi, vmax, np.full(2, 1.9), seed=1,
                                   duration=5.0, start=wild)
    assert np.allclose(qd4[0], 0.0)
    assert np.all(q4 <= 2.0)


def test_figure_eight_is_sized_to_the_effort_limits_at_the_fastest_speed():
    from delan_control.trajectories import figure_eight, fit_figure_eight, sample_points
    robot = RobotModel('seven_dof_arm.urdf')
    s = robot.spec
    fig = figure_eight(s.lower, s.upper, s.velocity_limit, period=6.0)
    lim = s.effort_limit * 0.5          # motors half as strong: 2x would not be feasible

    def need(f):
        _, q, qd, qdd = sample_points(f.at_speed(2.0), 6.0, 0.01)
        return np.max(np.abs(robot.inverse(q, qd, qdd)) / lim)
    assert need(fig) > 0.8
    fitted = fit_figure_eight(fig, robot.inverse, lim, speed=2.0)
    assert 0.75 < need(fitted) <= 0.8 * 1.02   # between the fit's sample points
    assert np.allclose(fitted.center, fig.center) and np.all(fitted.amplitude < fig.amplitude)
    # feasible already: unchanged
    assert fit_figure_eight(fig, robot.inverse, s.effort_limit * 10, speed=2.0) is fig
