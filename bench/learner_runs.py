"""What the benches that run the real learner on a demo's data share
(``bench_learner_replay.py``, ``bench_learning_phase.py``): a demo folder's evaluation setup and
learner settings, and the learner run once per seed, its last version judged on the replayed
evaluation loop against nominal Pinocchio. A helper, not a benchmark."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
from typing import Any, Dict, List, Tuple

import numpy as np
import yaml
from node_set import log


def add_learner_args(ap: argparse.ArgumentParser, seeds: str, threads: int) -> None:
    """``--demo``, ``--seeds``, ``--rate``, ``--model``, ``--set``, ``--threads``."""
    ap.add_argument(
        '--demo', required=True, help='a demo output folder (params.yaml, results.json, ...)'
    )
    ap.add_argument('--seeds', default=seeds, help='learner seeds, one run each')
    ap.add_argument(
        '--rate',
        type=float,
        default=0.0,
        help="optimiser steps per second of stamps (default: the demo learner's own rate)",
    )
    ap.add_argument(
        '--model',
        default='',
        help="the learner's model (default: the kind of the demo's checkpoint)",
    )
    ap.add_argument(
        '--set',
        default='',
        help='learner parameters to change, '
        "'name=value,...' (values in YAML: 0.995, true, [1, 2])",
    )
    ap.add_argument('--threads', type=int, default=threads)


def demo_learner(args: argparse.Namespace) -> Tuple[dict, str, Any, Dict[str, Any], float]:
    """``(results.json, urdf path, EvaluationSetup, learner overrides, steps/s)`` of the demo
    folder ``args.demo`` with ``args.model``, ``args.set`` and ``args.rate`` applied."""
    from delan_common.robot_model import find_urdf
    from delan_control.replay import EvaluationSetup
    from delan_learning.checkpoint import read_checkpoint
    from delan_learning.learner_replay import learner_overrides, learner_params

    with open(os.path.join(args.demo, 'results.json')) as f:
        res = json.load(f)
    urdf = find_urdf(res['robot']['urdf'])
    params = os.path.join(args.demo, 'params.yaml')
    setup = EvaluationSetup.from_params(urdf, params, res['robot']['joints'])
    overrides = learner_overrides(params)
    overrides['model'] = (
        args.model or read_checkpoint(res['learner']['checkpoint'])[0]['model_kind']
    )
    defaults = {p.name: p.default for p in learner_params()}
    for item in filter(None, args.set.split(',')):
        name, _, value = item.partition('=')
        name, value = name.strip(), yaml.safe_load(value)
        if isinstance(defaults.get(name), float) and type(value) is int:
            value = float(value)  # '0' for a double: rclpy refuses an integer
        overrides[name] = value
    return res, urdf, setup, overrides, args.rate or float(res['learner']['steps_per_s'])


def run_seeds(
    msgs: list,
    urdf: str,
    setup: Any,
    overrides: Dict[str, Any],
    rate: float,
    args: argparse.Namespace,
    nominal: Dict[float, float],
    until: float = 0.0,
) -> List[List[float]]:
    """The learner on ``msgs`` once per seed of ``args.seeds``: a table row each (steps, last
    version, its mean RMS over nominal's at each speed), and the ratios of the seeds that
    published, with their mean (min-max) row when any did."""
    from delan_control.model_loader import load_dynamics_model
    from delan_control.replay import SPEEDS, mean_rms
    from delan_learning.learner_replay import replay_learner

    print('| seed | steps | version | 1x / nominal | 2x / nominal | replay wall [s] |')
    print('|---|---|---|---|---|---|')
    ratios = []
    for seed in (int(s) for s in args.seeds.split(',')):
        tmp = tempfile.mkdtemp(prefix='learner_run_')
        try:
            steps, ckpt, wall = replay_learner(
                msgs, urdf, overrides, rate, until, seed, tmp, args.threads, say=log
            )
            if not ckpt:
                print(f'| {seed} | {steps} | none published | - | - | {wall:.0f} |', flush=True)
                continue
            model = load_dynamics_model(overrides['model'], setup.robot, checkpoint=ckpt)
            rms = mean_rms(setup, model)
            r = [rms[sp] / nominal[sp] for sp in SPEEDS]
            ratios.append(r)
            print(
                f'| {seed} | {steps} | {os.path.basename(ckpt)} | {r[0]:.3f} | {r[1]:.3f} | '
                f'{wall:.0f} |',
                flush=True,
            )
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    if ratios:
        a = np.array(ratios)
        print(
            f'| mean (min-max) | | | {a[:, 0].mean():.3f} ({a[:, 0].min():.3f}-'
            f'{a[:, 0].max():.3f}) | {a[:, 1].mean():.3f} ({a[:, 1].min():.3f}-'
            f'{a[:, 1].max():.3f}) | |'
        )
    return ratios
