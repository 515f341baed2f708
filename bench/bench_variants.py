"""Structured DeLaN against the variants Lutter & Peters (2021) compare it with, on the same data.

Models (``--kinds``): structured DeLaN (``delan``), one MLP for the Lagrangian
(``blackbox_lagrangian``), DeLaN's networks in Hamiltonian form (``hamiltonian``) and the
black-box torque MLP (``mlp``), each trained with the inverse (torque) loss for ``--steps``
optimiser steps (cosine learning rate) on 1x-speed trajectories of the simulated arm, then tested
on unseen trajectories at 1x speed and at 2x speed (twice the velocities, four times the
accelerations: extrapolation). Data as ``delan-gen-data`` makes them (Fourier excitation tracked
on the plant, torque held over each tick, true accelerations, no noise, no model mismatch).

Columns per test speed:

* torque nMSE: mean over joints of MSE / Var(tau) of the inverse model;
* qdd nMSE: the same of the forward model's acceleration at the recorded states and torques (what
  a rollout integrates; large where a learned H is nearly singular);
* q RMS @N: RMS over windows and joints of the position error of the forward model rolled out
  ``--horizon`` steps (RK4) under the recorded torques; windows whose rollout diverged (a
  non-finite state) are left out of the RMS and counted in brackets;
* E drift: the model's own energy (``T + V``; ``qd . dL/dqd - L`` for the black-box Lagrangian)
  in zero-torque, frictionless rollouts (``tau = tau_f(qd)`` cancels the learned friction) of
  ``--energy-steps`` RK4 steps of ``--energy-dt`` from ``--energy-starts`` test states: the
  median over starts of ``max_t |E(t) - E(0)|``, over the spread of ``E`` on the test states,
  diverged starts in brackets. Exact dynamics keep it at 0 up to integration error; n/a for the
  MLP, which has no energy.

The 'true plant' row is the floor of the rollout metric (the simulator's own model: only the
integration differs). The paper's qualitative result: the structured models extrapolate to
faster motion where the MLP does not.

    python bench/bench_variants.py                                   # both arms, ~10 min
    python bench/bench_variants.py --robots two_link --steps 500     # a quick look
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np
import torch
from reference_models import TruePlant

from delan_common.robot_model import RobotModel
from delan_control.datagen import generate_dataset
from delan_control.replay import SPEEDS
from delan_learning import rollout as ro
from delan_learning.data import Dataset
from delan_learning.models import build_model
from delan_learning.training import TorqueNormalizer, TrainConfig, Trainer

URDF_DIR = os.path.join(os.path.dirname(__file__), '..', 'delan_bringup', 'urdf')
ROBOTS = {'two_link': 'two_link_arm.urdf', 'seven_dof': 'seven_dof_arm.urdf'}
KINDS = ('delan', 'blackbox_lagrangian', 'hamiltonian', 'mlp')


class Frictionless(torch.nn.Module):
    """A model's own dynamics under zero torque with its learned friction cancelled."""

    def __init__(self, model):
        super().__init__()
        self.m = model

    def forward_dynamics(self, q, qd, tau):
        f = self.m.friction(qd) if getattr(self.m, 'use_friction', False) else 0.0
        return self.m.forward_dynamics(q, qd, f + 0.0 * tau)


def energy_of(model, q, qd):
    """The model's energy ``(B,)``, or None for a model without one (the MLP)."""
    if hasattr(model, 'total_energy'):
        return model.total_energy(q, qd)
    if model.kind == 'delan':
        T, V = model.energy(q, qd)
        return T + V
    return None


def torque_nmse(model, test: dict) -> float:
    q, qd, qdd = (torch.as_tensor(test[k]) for k in ('q', 'qd', 'qdd'))
    with torch.no_grad():
        err = model.inverse(q, qd, qdd).numpy() - test['tau']
    return float(np.mean(np.mean(err**2, 0) / np.var(test['tau'], 0)))


def robust(fn, n: int, chunk: int = 8):
    """``fn(sl)`` over ``range(n)`` at once, or chunk by chunk when a chunk raises (DeLaN's
    Cholesky meets a non-finite state of a diverged rollout): failed chunks are NaN."""
    try:
        return fn(slice(0, n))
    except RuntimeError:
        parts = []
        for i in range(0, n, chunk):
            sl = slice(i, min(i + chunk, n))
            try:
                parts.append(fn(sl))
            except RuntimeError:
                shape = fn.shape(sl)
                parts.append(torch.full(shape, float('nan'), dtype=torch.float64))
        return torch.cat(parts)


def forward_nmse(model, test: dict) -> float:
    """Mean over joints of MSE / Var(qdd) of the forward model at the recorded states: what a
    rollout integrates, without the integration."""
    q, qd, tau = (torch.as_tensor(test[k]) for k in ('q', 'qd', 'tau'))

    def qdd_of(sl):
        with torch.no_grad():
            return model.forward_dynamics(q[sl], qd[sl], tau[sl])

    qdd_of.shape = lambda sl: (len(q[sl]), q.shape[1])
    err = robust(qdd_of, len(q), chunk=256).numpy() - test['qdd']
    return float(np.nanmean(np.nanmean(err**2, 0) / np.var(test['qdd'], 0)))


def rollout_rms(model, test: dict, horizon: int, stride: int) -> tuple:
    """``(RMS position error at the horizon over finite windows [rad], diverged, windows)``."""
    q, qd, tau = (torch.as_tensor(test[k]) for k in ('q', 'qd', 'tau'))
    idx, dt = ro.window_index(test['traj'], test['t'], horizon)
    idx, dt = idx[::stride], dt[::stride]

    def last_error(sl):
        eq, _ = ro.rollout_errors(model, q, qd, tau, idx[sl], dt[sl], 'rk4', 'start')
        return eq[:, -1]

    last_error.shape = lambda sl: (len(idx[sl]), q.shape[1])
    last = robust(last_error, len(idx)).numpy()
    ok = np.isfinite(last).all(1) & (np.abs(last).max(1) < 1e3)
    rms = float(np.sqrt(np.mean(last[ok] ** 2))) if ok.any() else float('nan')
    return rms, int((~ok).sum()), len(idx)


def energy_drift(model, test: dict, starts: int, steps: int, dt: float):
    """``(median relative drift, diverged starts, starts)``, or None without an energy."""
    idx = np.linspace(0, len(test['q']) - 1, starts).astype(int)
    q0, qd0 = (torch.as_tensor(test[k][idx]) for k in ('q', 'qd'))
    with torch.no_grad():
        E_test = energy_of(model, torch.as_tensor(test['q']), torch.as_tensor(test['qd']))
    if E_test is None:
        return None

    @torch.no_grad()
    def drift_of(sl):
        b = len(q0[sl])
        u = torch.zeros(b, steps, q0.shape[1], dtype=q0.dtype)
        q, qd = ro.rollout(Frictionless(model), q0[sl], qd0[sl], u, torch.full((b, steps), dt))
        E = energy_of(model, q.flatten(0, 1), qd.flatten(0, 1)).view(b, steps)
        return (E - energy_of(model, q0[sl], qd0[sl])[:, None]).abs().max(1).values

    drift_of.shape = lambda sl: (len(q0[sl]),)
    drift = (robust(drift_of, starts, chunk=1) / E_test.std()).numpy()
    ok = np.isfinite(drift)
    return (float(np.median(drift[ok])) if ok.any() else float('nan')), int((~ok).sum()), starts


def train(kind: str, data: Dataset, args) -> tuple:
    torch.manual_seed(args.seed)
    cfg = TrainConfig(batch_size=args.batch, lr=args.lr, seed=args.seed)
    model = build_model(kind, data.joint_types, width=args.width)
    trainer = Trainer(model, cfg, TorqueNormalizer.from_torques(data.tau))
    t0 = time.perf_counter()
    done = 0
    while done < args.steps:  # cosine over the run, in rounds of 100 steps
        n = min(100, args.steps - done)
        lr = cfg.lr * (0.01 + 0.99 * 0.5 * (1 + np.cos(np.pi * done / args.steps)))
        trainer.train_steps(data, n, lr=lr)
        done += n
    return trainer.model.double().eval(), time.perf_counter() - t0


def fmt(value, scale=1.0, diverged=0, total=0, digits=3) -> str:
    if value is None:
        return 'n/a'
    text = 'diverged' if not np.isfinite(value) else f'{value * scale:.{digits}g}'
    return text + (f' ({diverged}/{total} div.)' if diverged and np.isfinite(value) else '')


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--robots', nargs='+', default=list(ROBOTS), choices=list(ROBOTS))
    p.add_argument('--kinds', nargs='+', default=list(KINDS), choices=list(KINDS))
    p.add_argument('--steps', type=int, default=3000, help='optimiser steps per model')
    p.add_argument('--trajectories', type=int, default=8, help='training trajectories')
    p.add_argument('--test-trajectories', type=int, default=2, help='per test speed')
    p.add_argument('--duration', type=float, default=10.0, help='seconds per trajectory')
    p.add_argument('--rate', type=float, default=200.0, help='sample rate [Hz]')
    p.add_argument('--horizon', type=int, default=25, help='rollout steps of the q metric')
    p.add_argument('--stride', type=int, default=20, help='every k-th rollout window')
    p.add_argument('--energy-starts', type=int, default=32)
    p.add_argument('--energy-steps', type=int, default=250)
    p.add_argument('--energy-dt', type=float, default=2e-3, help='[s]')
    p.add_argument('--batch', type=int, default=256)
    p.add_argument('--lr', type=float, default=5e-3)
    p.add_argument('--width', type=int, default=64)
    p.add_argument('--seed', type=int, default=0)
    p.add_argument('--json', metavar='FILE', help='also write the numbers here')
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    t_start = time.perf_counter()
    results = []
    for robot in args.robots:
        urdf = os.path.normpath(os.path.join(URDF_DIR, ROBOTS[robot]))
        gen = dict(duration=args.duration, rate=args.rate)
        data = Dataset.from_arrays(
            generate_dataset(urdf, trajectories=args.trajectories, seed=args.seed, **gen)
        )
        tests = {
            s: generate_dataset(
                urdf, trajectories=args.test_trajectories, seed=args.seed + 100, speed=s, **gen
            )
            for s in SPEEDS
        }
        plant = TruePlant(RobotModel(urdf))
        models = [('true plant', plant, 0.0)]
        for kind in args.kinds:
            sys.stderr.write(f'{robot}: training {kind} ...\n')
            models.append((kind, *train(kind, data, args)))
        for name, model, secs in models:
            res = {'robot': robot, 'model': name, 'train_s': secs}
            for s, test in tests.items():
                res[s] = {
                    'nmse': 0.0 if name == 'true plant' else torque_nmse(model, test),
                    'qdd_nmse': forward_nmse(model, test),
                    'rollout': rollout_rms(model, test, args.horizon, args.stride),
                    'energy': None
                    if name == 'true plant'
                    else energy_drift(
                        model, test, args.energy_starts, args.energy_steps, args.energy_dt
                    ),
                }
            sys.stderr.write(f'{robot} {name}: {res}\n')
            results.append(res)
    h_ms = 1000.0 * args.horizon / args.rate
    print(
        f'\n{args.trajectories} x {args.duration:g} s training trajectories at 1x speed, '
        f'{args.rate:g} Hz; {args.steps} steps (batch {args.batch}, width {args.width}, '
        f'seed {args.seed}); tested on {args.test_trajectories} unseen trajectories at 1x and '
        f'2x speed. q RMS at {args.horizon} steps ({h_ms:.0f} ms), every {args.stride}th '
        f'window; E drift over {args.energy_steps} x {1e3 * args.energy_dt:g} ms from '
        f'{args.energy_starts} states. Total {time.perf_counter() - t_start:.0f} s.\n'
    )
    H = args.horizon
    print(
        f'| robot | model | train [s] | torque nMSE 1x | torque nMSE 2x | qdd nMSE 1x | '
        f'qdd nMSE 2x | q RMS @{H} 1x [mrad] | q RMS @{H} 2x [mrad] | E drift 1x | E drift 2x |'
    )
    print('|---|---|---|---|---|---|---|---|---|---|---|')
    for r in results:
        cells = [r['robot'], r['model'], f'{r["train_s"]:.0f}']
        cells += [fmt(r[s]['nmse']) for s in SPEEDS]
        cells += [fmt(r[s]['qdd_nmse']) for s in SPEEDS]
        for s in SPEEDS:
            rms, bad, total = r[s]['rollout']
            cells.append(fmt(rms, 1e3, bad, total))
        for s in SPEEDS:
            e = r[s]['energy']
            if r['model'] == 'true plant':
                cells.append('-')
            else:
                cells.append('n/a' if e is None else fmt(e[0], 1.0, e[1], e[2], 2))
        print('| ' + ' | '.join(cells) + ' |')
    if args.json:
        with open(args.json, 'w') as f:
            json.dump({'args': vars(args), 'results': results}, f, indent=1, default=str)
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
