"""The online learner's ``loss`` (inverse / forward / both) on the 2-link arm, noisy velocities.

The sim's plant (``delan_control.plant.Plant``: the demo's mismatch, +0.6 kg payload and twice
the friction, RK4 at 1 kHz) is driven by a computed-torque loop on the nominal URDF that sees the
*measured* state, as the torque_controller sees the sim's joint states: positions with the demo's
0.1 mrad noise, velocities with ``k x 0.002 rad/s`` (``k`` in ``--levels``; the sim's
``position_noise`` / ``velocity_noise``), so the velocity noise reaches the torques through the
loop's damping. Each joint state carries the torque applied over the tick before it (the sim's
effort: ``torque_timing`` end). ``--trajectories`` Fourier excitations of ``--duration`` s, 0.5 s
apart, at ``--rate`` Hz.

The same stream goes through a real ``LearnerNode`` in this process (intake, acceleration
estimate, buffers, rollout windows, validation, publication policy) once per loss, with the
optimiser steps paced by the stamps (``--steps`` over the stream, as
``delan_learning.learner_replay`` does), so a run does not depend on the machine's load. Scored
on 2 unseen, clean trajectories (true accelerations, no noise): the torque nMSE of the policy's
best weights (what the learner would publish next) and the RMS position / velocity error of their
forward model rolled out ``--horizon-eval`` steps under the applied torques; beside them the
learner's own validation nMSE of those weights (noisy data, estimated accelerations), the
versions it published (past its quality gate, ``publish_max_nmse`` 0.25) and the CPU seconds of
the run (learning only; the machine's load does not count).

    python bench/bench_forward_loss_online.py                       # 1x and 10x, ~6 min of CPU
    python bench/bench_forward_loss_online.py --levels 10 --steps 3000 --losses inverse forward
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
from typing import Dict, List

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_forward_loss import (  # noqa: E402
    MISMATCH,
    POSITION_NOISE,
    URDF,
    VELOCITY_NOISE,
    score,
    unseen,
)
from node_set import provenance  # noqa: E402
from reference_models import TruePlant, ZeroAcceleration  # noqa: E402

from delan_common.excitation import random_fourier_trajectory  # noqa: E402
from delan_common.robot_model import RobotModel  # noqa: E402


def joint_states(args, level: float) -> List[tuple]:
    """``(t, q, qd, effort)`` of the noisy closed loop: the state measured at ``t_k`` and the
    torque applied over ``[t_k-1, t_k)``."""
    from delan_control.plant import Plant

    nominal = RobotModel(os.path.normpath(URDF))
    substeps = max(1, int(math.ceil(1000.0 / args.rate - 1e-9)))
    plant = Plant(
        nominal,
        MISMATCH,
        physics_rate=args.rate * substeps,
        position_noise=POSITION_NOISE,
        velocity_noise=level * VELOCITY_NOISE,
        seed=args.seed,
    )
    spec = nominal.spec
    bw = min(60.0, args.rate / 8.0)  # delan-gen-data's tracking loop
    kp, kd = bw * bw, 2.0 * bw
    T = int(round(args.duration * args.rate))
    t = np.arange(T) / args.rate
    out, t0 = [], 1000.0
    for i in range(args.trajectories):
        ref = random_fourier_trajectory(
            spec.lower, spec.upper, spec.velocity_limit, seed=args.seed * 1000 + i
        )
        q_ref, qd_ref, qdd_ref = ref.sample(t)
        f_ref = nominal.friction(qd_ref)
        plant.reset(q_ref[0], qd_ref[0])
        applied = np.zeros(nominal.n)
        for k in range(T):
            q, qd = plant.measure()
            out.append((t0 + t[k], q, qd, applied))
            a = qdd_ref[k] + kp * (q_ref[k] - q) + kd * (qd_ref[k] - qd)
            applied = plant.step(nominal.rigid_body_torque(q, qd, a) + f_ref[k], substeps)
        t0 += args.duration + 0.5
    return out


def learn(states: List[tuple], loss: str, args, checkpoint_dir: str) -> Dict:
    """Stream ``states`` through a LearnerNode with ``loss``; its best weights and numbers."""
    import rclpy
    from rclpy.context import Context
    from rclpy.parameter import Parameter
    from sensor_msgs.msg import JointState

    from delan_common.ros.stamps import set_seconds
    from delan_learning.nodes.learner import LearnerNode

    params = {
        'urdf_path': os.path.normpath(URDF),
        'checkpoint_dir': checkpoint_dir,
        'resume': False,
        'training_enabled': False,  # rounds driven here, paced by the stamps
        'loss': loss,
        'horizon': args.horizon,
        'integrator': args.integrator,
        'width': args.width,
        'batch_size': args.batch,
        'steps_per_round': 50,
        'min_samples': 1000,
        'learning_rate': args.lr,
        'learning_rate_final': args.lr * 0.02,
        'learning_rate_halflife': max(1, args.steps // 6),
        'publish_period': 1.0,
        'estimate_publish_rate': 0.0,
        'seed': args.seed,
    }
    ctx = Context()
    rclpy.init(context=ctx)
    cpu = time.process_time()
    try:
        node = LearnerNode(
            context=ctx, parameter_overrides=[Parameter(k, value=v) for k, v in params.items()]
        )
        try:
            rate = args.steps / (states[-1][0] - states[0][0])
            rng = np.random.default_rng(args.seed)
            msg = JointState(name=node.robot.joint_names)
            due, t_prev = 0.0, None
            for t, q, qd, effort in states:
                msg.position, msg.velocity, msg.effort = q.tolist(), qd.tolist(), effort.tolist()
                set_seconds(msg.header.stamp, t)
                node._on_joint_state(msg)
                ready = node.train_buf.size >= node.min_samples
                if ready and t_prev is not None:
                    due += rate * (t - t_prev)
                t_prev = t
                while due >= node.steps_per_round:
                    due -= node.steps_per_round
                    node.train_once(rng, now=t)
            while node.training_steps < args.steps:  # what pacing left (data came late)
                node.train_once(rng, now=states[-1][0] + node.training_steps)
            model = node.trainer.model
            if node.policy.good_state is not None:
                model.load_state_dict(node.policy.good_state)
            return {
                'model': model.double().eval(),
                'val_nmse': float(np.mean(node.policy.good_nmse or [math.nan])),
                'versions': node.version,
                'steps': node.training_steps,
                'cpu_s': time.process_time() - cpu,
            }
        finally:
            node.close()
            node.destroy_node()
    finally:
        rclpy.try_shutdown(context=ctx)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--levels', type=float, nargs='+', default=[1.0, 10.0])
    p.add_argument('--losses', nargs='+', default=['inverse', 'forward', 'both'])
    p.add_argument('--trajectories', type=int, default=4)
    p.add_argument('--duration', type=float, default=10.0)
    p.add_argument('--rate', type=float, default=250.0)
    p.add_argument('--steps', type=int, default=2000, help='optimiser steps per run')
    p.add_argument('--horizon', type=int, default=5, help='training rollout steps')
    p.add_argument('--horizon-eval', type=int, default=25, help='metric rollout steps')
    p.add_argument('--integrator', default='rk4', choices=('rk4', 'euler'))
    p.add_argument('--batch', type=int, default=64)
    p.add_argument('--width', type=int, default=32)
    p.add_argument('--lr', type=float, default=5e-3)
    p.add_argument('--seed', type=int, default=0)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    test = unseen(args)
    truth = TruePlant(RobotModel(os.path.normpath(URDF)).mismatched(MISMATCH))
    rows = [
        ('-', 'true plant', score(truth, test, args.horizon_eval)),
        ('-', 'qdd = 0', score(ZeroAcceleration(truth.joint_types), test, args.horizon_eval)),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        for level in args.levels:
            states = joint_states(args, level)
            for loss in args.losses:
                r = learn(states, loss, args, os.path.join(tmp, f'{level:g}_{loss}'))
                r.update(score(r.pop('model'), test, args.horizon_eval))
                rows.append((f'{level:g}x', loss, r))
                sys.stderr.write(f'{level:g}x {loss}: {r}\n')
    h_ms = 1000.0 * args.horizon_eval / args.rate
    print(
        f'\n2-link online learner, {args.trajectories} x {args.duration:g} s at {args.rate:g} Hz '
        f'per noise level, {args.steps} steps paced by the stamps (batch {args.batch}, width '
        f'{args.width}, rollouts {args.horizon} steps {args.integrator}); scored on 2 unseen '
        f'clean trajectories, rollouts {args.horizon_eval} steps ({h_ms:.0f} ms); '
        f'{provenance()}\n'
    )
    print(
        f'| qd noise | loss | versions | CPU [s] | learner val nMSE | torque nMSE | '
        f'q RMS @{args.horizon_eval} [mrad] | qd RMS @{args.horizon_eval} [rad/s] |'
    )
    print('|---|---|---|---|---|---|---|---|')
    for level, loss, r in rows:
        learned = 'versions' in r
        cells = [
            level,
            loss,
            str(r['versions']) if learned else '-',
            f'{r["cpu_s"]:.0f}' if learned else '-',
            f'{r["val_nmse"]:.4f}' if learned else '-',
            f'{r["nmse"]:.4f}' if 'nmse' in r else '-',
            f'{1e3 * r["q_rms"]:.3f}',
            f'{r["qd_rms"]:.4f}',
        ]
        print('| ' + ' | '.join(cells) + ' |')
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
