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
import glob
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import yaml
from node_set import log, provenance

SPEEDS = (1.0, 2.0)
#: learner parameters taken over from the demo's parameter file (the others: the node's defaults)
CARRIED = (
    'buffer_capacity',
    'min_samples',
    'steps_per_round',
    'batch_size',
    'learning_rate',
    'learning_rate_final',
    'learning_rate_halflife',
    'publish_period',
    'model',
    'loss_metric',
    'width',
    'depth',
    'friction',
    'diff_window_s',
    'validation_every',
    'publish_max_nmse',
)


def joint_states(bag_dir: str):
    """The bag's JointState messages in bag order (rosbags' deserialised dataclasses)."""
    from rosbags.highlevel import AnyReader

    paths = [
        Path(p) for p in sorted(glob.glob(os.path.join(bag_dir, '*'))) if os.path.isdir(p)
    ] or [Path(bag_dir)]
    with AnyReader(paths) as reader:
        conns = [c for c in reader.connections if c.msgtype == 'sensor_msgs/msg/JointState']
        if not conns:
            raise SystemExit(f'no sensor_msgs/JointState in {bag_dir}')
        return [
            reader.deserialize(raw, c.msgtype) for c, _, raw in reader.messages(connections=conns)
        ]


def learner_overrides(params_file: str) -> dict:
    with open(params_file) as f:
        doc = yaml.safe_load(f) or {}
    section = (doc.get('/**/learner') or {}).get('ros__parameters', {})
    return {k: v for k, v in section.items() if k in CARRIED}


def replay_learner(
    msgs,
    urdf: str,
    overrides: dict,
    rate: float,
    until: float,
    seed: int,
    checkpoint_dir: str,
    threads: int,
):
    """Feed ``msgs`` through a LearnerNode, ``rate`` optimiser steps per second of stamps;
    returns (training steps, last published checkpoint or '', wall seconds)."""
    from rclpy.parameter import Parameter
    from sensor_msgs.msg import JointState

    from delan_learning.nodes.learner import LearnerNode
    from delan_testing.ros import ros_context

    values = {
        **overrides,
        'urdf_path': urdf,
        'checkpoint_dir': checkpoint_dir,
        'training_enabled': False,
        'torch_threads': threads,
        'seed': seed,
        'resume': False,
    }
    wall = time.perf_counter()
    with ros_context() as ctx:
        node = LearnerNode(
            context=ctx, parameter_overrides=[Parameter(k, value=v) for k, v in values.items()]
        )
        try:
            torch.set_num_threads(threads)
            rng = np.random.default_rng(seed)
            steps_due, t_first, t_prev = 0.0, None, None
            for m in msgs:
                t = m.header.stamp.sec + 1e-9 * m.header.stamp.nanosec
                if t == 0.0:
                    continue  # the sim's first state: stamped by its clock, which is not here
                if t_first is None:
                    t_first = t
                if until and t - t_first > until:
                    break
                js = JointState(
                    name=list(m.name),
                    position=list(m.position),
                    velocity=list(m.velocity),
                    effort=list(m.effort),
                )
                js.header.stamp.sec, js.header.stamp.nanosec = (
                    m.header.stamp.sec,
                    m.header.stamp.nanosec,
                )
                node._on_joint_state(js)
                ready = node.train_buf.size >= node.min_samples and node.val_buf.size >= max(
                    10, node.min_samples // 10
                )
                if ready and t_prev is not None:
                    steps_due += rate * (t - t_prev)
                t_prev = t
                while steps_due >= node.steps_per_round:
                    steps_due -= node.steps_per_round
                    node.train_once(rng, now=t)
            log(
                f'seed {seed}: learner says {node.message!r}; v{node.version} published; '
                f'validation nMSE {np.round(node.val_nmse, 4).tolist()}, last good '
                f'{np.round(node.policy.good_nmse, 4).tolist()}'
            )
            return node.training_steps, node.checkpoint_path or '', time.perf_counter() - wall
        finally:
            node.close()
            node.destroy_node()


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
                msgs, urdf, overrides, rate, args.until, seed, tmp, args.threads
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
