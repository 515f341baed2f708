"""The online learner on a demo's bag, reproducibly: its joint states fed through the real
``LearnerNode`` (intake, acceleration estimate, buffers, rounds, validation, publication) in
stamp order, with optimiser steps paced by the stamps at a chosen rate instead of by the CPU, and
the last published version judged on the demo's evaluation loop (``delan_control.replay``):
mean RMS tracking error at 1x and 2x over nominal Pinocchio's (the demo's bound is 1/3).

One demo run is one draw: the same data and learner give very different models from one seed
to the next (the minibatch order, the start), so a change to the learner is judged here over
several seeds on the same bag, not by rerunning the demo.

    python bench/bench_learner_replay.py --demo out/demo_panda --seeds 0,1,2
    python bench/bench_learner_replay.py --demo out/demo_panda --rate 90 --until 130
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile

import numpy as np
import yaml
from node_set import log, provenance

from delan_learning.learner_replay import joint_states, learner_overrides, replay_learner

SPEEDS = (1.0, 2.0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument(
        '--demo', required=True, help='a demo output folder (bags/, params.yaml, results.json)'
    )
    ap.add_argument('--seeds', default='0,1,2', help='learner seeds, one run each')
    ap.add_argument(
        '--rate',
        type=float,
        default=0.0,
        help="optimiser steps per second of stamps (default: the demo learner's own rate)",
    )
    ap.add_argument(
        '--until', type=float, default=0.0, help='seconds of the bag to feed (default: all)'
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
    ap.add_argument('--threads', type=int, default=2)
    args = ap.parse_args()
    from delan_common.robot_model import find_urdf
    from delan_control.model_loader import load_dynamics_model
    from delan_control.replay import EvaluationSetup, replay_tracking

    with open(os.path.join(args.demo, 'results.json')) as f:
        res = json.load(f)
    urdf = find_urdf(res['robot']['urdf'])
    params = os.path.join(args.demo, 'params.yaml')
    setup = EvaluationSetup.from_params(urdf, params, res['robot']['joints'])
    overrides = learner_overrides(params)
    from delan_learning.checkpoint import read_checkpoint

    overrides['model'] = (
        args.model or read_checkpoint(res['learner']['checkpoint'])[0]['model_kind']
    )
    for item in filter(None, args.set.split(',')):
        name, _, value = item.partition('=')
        overrides[name.strip()] = yaml.safe_load(value)
    rate = args.rate or float(res['learner']['steps_per_s'])
    msgs = joint_states(os.path.join(args.demo, 'bags'))
    log(
        f'{provenance()}; {setup.robot.source}: {len(msgs)} joint states, {rate:.0f} steps/s, '
        f'model {overrides["model"]}'
    )
    nominal = {
        sp: float(np.mean(replay_tracking(setup, setup.nominal, sp, 'feedforward_urdf_pd')))
        for sp in SPEEDS
    }
    print(
        f'demo online: {res["learner"]["training_steps"]} steps, '
        + ', '.join(
            f'{r["controller"]} {r["speed"]:g}x {np.mean(r["rms"]) / nominal[r["speed"]]:.3f}'
            for r in res.get('tracking', [])
            if r.get('controller') in ('delan', 'delan_residual')
        )
    )
    print('| seed | steps | version | 1x / nominal | 2x / nominal | replay wall [s] |')
    print('|---|---|---|---|---|---|')
    ratios = []
    for seed in (int(s) for s in args.seeds.split(',')):
        tmp = tempfile.mkdtemp(prefix='learner_replay_')
        try:
            steps, ckpt, wall = replay_learner(
                msgs, urdf, overrides, rate, args.until, seed, tmp, args.threads, say=log
            )
            if not ckpt:
                print(f'| {seed} | {steps} | none published | - | - | {wall:.0f} |', flush=True)
                continue
            model = load_dynamics_model(overrides['model'], setup.robot, checkpoint=ckpt)
            r = [
                float(np.mean(replay_tracking(setup, model, sp, 'feedforward_urdf_pd')))
                / nominal[sp]
                for sp in SPEEDS
            ]
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
    return 0 if ratios else 1


if __name__ == '__main__':
    sys.exit(main())
