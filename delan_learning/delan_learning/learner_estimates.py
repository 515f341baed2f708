"""What the learner's published version predicts for the incoming samples
(``~/dynamics_estimate``), in one batch per intake batch by the numpy model.

The numpy model takes ~0.3 ms for one sample of a 7-DoF arm (torch, a call per term: ~0.8 ms),
so 50 estimates a second take ~1.5 % of a core (and of the GIL) from the optimiser.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional, Sequence

import numpy as np

from delan_common.residual_dynamics import NominalPlusResidual
from delan_learning.numpy_delan import NumpyDelan
from delan_learning.online import Sample


class Estimates(NamedTuple):
    """The terms of the dynamics for ``b`` samples of ``n`` joints."""

    mass_matrix: np.ndarray  # (b, n, n)
    coriolis: np.ndarray  # (b, n)
    gravity: np.ndarray  # (b, n)
    friction: np.ndarray  # (b, n)
    predicted: np.ndarray  # (b, n): H qdd + c + g + f
    kinetic: np.ndarray  # (b,)
    potential: np.ndarray  # (b,)


class SnapshotEstimator:
    """Evaluates a published model (a float64 torch DeLaN) on samples; the numpy model of the
    last snapshot is kept, rebuilt when another is passed. ``nominal``: the URDF's model, for a
    residual (the estimate is then nominal + residual)."""

    def __init__(self, joint_names: Sequence[str], nominal: Optional[Any] = None):
        self.joint_names, self.nominal = list(joint_names), nominal
        self._snapshot: Any = None
        self._model: Any = None

    def __call__(self, snapshot: Any, samples: Sequence[Sample]) -> Estimates:
        if self._snapshot is not snapshot:
            # batches only: the compiled one-state kernel is not needed (nor built)
            model: Any = NumpyDelan(snapshot, self.joint_names, use_c=False)
            if self.nominal is not None:
                model = NominalPlusResidual(self.nominal, model)
            self._snapshot, self._model = snapshot, model
        model = self._model
        q, qd, qdd = (np.array([getattr(s, k) for s in samples]) for k in ('q', 'qd', 'qdd'))
        H = np.asarray(model.mass_matrix(q))
        c, g = np.asarray(model.coriolis(q, qd)), np.asarray(model.gravity(q))
        f = np.asarray(model.friction(qd))
        T, V = (np.asarray(x).reshape(-1) for x in model.energy(q, qd))
        predicted = np.einsum('bij,bj->bi', H, qdd) + c + g + f
        return Estimates(H, c, g, f, predicted, T, V)
