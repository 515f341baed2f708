"""Plain DeLaN vs the residual on the URDF (``delan_residual``), on one demo's excitation bag.

Each model is trained offline on the first part of the bag (growing: the learning curve by
samples), with the same optimiser steps, and judged on the demo's own evaluation loop replayed
without ROS (``delan_control.replay``): mean RMS tracking error of the unseen figure eight at 1x
and 2x as a fraction of nominal Pinocchio's (the demo's bound is 1/3), and the torque nMSE on
the bag's held-out samples (one in five one-second chunks, as the learner holds them out).
``loss`` is the learner's ``loss_metric``: the torque error over each joint's spread, through
the URDF's inverse inertia (the acceleration it causes), or both. ``H invariant`` is the
learner's ``inertia_invariance``: the mass matrix learned independent of the joints that move
the rest rigidly (``--invariance both`` trains each variant with and without it).

    python bench/bench_residual.py --demo out/demo_panda
    python bench/bench_residual.py --demo out/demo_panda --fractions 0.1,0.25,0.5,1 --steps 6000
    python bench/bench_residual.py --demo out/demo_panda --variants delan:torque,delan:both
    python bench/bench_residual.py --demo out/demo_panda --variants delan:torque --invariance both
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np
import torch
from node_set import log, provenance

from delan_common.residual_dynamics import NominalPlusResidual
from delan_common.robot_model import RobotModel, find_urdf
from delan_control.replay import SPEEDS, EvaluationSetup, mean_rms
from delan_learning.bags import read_bag_arrays
from delan_learning.fastpath import dynamics_model
from delan_learning.models import build_model, model_config
from delan_learning.online import evaluate_total, fit_targets, held_out
from delan_learning.online_trainer import TrainingParams
from delan_learning.training import TorqueNormalizer, TrainConfig, Trainer

VARIANTS = (
    ('delan', 'torque'),
    ('delan_residual', 'torque'),
    ('delan_residual', 'acceleration'),
    ('delan_residual', 'both'),
)


def buffer_columns(nominal: RobotModel, data: dict) -> dict:
    """Every column the learner's buffer can hold, computed once for all variants."""
    out = {k: np.asarray(data[k]) for k in ('q', 'qd', 'qdd', 'tau')}
    out['tau_prior'] = nominal.inverse(out['q'], out['qd'], out['qdd'])
    out['metric'] = nominal.acceleration_metric(out['q'])
    return out


def arrays(columns: dict, kind: str, metric: str) -> dict:
    """What the learner's buffer would hold for ``kind`` and ``metric``."""
    drop = ({'tau_prior'} if kind != 'delan_residual' else set()) | (
        {'metric'} if metric == 'torque' else set()
    )
    return {k: v for k, v in columns.items() if k not in drop}


def subset(data: dict, mask: np.ndarray) -> dict:
    return {k: v[mask] for k, v in data.items()}


def train(
    robot, kind: str, metric: str, train_data: dict, steps: int, seed: int, invariant: bool
) -> Trainer:
    torch.manual_seed(seed)
    p = TrainingParams()  # the learner's defaults
    model = build_model(
        kind,
        robot.joint_types,
        **model_config(
            kind,
            p.width,
            p.depth,
            p.friction,
            p.friction_model,
            inertia_invariant_joints=robot.inertia_invariant_joints if invariant else (),
        ),
    )
    norm = TorqueNormalizer.from_torques(train_data['tau'], train_data.get('metric'))
    config = TrainConfig(batch_size=512, lr=3e-3, seed=seed, loss_metric=metric)
    trainer = Trainer(model, config, norm, device='cpu', dtype=torch.float32)
    trainer.train_steps(fit_targets(train_data), steps)
    return trainer


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument(
        '--demo', required=True, help='a demo output folder (bags/, params.yaml, results.json)'
    )
    ap.add_argument('--steps', type=int, default=3000, help='optimiser steps per model')
    ap.add_argument(
        '--fractions', default='0.25,1', help='parts of the excitation (by time) to train on'
    )
    ap.add_argument('--seed', type=int, default=0)
    ap.add_argument('--threads', type=int, default=1)
    ap.add_argument(
        '--variants',
        default=','.join(f'{k}:{m}' for k, m in VARIANTS),
        help='model:loss pairs to train, e.g. delan:torque,delan:both',
    )
    ap.add_argument(
        '--invariance',
        choices=('on', 'off', 'both'),
        default='on',
        help="the learner's inertia_invariance: on (its default), off, or each variant both ways",
    )
    args = ap.parse_args()
    variants = [tuple(v.split(':')) for v in args.variants.split(',')]
    invariance = {'on': (True,), 'off': (False,), 'both': (False, True)}[args.invariance]
    torch.set_num_threads(args.threads)
    with open(os.path.join(args.demo, 'results.json')) as f:
        res = json.load(f)
    urdf = find_urdf(res['robot']['urdf'])
    setup = EvaluationSetup.from_params(
        urdf, os.path.join(args.demo, 'params.yaml'), res['robot']['joints']
    )
    robot, nominal = setup.robot, setup.nominal
    data = read_bag_arrays(
        os.path.join(args.demo, 'bags'),
        joint_names=robot.joint_names,
        joint_types=robot.joint_types,
    )
    t = np.asarray(data['t'])
    # held out as the learner does: one in five one-second chunks of the stamps
    is_val = np.array([held_out(x, 5) for x in t])
    log(f'{provenance()}; {robot.source}: {len(t)} samples ({int(is_val.sum())} held out)')
    nominal_rms = mean_rms(setup, nominal)
    print(
        'nominal Pinocchio mean RMS: '
        + ', '.join(f'{nominal_rms[sp]:.4f} rad at {sp:g}x' for sp in SPEEDS)
    )
    print(
        '| model | loss | H invariant | train samples | steps | held-out torque nMSE (mean) | '
        '1x / nominal | 2x / nominal | train [s] |'
    )
    print('|---|---|---|---|---|---|---|---|---|')
    invariant_names = [robot.joint_names[i] for i in robot.inertia_invariant_joints]
    columns = buffer_columns(nominal, data)
    order = np.argsort(t, kind='stable')
    train_rank = np.empty(len(t), dtype=np.int64)
    train_rank[order] = np.cumsum(~is_val[order]) - 1  # place among the training samples
    n_train = int((~is_val).sum())
    for fraction in (float(x) for x in args.fractions.split(',')):
        first = ~is_val & (train_rank < fraction * n_train)  # the first part, in time
        for (kind, metric), invariant in ((v, i) for v in variants for i in invariance):
            full = arrays(columns, kind, metric)
            tr = subset(full, first)
            va = subset(full, is_val)
            wall = time.perf_counter()
            trainer = train(robot, kind, metric, tr, args.steps, args.seed, invariant)
            wall = time.perf_counter() - wall
            nmse = float(np.mean(evaluate_total(trainer, va)['nmse']))
            learned = dynamics_model(trainer.model.double().eval(), robot.joint_names)
            if kind == 'delan_residual':
                learned = NominalPlusResidual(nominal, learned)
            rms = mean_rms(setup, learned)
            ratios = [rms[sp] / nominal_rms[sp] for sp in SPEEDS]
            print(
                f'| {kind} | {metric} | {", ".join(invariant_names) if invariant else "-"} | '
                f'{len(tr["q"])} | {args.steps} | {nmse:.4f} | '
                f'{ratios[0]:.3f} | {ratios[1]:.3f} | {wall:.0f} |',
                flush=True,
            )
    return 0


if __name__ == '__main__':
    sys.exit(main())
