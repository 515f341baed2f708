import numpy as np

from delan_control.continuity import JumpDetector


def test_motion_within_the_velocity_limits_is_no_jump_a_reset_is():
    d = JumpDetector(np.array([2.0, np.inf]))
    t, q = 0.0, np.zeros(2)
    assert d.check(t, q) is None  # the first state
    for _ in range(100):  # at the limits (and 10 m/s unlimited)
        t, q = t + 0.004, q + np.array([2.0, 10.0]) * 0.004
        assert d.check(t, q) is None
    assert d.check(t + 0.004, q + [0.02, 0.0]) is None  # noise, a late state
    assert d.check(t + 0.008, np.zeros(2)) == np.max(np.abs(q + [0.02, 0.0]))  # reset home
    assert d.check(t + 0.012, np.zeros(2)) is None
    # a long gap allows a long way; after reset() the next state is a first one again
    assert d.check(t + 10.0, [5.0, 5.0]) is None
    d.reset()
    assert d.check(t + 10.004, [-5.0, -5.0]) is None


def test_a_continuous_joint_reported_wrapped_does_not_jump_when_it_crosses_pi():
    """A driver that reports a continuous joint in (-pi, pi]: pi - 0.01 then -pi + 0.01 is a
    0.02 rad step, not a 6.26 rad jump (a revolute joint's would be one)."""
    d = JumpDetector(np.array([2.0, 2.0]), continuous=np.array([True, False]))
    assert d.check(0.0, np.array([np.pi - 0.01, 0.0])) is None
    assert d.check(0.004, np.array([-np.pi + 0.01, 0.0])) is None
    assert d.check(0.008, np.array([-np.pi + 0.01, 2 * np.pi - 0.01])) is not None
