"""TrainingStop: the demo learns on past the validation target while the learner improves."""
import math

import numpy as np
import pytest

from delan_control.training_stop import TrainingStop

TARGET = [0.01, 0.002]


def test_not_done_before_the_target():
    stop = TrainingStop(TARGET, patience=30.0)
    stop.observe(0.0, 1, [0.05, 0.01])
    assert not stop.reached()
    assert not stop.done(1000.0)     # however long it has not improved
    assert stop.t_reached is None


def test_learns_on_while_improving_and_stops_on_a_plateau():
    stop = TrainingStop(TARGET, patience=30.0, min_gain=0.1)
    t, version = 0.0, 0
    for nmse in ([0.009, 0.0019], [0.006, 0.0012], [0.004, 0.0008]):   # each >10 % better
        version += 1
        stop.observe(t, version, nmse)
        assert stop.reached()
        assert not stop.done(t + 29.0)
        t += 20.0
    assert stop.t_reached == 0.0
    t_best = t - 20.0
    for nmse in ([0.0039, 0.0008], [0.0041, 0.00079], [0.0038, 0.00081]):  # within 10 %
        version += 1
        stop.observe(t, version, nmse)
        t += 10.0
    assert stop.t_best == t_best
    assert not stop.done(t_best + 29.9)
    assert stop.done(t_best + 30.0)


def test_the_newest_version_must_be_at_the_target():
    stop = TrainingStop(TARGET, patience=0.0)
    stop.observe(0.0, 1, [0.005, 0.001])
    assert stop.done(0.0)
    stop.observe(5.0, 2, [0.005, 0.003])          # worse than the target on joint 2
    assert not stop.reached() and not stop.done(100.0)


def test_score_weighs_joints_by_relative_progress():
    stop = TrainingStop(TARGET, patience=10.0, min_gain=0.1)
    stop.observe(0.0, 1, [0.008, 0.0016])
    best = stop.best
    assert best == pytest.approx(math.log(0.8))
    # joint 1 halves its error, joint 2 (ten times smaller torques) doubles it: no progress
    stop.observe(5.0, 2, [0.004, 0.0032])
    assert stop.best == best and stop.t_best == 0.0


def test_repeated_and_broken_versions():
    stop = TrainingStop(TARGET, patience=10.0)
    stop.observe(0.0, 1, [0.005, 0.001])
    stop.observe(50.0, 1, [0.0001, 0.00001])      # the same version again: ignored
    assert stop.t_best == 0.0
    stop.observe(60.0, 2, [float('nan'), 0.001])
    assert not stop.reached() and not stop.done(100.0)
    stop.observe(70.0, 3, [0.005])                 # wrong length
    assert not stop.reached()
    stop.observe(80.0, 4, [0.005, 0.001])
    assert stop.done(80.0)                         # t_best still 0.0


@pytest.mark.parametrize('target', [[0.0, 0.01], [-1.0], [[0.1]]])
def test_bad_targets_are_refused(target):
    with pytest.raises(ValueError):
        TrainingStop(target)


def test_defaults_are_positive_and_finite():
    stop = TrainingStop(np.array(TARGET))
    assert stop.patience == 30.0 and not stop.reached()
