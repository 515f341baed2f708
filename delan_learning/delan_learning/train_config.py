"""Optimisation settings, apart from torch so that command lines read their defaults cheaply."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from delan_common.model_kinds import FRICTION_LAW_KINDS, LEARNED_KINDS

#: values of ``TrainConfig.loss``
LOSSES = ('inverse', 'forward', 'both')
#: values of ``TrainConfig.loss_metric``
LOSS_METRICS = ('torque', 'acceleration', 'both')
#: rollout integrators and torque timings (:mod:`delan_learning.rollout`)
INTEGRATORS = ('rk4', 'euler')
TORQUE_TIMINGS = ('start', 'end')
#: DeLaN's friction laws (the model argument ``friction_model``, :mod:`delan_learning.friction`;
#: here so that command lines list them without importing torch)
FRICTION_MODELS = ('coulomb_viscous', 'stribeck')
DEFAULT_FRICTION_MODEL = 'coulomb_viscous'


def resolve_loss_metric(loss_metric: str, model: str, loss: str) -> str:
    """``loss_metric`` with 'auto' resolved: 'both' for the kinds a controller follows, trained
    by the inverse loss, else 'torque' (a rollout measures the motion itself; the other kinds
    are compared by the loss they are published with)."""
    if loss_metric != 'auto':
        return loss_metric
    return 'both' if model in LEARNED_KINDS and loss == 'inverse' else 'torque'


def loss_metric_error(loss: str, loss_metric: str) -> Optional[str]:
    """Why ``loss_metric`` cannot weigh ``loss`` (None: it can): it weighs the inverse loss."""
    if loss == 'inverse' or loss_metric in ('auto', 'torque'):
        return None
    return (
        f'loss_metric {loss_metric!r} weighs the inverse loss, not loss {loss!r} (a '
        'rollout measures the motion itself); use loss_metric torque or auto'
    )


def friction_model_error(kind: str, friction_model: str) -> Optional[str]:
    """Why a ``kind`` model cannot have ``friction_model`` (None: it can): another law than the
    default only for the kinds on DeLaN's networks (ignored, the user would get a law other
    than the one asked for)."""
    if friction_model == DEFAULT_FRICTION_MODEL or kind in FRICTION_LAW_KINDS:
        return None
    return (
        f"friction_model {friction_model!r} is for the models on DeLaN's networks "
        f'({", ".join(FRICTION_LAW_KINDS)}); the {kind!r} model has '
        + ('no friction term' if kind == 'mlp' else 'viscous + Coulomb friction only')
    )


@dataclass
class TrainConfig:
    """Optimisation settings (all JSON-able; stored in checkpoints)."""

    #: passes over the data at most; None = no limit (``max_steps``, the plateau or the budget)
    epochs: Optional[int] = None
    #: optimiser steps at most
    max_steps: int = 100_000
    batch_size: int = 512
    lr: float = 5e-3
    weight_decay: float = 1e-5
    #: 'plateau' multiplies lr by ``plateau_factor`` after ``plateau_patience`` rounds without a
    #: relative improvement of ``plateau_threshold`` and stops once it would fall below
    #: ``lr * final_lr_fraction``; 'cosine' decays lr to ``lr * final_lr_fraction`` over the
    #: epochs (``max_steps`` when None) or the time budget, whichever runs out first;
    #: 'constant' keeps it.
    lr_schedule: str = 'plateau'
    final_lr_fraction: float = 0.01
    plateau_patience: int = 5
    plateau_factor: float = 0.3
    plateau_threshold: float = 1e-3
    #: a round (one validation pass, one metrics dict) is the fewest whole epochs that hold at
    #: least this many steps; 0 = one epoch per round
    round_steps: int = 100
    val_fraction: float = 0.2
    #: rounds without a validation improvement before stopping; 0 = never stop early
    patience: int = 50
    seed: int = 0
    #: wall-clock seconds for ``fit``; None = no limit
    time_budget: Optional[float] = None
    grad_clip: Optional[float] = 10.0
    quiet: bool = True
    #: keep freed memory in the process heap (glibc ``mallopt``, see :func:`tune_allocator`)
    tune_allocator: bool = True
    #: what is minimised: 'inverse' (normalised torque error of the inverse model; needs qdd),
    #: 'forward' (error of positions and velocities predicted ``horizon`` steps ahead by the
    #: forward model under the recorded torques, :mod:`delan_learning.rollout`; no qdd enters)
    #: or 'both' (their sum, the forward term times ``forward_weight``)
    loss: str = 'inverse'
    #: forward loss: steps per rollout window (at the data rate)
    horizon: int = 10
    #: forward loss: 'rk4' or 'euler' (semi-implicit)
    integrator: str = 'rk4'
    #: forward loss: torque of sample k acts over [t_k, t_k+1) ('start') or over (t_k-1, t_k]
    #: ('end': a joint state's effort, as the torque kernel assumes)
    torque_timing: str = 'start'
    #: forward loss: a step longer than this times the median step is a gap windows skip
    gap_factor: float = 1.5
    #: 'both': weight of the forward term
    forward_weight: float = 1.0
    #: inverse loss: what a torque error ``e`` costs: 'torque' (``e`` over each joint's torque
    #: spread), 'acceleration' (``|W e|^2`` with the data's per-sample metric ``W = H^-1`` of
    #: a nominal model: the acceleration the error would cause, large where joint axes line up
    #: or links are light) or 'both' (their sum); the last two need ``metric`` in the data
    loss_metric: str = 'torque'
