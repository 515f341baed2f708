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
import os
import sys

import numpy as np
from learner_runs import add_learner_args, demo_learner, run_seeds
from node_set import log, provenance

from delan_control.replay import mean_rms
from delan_learning.learner_replay import joint_states


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    add_learner_args(ap, seeds='0,1,2', threads=2)
    ap.add_argument(
        '--until', type=float, default=0.0, help='seconds of the bag to feed (default: all)'
    )
    args = ap.parse_args()
    res, urdf, setup, overrides, rate = demo_learner(args)
    msgs = joint_states(os.path.join(args.demo, 'bags'))
    log(
        f'{provenance()}; {setup.robot.source}: {len(msgs)} joint states, {rate:.0f} steps/s, '
        f'model {overrides["model"]}'
    )
    nominal = mean_rms(setup, setup.nominal)
    print(
        f'demo online: {res["learner"]["training_steps"]} steps, '
        + ', '.join(
            f'{r["controller"]} {r["speed"]:g}x {np.mean(r["rms"]) / nominal[r["speed"]]:.3f}'
            for r in res.get('tracking', [])
            if r.get('controller') in ('delan', 'delan_residual')
        )
    )
    ratios = run_seeds(msgs, urdf, setup, overrides, rate, args, nominal, until=args.until)
    return 0 if ratios else 1


if __name__ == '__main__':
    sys.exit(main())
