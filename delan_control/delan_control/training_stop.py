"""When the demo stops the online learner. ROS-free.

A version at the validation target is not yet a finished model: the torque nMSE on the excitation
reaches the target well before the model stops improving, and what it learns after that (the
structure that carries it to motion faster than the excitation) only shows in tracking. So the
demo learns on while the learner still improves and stops once it has plateaued at the target.
"""
from __future__ import annotations

import math
from typing import List, Optional, Sequence, Tuple

import numpy as np


class TrainingStop:
    """Fed every published version (:meth:`observe`); :meth:`done` once the newest is at the
    target on every joint and the trend of the last ``patience`` seconds of versions promises
    less than ``min_gain`` (relative) over another ``patience`` seconds.

    The score is the mean over joints of ``log(nMSE / target)``: every joint counts by its
    relative progress, whatever its torque scale, and one noisy joint does not decide. The trend
    is the median slope between pairs of versions of the window (Theil-Sen), so a version that
    happens to validate well or badly does not end learning that still goes on.
    """

    def __init__(self, target: Sequence[float], patience: float = 90.0, min_gain: float = 0.1):
        self.target = np.asarray(target, dtype=np.float64)
        if self.target.ndim != 1 or self.target.size == 0 or not np.all(self.target > 0):
            raise ValueError(f'target must be positive per joint, got {target!r}')
        if patience < 0 or min_gain < 0:
            raise ValueError('patience and min_gain must not be negative')
        self.patience = float(patience)
        self._gain = math.log1p(min_gain)
        self.version: Optional[int] = None
        self.nmse: Optional[np.ndarray] = None
        self.scores: List[Tuple[float, float]] = []    # (t, score) of every usable version
        self.t_reached: Optional[float] = None

    def observe(self, t: float, version: int, nmse: Sequence[float]) -> None:
        """A version published at time ``t`` with its per-joint validation ``nmse``; versions
        seen before are ignored. A version with a non-finite or missing joint counts as not at
        the target."""
        if version == self.version:
            return
        self.version = version
        x = np.asarray(nmse, dtype=np.float64)
        if x.shape != self.target.shape or not np.all(np.isfinite(x)) or np.any(x < 0):
            self.nmse = None
            return
        self.nmse = x
        self.scores.append((float(t), float(np.mean(np.log(np.maximum(x, 1e-300) /
                                                           self.target)))))
        if self.reached() and self.t_reached is None:
            self.t_reached = float(t)

    def reached(self) -> bool:
        """The newest version is at the target on every joint."""
        return self.nmse is not None and bool(np.all(self.nmse <= self.target))

    def expected_gain(self, t: float) -> Optional[float]:
        """The score the trend of the versions in ``[t - patience, t]`` still promises to gain
        over another ``patience`` seconds (log of a ratio, > 0 while improving); None before the
        versions span the window (three at least)."""
        if not self.scores or self.scores[0][0] > t - self.patience:
            return None
        window = np.array([s for s in self.scores if t - self.patience <= s[0] <= t])
        if len(window) < 3 or np.ptp(window[:, 0]) <= 0:
            return None
        i, j = np.triu_indices(len(window), k=1)
        dt = window[j, 0] - window[i, 0]
        ok = dt > 0
        slope = np.median((window[j, 1] - window[i, 1])[ok] / dt[ok])   # Theil-Sen
        return float(-slope * self.patience)

    def done(self, t: float) -> bool:
        """At the target, and the last ``patience`` seconds up to ``t`` promise no more than
        ``min_gain``. With ``patience`` 0: as soon as the newest version is at the target."""
        if not self.reached():
            return False
        if self.patience == 0:
            return True
        gain = self.expected_gain(t)
        return gain is not None and gain < self._gain
