"""Timing of a control loop, measured by the loop itself from DDS source timestamps.

latency = command published - joint state published (the writer's stamp of the state: transport,
queueing, the callback and the publish); a *missed cycle* is a state that got no command of its
own before the next state was published: answered late, or superseded by a newer state before
the loop got to it (a loop that has fallen behind answers only the newest). Both
clocks are the system clock of one host (or of hosts kept in sync, e.g. by PTP); a negative
latency (clocks apart) is counted, not recorded.

Latencies go into a histogram of ``BIN_US`` bins (cumulative since start), so any window's
percentiles follow from two snapshots: the node's diagnostics publish it, a benchmark subtracts.
"""

from __future__ import annotations

import threading
from typing import Dict, Optional, Sequence, Tuple

import numpy as np

BIN_US = 10  # histogram resolution [us]
N_BINS = 2000  # bins cover 0-20 ms; later commands go to one overflow bin


def percentile_us(hist: np.ndarray, q: float) -> float:
    """Upper edge [us] of the bin holding the ``q``-th percentile (NaN for an empty histogram;
    inf when it lies in the overflow bin)."""
    total = int(hist.sum())
    if total == 0:
        return float('nan')
    k = int(np.searchsorted(np.cumsum(hist), q / 100.0 * total))
    return float('inf') if k >= N_BINS else float((k + 1) * BIN_US)


def histogram_text(hist: np.ndarray) -> str:
    """``'bin:count,...'`` of the non-empty bins (a diagnostics value)."""
    nz = np.flatnonzero(hist)
    return ','.join(f'{i}:{hist[i]}' for i in nz)


def parse_histogram(text: str) -> np.ndarray:
    """Inverse of :func:`histogram_text`; ValueError for text that is not one."""
    hist = np.zeros(N_BINS + 1, dtype=np.int64)
    for item in filter(None, text.split(',')):
        i, c = item.split(':')
        hist[int(i)] = int(c)
    return hist


class LoopStats:
    """Latency histogram, maximum and missed cycles of one control loop. The loop thread
    records, another (diagnostics) reads: :meth:`snapshot` is consistent, and the arrays are
    never read while the loop writes them."""

    def __init__(self):
        self._lock = threading.Lock()
        self.hist = np.zeros(N_BINS + 1, dtype=np.int64)
        self.max_us = 0.0
        self.states = 0
        self.missed = 0
        self.clock_skew = 0
        self._last_command_ns: Optional[int] = None
        self._window = self.hist.copy()
        self._window_max = 0.0

    def received(self, stamps_ns: Sequence[int]) -> None:
        """Joint states taken together (source stamps, oldest first); only the last one will
        be answered."""
        if not stamps_ns:
            return
        with self._lock:
            self._received(stamps_ns)

    def _received(self, stamps_ns: Sequence[int]) -> None:
        self.states += len(stamps_ns)
        # the previous answer went out after this state was published: it came late
        if self._last_command_ns is not None and stamps_ns[0] < self._last_command_ns:
            self.missed += 1
        self.missed += len(stamps_ns) - 1  # superseded before they were answered
        self._last_command_ns = None

    def command(self, state_ns: int, command_ns: int) -> None:
        """The command answering the state published at ``state_ns`` went out at
        ``command_ns``."""
        with self._lock:
            self._command(state_ns, command_ns)

    def _command(self, state_ns: int, command_ns: int) -> None:
        self._last_command_ns = command_ns
        us = (command_ns - state_ns) * 1e-3
        if us < 0.0:
            self.clock_skew += 1
            return
        self.hist[min(int(us) // BIN_US, N_BINS)] += 1
        if us > self.max_us:
            self.max_us = us
        if us > self._window_max:
            self._window_max = us

    def snapshot(self) -> Dict:
        """Everything at one instant: ``window`` (p50 / p99 / max [us] and count of the
        commands since the previous snapshot), and copies of the cumulative ``hist``,
        ``max_us``, ``states``, ``missed``, ``clock_skew``."""
        with self._lock:
            return {
                'window': self._take_window(),
                'hist': self.hist.copy(),
                'max_us': self.max_us,
                'states': self.states,
                'missed': self.missed,
                'clock_skew': self.clock_skew,
            }

    def diagnostics(self, loop_errors: int) -> Tuple[Tuple[str, object], ...]:
        """Diagnostic values: the loop's timing over the window since the last call [us], its
        missed cycles, the callback errors the loop counted (``loop_errors``) and the
        cumulative latency histogram (a window's percentiles from two snapshots)."""
        s = self.snapshot()  # the loop thread goes on writing meanwhile
        w = s['window']
        return (
            ('loop_latency_p50_us', f'{w["p50_us"]:.0f}'),
            ('loop_latency_p99_us', f'{w["p99_us"]:.0f}'),
            ('loop_latency_max_us', f'{w["max_us"]:.0f}'),
            ('loop_latency_max_all_us', f'{s["max_us"]:.0f}'),
            ('joint_states_received', s['states']),
            ('missed_cycles', s['missed']),
            ('clock_skew_samples', s['clock_skew']),
            ('loop_errors', loop_errors),
            ('latency_histogram_10us', histogram_text(s['hist'])),
        )

    def _take_window(self) -> Dict[str, float]:
        w = self.hist - self._window
        out = {
            'p50_us': percentile_us(w, 50),
            'p99_us': percentile_us(w, 99),
            'max_us': self._window_max,
            'count': int(w.sum()),
        }
        self._window = self.hist.copy()
        self._window_max = 0.0
        return out
