"""Decimation of a fast stream (1 kHz control cycles, joint-state samples) to a rate a viewer or
a recorder wants, decided per event without ROS: the nodes ask :meth:`Decimator.due` and publish
only then, so the fast path pays one comparison for every event it does not publish."""

from __future__ import annotations

import math


class Decimator:
    """Passes at most ``rate_hz`` events per second of the caller's clock (any clock in seconds:
    a steady clock, or the stamps of the samples themselves).

    The schedule keeps its phase, so the average rate is ``rate_hz`` for any input faster than
    that, whatever the jitter; after a gap longer than a period it restarts from the event
    that ends the gap (no burst of catch-up events), and a clock that goes back (a restarted
    sim) restarts it as well. ``rate_hz = 0`` passes nothing; a rate the input cannot reach
    passes every event.
    """

    def __init__(self, rate_hz: float):
        self._period = math.inf
        self._next = -math.inf
        self.rate_hz = rate_hz

    @property
    def rate_hz(self) -> float:
        """Events passed per second at most; 0 passes nothing."""
        return 0.0 if math.isinf(self._period) else 1.0 / self._period

    @rate_hz.setter
    def rate_hz(self, rate_hz: float) -> None:
        """A new rate takes effect at once (the next event passes)."""
        if not (rate_hz >= 0.0 and math.isfinite(rate_hz)):
            raise ValueError(f'decimation rate must be finite and >= 0, got {rate_hz}')
        self._period = 1.0 / rate_hz if rate_hz > 0 else math.inf
        self._next = -math.inf

    def due(self, t: float) -> bool:
        """Whether the event at time ``t`` [s] is to be passed on."""
        period, nxt = self._period, self._next
        # a thousandth of a period early still counts as on time: stamps of a fixed-rate
        # stream, as floats, land a rounding error before or after their slot
        if t < nxt - 1e-3 * period:
            if t >= nxt - period:
                return False
            nxt = -math.inf  # the clock went back: start over
        if math.isinf(period):
            return False
        self._next = nxt + period if t - nxt < period else t + period
        return True
