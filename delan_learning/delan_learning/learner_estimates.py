"""What the learner's published version predicts for the incoming samples
(``~/dynamics_estimate``), in one batch per intake batch.

DeLaN and its residual are evaluated by the numpy model: ~0.3 ms for one sample of a 7-DoF arm
(torch, a call per term: ~0.8 ms), so 50 estimates a second take ~1.5 % of a core (and of the
GIL) from the optimiser. The hamiltonian variant holds DeLaN's very networks, so the numpy
model of those gives its terms too (the same physical model; the Hamiltonian form only computes
the torque another way). The other kinds are evaluated in torch, with what they have:

- ``blackbox_lagrangian``: ``H`` at the sample's ``(q, qd)`` (a black-box Lagrangian's depends on
  the velocity too), ``c``, ``g``, friction; no split of its energy into kinetic and potential:
  both energies are NaN;
- ``mlp``: the predicted torque only; the terms are empty arrays and the energies NaN (as a
  message's ``measured_torque`` is empty when a joint state had no effort).
"""

from __future__ import annotations

from typing import Any, Dict, NamedTuple, Optional, Sequence

import numpy as np
import torch

from delan_common.residual_dynamics import NominalPlusResidual
from delan_learning.numpy_delan import NumpyDelan
from delan_learning.online import Sample


class Estimates(NamedTuple):
    """The terms of the dynamics for ``b`` samples of ``n`` joints; None where the model has
    no such term (NaN energies likewise)."""

    mass_matrix: Optional[np.ndarray]  # (b, n, n)
    coriolis: Optional[np.ndarray]  # (b, n)
    gravity: Optional[np.ndarray]  # (b, n)
    friction: Optional[np.ndarray]  # (b, n)
    predicted: np.ndarray  # (b, n): H qdd + c + g + f
    kinetic: np.ndarray  # (b,)
    potential: np.ndarray  # (b,)

    def fields(self, k: int) -> Dict[str, Any]:
        """Sample ``k``'s ``DynamicsEstimate`` fields of the model (a term the model does not
        have: an empty array)."""

        def row(x: Optional[np.ndarray]) -> list:
            return [] if x is None else x[k].reshape(-1).tolist()

        return {
            'mass_matrix': row(self.mass_matrix),
            'coriolis_torque': row(self.coriolis),
            'gravity_torque': row(self.gravity),
            'friction_torque': row(self.friction),
            'predicted_torque': row(self.predicted),
            'kinetic_energy': float(self.kinetic[k]),
            'potential_energy': float(self.potential[k]),
        }


def _numpy_terms(model: Any, q: np.ndarray, qd: np.ndarray, qdd: np.ndarray) -> Estimates:
    """By a ``DynamicsModel`` with every term (the numpy DeLaN, + the URDF's for a residual)."""
    H = np.asarray(model.mass_matrix(q))
    c, g = np.asarray(model.coriolis(q, qd)), np.asarray(model.gravity(q))
    f = np.asarray(model.friction(qd))
    T, V = (np.asarray(x).reshape(-1) for x in model.energy(q, qd))
    predicted = np.einsum('bij,bj->bi', H, qdd) + c + g + f
    return Estimates(H, c, g, f, predicted, T, V)


@torch.no_grad()
def _torch_terms(model: Any, q: np.ndarray, qd: np.ndarray, qdd: np.ndarray) -> Estimates:
    """By the torch model itself, for the kinds without a numpy twin (module docstring)."""
    tq, tqd, tqdd = (torch.as_tensor(x, dtype=model.dtype) for x in (q, qd, qdd))
    predicted = model.inverse(tq, tqd, tqdd).numpy()
    nan = np.full(len(q), np.nan)
    if model.kind == 'mlp':
        return Estimates(None, None, None, None, predicted, nan, nan)
    H = model.mass_matrix(tq, tqd).numpy()
    c, g = model.coriolis(tq, tqd).numpy(), model.gravity(tq).numpy()
    return Estimates(H, c, g, model.friction(tqd).numpy(), predicted, nan, nan.copy())


class SnapshotEstimator:
    """Evaluates a published model (a float64 torch model of the learner's kind) on samples;
    the evaluator of the last snapshot is kept, rebuilt when another is passed. ``nominal``:
    the URDF's model, for a residual (the estimate is then nominal + residual)."""

    def __init__(self, joint_names: Sequence[str], nominal: Optional[Any] = None):
        self.joint_names, self.nominal = list(joint_names), nominal
        self._snapshot: Any = None
        self._model: Any = None

    def _evaluator(self, snapshot: Any) -> Any:
        kind = getattr(snapshot, 'kind', 'delan')
        if kind not in ('delan', 'delan_residual', 'hamiltonian'):
            return snapshot
        # batches only: the compiled one-state kernel is not needed (nor built)
        delan = snapshot.delan if kind == 'hamiltonian' else snapshot
        model: Any = NumpyDelan(delan, self.joint_names, use_c=False)
        return NominalPlusResidual(self.nominal, model) if self.nominal is not None else model

    def __call__(self, snapshot: Any, samples: Sequence[Sample]) -> Estimates:
        """The terms of ``snapshot``'s dynamics at ``samples`` (:class:`Estimates`), by its numpy
        twin where it has one, else by the torch model itself."""
        if self._snapshot is not snapshot:
            self._snapshot, self._model = snapshot, self._evaluator(snapshot)
        q, qd, qdd = (np.array([getattr(s, k) for s in samples]) for k in ('q', 'qd', 'qdd'))
        if isinstance(self._model, torch.nn.Module):
            return _torch_terms(self._model, q, qd, qdd)
        return _numpy_terms(self._model, q, qd, qdd)
