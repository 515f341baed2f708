"""The demo's evaluation, replayed without ROS (``delan_control.replay``): each model's RMS
tracking error on the figure eight at 1x and 2x and the ratio to nominal Pinocchio's, in seconds.

With a demo's output folder (``--demo out/demo``) it judges that demo's learned model and its
identified parameters on the same loop; the numbers match the demo's own table, because the
demo's sim runs in lockstep. Without one it runs the analytic models only (nominal and the
sim's own model: the floor).

    python bench/bench_replay.py                                   # 2-link arm, analytic models
    python bench/bench_replay.py --robot panda.urdf --demo out/demo
    python bench/bench_replay.py --robot panda.urdf --checkpoint model.pt
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np
from node_set import PARAMS_FILE, log, provenance

from delan_common.robot_model import find_urdf
from delan_control.model_loader import load_dynamics_model
from delan_control.replay import SPEEDS, EvaluationSetup, replay_tracking, true_model


def models(setup: EvaluationSetup, args) -> dict:
    out = {'pinocchio': setup.nominal, 'true plant': true_model(setup)}
    checkpoint, identified = args.checkpoint, ''
    if args.demo:
        with open(os.path.join(args.demo, 'results.json')) as f:
            res = json.load(f)
        checkpoint = checkpoint or res['learner']['checkpoint']
        identified = os.path.join(args.demo, 'identified.json')
    if identified and os.path.isfile(identified):
        out['identified'] = load_dynamics_model(
            'identified', setup.robot, identified_params=identified
        )
    if checkpoint:
        from delan_learning.checkpoint import read_checkpoint

        kind = read_checkpoint(checkpoint)[0]['model_kind']
        out[kind] = load_dynamics_model(kind, setup.robot, checkpoint=checkpoint)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--robot', '--urdf', default='two_link_arm.urdf')
    ap.add_argument('--joints', default='')
    ap.add_argument(
        '--params',
        default=None,
        help='node parameter file (default: the demo '
        "folder's params.yaml, else the bringup's sim_params.yaml)",
    )
    ap.add_argument('--demo', default='', help='a demo output folder (results.json)')
    ap.add_argument('--checkpoint', default='', help='a DeLaN checkpoint to judge')
    ap.add_argument('--law', default='feedforward_urdf_pd')
    ap.add_argument('--duration', type=float, default=8.0)
    args = ap.parse_args()
    joints = [j for j in args.joints.replace(',', ' ').split() if j]
    params = args.params or PARAMS_FILE
    if not args.params and args.demo and os.path.isfile(os.path.join(args.demo, 'params.yaml')):
        params = os.path.join(args.demo, 'params.yaml')  # what the demo's nodes ran with
    setup = EvaluationSetup.from_params(find_urdf(args.robot), params, joints)
    log(f'{provenance()}; {setup.robot.source}')
    print('| model | speed | RMS tracking error per joint | mean | / pinocchio | replay [s] |')
    print('|---|---|---|---|---|---|')
    nominal = {}
    for name, model in models(setup, args).items():
        for speed in SPEEDS:
            t0 = time.perf_counter()
            rms = replay_tracking(setup, model, speed, args.law, args.duration)
            wall = time.perf_counter() - t0
            mean = float(np.mean(rms))
            nominal.setdefault(speed, mean)
            print(
                f'| {name} | {speed:g}x | {" / ".join(f"{x:.4f}" for x in rms)} | '
                f'{mean:.4f} | {mean / nominal[speed]:.3f} | {wall:.1f} |',
                flush=True,
            )
    return 0


if __name__ == '__main__':
    sys.exit(main())
