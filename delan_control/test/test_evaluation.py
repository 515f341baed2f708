"""The demo's judging rules: wrapped errors, divergence, the verdict."""

import numpy as np

from delan_control.evaluation import (
    DivergenceCheck,
    delan_verdict,
    joint_errors,
    learning_target,
)


def test_continuous_errors_are_wrapped_and_others_are_not():
    types = ['continuous', 'revolute', 'prismatic']
    q_ref = np.array([[np.pi - 0.01, 3.0, 0.5], [0.0, 0.0, 0.0], [700.0, 0.0, 0.0]])
    q = np.array([[-np.pi + 0.01, -3.0, -0.5], [2 * np.pi * 5 + 0.2, 0.0, 0.0], [0.0, 0.0, 0.0]])
    err = joint_errors(q_ref, q, types)
    assert np.isclose(err[0, 0], -0.02)
    assert np.isclose(err[1, 0], -0.2)
    assert -np.pi < err[2, 0] <= np.pi
    assert np.isclose(np.cos(err[2, 0]), np.cos(700.0))
    assert err[0, 1] == 6.0 and err[0, 2] == 1.0
    # exactly pi stays pi (the interval is half-open at -pi)
    assert joint_errors(np.array([np.pi]), np.array([0.0]), ['continuous'])[0] == np.pi


def test_divergence_by_error_bound():
    check = DivergenceCheck(np.array([10.0, 10.0]), max_error=1.0)
    t = np.arange(10) * 0.01
    assert check.update(t, np.full((10, 2), 0.5), np.zeros((10, 2))) is None
    err = np.zeros((10, 2))
    err[7, 1] = -1.5
    why = check.update(t + 0.1, err, np.zeros((10, 2)))
    assert why and 'joint 1' in why
    # stays diverged
    assert check.update(t + 0.2, np.zeros((10, 2)), np.zeros((10, 2))) == why


def test_divergence_by_lasting_saturation_only():
    lim = np.array([5.0, np.inf])
    check = DivergenceCheck(lim, max_error=1.0, max_saturated_s=0.5)
    t = np.arange(0, 2.0, 0.01)
    tau = np.zeros((t.size, 2))
    # saturated bursts of 0.4 s with breaks: not divergence
    burst = (t % 0.5) < 0.4
    tau[burst, 0] = 5.0
    tau[:, 1] = 1e6  # no limit on joint 1: never saturated
    assert check.update(t, np.zeros_like(tau), tau) is None
    # then 0.6 s at the (negative) limit, fed in small chunks
    t2 = 2.0 + np.arange(0, 0.6, 0.01)
    tau2 = np.tile([-5.0, 0.0], (t2.size, 1))
    reasons = [
        check.update(t2[i : i + 7], np.zeros((len(t2[i : i + 7]), 2)), tau2[i : i + 7])
        for i in range(0, t2.size, 7)
    ]
    assert reasons[-1] and 'joint 0' in reasons[-1]
    assert reasons[0] is None


def test_verdict():
    speeds = (1.0, 2.0)
    rms = {
        ('delan', 1.0): 0.01,
        ('pinocchio', 1.0): 0.05,
        ('delan', 2.0): 0.015,
        ('pinocchio', 2.0): 0.05,
    }
    ok = delan_verdict(rms, {}, speeds, 1 / 3, {1.0: 0.001, 2.0: 0.002})
    assert ok.passed and np.isclose(ok.ratios[1.0], 0.2)
    bad = delan_verdict(rms, {}, speeds, 0.25)
    assert not bad.passed and '2x' in bad.failures[0]
    div = delan_verdict(rms, {('delan', 1.0): True}, speeds, 1 / 3)
    assert not div.passed and 'diverged' in div.failures[0]
    # nominal diverged: a clean delan run passes that speed
    rms2 = dict(rms)
    rms2[('pinocchio', 2.0)] = 0.01
    assert delan_verdict(rms2, {('pinocchio', 2.0): True}, speeds, 1 / 3).passed
    broken = delan_verdict(rms, {}, speeds, 1 / 3, {1.0: 112.0})
    assert not broken.passed and 'broken' in broken.failures[0]
    assert not delan_verdict({}, {}, speeds, 1 / 3).passed
    # the excitation the models learned from is not explained by the plant itself
    assert delan_verdict(rms, {}, speeds, 1 / 3, excitation_floor=[0.001, 0.002]).passed
    wild = delan_verdict(rms, {}, speeds, 1 / 3, excitation_floor=[0.001, 133.6])
    assert not wild.passed and 'excitation' in wild.failures[0] and '134' in wild.failures[0]
    # the loop itself cannot track: even the sim's own model is about as far off as nominal
    assert delan_verdict(rms, {}, speeds, 1 / 3, loop_floor={1.0: 0.001, 2.0: 0.002}).passed
    stuck = delan_verdict(rms, {}, speeds, 1 / 3, loop_floor={1.0: 0.001, 2.0: 0.048})
    assert not stuck.passed and len(stuck.failures) == 1
    assert 'cannot tell models apart at 2x' in stuck.failures[0]
    # a floor that leaves a learned model little of its bound (0.28 x nominal's against 1/3):
    # the loop is named beside the model
    tight = delan_verdict(rms, {}, speeds, 1 / 3, loop_floor={1.0: 0.001, 2.0: 0.014})
    assert not tight.passed and '0.28 x nominal' in tight.failures[0]
    assert delan_verdict(rms, {}, speeds, 1 / 3, loop_floor={1.0: 0.001, 2.0: 0.008}).passed


def test_a_barely_excited_joint_is_noise_not_broken_data():
    """A Kinova base turned little under an upright arm: true-plant nMSE 0.107 of a 0.03 N m
    torque spread, a residual of 0.01 N m against a 40 N m motor. An end-stop impact leaves a
    residual of the motor's size."""
    from delan_control.evaluation import broken_joints

    nmse, effort = [0.107, 0.005, 1.85], [40.0, 80.0, 3.0]
    residual = [0.0096, 0.22, 1.4]
    assert broken_joints(nmse, 0.1).tolist() == [True, False, True]
    assert broken_joints(nmse, 0.1, residual, effort).tolist() == [False, False, True]
    # without a finite effort limit the nMSE alone decides
    assert broken_joints(nmse, 0.1, residual, [np.inf, 80.0, 0.0]).tolist() == [True, False, True]
    rms = {('delan', 1.0): 0.001, ('pinocchio', 1.0): 0.01}
    kw = dict(excitation_floor=nmse[:2], excitation_residual=residual[:2], effort_limit=effort[:2])
    assert delan_verdict(rms, {}, [1.0], 1 / 3, **kw).passed
    assert not delan_verdict(rms, {}, [1.0], 1 / 3, excitation_floor=nmse[:2]).passed
    impact = dict(kw, excitation_floor=[0.107, 0.2], excitation_residual=[0.0096, 5.0])
    failed = delan_verdict(rms, {}, [1.0], 1 / 3, **impact)
    assert not failed.passed and '0.2 (> 0.1)' in failed.failures[0]


def test_a_joint_at_its_end_stops_fails_the_verdict():
    """The SO-100's gripper with the demo's payload sat at its stops for 30 % of the excitation;
    its 35 N m limit (a hobby servo's URDF) hid the impacts from the residual rule."""
    from delan_control.evaluation import MAX_END_STOP_SHARE, end_stop_share

    lower, upper = np.array([-1.0, -np.inf, 0.0]), np.array([1.0, np.inf, 2.0])
    q = np.zeros((1000, 3))
    q[:, 2] = 1.0
    q[:300, 2] = 2.0  # 30 % at the upper stop
    q[:3, 0] = -1.0  # 0.3 %: a touch, within the allowed share
    q[:, 1] = 1e6  # no limits: never at a stop
    share = end_stop_share(q, lower, upper)
    np.testing.assert_allclose(share, [0.003, 0.0, 0.3])
    assert end_stop_share(np.zeros((0, 3)), lower, upper).tolist() == [0.0, 0.0, 0.0]
    rms = {('delan', 1.0): 0.001, ('pinocchio', 1.0): 0.01}
    names = ['a', 'b', 'gripper']
    ok = delan_verdict(rms, {}, [1.0], 1 / 3, end_stops=dict(zip(names, share[:2])))
    assert ok.passed and share[0] <= MAX_END_STOP_SHARE
    stuck = delan_verdict(rms, {}, [1.0], 1 / 3, end_stops=dict(zip(names, share)))
    assert not stuck.passed and 'gripper 30.0%' in stuck.failures[0]
    assert 'a 0.3%' not in stuck.failures[0]


def test_learning_target_is_the_fixed_one_where_the_floor_is_not_finite():
    """A floor the true plant could not compute (an excitation that broke: end stops, a sim
    gone non-finite) must not become a NaN target, which no version can reach and which
    stopped the demo with a traceback; the fixed target stands there."""
    floor = np.array([0.0001, 0.01, np.nan, np.inf])
    target = learning_target(0.003, 3.0, floor)
    np.testing.assert_allclose(target[:2], [0.003, 0.03])
    assert target[2] == target[3] == 0.003
