"""TrainingStop: the demo learns on past the validation target while the learner improves."""

import math

import numpy as np
import pytest

from delan_control.training_stop import TrainingStop

TARGET = [0.01, 0.002]


def feed(stop, times, nmse_of_t, first_version=1):
    for k, t in enumerate(times):
        stop.observe(t, first_version + k, nmse_of_t(t))


def test_not_done_before_the_target():
    stop = TrainingStop(TARGET, patience=30.0)
    feed(stop, np.arange(0.0, 200.0, 5.0), lambda t: [0.05, 0.01])  # flat, above the target
    assert not stop.reached()
    assert stop.expected_gain(195.0) == pytest.approx(0.0, abs=1e-12)
    assert not stop.done(195.0)
    assert stop.t_reached is None


def test_learns_on_while_improving_and_stops_on_a_plateau():
    stop = TrainingStop(TARGET, patience=60.0, min_gain=0.1)
    # at the target from t = 0, improving 30 % a minute until t = 120, flat after

    def nmse(t):
        return [x * 0.7 ** (min(t, 120.0) / 60.0) for x in (0.009, 0.0018)]

    feed(stop, np.arange(0.0, 121.0, 5.0), nmse)
    assert stop.t_reached == 0.0
    assert stop.expected_gain(120.0) == pytest.approx(-math.log(0.7))
    assert not stop.done(120.0)
    feed(stop, np.arange(125.0, 241.0, 5.0), nmse, first_version=100)
    assert stop.expected_gain(240.0) == pytest.approx(0.0, abs=1e-9)
    assert stop.done(240.0)
    # the first time the trend of the window promises less than 10 %
    first = next(
        t for t in np.arange(125.0, 241.0, 5.0) if np.all(stop.expected_gain(t) < math.log(1.1))
    )
    assert 125.0 < first < 180.0


def test_one_lucky_version_does_not_end_learning_that_goes_on():
    stop = TrainingStop(TARGET, patience=60.0, min_gain=0.1)
    rng = np.random.default_rng(0)
    times = np.arange(0.0, 181.0, 5.0)
    trend = np.exp(-times / 150.0)  # -0.4 in log a minute
    noise = np.exp(rng.normal(0, 0.1, times.size))
    noise[12] = 0.3  # t = 60: validates three times better than the trend
    for k, t in enumerate(times):
        stop.observe(t, k, [0.009 * trend[k] * noise[k], 0.0018 * trend[k] * noise[k]])
        assert not stop.done(t)


def test_the_newest_version_must_be_at_the_target():
    stop = TrainingStop(TARGET, patience=0.0)
    stop.observe(0.0, 1, [0.005, 0.001])
    assert stop.done(0.0)  # patience 0: at the target is enough
    stop.observe(5.0, 2, [0.005, 0.003])  # worse than the target on joint 2
    assert not stop.reached() and not stop.done(100.0)


def test_undecided_before_the_versions_span_the_window():
    stop = TrainingStop(TARGET, patience=60.0)
    feed(stop, [100.0, 110.0, 120.0], lambda t: [0.005, 0.001])
    assert stop.expected_gain(150.0) is None and not stop.done(150.0)
    assert stop.done(160.0)  # flat over the 60 s since t = 100


def test_one_joint_still_improving_keeps_learning():
    """Joint 1 sits at its noise floor; joint 2 (a light wrist) still improves 20 % a minute."""
    stop = TrainingStop(TARGET, patience=60.0, min_gain=0.1)

    def nmse(t):
        return [0.005, 0.0015 * 0.8 ** (t / 60.0)]

    feed(stop, np.arange(0.0, 301.0, 5.0), nmse)
    gain = stop.expected_gain(300.0)
    assert gain[0] == pytest.approx(0.0, abs=1e-9)
    assert gain[1] == pytest.approx(-math.log(0.8))
    assert not stop.done(300.0)
    assert stop.scores[-1][0] == pytest.approx(math.log(0.5))  # per joint, over its target


def test_repeated_and_broken_versions():
    stop = TrainingStop(TARGET, patience=10.0)
    stop.observe(0.0, 1, [0.005, 0.001])
    stop.observe(50.0, 1, [0.0001, 0.00001])  # the same version again: ignored
    assert len(stop.scores) == 1
    stop.observe(60.0, 2, [float('nan'), 0.001])
    assert not stop.reached() and not stop.done(100.0)
    stop.observe(70.0, 3, [0.005])  # wrong length
    assert not stop.reached() and len(stop.scores) == 1


@pytest.mark.parametrize('target', [[0.0, 0.01], [-1.0], [[0.1]], []])
def test_bad_targets_are_refused(target):
    with pytest.raises(ValueError):
        TrainingStop(target)
