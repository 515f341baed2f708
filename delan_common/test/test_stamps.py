"""Seconds to and from message stamps: every node rounds the same way, and a rounded-up
nanosecond count never leaves nanosec at 1e9 (an invalid Time)."""

import pytest
from builtin_interfaces.msg import Duration, Time

from delan_common.ros.stamps import seconds, set_seconds


@pytest.mark.parametrize(
    's, sec, nanosec',
    [
        (0.0, 0, 0),
        (12.5, 12, 500_000_000),
        (1.9999999999, 2, 0),
        (99.000000001, 99, 1),
        (-0.25, -1, 750_000_000),
    ],
)
def test_set_seconds_rounds_to_the_nanosecond(s, sec, nanosec):
    t = Time()
    set_seconds(t, s)
    assert (t.sec, t.nanosec) == (sec, nanosec)
    assert abs(seconds(t) - s) <= 1e-9


def test_wall_clock_stamps_round_trip_to_a_microsecond():
    t = Time()
    set_seconds(t, 1_700_000_000.000123)  # a double holds an epoch stamp to ~0.2 us
    assert t.sec == 1_700_000_000 and abs(t.nanosec - 123_000) < 500
    assert abs(seconds(t) - 1_700_000_000.000123) < 1e-6


def test_seconds_of_a_duration_and_of_a_time_agree():
    d, t = Duration(sec=3, nanosec=250_000_000), Time(sec=3, nanosec=250_000_000)
    assert seconds(d) == seconds(t) == 3.25
