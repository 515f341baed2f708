"""Command lines: ``delan-train`` fits a model to recorded data, ``delan-eval`` scores one.

Both exit 0 on success and 2 on bad input (missing/invalid files or arrays, checkpoints for
other joints), printing one ``delan-<cmd>: error: ...`` line to stderr instead of a traceback.
``delan-train`` prints a JSON summary to stdout (progress, unless ``--quiet``, goes to stderr);
``delan-eval`` prints its metrics as JSON to stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Dict, List, Optional, Sequence

import numpy as np

from delan_common.model_kinds import VARIANT_KINDS
from delan_learning.cli_args import add_data_arguments, add_renamed_option, arrays_from_args
from delan_learning.train_config import (
    DEFAULT_FRICTION_MODEL,
    FRICTION_MODELS,
    INTEGRATORS,
    LOSS_METRICS,
    LOSSES,
    TORQUE_TIMINGS,
    loss_metric_error,
    resolve_loss_metric,
)

EXIT_OK, EXIT_BAD_INPUT = 0, 2
#: what ``delan-train --model`` fits (``delan_residual`` needs a nominal model: the learner's)
TRAIN_MODELS = ('delan', 'mlp') + VARIANT_KINDS


class UsageError(Exception):
    """Bad input from the user: reported in one line, exit code 2."""


def _fail(prog: str, message: str) -> int:
    sys.stderr.write(f'{prog}: error: {message}\n')
    return EXIT_BAD_INPUT


def _read_data(args: argparse.Namespace, require_tau: bool = True, match_torque: bool = True):
    """The :class:`~delan_learning.data.Dataset` of ``--data`` or ``--bag`` (and ``--joints``);
    UsageError on bad options or unreadable data. ``match_torque=False`` keeps the recorded
    torque of an ``.npz`` whose qdd is estimated (what a rollout applies), instead of the one
    averaged with the estimate's kernel (what the inverse model pairs with it)."""
    from delan_learning.data import Dataset, load_npz

    try:
        arrays = arrays_from_args(
            args, lambda path: load_npz(path, require_tau, match_torque=match_torque).arrays()
        )
        return Dataset.from_arrays(
            arrays,
            require_tau=require_tau,
            source=str(args.data or args.bag),
            match_torque=match_torque,
        )
    except ValueError as err:  # DataError included
        raise UsageError(str(err)) from None


# -- delan-train ----------------------------------------------------------------------------------
def train_parser() -> argparse.ArgumentParser:
    """The ``delan-train`` command line."""
    from delan_learning.train_config import TrainConfig

    p = argparse.ArgumentParser(
        prog='delan-train',
        description='Fit a DeLaN (or a baseline or variant) inverse-dynamics model '
        'to recorded joint data and save a checkpoint.',
    )
    add_data_arguments(
        p,
        'joints to learn, comma separated, in the order of the model '
        '(default: all joints of the data; of a bag, as delan-bag2npz reads them)',
    )
    p.add_argument('--out', required=True, metavar='model.pt', help='checkpoint to write')
    p.add_argument(
        '--model',
        choices=TRAIN_MODELS,
        default='delan',
        help='kind of model to fit (default %(default)s): structured DeLaN, the black-box '
        'MLP, or the variants DeLaN is compared with: one MLP for the Lagrangian '
        "(blackbox_lagrangian), DeLaN's networks in Hamiltonian form (hamiltonian)",
    )
    p.add_argument(
        '--loss',
        choices=LOSSES,
        default=TrainConfig.loss,
        help="'inverse' (default): torque error of the inverse model, with qdd "
        "estimated from the data; 'forward': error of positions and velocities "
        'predicted --horizon steps ahead by the forward model under the recorded '
        "torques (no qdd; needs time stamps t and --model delan); 'both': their sum",
    )
    p.add_argument(
        '--loss-metric',
        choices=('auto',) + LOSS_METRICS,
        default='auto',
        help="what a torque error costs in the inverse loss, as the learner's loss_metric: "
        "'torque' (each joint over its torque spread), 'acceleration' (through the inverse "
        "of --urdf's mass matrix: the acceleration the error would cause, large where joint "
        "axes line up or links are light) or 'both'; 'auto' (default): both for delan with "
        '--urdf and --loss inverse, else torque',
    )
    add_rollout_arguments(p, TrainConfig.horizon, 'forward loss: steps per rollout window')
    p.add_argument(
        '--epochs',
        type=int,
        default=None,
        help='passes over the data at most (default: no limit; training runs until '
        'the validation loss plateaus, see --schedule)',
    )
    p.add_argument(
        '--max-steps',
        type=int,
        default=TrainConfig.max_steps,
        help='optimiser steps at most (default %(default)s)',
    )
    p.add_argument(
        '--schedule',
        choices=('plateau', 'cosine', 'constant'),
        default='plateau',
        help="learning rate: 'plateau' (default) lowers it whenever the validation "
        "loss stops improving and stops after the last drop; 'cosine' decays it over "
        '--epochs (else --max-steps)',
    )
    p.add_argument('--batch', type=int, default=512, help='minibatch size')
    p.add_argument('--lr', type=float, default=5e-3, help='peak learning rate (cosine decay)')
    p.add_argument('--width', type=int, default=64, help='hidden units per layer')
    p.add_argument('--depth', type=int, default=2, help='hidden layers')
    p.add_argument('--seed', type=int, default=0)
    p.add_argument(
        '--no-friction',
        action='store_true',
        help='no friction terms (DeLaN and its variants; the mlp has none anyway)',
    )
    p.add_argument(
        '--friction-model',
        choices=FRICTION_MODELS,
        default=DEFAULT_FRICTION_MODEL,
        help="DeLaN's friction law (delan, hamiltonian): 'coulomb_viscous' "
        "(default: viscous + symmetric Coulomb) or 'stribeck' (adds asymmetric Coulomb levels "
        'and Stribeck break-away friction)',
    )
    p.add_argument(
        '--val-fraction',
        type=float,
        default=0.2,
        help='share of trajectories held out for early stopping',
    )
    p.add_argument(
        '--patience',
        type=int,
        default=TrainConfig.patience,
        help='early stopping: validation rounds without improvement (0: never)',
    )
    p.add_argument(
        '--time-budget',
        type=float,
        default=None,
        metavar='SECONDS',
        help='stop training after this wall time',
    )
    p.add_argument(
        '--threads',
        type=int,
        default=1,
        help='torch CPU threads (default 1: at width 64 and batch 512 each op is too '
        'small to split, and a second thread stalls when the core is shared; raise '
        'it for wide models or large batches)',
    )
    p.add_argument(
        '--urdf',
        default=None,
        metavar='robot.urdf',
        help="the robot's description (URDF or xacro), for delan and delan_residual: the mass "
        "matrix is learned independent of the joints below no other of the data (an arm's "
        "first joint), as the learner's inertia_invariance; without it H may depend on "
        'every joint',
    )
    p.add_argument('--quiet', action='store_true', help='no progress output')
    return p


def add_rollout_arguments(
    p: argparse.ArgumentParser, horizon: Optional[int], horizon_help: str
) -> None:
    """``--horizon``, ``--integrator``, ``--torque-timing``: how a forward model is rolled out
    (:mod:`delan_learning.rollout`), the same for the loss and the metric."""
    p.add_argument('--horizon', type=int, default=horizon, metavar='N', help=horizon_help)
    p.add_argument(
        '--integrator',
        choices=INTEGRATORS,
        default='rk4',
        help="rollout integration: 'rk4' (default) or 'euler' (semi-implicit)",
    )
    p.add_argument(
        '--torque-timing',
        choices=TORQUE_TIMINGS,
        default='start',
        help="the torque of sample k acts over [t_k, t_k+1) ('start', default: "
        "delan-gen-data) or over (t_k-1, t_k] ('end': a joint state's effort)",
    )


def _description(urdf: str, joint_names: Sequence[str]):
    """The :class:`~delan_common.urdf_joints.RobotDescription` of ``--urdf`` (a path or a bare
    name, as delan-sysid takes it) for the data's joints; UsageError for one that does not load
    or lacks them."""
    from delan_common.robot_model import find_urdf
    from delan_common.urdf_joints import RobotDescription

    try:
        path = urdf if os.path.isfile(urdf) else find_urdf(urdf)
        return RobotDescription.load(path, joints=list(joint_names))
    except (OSError, ValueError) as err:  # UrdfError and JointSelectionError included
        raise UsageError(f'--urdf {urdf}: {err}') from None


def _inertia_invariant(robot, joint_names: Sequence[str]) -> List[int]:
    """The data's columns (indices into ``joint_names``) of the joints the mass matrix of
    ``robot`` (a RobotDescription) does not depend on (:attr:`~delan_common.urdf_joints.
    RobotDescription.inertia_invariant_joints`)."""
    names = list(joint_names)
    return [names.index(robot.joint_names[i]) for i in robot.inertia_invariant_joints]


def _acceleration_metric(robot, joint_names: Sequence[str], q: np.ndarray) -> np.ndarray:
    """``W = H^-1 (N, n, n)`` of ``robot``'s (a RobotDescription) URDF model at the data's
    positions ``q (N, n)``, rows and columns in the data's joint order (``joint_names``), as
    the learner's intake computes it per sample; UsageError where the mass matrix is
    singular."""
    from delan_common.robot_model import RobotModel

    model = RobotModel.from_description(robot)
    names = list(joint_names)
    to_data = [list(model.joint_names).index(j) for j in names]  # model index of each column
    try:
        w = model.acceleration_metric(model.to_model_order(names, q))
    except np.linalg.LinAlgError:
        w = None
    if w is None or not np.all(np.isfinite(w)):
        raise UsageError(
            "--loss-metric: the URDF's mass matrix is singular at some of the data's poses; "
            'use --loss-metric torque'
        )
    return w[:, to_data][:, :, to_data]


def train_main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of ``delan-train``; returns the exit code."""
    args = train_parser().parse_args(argv)
    prog = 'delan-train'
    try:
        if args.loss != 'inverse' and args.model == 'mlp':
            raise UsageError(
                f'--loss {args.loss} trains through the forward dynamics, which '
                'the mlp model does not have (it is an inverse model only); use '
                '--model delan or --loss inverse'
            )
        for name, value, lo in (
            ('--epochs', args.epochs, 1),
            ('--max-steps', args.max_steps, 1),
            ('--batch', args.batch, 1),
            ('--width', args.width, 1),
            ('--depth', args.depth, 1),
            ('--horizon', args.horizon, 1),
        ):
            if value is not None and value < lo:
                raise UsageError(f'{name} must be >= {lo}, got {value}')
        if not args.lr > 0:
            raise UsageError(f'--lr must be > 0, got {args.lr}')
        if not 0.0 <= args.val_fraction < 1.0:
            raise UsageError(f'--val-fraction must be in [0, 1), got {args.val_fraction}')
        if args.time_budget is not None and not args.time_budget > 0:
            raise UsageError(f'--time-budget must be > 0, got {args.time_budget}')
        # the forward loss applies the recorded torque; the inverse term wants the matched one
        data = _read_data(args, match_torque=args.loss != 'forward')
        if args.loss != 'inverse' and data.t is None:
            raise UsageError(f'--loss {args.loss} needs time stamps: the data have no t array')
        if loss_metric_error(args.loss, args.loss_metric):
            raise UsageError(
                f'--loss-metric {args.loss_metric} weighs the inverse loss, not --loss '
                f'{args.loss} (a rollout measures the motion itself); use --loss-metric torque '
                'or auto'
            )
        loss_metric = resolve_loss_metric(args.loss_metric, args.model, args.loss)
        if loss_metric != 'torque' and not args.urdf:
            if args.loss_metric == 'auto':
                loss_metric = 'torque'  # no nominal model to weigh the errors with
            else:
                raise UsageError(
                    f'--loss-metric {args.loss_metric} weighs errors by the inverse of the '
                    "URDF's mass matrix: give --urdf"
                )
        invariant: List[int] = []
        if args.urdf:
            robot = _description(args.urdf, data.joint_names)
            invariant = _inertia_invariant(robot, data.joint_names)
            if loss_metric != 'torque':
                data.metric = _acceleration_metric(robot, data.joint_names, data.q)
    except UsageError as err:
        return _fail(prog, str(err))

    import torch

    from delan_learning import models
    from delan_learning.checkpoint import save_model
    from delan_learning.training import TrainConfig, train_model

    if args.threads:
        torch.set_num_threads(args.threads)
    config = TrainConfig(
        epochs=args.epochs,
        max_steps=args.max_steps,
        lr_schedule=args.schedule,
        batch_size=args.batch,
        lr=args.lr,
        val_fraction=args.val_fraction,
        patience=args.patience,
        seed=args.seed,
        time_budget=args.time_budget,
        quiet=args.quiet,
        loss=args.loss,
        horizon=args.horizon,
        integrator=args.integrator,
        torque_timing=args.torque_timing,
        loss_metric=loss_metric,
    )
    try:
        model_config = models.model_config(
            args.model,
            args.width,
            args.depth,
            not args.no_friction,
            args.friction_model,
            inertia_invariant_joints=invariant,
        )
    except ValueError:
        return _fail(prog, f'--friction-model is for DeLaN models, not {args.model}')
    try:
        result = train_model(data, args.model, config, model_config)
    except ValueError as err:  # e.g. no window without a gap for the forward loss
        return _fail(prog, str(err))
    try:
        meta = save_model(result.model, args.out, result.metadata)
    except OSError as err:
        return _fail(prog, f'cannot write {args.out}: {err}')
    final = meta['training']['final_metrics']
    summary = {
        'out': args.out,
        'model_kind': args.model,
        'joint_names': meta['joint_names'],
        'epochs_run': meta['training']['epochs_run'],
        'steps': meta['training']['steps'],
        'stop_reason': meta['training']['stop_reason'],
        'n_train': meta['training']['n_train'],
        'n_val': meta['training']['n_val'],
        'val_nmse': dict(zip(meta['joint_names'], final['nmse'])),
        'train_seconds': result.history[-1]['elapsed_s'] if result.history else 0.0,
        'loss': args.loss,
        'loss_metric': loss_metric,
    }
    if 'rollout' in final:
        summary['val_rollout'] = final['rollout']
    print(json.dumps(summary, indent=2))
    return EXIT_OK


# -- delan-eval -----------------------------------------------------------------------------------
def eval_parser() -> argparse.ArgumentParser:
    """The ``delan-eval`` command line."""
    p = argparse.ArgumentParser(
        prog='delan-eval',
        description='Score a checkpoint on recorded data: per-joint MSE and '
        'normalised MSE (MSE / Var) of the inverse model, and of the forward model with '
        '--forward. Prints JSON.',
    )
    add_renamed_option(
        p,
        '--checkpoint',
        '--model',
        required=True,
        metavar='model.pt',
        help='checkpoint to score (written by delan-train)',
    )
    add_data_arguments(
        p,
        "joints to read from the data: the checkpoint's joints, comma "
        'separated (default: all joints of the data)',
    )
    p.add_argument('--forward', action='store_true', help='also score the forward model (qdd)')
    add_rollout_arguments(
        p,
        None,
        'also roll the forward model out N steps under the recorded '
        'torques from every start state (windows never cross a trajectory '
        'boundary or a time gap) and report the RMS position / velocity '
        'error at step N (needs time stamps t)',
    )
    return p


def _column_order(model_names: List[str], data_names: List[str]) -> np.ndarray:
    """Indices taking the data's columns into model order; UsageError if joints are missing."""
    missing = [n for n in model_names if n not in data_names]
    if missing:
        raise UsageError(
            f'the data lack joints {missing} of the model (data joints: {data_names})'
        )
    return np.array([data_names.index(n) for n in model_names], dtype=np.int64)


def _errors(pred: np.ndarray, target: np.ndarray, names: List[str]) -> Dict:
    mse = np.mean((pred - target) ** 2, axis=0)
    var = np.var(target, axis=0)
    nmse = mse / np.maximum(var, 1e-300)
    return {
        'mse': dict(zip(names, mse.tolist())),
        'nmse': dict(zip(names, nmse.tolist())),
        'mse_mean': float(mse.mean()),
        'nmse_mean': float(nmse.mean()),
    }


def eval_main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of ``delan-eval``; returns the exit code."""
    args = eval_parser().parse_args(argv)
    prog = 'delan-eval'
    from delan_learning.checkpoint import CheckpointError, load_model

    try:
        try:
            model, meta = load_model(args.checkpoint)
        except CheckpointError as err:
            raise UsageError(str(err)) from None
        names = [str(s) for s in meta['joint_names']]
        if args.joints is not None and sorted(args.joints) != sorted(names):
            raise UsageError(
                f'--joints {args.joints} are not the joints of the checkpoint {names}'
            )
        if args.horizon is not None and args.horizon < 1:
            raise UsageError(f'--horizon must be >= 1, got {args.horizon}')
        data = _read_data(args)
        order = _column_order(names, list(data.joint_names))
        # rollouts apply the recorded torque, not the one matched to an estimated qdd
        raw = _read_data(args, match_torque=False) if args.horizon else None
        if raw is not None and raw.t is None:
            raise UsageError('--horizon needs time stamps: the data have no t array')
    except UsageError as err:
        return _fail(prog, str(err))

    import torch

    q, qd, qdd, tau = (
        torch.as_tensor(x[:, order], dtype=torch.float64)
        for x in (data.q, data.qd, data.qdd, data.tau)
    )
    chunk = 8192
    with torch.no_grad():
        tau_hat = torch.cat(
            [
                model.inverse(q[i : i + chunk], qd[i : i + chunk], qdd[i : i + chunk])
                for i in range(0, len(q), chunk)
            ]
        ).numpy()
    result = {
        'model': args.checkpoint,
        'model_kind': meta['model_kind'],
        'data': data.source,
        'joint_names': names,
        'n_samples': len(data),
        'inverse': _errors(tau_hat, tau.numpy(), names),
    }
    if args.forward:
        with torch.no_grad():
            qdd_hat = torch.cat(
                [
                    model.forward_dynamics(q[i : i + chunk], qd[i : i + chunk], tau[i : i + chunk])
                    for i in range(0, len(q), chunk)
                ]
            ).numpy()
        result['forward'] = _errors(qdd_hat, qdd.numpy(), names)
    if raw is not None:
        from delan_learning.rollout import horizon_metrics, rollout_errors, window_index

        index, dt = window_index(raw.traj, raw.t, args.horizon)
        if len(index) == 0:
            return _fail(
                prog,
                f'no {args.horizon + 1} consecutive samples without a gap in '
                'the data for --horizon',
            )
        q_raw, qd_raw, tau_raw = (
            torch.as_tensor(x[:, order], dtype=torch.float64) for x in (raw.q, raw.qd, raw.tau)
        )
        eq, ev = rollout_errors(
            model, q_raw, qd_raw, tau_raw, index, dt, args.integrator, args.torque_timing
        )
        result['rollout'] = horizon_metrics(eq, ev, names, dt)
    print(json.dumps(result, indent=2))
    return EXIT_OK


if __name__ == '__main__':
    raise SystemExit(train_main())
