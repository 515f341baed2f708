"""When the demo stops the online learner. ROS-free.

A version at the validation target is not yet a finished model: the torque nMSE on the excitation
reaches the target well before the model stops improving, and what it learns after that (the
structure that carries it to motion faster than the excitation) only shows in tracking. So the
demo learns on while the learner still improves and stops once it has plateaued at the target.
"""

from __future__ import annotations

import math
from typing import List, Optional, Sequence

import numpy as np


class TrainingStop:
    """Fed every published version (:meth:`observe`); :meth:`done` once the newest is at the
    target on every joint and the trend of the last ``patience`` seconds of versions promises
    no joint more than ``min_gain`` (relative) over another ``patience`` seconds.

    Per joint, not on average: joints at their noise floor stay flat while the light ones (a
    wrist, the counter-rotation of two collinear joints) still improve, and those are what
    faster motion needs. The trend of a joint is the median slope of its ``log(nMSE)`` between
    pairs of versions of the window (Theil-Sen), so a version that happens to validate well or
    badly does not end learning that still goes on.
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
        self.times: List[float] = []  # of every usable version
        self.scores: List[np.ndarray] = []  # its log(nMSE / target) per joint
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
        self.times.append(float(t))
        self.scores.append(np.log(np.maximum(x, 1e-300) / self.target))
        if self.reached() and self.t_reached is None:
            self.t_reached = float(t)

    def reached(self) -> bool:
        """The newest version is at the target on every joint."""
        return self.nmse is not None and bool(np.all(self.nmse <= self.target))

    def expected_gain(self, t: float) -> Optional[np.ndarray]:
        """Per joint, what the trend of the versions in ``[t - patience, t]`` still promises to
        gain over another ``patience`` seconds (log of an nMSE ratio, > 0 while improving); None
        before the versions span the window (three at least)."""
        if not self.times or self.times[0] > t - self.patience:
            return None
        times = np.asarray(self.times)
        inside = (times >= t - self.patience) & (times <= t)
        if inside.sum() < 3:
            return None
        ts, ys = times[inside], np.asarray(self.scores)[inside]
        i, j = np.triu_indices(len(ts), k=1)
        dt = ts[j] - ts[i]
        ok = dt > 0
        if not ok.any():
            return None
        slopes = (ys[j] - ys[i])[ok] / dt[ok, None]
        return -np.median(slopes, axis=0) * self.patience  # Theil-Sen, per joint

    def done(self, t: float) -> bool:
        """At the target, and the last ``patience`` seconds up to ``t`` promise no joint more
        than ``min_gain``. With ``patience`` 0: as soon as the newest version is at the target."""
        if not self.reached():
            return False
        if self.patience == 0:
            return True
        gain = self.expected_gain(t)
        return gain is not None and bool(np.all(gain < self._gain))
