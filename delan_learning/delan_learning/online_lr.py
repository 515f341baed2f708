"""The online learner's learning rate: optionally decaying, and fast again after a change.

Adam at a constant rate settles where the rate's own minibatch noise balances the gradient; a
learner that runs for hours on one arm can trade the speed of a large rate for the precision of
a smaller one. The rate here halves every ``halflife_steps`` optimiser steps from ``start``
down to ``final``, and starts over when the learner sees the data change (a payload, a new
tool), where fast learning is needed again. ``final >= start`` keeps the rate constant.
"""

from __future__ import annotations


class OnlineLearningRate:
    """``start * 0.5 ** ((steps - origin) / halflife_steps)``, never below ``final``."""

    def __init__(self, start: float, final: float, halflife_steps: float) -> None:
        self.start, self.final, self.halflife_steps = start, final, halflife_steps
        self.origin = 0

    def at(self, steps: int) -> float:
        """The rate for the optimiser steps after ``steps`` steps in all; ``final >= start`` or
        ``halflife_steps <= 0`` keeps ``start``."""
        if self.halflife_steps <= 0 or self.final >= self.start:
            return self.start
        decayed = self.start * 0.5 ** (max(steps - self.origin, 0) / self.halflife_steps)
        return max(self.final, decayed)

    def restart(self, steps: int) -> None:
        """Back to ``start`` from ``steps`` on (the data changed)."""
        self.origin = steps
