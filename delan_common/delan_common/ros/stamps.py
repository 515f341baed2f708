"""Seconds to and from the ``sec``/``nanosec`` pairs of ROS messages (header stamps, ``/clock``,
``time_from_start``), so that every node rounds them the same way."""

from __future__ import annotations


def seconds(t) -> float:
    """``t``: a ``builtin_interfaces`` Time or Duration, or anything with ``sec``/``nanosec``."""
    return t.sec + 1e-9 * t.nanosec


def set_seconds(t, s: float) -> None:
    """Write ``s`` [s] into ``t``'s ``sec``/``nanosec``, rounded to the nanosecond."""
    t.sec, t.nanosec = divmod(int(round(s * 1e9)), 1_000_000_000)
