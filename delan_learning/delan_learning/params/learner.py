"""Parameters of the ``learner`` node, after the robot's (``param_table.robot_table``)."""

from __future__ import annotations

from typing import Any, Optional

from delan_common.model_kinds import FORWARD_KINDS, ONLINE_KINDS
from delan_common.param_table import Param, ParamContext
from delan_common.urdf_joints import END_STOP_TOLERANCE
from delan_learning.online import ACCELERATION_SOURCES
from delan_learning.train_config import (
    FRICTION_MODELS,
    INTEGRATORS,
    LOSS_METRICS,
    LOSSES,
    TORQUE_TIMINGS,
    friction_model_error,
    loss_metric_error,
)


def loss_error(loss: str, model: str, loss_metric: str) -> Optional[str]:
    """Why the learner of ``model`` kind with ``loss_metric`` cannot train with ``loss``
    (None: it can); the learner's version of ``training._check_loss_config``."""
    if loss == 'inverse':
        return None
    if model not in FORWARD_KINDS:
        why = (
            "it learns a torque on top of the URDF's model"
            if model == 'delan_residual'
            else 'a black-box inverse model: its forward model is a numerical solve'
        )
        return (
            f'loss {loss!r} trains through the forward dynamics, which the {model!r} model '
            f'does not have in a differentiable form ({why}); use loss inverse, or model '
            + ', '.join(FORWARD_KINDS)
        )
    return loss_metric_error(loss, loss_metric)


def _loss_fits_model(value: Any, ctx: ParamContext) -> Optional[str]:
    """loss: one the model kind can be trained with (declared after model and loss_metric)."""
    return loss_error(value, ctx.values['model'], ctx.values['loss_metric'])


def _friction_law_fits_model(value: Any, ctx: ParamContext) -> Optional[str]:
    """friction_model: one the model kind has (declared after model)."""
    return friction_model_error(ctx.values['model'], value)


TABLE = (
    Param(
        'model',
        'delan',
        'What is learned: delan (the whole dynamics), '
        "delan_residual (what the URDF's rigid-body model misses, on top "
        'of it), or, to compare them on the same stream, the black-box mlp (inverse dynamics '
        'only) or the variants blackbox_lagrangian (one MLP for L(q, qd)) and hamiltonian '
        "(DeLaN's networks in Hamiltonian form). Every kind is published the same way; a "
        'controller follows delan and delan_residual only and refuses a version of the others',
        choices=ONLINE_KINDS,
        read_only=True,
    ),
    Param(
        'loss_metric',
        'auto',
        'What a torque error costs in the loss: torque (each '
        "joint over its torque spread), acceleration (through the URDF's inverse "
        'inertia: the acceleration the error would cause, large where joint axes line up '
        'or links are light) or both; auto = both for delan and delan_residual '
        'with loss inverse, torque otherwise',
        choices=('auto',) + LOSS_METRICS,
        read_only=True,
    ),
    Param(
        'loss',
        'inverse',
        'What training minimises: inverse (the torque error of the inverse model, with the '
        'estimated acceleration), forward (the error of the positions and velocities the '
        'forward model predicts horizon samples ahead from a measured state under the measured '
        'efforts: no acceleration estimate enters, for noisy velocities; not for '
        'delan_residual and mlp) or both '
        '(their sum). Validation, the quality gate and publication stay on the torque nMSE. A '
        'change applies from the next training round: the trainer is rebuilt around the current '
        'weights (the optimiser state starts over) and the versions trained with the new loss '
        'are compared among themselves',
        choices=LOSSES,
        check=_loss_fits_model,
    ),
    Param(
        'horizon',
        10,
        'forward / both: joint states per rollout window, after its first (windows never span '
        'a gap in the stamps, an estimator restart, a rejected message or a held-out chunk); a '
        'training step costs about 4 x horizon model evaluations. Applies from the next round',
        min=1,
        max=500,
    ),
    Param(
        'integrator',
        'rk4',
        'forward / both: how a rollout integrates the learned forward model: rk4 (classic '
        'Runge-Kutta) or euler (semi-implicit, 4x cheaper per step). Applies from the next round',
        choices=INTEGRATORS,
    ),
    Param(
        'torque_timing',
        'end',
        "forward / both: which joint state's effort acts between two: end (the later one's: "
        'the torque that led to it, as a simulator in lockstep and most drives report it) or '
        "start (the earlier one's). Applies from the next round",
        choices=TORQUE_TIMINGS,
    ),
    Param(
        'buffer_capacity',
        200000,
        'Replay buffer size [samples]; bounds '
        'memory to 32 * n_joints + 8 bytes per sample, + 8 * n_joints + 8 for delan, '
        'blackbox_lagrangian and hamiltonian (the measured effort and stream position the '
        'forward loss needs), + 8 * n_joints for '
        'delan_residual, + 4 * n_joints^2 for a loss_metric other than '
        'torque',
        min=100,
        max=50_000_000,
        read_only=True,
    ),
    Param('min_samples', 2000, 'Samples before training starts', min=10, max=10_000_000),
    Param(
        'validation_every',
        5,
        'One in k one-second chunks of data '
        'is held out for validation (spread by a hash of the stamp, '
        'not every k-th: that would hold out the same phases of a '
        'repeated motion)',
        min=2,
        max=100,
        read_only=True,
    ),
    Param('steps_per_round', 100, 'Optimiser steps per training round', min=1, max=100000),
    Param('batch_size', 512, 'Minibatch size', min=8, max=65536),
    Param(
        'learning_rate',
        3e-3,
        'AdamW learning rate at the start and again after the data changed (see shift_factor)',
        min=1e-7,
        max=1.0,
    ),
    Param(
        'learning_rate_final',
        3e-3,
        'The rate decays to this (>= learning_rate, the default: no decay)',
        min=1e-8,
        max=1.0,
    ),
    Param(
        'learning_rate_halflife',
        3000,
        'Optimiser steps over which the rate halves (0: no decay)',
        min=0,
        max=10_000_000,
    ),
    Param('width', 64, 'Hidden units per layer', min=4, max=1024, read_only=True),
    Param('depth', 2, 'Hidden layers', min=1, max=8, read_only=True),
    Param(
        'friction',
        True,
        'Learn viscous + Coulomb friction (mlp: no friction term, its network learns friction '
        'with the rest)',
        read_only=True,
    ),
    Param(
        'friction_model',
        'coulomb_viscous',
        'The friction law learned (with friction): coulomb_viscous (viscous + symmetric '
        'Coulomb) or stribeck (asymmetric Coulomb with a break-away bump, viscous; '
        'delan_learning/friction.py; delan, delan_residual and hamiltonian only)',
        choices=FRICTION_MODELS,
        check=_friction_law_fits_model,
        read_only=True,
    ),
    Param(
        'inertia_invariance',
        True,
        'delan / delan_residual: learn the mass matrix independent of the positions of the '
        'learned joints below no other learned joint in the URDF (on an arm, its first joint). '
        'Exact for a fixed base: such a joint moves its subtree rigidly, and kinetic energy '
        'does not change under a rigid motion; the potential still depends on it, as gravity '
        'about a tilted axis or a spring does. false: H may depend on every joint',
        read_only=True,
    ),
    Param('seed', 0, 'Seed of weights and minibatches', min=0, max=2**31 - 1, read_only=True),
    Param('training_enabled', True, 'Pause/resume training at runtime'),
    Param(
        'publish_period',
        5.0,
        'Publish an improved model at most this often [s wall time]',
        min=0.1,
        max=3600.0,
    ),
    Param(
        'checkpoint_dir',
        'delan_checkpoints',
        'Where model versions are written',
        read_only=True,
    ),
    Param('keep_versions', 5, 'Checkpoint versions kept on disk', min=1, max=1000),
    Param(
        'resume',
        True,
        'Continue from the newest loadable checkpoint in checkpoint_dir at start-up',
        read_only=True,
    ),
    Param(
        'publish_max_nmse',
        0.25,
        'Quality gate: a version is '
        'published only when its validation nMSE is at most this on '
        'every joint (a controller following the learner must not get '
        'a barely trained model)',
        min=1e-9,
        max=1e9,
    ),
    Param(
        'divergence_factor',
        20.0,
        'Validation loss this many times the best counts as divergence',
        min=1.5,
        max=1e6,
    ),
    Param(
        'divergence_floor',
        1e-3,
        'Validation loss (torque MSE over '
        'its variance, mean of the joints) below which no loss counts '
        'as divergence',
        min=0.0,
        max=1e3,
    ),
    Param(
        'shift_factor',
        5.0,
        "The published version's validation loss "
        'this many times its loss when it was published means the data '
        'changed (a burst of bad data, or a lasting change of the robot): '
        'publication is then held, see publish_hold_s',
        min=1.1,
        max=1e6,
    ),
    Param(
        'publish_hold_s',
        10.0,
        'After the data changed, a new version '
        'goes out only once it beats the published one on validation '
        'data stamped more than this long after the change was seen: a '
        'burst of bad data shorter than this never reaches a controller '
        '[s of joint-state stamps]',
        min=0.0,
        max=3600.0,
    ),
    Param('status_rate', 1.0, 'ModelStatus rate [Hz]', min=0.01, max=100.0, read_only=True),
    Param(
        'estimate_publish_rate',
        50.0,
        'Rate of ~/dynamics_estimate [Hz of '
        'joint-state stamps]: at most one incoming sample per 1/rate, with '
        "the published version's prediction beside the measured torque; "
        '0 = off',
        min=0.0,
        max=1000.0,
    ),
    Param(
        'estimate_rate',
        -1.0,
        'Deprecated name of estimate_publish_rate, used instead of it when set (-1 = not set)',
        min=-1.0,
        max=1000.0,
        read_only=True,
    ),
    Param(
        'diff_window_s',
        0.06,
        'Span of the acceleration estimator [s] (a '
        'cubic fitted over it); longer is less noisy and more smoothed',
        min=0.005,
        max=1.0,
        read_only=True,
    ),
    Param(
        'acceleration_source',
        'velocity',
        'What qdd is estimated from: the measured '
        'velocities (differentiated once, as delan-train does from a bag) or the positions '
        '(twice: only for drives whose velocity is worse than a difference of their '
        'encoder)',
        choices=ACCELERATION_SOURCES,
        read_only=True,
    ),
    Param(
        'max_gap',
        0.1,
        'Time gap that restarts the estimator [s]',
        min=1e-4,
        max=10.0,
        read_only=True,
    ),
    Param(
        'range_factor',
        3.0,
        'Reject samples whose |torque| or |velocity| exceeds this times the URDF limit',
        min=1.0,
        max=1000.0,
    ),
    Param(
        'end_stop_margin',
        END_STOP_TOLERANCE,
        'Reject samples with a '
        'joint this close to a position limit [rad or m]: an end '
        'stop pushes the arm there with a force no model has (0 = '
        'keep them)',
        min=0.0,
        max=0.5,
    ),
    Param('torch_threads', 1, 'CPU threads for training', min=1, max=64, read_only=True),
    Param(
        'training_niceness',
        10,
        "Added to the training thread's nice value: "
        'on a machine shared with a controller, training yields the CPU to '
        'the control loop (0 = same priority)',
        min=0,
        max=19,
        read_only=True,
    ),
)
