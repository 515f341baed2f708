"""The controller's target (``reference_tracking.ReferenceTracker``): hold, track, rejoin after
a gap in the joint states, drop a reference the arm is far from."""

import numpy as np
import pytest

from delan_control.reference_tracking import ReferenceTracker
from delan_control.trajectories import PiecewiseQuintic

VMAX = np.array([2.0, 2.0])


def _ramp(t0: float = 0.0) -> PiecewiseQuintic:
    """Joint 0 moves from 0 to 1 rad over 10 s (0.1 rad/s in the middle), joint 1 stays."""
    t = t0 + np.linspace(0.0, 10.0, 11)
    q = np.stack([t - t0, np.zeros_like(t)], axis=1) / 10.0
    qd = np.zeros_like(q)
    qd[:, 0] = 0.1
    return PiecewiseQuintic(t, q, qd)


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
    tr.set_reference(ref)
    q_ref, qd_ref, qdd_ref, holding = tr.target(5.0, np.zeros(2), np.zeros(2))
    assert not holding and tr.received == 1
    for got, want in zip((q_ref, qd_ref, qdd_ref), ref.sample(5.0)):
        np.testing.assert_allclose(got, want[0])


def test_after_a_stall_the_target_starts_at_the_arm_and_rejoins_the_reference():
    tr = ReferenceTracker(VMAX, resume_tolerance=1.0, resume_time=1.0)
    tr.resume(0.0, np.zeros(2), np.zeros(2))
    tr.set_reference(_ramp())
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
    tr.set_reference(_ramp())
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
    tr.set_reference(_ramp())
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
    tr.set_reference(_ramp())
    _track(tr, 0.0, 1.0)
    q_moved = np.array([2.0, 0.3])  # the arm was moved by hand
    r = tr.resume(1.5, q_moved, np.zeros(2))
    assert r.action == 'dropped' and tr.dropped == 1 and tr.reference is None
    assert r.error == pytest.approx(2.0 - 0.15, abs=1e-3)  # the reference is at 0.15
    q_ref, qd_ref, _, holding = tr.target(1.6, q_moved + 0.01, np.zeros(2))
    assert holding
    np.testing.assert_array_equal(q_ref, q_moved)
    # a new reference is tracked again; a tolerance raised at runtime applies at once
    tr.set_reference(_ramp(2.0))
    tr.resume_tolerance = 5.0
    assert tr.resume(3.0, q_moved, np.zeros(2)).action == 'rejoining'
    assert tr.received == 2 and tr.dropped == 1


def test_a_new_reference_cancels_the_rejoin_of_the_old_one():
    tr = ReferenceTracker(VMAX, 1.0, 1.0)
    tr.resume(0.0, np.zeros(2), np.zeros(2))
    tr.set_reference(_ramp())
    _track(tr, 0.0, 2.0)
    tr.resume(4.0, *_exact(tr, 2.0))
    assert tr.rejoining
    ref = _ramp(4.0)
    tr.set_reference(ref)
    assert not tr.rejoining
    q_ref, _, _, _ = tr.target(4.5, np.zeros(2), np.zeros(2))
    np.testing.assert_allclose(q_ref, ref.sample(4.5)[0][0])


def test_an_untracked_joint_neither_drops_nor_rejoins_the_reference():
    """A passive joint (``tracked`` False) swings wherever it does: how far it is from its
    reference after a gap is not the arm's deviation."""
    tr = ReferenceTracker(VMAX, 0.5, 1.0, tracked=np.array([True, False]))
    tr.resume(0.0, np.zeros(2), np.zeros(2))
    tr.set_reference(_ramp())
    _track(tr, 0.0, 1.0)
    q, qd = _exact(tr, 1.5)
    r = tr.resume(1.5, q + np.array([0.0, 3.0]), qd + np.array([0.0, 5.0]))
    assert r.action == 'unchanged' and tr.reference is not None
