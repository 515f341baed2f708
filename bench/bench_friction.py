"""DeLaN's friction laws on the 7-DoF arm's ``realistic`` plant (issue 17): what the Stribeck law
(asymmetric Coulomb + Stribeck + viscous, ``friction_model='stribeck'``) buys over the default
(viscous + symmetric Coulomb, ``'coulomb_viscous'``), next to rigid-body identification.

Offline, on ``datagen`` excitation data of the plant (exact accelerations, no noise):

1. Held-out torque nMSE per joint at 1x and 2x speed (unseen trajectory seeds, the 2x ones the
   same paths played twice as fast) of: rigid-body least-squares identification
   (``sysid.identify_dataset``, the demo's estimator), DeLaN with each friction law (same data,
   seeds and optimiser steps), and the learned friction curve's RMS error against the plant's
   over the velocities the data visit. An ablation row trains the default law from a
   least-squares start like the Stribeck law's, to tell the law's share from its start's.
2. With ``--tracking``: the demo's evaluation loop (``delan_control.replay.replay_tracking``, the
   figure eight of ``config/sim_params.yaml`` on the realistic plant, feedforward + PD as in the
   demo): mean RMS tracking error and the wrist_roll's, 1x / 2x, of nominal Pinocchio, the
   identified model, the DeLaNs and the true plant.

Run: ``source env.sh && python bench/bench_friction.py [--quick] [--tracking] [--seeds 0,1]``
(docs/demo.md: ``--steps 8000 --seeds 0,1 --tracking``, ~15 min on 2 busy cores).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from typing import Dict, List

import numpy as np
import torch
import yaml
from node_set import log, provenance

from delan_common.dynamics import COULOMB_SMOOTHING
from delan_common.robot_model import Mismatch, RobotModel
from delan_control.datagen import generate_dataset
from delan_control.replay import SPEEDS
from delan_control.sysid import identify_dataset
from delan_learning.data import Dataset
from delan_learning.friction import raw_of
from delan_learning.models import build_model
from delan_learning.numpy_delan import NumpyDelan
from delan_learning.training import TorqueNormalizer, TrainConfig, Trainer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
URDF = os.path.join(ROOT, 'delan_bringup', 'urdf', 'seven_dof_arm.urdf')
PARAMS_FILE = os.path.join(ROOT, 'delan_bringup', 'config', 'sim_params.yaml')
KEYS = ('q', 'qd', 'qdd', 'tau')
LS_START = '(least-squares start)'
#: the DeLaN variants: each law as the library starts it, and the default law with the
#: Stribeck law's kind of start, which separates what the law buys from what its start buys
VARIANTS = ('coulomb_viscous', f'coulomb_viscous {LS_START}', 'stribeck')


def nmse(pred: np.ndarray, tau: np.ndarray) -> np.ndarray:
    """Per-joint ``mean((pred - tau)^2) / var(tau)`` ``(n,)``."""
    return np.mean((pred - tau) ** 2, axis=0) / np.var(tau, axis=0)


def datasets(args, mismatch: Mismatch) -> Dict[str, Dict[str, np.ndarray]]:
    """Training data and the held-out sets at each speed."""
    common = dict(rate=args.rate, mismatch=mismatch, duration=args.duration)
    out = {'train': generate_dataset(URDF, trajectories=args.trajectories, seed=0, **common)}
    for sp in SPEEDS:
        out[f'{sp:g}x'] = generate_dataset(
            URDF, trajectories=2, seed=100, speed=sp, **{**common, 'duration': 10.0}
        )
    return out


def least_squares_start(model, data: Dataset) -> None:
    """The default law started as the Stribeck law is: ``b, fc`` per joint by least squares
    on the rigid-body stand-ins of ``models.joint_inertia_estimates`` (an ablation: the default
    itself starts at 2 % of each joint's torque spread)."""
    q, qd, qdd, tau = (np.asarray(getattr(data, k), dtype=np.float64) for k in KEYS)
    shared = np.concatenate([qdd, np.sin(q), np.cos(q), np.ones((len(q), 1))], axis=1)
    coef = np.empty((2, q.shape[1]))
    for j in range(q.shape[1]):
        v = qd[:, j : j + 1]
        A = np.concatenate([shared, v, np.tanh(v / COULOMB_SMOOTHING)], axis=1)
        coef[:, j] = np.linalg.lstsq(A, tau[:, j], rcond=None)[0][-2:]
    tau_std = model.tau_scale.numpy()
    coef = np.clip(coef, 1e-3 * tau_std, 10.0 * tau_std)
    with torch.no_grad():
        model.friction_raw.copy_(raw_of(coef, tau_std))


def train_delan(data: Dataset, variant: str, args, seed: int) -> NumpyDelan:
    """What ``train_model`` does without a validation split, with a start of its own for the
    ablation variant."""
    friction_model = variant.split()[0]
    cfg = TrainConfig(
        max_steps=args.steps, batch_size=512, lr=5e-3, lr_schedule='cosine', patience=0, seed=seed
    )
    torch.manual_seed(seed)
    model = build_model('delan', data.joint_types, friction_model=friction_model)
    model.init_scales(*(torch.as_tensor(getattr(data, k)) for k in KEYS))
    if variant.endswith(LS_START):
        least_squares_start(model, data)
    trainer = Trainer(model, cfg, TorqueNormalizer.from_torques(data.tau))
    trainer.fit(data, None)
    return NumpyDelan(trainer.model.double().eval(), list(data.joint_names))


def friction_error(model, truth: RobotModel, qd: np.ndarray) -> np.ndarray:
    """RMS of learned minus true friction ``(n,)`` over a grid within each joint's 1-99 %
    velocity range of ``qd`` (the friction as a whole, not its split from the rest)."""
    lo, hi = np.percentile(qd, [1, 99], axis=0)
    v = np.linspace(lo, hi, 401)
    return np.sqrt(np.mean((model.friction(v) - truth.friction(v)) ** 2, axis=0))


def evaluation_setup(mismatch_preset: str):
    """The demo's evaluation loop on ``config/sim_params.yaml`` with the preset."""
    from delan_control.replay import EvaluationSetup

    with open(PARAMS_FILE) as f:
        doc = yaml.safe_load(f)
    doc['/**/sim']['ros__parameters']['mismatch_preset'] = mismatch_preset
    with tempfile.NamedTemporaryFile('w', suffix='.yaml', delete=False) as f:
        yaml.safe_dump(doc, f)
    try:
        return EvaluationSetup.from_params(URDF, f.name)
    finally:
        os.unlink(f.name)


def fmt(a: np.ndarray) -> str:
    return ' '.join(f'{x:.1e}' for x in a)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--quick', action='store_true', help='less data and fewer steps')
    ap.add_argument('--trajectories', type=int, default=8, help='training trajectories')
    ap.add_argument('--duration', type=float, default=20.0, help='seconds per trajectory')
    ap.add_argument('--rate', type=float, default=250.0, help='sample (control) rate [Hz]')
    ap.add_argument('--steps', type=int, default=6000, help='DeLaN optimiser steps')
    ap.add_argument('--seeds', default='0', help='DeLaN seeds, one training each')
    ap.add_argument(
        '--variants',
        default='0,1,2',
        help='DeLaN variants by index: ' + ', '.join(f'{i} {v}' for i, v in enumerate(VARIANTS)),
    )
    ap.add_argument('--tracking', action='store_true', help='also the demo evaluation loop')
    ap.add_argument('--threads', type=int, default=1)
    args = ap.parse_args()
    if args.quick:
        args.trajectories, args.duration, args.steps = 4, 10.0, 1500
    torch.set_num_threads(args.threads)
    nominal = RobotModel(URDF)
    mismatch = Mismatch.from_preset('realistic', nominal)
    truth = nominal.mismatched(mismatch)
    names = list(nominal.joint_names)
    load = os.getloadavg()
    print(
        f'# bench_friction: {os.path.basename(URDF)}, realistic plant; {args.trajectories} x '
        f'{args.duration:g} s at {args.rate:g} Hz, {args.steps} steps, seeds {args.seeds} '
        f'({os.cpu_count()} CPUs, load {load[0]:.2f}; {provenance()})'
    )
    log('generating data')
    data = datasets(args, mismatch)
    models: Dict[str, List] = {}
    log('identifying')
    t0 = time.time()
    models['identified'] = [identify_dataset(nominal, data['train'], holdout=0)[0]]
    log(f'identified in {time.time() - t0:.1f} s')
    train = Dataset.from_arrays(data['train'])
    for variant in args.variants.split(','):
        variant = VARIANTS[int(variant)]
        models[f'delan {variant}'] = []
        for seed in (int(s) for s in args.seeds.split(',')):
            t0 = time.time()
            models[f'delan {variant}'].append(train_delan(train, variant, args, seed))
            log(f'delan {variant} seed {seed}: {time.time() - t0:.0f} s')

    wrist = names.index('wrist_roll')
    print('\n### Held-out torque nMSE (mean over seeds)\n')
    print(f'joints: {", ".join(names)}\n')
    print('| model | speed | nMSE per joint | mean | wrist_roll | friction RMS err, wrist_roll |')
    print('|---|---|---|---:|---:|---:|')
    for name, ms in models.items():
        for sp in SPEEDS:
            d = data[f'{sp:g}x']
            e = np.mean([nmse(m.inverse(d['q'], d['qd'], d['qdd']), d['tau']) for m in ms], 0)
            fe = np.mean([friction_error(m, truth, data['train']['qd']) for m in ms], 0)
            print(
                f'| {name} | {sp:g}x | {fmt(e)} | {e.mean():.2e} | {e[wrist]:.2e} | '
                f'{fe[wrist]:.3f} N m |'
            )
    for name, ms in models.items():
        if name.startswith('delan'):
            fe = np.mean([friction_error(m, truth, data['train']['qd']) for m in ms], 0)
            print(f'\n{name}: friction RMS error per joint [N m]: {fmt(fe)}')
    if not args.tracking:
        return 0
    from delan_control.replay import replay_tracking, true_model

    setup = evaluation_setup('realistic')
    rows = {'nominal': [setup.nominal], **models, 'true plant': [true_model(setup)]}
    print('\n### Demo evaluation loop: RMS tracking error [rad], mean over joints / wrist_roll\n')
    print('| model | 1x mean | 1x wrist_roll | 2x mean | 2x wrist_roll |')
    print('|---|---:|---:|---:|---:|')
    for name, ms in rows.items():
        cells = []
        for sp in SPEEDS:
            rms = np.mean([replay_tracking(setup, m, sp) for m in ms], 0)
            cells += [f'{rms.mean():.4f}', f'{rms[wrist]:.4f}']
        print(f'| {name} | ' + ' | '.join(cells) + ' |', flush=True)
    return 0


if __name__ == '__main__':
    sys.exit(main())
