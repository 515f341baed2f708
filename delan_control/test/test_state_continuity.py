"""StateContinuity: stale after the timeout (tripping once), fresh again with the next state;
a restart after a stall or a jump of the arm, none while the motion goes on."""

import numpy as np

from delan_control.continuity import StateContinuity


def test_stale_trips_once_and_the_next_state_restarts():
    c = StateContinuity(0.1, np.array([2.0, 2.0]))
    trips = []
    assert c.stale and not c.expire(5.0, lambda: trips.append(1))  # no state yet: no trip
    first = c.take(10.0, 0.0, np.zeros(2))
    assert first is not None and first.cause == 'the stall' and not c.stale
    assert c.take(10.004, 0.004, np.zeros(2)) is None  # the motion goes on
    assert not c.expire(10.1, lambda: trips.append(1))  # 0.096 s: within the timeout
    assert c.expire(10.2, lambda: trips.append(1)) and c.stale and trips == [1]
    assert not c.expire(10.3, lambda: trips.append(1)) and trips == [1]  # once
    assert c.trips == 1
    again = c.take(11.0, 1.0, np.full(2, 3.0))  # back, far from before: a stall, not a jump
    assert again is not None and again.cause == 'the stall'
    assert again.message == 'joint states fresh: commanding'


def test_a_jump_of_the_arm_is_a_restart():
    c = StateContinuity(1.0, np.array([2.0, 2.0]))
    c.take(0.0, 0.0, np.zeros(2))
    jump = c.take(0.004, 0.004, np.array([0.0, 1.5]))
    assert jump is not None and jump.cause == 'a jump of the arm'
    assert jump.message.startswith('the arm jumped 1.500 between two joint states')
    assert c.take(0.008, 0.008, np.array([0.0, 1.5])) is None
    assert c.trips == 0 and not c.stale
