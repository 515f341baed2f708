"""The controller's target (``reference_tracking.ReferenceTracker``): hold, track, join a new
reference and rejoin one after a gap in the joint states without a step, drop a reference the
arm is far from."""

import numpy as np
import pytest

from delan_control.reference_tracking import NEW_REFERENCE, ReferenceTracker
from delan_control.trajectories import PiecewiseQuintic

VMAX = np.array([2.0, 2.0])


def _ramp(t0: float = 0.0, start=(0.0, 0.0)) -> PiecewiseQuintic:
    """Joint 0 moves from rest at ``start`` to 1 rad farther over 10 s (0.1 rad/s after the
    first second), joint 1 stays."""
    t = t0 + np.linspace(0.0, 10.0, 11)
    q = np.stack([t - t0, np.zeros_like(t)], axis=1) / 10.0 + np.asarray(start)
    qd = np.zeros_like(q)
    qd[1:, 0] = 0.1
    return PiecewiseQuintic(t, q, qd)


def _start(tracker: ReferenceTracker, ref: PiecewiseQuintic, t: float = 0.0, q=(0.0, 0.0)):
    """``ref`` arrives and is taken up at ``t`` with the arm at rest at ``q``."""
    tracker.set_reference(ref)
    return tracker.adopt(t, np.asarray(q, float), np.zeros(2))


def _track(tracker: ReferenceTracker, t0: float, t1: float, dt: float = 0.01):
    """The arm follows the target exactly from t0 to t1; the last target."""
    for t in np.arange(t0, t1, dt):
        q_ref, qd_ref, _, _ = tracker.target(t, *_exact(tracker, t))
    return q_ref, qd_ref


def _exact(tracker, t):
    q, qd, _ = (a[0] for a in tracker.reference.sample(t))
    return q, qd


def test_without_a_reference_it_holds_where_the_arm_was_at_rest():
    tr = ReferenceTracker(VMAX, resume_tolerance=1.0, resume_time=1.0)
    assert tr.resume(0.0, np.array([0.3, -0.2]), np.array([0.5, 0.0])).action == 'holding'
    q_ref, qd_ref, qdd_ref, holding = tr.target(0.1, np.array([0.31, -0.2]), np.zeros(2))
    assert holding
    np.testing.assert_array_equal(q_ref, [0.3, -0.2])
    assert not qd_ref.any() and not qdd_ref.any()


def test_a_reference_is_tracked_as_given_and_counted():
    tr = ReferenceTracker(VMAX, 1.0, 1.0)
    tr.resume(0.0, np.zeros(2), np.zeros(2))
    ref = _ramp()
    assert _start(tr, ref).action == 'unchanged'  # it begins where the arm is held
    assert tr.adopt(0.01, np.zeros(2), np.zeros(2)) is None  # nothing new
    q_ref, qd_ref, qdd_ref, holding = tr.target(5.0, np.zeros(2), np.zeros(2))
    assert not holding and tr.received == 1
    for got, want in zip((q_ref, qd_ref, qdd_ref), ref.sample(5.0)):
        np.testing.assert_allclose(got, want[0])


def test_after_a_stall_the_target_starts_at_the_arm_and_rejoins_the_reference():
    tr = ReferenceTracker(VMAX, resume_tolerance=1.0, resume_time=1.0)
    tr.resume(0.0, np.zeros(2), np.zeros(2))
    _start(tr, _ramp())
    _track(tr, 0.0, 3.0)
    # joint states stop at 3 s with the arm on the reference; they come back at 5 s with the
    # arm where it stopped (a frozen driver): the reference moved on ~0.2 rad meanwhile
    q_arm, qd_arm = _exact(tr, 3.0)
    r = tr.resume(5.0, q_arm, qd_arm)
    assert r.action == 'rejoining' and tr.rejoined == 1 and tr.rejoining
    assert r.error == pytest.approx(0.2, abs=0.01) and r.until >= 6.0
    q_ref, qd_ref, _, holding = tr.target(5.0, q_arm, qd_arm)
    assert not holding
    np.testing.assert_allclose(q_ref, q_arm, atol=1e-9)  # no step in the target
    np.testing.assert_allclose(qd_ref, qd_arm, atol=1e-9)
    q_ref, _ = _track(tr, 5.0, r.until + 0.05)
    assert not tr.rejoining  # back on the reference
    np.testing.assert_allclose(q_ref, _exact(tr, r.until + 0.04)[0], atol=2e-3)


def test_the_feedback_before_a_stall_is_kept_and_a_driver_that_resumes_in_place_changes_nothing():
    tr = ReferenceTracker(VMAX, 1.0, 1.0)
    tr.resume(0.0, np.zeros(2), np.zeros(2))
    _start(tr, _ramp())
    lag = np.array([0.01, 0.0])  # the arm trails the reference by 10 mrad
    for t in np.arange(0.0, 3.0, 0.01):
        q, qd = _exact(tr, t)
        tr.target(t, q - lag, qd)
    q, qd = _exact(tr, 2.99)
    # the same state right after (a gap of one sample): nothing grew beyond the noise
    assert tr.resume(3.0, q - lag + 0.0001, qd).action == 'unchanged'
    assert not tr.rejoining and tr.rejoined == 0
    # after a longer gap only what the gap added is rejoined, not the 10 mrad lag
    r = tr.resume(4.0, q - lag, qd)
    assert r.action == 'rejoining'
    assert r.error == pytest.approx(0.1 + 0.0001, abs=2e-3)
    q_ref, _, _, _ = tr.target(4.0, q - lag, qd)
    np.testing.assert_allclose(q_ref, q, atol=1e-6)  # the lag is still fed back


def test_a_stall_during_a_rejoin_continues_it_without_a_step_in_the_target():
    """Joint states stall again while the target is still on its way back to the reference
    (a driver that stutters, a controller started after its reference): the rejoin goes on
    from where it was, with what the new gap added, and the target's position, velocity and
    acceleration carry on across the gap (an acceleration step is a torque step of H x it)."""
    tr = ReferenceTracker(VMAX, resume_tolerance=5.0, resume_time=1.0)
    tr.resume(0.0, np.zeros(2), np.zeros(2))
    _start(tr, _ramp())
    _track(tr, 0.0, 2.0)
    # the first stall: back at 6 s where the arm stopped at 2 s, 0.4 rad behind
    r1 = tr.resume(6.0, *_exact(tr, 2.0))
    assert r1.action == 'rejoining' and r1.until > 6.5
    t_stop = 6.0 + 0.4 * (r1.until - 6.0)  # mid-rejoin: the offset moves and accelerates
    for t in np.arange(6.0, t_stop, 0.004):  # the arm on the target
        q_ref, qd_ref, qdd_ref, _ = tr.target(t, np.zeros(2), np.zeros(2))
        tr.target(t, q_ref, qd_ref)
    assert tr.rejoining and abs(qdd_ref[0]) > 0.01
    # a driver that resumes in place and in time (its clock stopped with it): nothing grew,
    # the rejoin goes on unchanged
    assert tr.resume(t, q_ref, qd_ref).action == 'unchanged' and tr.rejoined == 1
    # one whose clock ran on (the target moved on meanwhile, the arm did not): 4 ms (a sim
    # paused with its clock, one period), then 0.3 s
    t_back = t + 0.004
    r2 = tr.resume(t_back, q_ref, qd_ref)
    assert r2.action == 'rejoining' and tr.rejoined == 2
    q2, qd2, qdd2, _ = tr.target(t_back, q_ref, qd_ref)
    np.testing.assert_allclose(q2, q_ref, atol=1e-9)
    np.testing.assert_allclose(qd2, qd_ref, atol=1e-9)
    # the acceleration changes as the old rejoin's did in 4 ms (its jerk < 60 x 0.4 / T^3)
    np.testing.assert_allclose(qdd2, qdd_ref, atol=0.004 * 60 * 0.4 / (r1.until - 6.0) ** 3)
    r3 = tr.resume(t_back + 0.3, q2, qd2)
    # only what this gap added: how far the target (reference + rejoin) moved in 0.3 s
    assert r3.action == 'rejoining' and tr.rejoined == 3
    assert 0.3 * 0.1 < r3.error <= 0.3 * (0.1 + 1.875 * 0.4 / (r1.until - 6.0))
    q_end, _ = _track(tr, t_back + 0.3, r3.until + 0.05)
    assert not tr.rejoining
    np.testing.assert_allclose(q_end, _exact(tr, r3.until + 0.04)[0], atol=2e-3)


def test_a_reference_far_from_the_arm_is_dropped_and_the_arm_held():
    tr = ReferenceTracker(VMAX, resume_tolerance=0.5, resume_time=1.0)
    tr.resume(0.0, np.zeros(2), np.zeros(2))
    _start(tr, _ramp())
    _track(tr, 0.0, 1.0)
    q_moved = np.array([2.0, 0.3])  # the arm was moved by hand
    r = tr.resume(1.5, q_moved, np.zeros(2))
    assert r.action == 'dropped' and tr.dropped == 1 and tr.reference is None
    assert r.error == pytest.approx(2.0 - 0.15, abs=1e-3)  # the reference is at 0.15
    q_ref, qd_ref, _, holding = tr.target(1.6, q_moved + 0.01, np.zeros(2))
    assert holding
    np.testing.assert_array_equal(q_ref, q_moved)
    # a tolerance raised at runtime applies at once: a new reference 1.9 rad away is joined
    tr.resume_tolerance = 5.0
    r = _start(tr, _ramp(2.0), 3.0, q_moved)
    assert r.action == 'rejoining' and tr.reference is not None
    assert tr.received == 2 and tr.dropped == 1 and tr.rejoined == 0


def test_a_new_reference_begins_where_the_arm_is_and_joins_its_course():
    """A reference that begins away from the arm (0.2 rad from where it sags below its hold
    position, 0.3 rad on joint 1): the target starts at the arm's position and velocity, as a
    JointTrajectoryController starts from the current state, and reaches the reference after
    resume_time or longer."""
    tr = ReferenceTracker(VMAX, resume_tolerance=0.5, resume_time=1.0)
    tr.resume(0.0, np.zeros(2), np.zeros(2))
    sag, sagging = np.array([-0.1, 0.0]), np.array([-0.05, 0.0])
    tr.target(0.5, sag, sagging)
    ref = _ramp(1.0, start=(0.1, 0.3))
    tr.set_reference(ref)
    assert tr.reference is None  # taken up at the next joint state
    r = tr.adopt(1.0, sag, sagging)
    # over 1.125 s: catching up 0.3 rad adds at most a quarter of the velocity limit
    assert r.action == 'rejoining' and r.error == pytest.approx(0.3)
    assert r.until == pytest.approx(1.0 + 1.875 * 0.3 / (0.25 * 2.0))
    level, message = r.describe(NEW_REFERENCE, 1.0, tr.resume_tolerance)
    assert level == 'info'
    assert (
        'new reference taken up from the arm, 0.300 from its course, joined over 1.12' in message
    )
    assert tr.reference is ref and tr.rejoining and tr.rejoined == 0
    q_ref, qd_ref, _, holding = tr.target(1.0, sag, sagging)
    assert not holding
    np.testing.assert_allclose(q_ref, sag, atol=1e-12)  # no position error: no step
    np.testing.assert_allclose(qd_ref, sagging, atol=1e-12)
    targets = np.array([tr.target(t, sag, sagging)[0] for t in np.arange(1.0, 2.5, 0.001)])
    assert np.abs(np.diff(targets, axis=0)).max() < 0.6e-3  # 0.5 rad/s at most
    assert not tr.rejoining
    np.testing.assert_allclose(targets[-1], ref.sample(2.499)[0][0], atol=1e-12)


def _swing(t0: float = 0.0) -> PiecewiseQuintic:
    """Joint 0 swings 0.3 sin(2 (t - t0)) rad for 10 s (accelerations up to 1.2 rad/s^2),
    joint 1 stays."""
    t = t0 + np.arange(0.0, 10.0, 0.05)
    w = 2.0 * (t - t0)
    zero = np.zeros_like(t)
    return PiecewiseQuintic(
        t,
        np.stack([0.3 * np.sin(w), zero], axis=1),
        np.stack([0.6 * np.cos(w), zero], axis=1),
        np.stack([-1.2 * np.sin(w), zero], axis=1),
    )


def test_a_reference_taken_up_mid_swing_starts_with_the_last_targets_acceleration():
    """The model's feed-forward is H x the target's acceleration: a reference taken up while its
    course accelerates (arrived late, a switch to another) would step the command by H x the
    course's acceleration. The target starts with the acceleration of the last target (zero
    when holding) and joins the course's over the rejoin."""
    tr = ReferenceTracker(VMAX, resume_tolerance=1.0, resume_time=1.0)
    tr.resume(0.0, np.zeros(2), np.zeros(2))
    tr.target(0.0, np.zeros(2), np.zeros(2))  # holding at rest
    swing = _swing()
    t = 0.8  # taken up late: its course at 0.3 sin 1.6, accelerating at -1.2 rad/s^2
    assert abs(swing.sample(t)[2][0, 0]) > 1.1
    r = _start(tr, swing, t)
    assert r.action == 'rejoining'
    q_ref, qd_ref, qdd_ref, _ = tr.target(t, np.zeros(2), np.zeros(2))
    np.testing.assert_allclose(q_ref, 0.0, atol=1e-12)
    np.testing.assert_allclose(qd_ref, 0.0, atol=1e-12)
    np.testing.assert_allclose(qdd_ref, 0.0, atol=1e-12)  # as held, not the course's
    _track(tr, t, r.until + 0.05)
    assert not tr.rejoining
    # a switch to another swing, half a period apart, while the first accelerates: the target
    # goes on with the first's acceleration
    t = r.until + 0.05
    _, _, qdd_before, _ = tr.target(t, *_exact(tr, t))
    assert abs(qdd_before[0]) > 0.1
    other = _swing(t0=t - 0.7)
    assert _start(tr, other, t + 0.01, q=_exact(tr, t)[0]).action == 'rejoining'
    q_arm, qd_arm = _exact(tr, t)
    qdd_after = tr.target(t + 0.01, q_arm, qd_arm)[2]
    np.testing.assert_allclose(qdd_after, qdd_before, atol=1e-9)
    assert abs(other.sample(t + 0.01)[2][0, 0] - qdd_before[0]) > 0.5  # the course's is not


def test_after_a_stall_the_target_goes_on_with_its_acceleration_before_the_stall():
    """Joint states stall for 0.7 s while the reference swings on; they come back with the arm
    where it stopped (a paused sim whose stamps ran on): position, velocity and acceleration of
    the target carry on from before the stall, however the course's acceleration changed."""
    tr = ReferenceTracker(VMAX, resume_tolerance=1.0, resume_time=1.0)
    tr.resume(0.0, np.zeros(2), np.zeros(2))
    _start(tr, _swing())
    q_ref, qd_ref = _track(tr, 0.0, 1.0)
    qdd_ref = tr.target(0.99, q_ref, qd_ref)[2]
    r = tr.resume(1.7, q_ref, qd_ref)
    assert r.action == 'rejoining'
    assert abs(_swing().sample(1.7)[2][0, 0] - qdd_ref[0]) > 1.0  # the course's changed
    q2, qd2, qdd2, _ = tr.target(1.7, q_ref, qd_ref)
    np.testing.assert_allclose(q2, q_ref, atol=1e-9)
    np.testing.assert_allclose(qd2, qd_ref, atol=1e-9)
    np.testing.assert_allclose(qdd2, qdd_ref, atol=1e-9)
    q_end, _ = _track(tr, 1.7, r.until + 0.05)
    assert not tr.rejoining
    np.testing.assert_allclose(q_end, _exact(tr, r.until + 0.04)[0], atol=2e-3)


def test_a_reference_that_arrives_late_is_joined_from_the_arm_not_dropped():
    """A reference sent from where the arm is, taken up 0.8 s into its 1 s approach (a long
    message on a loaded machine, a sim at twice real time): its course is 1.5 rad on, beyond
    resume_tolerance, but it began at the arm: joined from there."""
    tr = ReferenceTracker(VMAX, resume_tolerance=1.0, resume_time=1.0)
    tr.resume(0.0, np.zeros(2), np.zeros(2))
    approach = PiecewiseQuintic(np.array([1.0, 2.0, 12.0]), np.array([[0, 0], [2, 0], [3, 0.0]]))
    r = _start(tr, approach, 1.8)
    assert r.action == 'rejoining' and r.error > 1.5 and tr.dropped == 0
    np.testing.assert_allclose(tr.target(1.8, np.zeros(2), np.zeros(2))[0], [0.0, 0.0])


def test_a_new_reference_that_begins_later_is_waited_for_at_its_first_point():
    """A reference whose first point lies in the future (a JointTrajectoryController-style
    goal, stamped ahead): the target moves from the hold position to that point at rest."""
    tr = ReferenceTracker(VMAX, resume_tolerance=0.5, resume_time=1.0)
    tr.resume(0.0, np.zeros(2), np.zeros(2))
    ref = _ramp(5.0, start=(0.2, 0.0))
    r = _start(tr, ref, 1.0)
    assert r.action == 'rejoining' and r.until == 2.0
    np.testing.assert_allclose(tr.target(1.0, np.zeros(2), np.zeros(2))[0], [0.0, 0.0])
    for t in (2.0, 4.0, 5.0):
        q_ref, qd_ref, _, _ = tr.target(t, np.zeros(2), np.zeros(2))
        np.testing.assert_allclose(q_ref, [0.2, 0.0], atol=1e-12)
        assert not qd_ref.any()
    np.testing.assert_allclose(tr.target(8.0, np.zeros(2), np.zeros(2))[0], [0.5, 0.0])


def test_a_new_reference_far_from_the_arm_is_dropped_and_the_arm_held():
    """Beyond resume_tolerance from the arm (a reference meant for another start, an arm moved
    meanwhile): dropped, whatever was tracked before, and the arm held where it is."""
    tr = ReferenceTracker(VMAX, resume_tolerance=0.5, resume_time=1.0)
    tr.resume(0.0, np.zeros(2), np.zeros(2))
    _start(tr, _ramp())
    q_arm, _ = _track(tr, 0.0, 2.0)
    r = _start(tr, _ramp(2.0, start=(0.0, -0.6)), 2.0, q_arm)
    assert r.action == 'dropped' and r.error == pytest.approx(0.6, abs=1e-9)
    level, message = r.describe(NEW_REFERENCE, 2.0, tr.resume_tolerance)
    assert level == 'warning'
    assert 'new reference dropped: its first point is 0.600 from the arm' in message
    assert tr.reference is None and tr.dropped == 1 and tr.received == 2
    q_ref, qd_ref, _, holding = tr.target(2.1, q_arm + 0.01, np.zeros(2))
    assert holding and not qd_ref.any()
    np.testing.assert_array_equal(q_ref, q_arm)


def test_a_reference_that_continues_the_current_one_changes_nothing():
    """A splice (the reference node's repeated excitation) or the same reference sent again:
    the arm's lag is still fed back, nothing is rejoined."""
    tr = ReferenceTracker(VMAX, 1.0, 1.0)
    tr.resume(0.0, np.zeros(2), np.zeros(2))
    _start(tr, _ramp())
    lag = np.array([0.01, 0.0])
    for t in np.arange(0.0, 3.0, 0.01):
        q, qd = _exact(tr, t)
        tr.target(t, q - lag, qd)
    q, qd = _exact(tr, 3.0)
    r = _start(tr, _ramp(), 3.0, q - lag)
    assert r.action == 'unchanged' and not tr.rejoining
    np.testing.assert_allclose(tr.target(3.0, q - lag, qd)[0], q, atol=1e-12)


def test_a_new_reference_during_a_rejoin_begins_where_the_arm_is():
    tr = ReferenceTracker(VMAX, 1.0, 1.0)
    tr.resume(0.0, np.zeros(2), np.zeros(2))
    _start(tr, _ramp())
    _track(tr, 0.0, 2.0)
    tr.resume(4.0, *_exact(tr, 2.0))
    assert tr.rejoining
    arm = np.array([0.21, 0.01])
    ref = _ramp(4.2, start=(0.1, 0.0))
    assert _start(tr, ref, 4.2, arm).action == 'rejoining'
    np.testing.assert_allclose(tr.target(4.2, arm, np.zeros(2))[0], arm, atol=1e-12)
    q_ref, _, _, _ = tr.target(7.0, np.zeros(2), np.zeros(2))
    np.testing.assert_allclose(q_ref, ref.sample(7.0)[0][0])


def test_an_untracked_joint_neither_drops_nor_rejoins_the_reference():
    """A passive joint (``tracked`` False) swings wherever it does: how far it is from its
    reference after a gap is not the arm's deviation."""
    tr = ReferenceTracker(VMAX, 0.5, 1.0, tracked=np.array([True, False]))
    tr.resume(0.0, np.zeros(2), np.zeros(2))
    _start(tr, _ramp())
    _track(tr, 0.0, 1.0)
    q, qd = _exact(tr, 1.5)
    r = tr.resume(1.5, q + np.array([0.0, 3.0]), qd + np.array([0.0, 5.0]))
    assert r.action == 'unchanged' and tr.reference is not None
    # nor how far a new reference puts it (it begins at rest where joint 0 is)
    r = _start(tr, _ramp(1.5, start=(q[0], 3.0)), 1.5, q + np.array([0.0, 0.4]))
    assert r.action == 'unchanged' and tr.reference is not None and tr.dropped == 0


def test_a_continuous_joint_counts_its_distance_modulo_two_pi():
    """A reference a whole turn (+0.2 rad) from a continuous joint is 0.2 rad from it, as the
    controller's wrapped position error has it: joined over 0.2 rad, not dropped, and not
    driven a turn round; after a stall, a driver that reports the joint wrapped changes
    nothing."""
    tr = ReferenceTracker(VMAX, 0.5, 1.0, continuous=np.array([True, False]))
    tr.resume(0.0, np.zeros(2), np.zeros(2))
    r = _start(tr, _ramp(0.0, start=(2 * np.pi + 0.2, 0.0)))
    assert r.action == 'rejoining' and r.error == pytest.approx(0.2) and tr.dropped == 0
    q_ref = tr.target(0.0, np.zeros(2), np.zeros(2))[0]
    np.testing.assert_allclose(q_ref, [2 * np.pi, 0.0], atol=1e-12)  # the hold, a turn on
    _track(tr, 0.0, 3.0)
    q, qd = _exact(tr, 3.0)
    assert tr.resume(3.0, q - [2 * np.pi, 0.0], qd).action == 'unchanged'
