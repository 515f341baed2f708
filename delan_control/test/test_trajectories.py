import numpy as np
import pytest

from delan_control.trajectories import (
    PiecewiseQuintic,
    effort_share,
    figure_eight,
    make_reference,
    random_fourier_trajectory,
    rejoin_offset,
    splice,
)

LOWER, UPPER, VMAX = np.array([-3.1, -2.8]), np.array([3.1, 2.8]), np.array([6.0, 8.0])


def test_quintic_reproduces_a_quintic_polynomial_exactly():
    rng = np.random.default_rng(0)
    c = rng.normal(size=(6, 3))
    f = lambda t: sum(c[k] * t[:, None] ** k for k in range(6))  # noqa: E731
    fd = lambda t: sum(k * c[k] * t[:, None] ** (k - 1) for k in range(1, 6))  # noqa: E731
    fdd = lambda t: sum(k * (k - 1) * c[k] * t[:, None] ** (k - 2) for k in range(2, 6))  # noqa
    tw = np.array([0.0, 0.3, 1.0, 1.7])
    traj = PiecewiseQuintic(tw, f(tw), fd(tw), fdd(tw))
    ts = np.linspace(0.001, 1.699, 200)
    q, qd, qdd = traj.sample(ts)
    np.testing.assert_allclose(q, f(ts), atol=1e-10)
    np.testing.assert_allclose(qd, fd(ts), atol=1e-9)
    np.testing.assert_allclose(qdd, fdd(ts), atol=1e-8)


def test_quintic_holds_at_rest_outside_its_span_and_rejects_bad_points():
    traj = PiecewiseQuintic(np.array([1.0, 2.0]), np.array([[0.0], [1.0]]))
    q, qd, qdd = traj.sample(np.array([0.0, 3.0]))
    assert q[:, 0].tolist() == [0.0, 1.0] and not qd.any() and not qdd.any()
    with pytest.raises(ValueError):
        PiecewiseQuintic(np.array([0.0, 0.0]), np.zeros((2, 1)))
    with pytest.raises(ValueError):
        PiecewiseQuintic(np.array([0.0, 1.0]), np.array([[0.0], [np.nan]]))


@pytest.mark.parametrize('speed', [1.0, 2.0])
def test_figure_eight_is_consistent_and_inside_limits(speed):
    traj = figure_eight(LOWER, UPPER, VMAX).at_speed(speed)
    t = np.linspace(0, 10, 20001)
    q, qd, qdd = traj.sample(t)
    assert np.all(q > LOWER) and np.all(q < UPPER)
    assert np.all(np.abs(qd) <= VMAX)
    np.testing.assert_allclose(np.gradient(q, t, axis=0)[2:-2], qd[2:-2], atol=1e-3 * speed)
    np.testing.assert_allclose(
        np.gradient(qd, t, axis=0)[2:-2], qdd[2:-2], atol=1e-2 * speed**2, rtol=1e-2
    )  # jerk jumps where the ramp ends
    assert np.allclose(qd[0], 0) and np.allclose(qdd[0], 0)  # starts at rest


def test_figure_eight_at_two_x_is_the_same_path_twice_as_fast():
    base = figure_eight(LOWER, UPPER, VMAX)
    t = np.linspace(0, 4, 101)
    q1, qd1, qdd1 = base.sample(2 * t)
    q2, qd2, qdd2 = base.at_speed(2.0).sample(t)
    np.testing.assert_allclose(q2, q1, atol=1e-12)
    np.testing.assert_allclose(qd2, 2 * qd1, atol=1e-12)
    np.testing.assert_allclose(qdd2, 4 * qdd1, atol=1e-9)


def test_excitation_is_seeded_and_within_limits():
    a = random_fourier_trajectory(LOWER, UPPER, VMAX, seed=3)
    b = random_fourier_trajectory(LOWER, UPPER, VMAX, seed=3)
    c = random_fourier_trajectory(LOWER, UPPER, VMAX, seed=4)
    t = np.linspace(0, a.period, 5001)
    qa, qda, _ = a.sample(t)
    assert np.array_equal(qa, b.sample(t)[0]) and not np.allclose(qa, c.sample(t)[0])
    span = UPPER - LOWER
    assert np.all(qa >= LOWER + 0.1 * span - 1e-9) and np.all(qa <= UPPER - 0.1 * span + 1e-9)
    assert np.all(np.abs(qda) <= 0.6 * VMAX + 1e-9)
    np.testing.assert_allclose(np.gradient(qa, t, axis=0)[2:-2], qda[2:-2], atol=1e-3)


def test_excitation_of_continuous_joints_is_finite():
    lower, upper = np.array([-np.inf, -1.0]), np.array([np.inf, 1.0])
    traj = random_fourier_trajectory(lower, upper, np.array([3.0, 3.0]), seed=1)
    q, qd, qdd = traj.sample(np.linspace(0, traj.period, 500))
    assert np.all(np.isfinite(q)) and np.all(np.isfinite(qdd))
    assert np.all(np.abs(q[:, 0]) <= np.pi) and np.all(np.abs(q[:, 1]) <= 1.0)


def test_rejoin_offset_starts_at_the_arm_and_ends_at_zero_within_the_speed_budget():
    dq, dqd, vmax = np.array([0.4, -0.01]), np.array([0.2, 0.0]), np.array([2.0, np.inf])
    off = rejoin_offset(10.0, dq, dqd, vmax, min_time=0.5)
    T = off.end_time - 10.0
    assert T == pytest.approx(1.875 * 0.4 / (0.25 * 2.0))  # stretched past min_time
    q, qd, qdd = off.sample(np.array([10.0, off.end_time, off.end_time + 1.0]))
    assert q[0] == pytest.approx(dq) and qd[0] == pytest.approx(dqd)
    assert qdd[0] == pytest.approx([0.0, 0.0])
    assert np.allclose(q[1:], 0.0) and np.allclose(qd[1:], 0.0)
    t = np.linspace(10.0, off.end_time, 2001)
    _, qd_all, _ = off.sample(t)
    # the position offset alone would peak at 0.25 vmax; the initial velocity adds a little
    assert np.abs(qd_all[:, 0]).max() <= 0.25 * 2.0 + 0.2
    # a small offset takes min_time; joints without a limit count as 1 rad/s
    assert rejoin_offset(0.0, [0.01, 0.0], [0.0, 0.0], [np.inf, 0.0], 0.5).end_time == 0.5
    assert rejoin_offset(
        0.0, [0.0, 0.5], [0.0, 0.0], [np.inf, 0.0], 0.5
    ).end_time == pytest.approx(1.875 * 0.5 / 0.25)


def test_a_spliced_excitation_repeats_the_end_of_the_last_one_then_follows_on():
    lo, hi, vmax = np.array([-2.0, -1.5]), np.array([2.0, 1.5]), np.array([2.0, 2.0])
    first = make_reference('excitation', lo, hi, vmax, np.zeros(2), seed=1, duration=3.0)
    following = make_reference(
        'excitation',
        lo,
        hi,
        vmax,
        first[1][-1],
        seed=2,
        duration=3.0,
        start=tuple(a[-1] for a in first[1:]),
    )
    offset, spliced = splice(first, following, overlap=1.0)
    t = spliced[0]
    assert offset == pytest.approx(first[0][-1] - 1.0) and t[0] == 0.0
    assert np.all(np.diff(t) > 0)
    # over the overlap both references command the same motion at the same (absolute) time,
    # so the handover is seamless whenever within it the new one arrives ...
    a, b = PiecewiseQuintic(*first), PiecewiseQuintic(*spliced)
    times = np.linspace(offset, first[0][-1] - 1e-6, 50)
    for x, y in zip(a.sample(times), b.sample(times - offset)):
        assert np.allclose(x, y, atol=1e-9)
    # ... and after it the new one is the following excitation
    later = np.linspace(0.0, following[0][-1] - 1e-6, 200)
    for x, y in zip(
        PiecewiseQuintic(*following).sample(later), b.sample(later + first[0][-1] - offset)
    ):
        assert np.allclose(x, y, atol=1e-9)
    assert spliced[0][-1] == pytest.approx(1.0 + following[0][-1])


def test_effort_share_counts_only_finite_limits():
    qdd = np.array([[1.0, 50.0], [-3.0, 0.0]])
    inverse = lambda q, qd, a: a * np.array([2.0, 1.0])  # noqa: E731
    assert effort_share(inverse, np.array([4.0, np.inf]), qdd, qdd, qdd) == pytest.approx(1.5)
    assert effort_share(inverse, np.array([np.inf, 0.0]), qdd, qdd, qdd) == 0.0
