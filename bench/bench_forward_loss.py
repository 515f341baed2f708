"""Inverse vs forward vs both losses on the same noisy 2-link data: when does forward win?

Data as ``delan-gen-data`` makes them (the simulated plant under computed-torque tracking of
Fourier excitation, the demo's mismatch: +0.6 kg payload, twice the friction; 250 Hz, torque held
over each tick). Measurement noise as the demo's sim adds it (``sim_params.yaml``): 0.1 mrad on
positions and ``k x 0.002 rad/s`` on velocities, ``k`` in ``--levels``. Accelerations are then
*estimated* from the noisy velocities (Savitzky-Golay, the pipeline's default), which is all the
inverse loss can use; the forward loss never sees them.

Rows per noise level and loss: torque nMSE of the inverse model on clean, unseen trajectories
(true accelerations), and the RMS position / velocity error of the forward model rolled out
``--horizon-eval`` steps under the recorded torques on those trajectories (all joints averaged).
'forward raw' trains on the recorded torque instead of the one averaged with the acceleration
estimate's kernel (``match_torque=False``): the kernel is right for the inverse loss only.
The 'true plant' row is the floor (the sim's own model; it lacks nothing but the integration);
'qdd = 0' (constant velocity) is what a forward model must beat to have learned anything.

    python bench/bench_forward_loss.py --horizon 5 --batch 64 --width 32 [--levels 1 3 10]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
import torch
from reference_models import TruePlant, ZeroAcceleration

from delan_common.robot_model import Mismatch, RobotModel
from delan_control.datagen import generate_dataset
from delan_learning import rollout as ro
from delan_learning.data import Dataset
from delan_learning.models import build_model
from delan_learning.training import TorqueNormalizer, TrainConfig, Trainer

URDF = os.path.join(os.path.dirname(__file__), '..', 'delan_bringup', 'urdf', 'two_link_arm.urdf')
MISMATCH = Mismatch(payload_mass=0.6, viscous_scale=2.0, coulomb_scale=2.0)
POSITION_NOISE, VELOCITY_NOISE = 1e-4, 2e-3  # the demo's sim [rad], [rad/s]


def noisy(arrays: dict, level: float, seed: int) -> dict:
    """Positions and velocities with the demo's noise (velocity noise ``level`` times), and
    no accelerations (the pipeline estimates them)."""
    rng = np.random.default_rng(seed)
    out = {k: v for k, v in arrays.items() if k not in ('qdd', 'q_ref', 'meta')}
    out['q'] = arrays['q'] + POSITION_NOISE * rng.standard_normal(arrays['q'].shape)
    out['qd'] = arrays['qd'] + level * VELOCITY_NOISE * rng.standard_normal(arrays['qd'].shape)
    return out


def unseen(args) -> dict:
    """The metric's data: 2 trajectories of the mismatched plant that training never saw (seeds
    from ``args.seed + 100``), ``args.duration`` s each at ``args.rate``."""
    return generate_dataset(
        os.path.normpath(URDF),
        trajectories=2,
        duration=args.duration,
        rate=args.rate,
        seed=args.seed + 100,
        mismatch=MISMATCH,
    )


def score(model, test: dict, horizon: int) -> dict:
    q, qd, qdd, tau = (torch.as_tensor(test[k]) for k in ('q', 'qd', 'qdd', 'tau'))
    out = {}
    if hasattr(model, 'inverse'):
        with torch.no_grad():
            err = (model.inverse(q, qd, qdd) - tau).numpy()
        out['nmse'] = float(np.mean(np.mean(err**2, 0) / np.var(test['tau'], 0)))
    idx, dt = ro.window_index(test['traj'], test['t'], horizon)
    idx, dt = idx[::5], dt[::5]
    eq, ev = ro.rollout_errors(model, q, qd, tau, idx, dt, 'rk4', 'start')
    out['q_rms'] = float(eq[:, -1].pow(2).mean().sqrt())
    out['qd_rms'] = float(ev[:, -1].pow(2).mean().sqrt())
    return out


def train(data: Dataset, loss: str, steps: int, args) -> tuple:
    torch.manual_seed(args.seed)
    cfg = TrainConfig(
        loss=loss,
        horizon=args.horizon,
        integrator=args.integrator,
        batch_size=args.batch,
        lr=args.lr,
        seed=args.seed,
    )
    model = build_model('delan', data.joint_types, width=args.width)
    trainer = Trainer(model, cfg, TorqueNormalizer.from_torques(data.tau))
    t0 = time.perf_counter()
    done = 0
    while done < steps:  # cosine over the run, in rounds of 100 steps
        n = min(100, steps - done)
        lr = cfg.lr * (0.01 + 0.99 * 0.5 * (1 + np.cos(np.pi * done / steps)))
        trainer.train_steps(data, n, lr=lr)
        done += n
    return trainer.model.double().eval(), time.perf_counter() - t0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument(
        '--levels',
        type=float,
        nargs='+',
        default=[1.0, 10.0],
        help="velocity noise in multiples of the demo's 0.002 rad/s",
    )
    p.add_argument('--trajectories', type=int, default=6)
    p.add_argument('--duration', type=float, default=10.0)
    p.add_argument('--rate', type=float, default=250.0)
    p.add_argument('--horizon', type=int, default=10, help='training rollout steps')
    p.add_argument('--horizon-eval', type=int, default=25, help='metric rollout steps')
    p.add_argument('--integrator', default='rk4', choices=ro.INTEGRATORS)
    p.add_argument('--steps-inverse', type=int, default=3000)
    p.add_argument(
        '--steps-forward',
        type=int,
        default=3000,
        help='steps for forward / both (1200 left forward under-trained)',
    )
    p.add_argument('--batch', type=int, default=128)
    p.add_argument('--lr', type=float, default=5e-3)
    p.add_argument('--width', type=int, default=64)
    p.add_argument('--seed', type=int, default=0)
    p.add_argument('--losses', nargs='*', default=['inverse', 'forward', 'forward raw', 'both'])
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    urdf = os.path.normpath(URDF)
    clean = generate_dataset(
        urdf,
        trajectories=args.trajectories,
        duration=args.duration,
        rate=args.rate,
        seed=args.seed,
        mismatch=MISMATCH,
    )
    test = unseen(args)
    truth = TruePlant(RobotModel(urdf).mismatched(MISMATCH))
    rows = [
        ('-', 'true plant', score(truth, test, args.horizon_eval), 0, 0.0),
        (
            '-',
            'qdd = 0',
            score(ZeroAcceleration(truth.joint_types), test, args.horizon_eval),
            0,
            0.0,
        ),
    ]
    for level in args.levels:
        arrays = noisy(clean, level, seed=int(level * 1000) + args.seed)
        matched = Dataset.from_arrays(arrays)
        raw = Dataset.from_arrays(arrays, match_torque=False)
        for loss in args.losses:
            kind = loss.split()[0]
            steps = args.steps_inverse if kind == 'inverse' else args.steps_forward
            model, secs = train(raw if loss.endswith('raw') else matched, kind, steps, args)
            rows.append((f'{level:g}x', loss, score(model, test, args.horizon_eval), steps, secs))
            r = rows[-1]
            sys.stderr.write(f'{r[0]} {r[1]}: {r[2]} ({secs:.0f} s)\n')
    h_ms = 1000.0 * args.horizon_eval / args.rate
    print(
        f'\n2-link, {args.trajectories} x {args.duration:g} s at {args.rate:g} Hz; training '
        f'rollouts {args.horizon} steps ({args.integrator}); metric at {args.horizon_eval} '
        f'steps ({h_ms:.0f} ms) on 2 unseen trajectories\n'
    )
    print(
        f'| qd noise | loss | steps | train [s] | torque nMSE | q RMS @{args.horizon_eval} '
        f'[mrad] | qd RMS @{args.horizon_eval} [rad/s] |'
    )
    print('|---|---|---|---|---|---|---|')
    for level, loss, s, steps, secs in rows:
        nmse = f'{s["nmse"]:.4f}' if 'nmse' in s else '-'
        print(
            f'| {level} | {loss} | {steps} | {secs:.0f} | {nmse} | {1e3 * s["q_rms"]:.3f} | '
            f'{s["qd_rms"]:.4f} |'
        )
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
