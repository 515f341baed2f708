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


def test_a_reset_the_velocity_limits_let_through_is_a_jump_by_the_measured_velocities():
    """The iCub's arm gives no velocity limits (10 rad/s assumed: 0.18 rad per 4 ms state
    passes): a sim reset 0.15 rad away, at rest, went through as motion, and the computed-torque
    feedback on the old reference flung the light arm into its end stops. The measured
    velocities say the arm did not move there; steps they explain are no jump."""
    from delan_control.continuity import WITNESS_DT

    d = JumpDetector(np.full(2, np.inf))
    t, q, qd = 0.0, np.zeros(2), np.zeros(2)
    assert d.check(t, q, qd) is None
    for _ in range(50):  # 3 rad/s with the velocity measured 20 % off, and accelerating
        qd_next = qd + np.array([0.2, -0.1])
        t, q = t + 0.004, q + 0.5 * (qd + qd_next) * 0.004
        qd = qd_next
        assert d.check(t, q, qd * 1.2) is None
    assert d.check(t + 0.004, q + [0.0, 0.15], np.zeros(2)) is not None  # stopped, moved
    d2 = JumpDetector(np.full(2, np.inf))
    assert d2.check(0.0, np.zeros(2), np.zeros(2)) is None
    assert d2.check(0.004, np.array([0.0, 0.15]), np.zeros(2)) == 0.15  # a reset at rest
    assert d2.check(0.008, np.array([0.0, 0.15]), np.zeros(2)) is None
    # without velocities, or further apart than the velocities witness: the limits alone
    d3 = JumpDetector(np.full(2, np.inf))
    assert d3.check(0.0, np.zeros(2)) is None
    assert d3.check(0.004, np.array([0.0, 0.15])) is None
    d4 = JumpDetector(np.full(2, np.inf))
    assert d4.check(0.0, np.zeros(2), np.zeros(2)) is None
    assert d4.check(2 * WITNESS_DT, np.array([0.0, 0.15]), np.zeros(2)) is None
