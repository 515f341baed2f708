"""When the demo stops the online learner. ROS-free.

A version at the validation target is not yet a finished model: the torque nMSE on the excitation
reaches the target well before the model stops improving, and what it learns after that (the
structure that carries it to motion faster than the excitation) only shows in tracking. So the
demo learns on while the learner still improves and stops once it has plateaued at the target.
"""
from __future__ import annotations

import math
from typing import Optional, Sequence

import numpy as np


class TrainingStop:
    """Fed every published version (:meth:`observe`); :meth:`done` once the newest is at the
    target on every joint and no version has improved the score by ``min_gain`` (relative) for
    ``patience`` seconds.

    The score is the mean over joints of ``log(nMSE / target)``: every joint counts by its
    relative progress, whatever its torque scale, and one noisy joint does not decide.
    """

    def __init__(self, target: Sequence[float], patience: float = 30.0, min_gain: float = 0.1):
        self.target = np.asarray(target, dtype=np.float64)
        if self.target.ndim != 1 or not np.all(self.target > 0):
            raise ValueError(f'target must be positive per joint, got {target!r}')
        if patience < 0 or min_gain < 0:
            raise ValueError('patience and min_gain must not be negative')
        self.patience = float(patience)
        self._gain = math.log1p(min_gain)
        self.version: Optional[int] = None
        self.nmse: Optional[np.ndarray] = None
        self.best = math.inf
        self.t_best: Optional[float] = None
        self.t_reached: Optional[float] = None

    def observe(self, t: float, version: int, nmse: Sequence[float]) -> None:
        """A version published at time ``t`` with its per-joint validation ``nmse``; versions
        seen before are ignored. A version with a non-finite or missing joint counts as not at
        the target and as no progress."""
        if version == self.version:
            return
        self.version = version
        x = np.asarray(nmse, dtype=np.float64)
        if x.shape != self.target.shape or not np.all(np.isfinite(x)) or np.any(x < 0):
            self.nmse = None
            return
        self.nmse = x
        score = float(np.mean(np.log(np.maximum(x, 1e-300) / self.target)))
        if self.t_best is None or score < self.best - self._gain:
            self.best, self.t_best = score, t
        if self.reached() and self.t_reached is None:
            self.t_reached = t

    def reached(self) -> bool:
        """The newest version is at the target on every joint."""
        return self.nmse is not None and bool(np.all(self.nmse <= self.target))

    def done(self, t: float) -> bool:
        """At the target, and no progress for ``patience`` seconds up to ``t``."""
        return self.reached() and self.t_best is not None and t - self.t_best >= self.patience
