"""Count rejected input by reason and log it throttled, so a flood of bad messages stays visible
without flooding the log."""

from __future__ import annotations

import time
from collections import Counter
from typing import Dict


class RejectionCounter:
    """Counts rejected inputs by reason and logs each reason at most every ``log_period_s``,
    so a flood of bad messages neither floods the log nor goes unseen."""

    def __init__(self, logger, what: str, log_period_s: float = 2.0):
        self._logger = logger
        self._what = what
        self._period = log_period_s
        self._last_log: Dict[str, float] = {}
        self.counts: Counter = Counter()

    @property
    def total(self) -> int:
        """Rejections so far, all reasons together."""
        return sum(self.counts.values())

    def reject(self, reason: str, detail: str) -> None:
        """Count one rejection under ``reason`` and log it with ``detail``, unless that reason was
        logged within the last ``log_period_s``."""
        self.counts[reason] += 1
        now = time.monotonic()
        if now - self._last_log.get(reason, -1e9) >= self._period:
            self._last_log[reason] = now
            self._logger.warning(
                f'rejected {self._what} ({reason}, {self.counts[reason]} so far): {detail}'
            )
