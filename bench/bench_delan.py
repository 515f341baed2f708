"""DeLaN benchmark: training throughput, batch-1 inverse-dynamics latency, 2-link accuracy.

Prints tables; not a test. Run ``python bench/bench_delan.py [--quick] [--threads N]``
(``--compile`` also times a ``torch.compile``d training step; compiling takes about a minute on
2 cores, so it is off by default). Timings are best-of-repeats wall clock; the 1-minute load
average is printed because on a shared machine other processes inflate every number.

Reference point: the reference DeLaN implementation trains ~17,500 samples/s (2-DoF, width 64,
2 hidden layers, batch 512) on this machine; the target is 5x that.
"""

from __future__ import annotations

import argparse
import glob
import os
import sys
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, 'delan_learning'))

from delan_common.dynamics import friction_torque  # noqa: E402
from delan_common.excitation import random_fourier_trajectory  # noqa: E402
from delan_learning.data import Dataset  # noqa: E402
from delan_learning.lagrangian import DelanModel  # noqa: E402
from delan_learning.mlp import MlpInverseModel  # noqa: E402
from delan_learning.numpy_delan import NumpyDelan  # noqa: E402
from delan_learning.training import Batch, TorqueNormalizer, TrainConfig, Trainer, train_model  # noqa: E402

REFERENCE_SAMPLES_PER_S = 17_500.0
TWO_LINK_URDF = os.path.join(ROOT, 'delan_bringup', 'urdf', 'two_link_arm.urdf')


def panda_urdf() -> str:
    """example-robot-data's panda.urdf (its Python module is optional, the data are not)."""
    import pinocchio

    base = os.path.dirname(pinocchio.__file__)
    hits = glob.glob(
        os.path.join(
            base,
            '..',
            '..',
            '..',
            '..',
            'share',
            'example-robot-data',
            'robots',
            'panda_description',
            'urdf',
            'panda.urdf',
        )
    )
    if not hits:
        raise FileNotFoundError('panda.urdf of example-robot-data not found')
    return os.path.normpath(hits[0])


def pinocchio_arm(urdf, keep: int):
    """Pinocchio model (``urdf``, or the panda when None) with only the first ``keep`` joints
    free, the rest (the panda's fingers) locked at their neutral position."""
    import pinocchio as pin

    try:
        if urdf is None:
            import example_robot_data

            model = example_robot_data.load('panda').model
        else:
            model = pin.buildModelFromUrdf(urdf)
    except ImportError:
        model = pin.buildModelFromUrdf(panda_urdf())
    lock = list(range(keep + 1, model.njoints))
    if lock:
        model = pin.buildReducedModel(model, lock, pin.neutral(model))
    return pin, model, model.createData()


def fmt_rate(x: float) -> str:
    return f'{x:,.0f}'


def time_steps(step, n_steps: int, repeats: int) -> float:
    """Best seconds per call over ``repeats`` runs of ``n_steps`` calls."""
    best = float('inf')
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(n_steps):
            step()
        best = min(best, (time.perf_counter() - t0) / n_steps)
    return best


def throughput(args) -> list:
    rows = []
    B = 512
    for n in (2, 7):
        rng = torch.Generator().manual_seed(0)
        batch = Batch(*(torch.randn(B, n, generator=rng) for _ in range(4)))
        norm = TorqueNormalizer(np.zeros(n), np.ones(n))
        variants = [
            ('DeLaN (separate H/V nets, default)', lambda: DelanModel(['revolute'] * n)),
            ('DeLaN (shared trunk)', lambda: DelanModel(['revolute'] * n, shared_trunk=True)),
            ('MLP baseline', lambda: MlpInverseModel(['revolute'] * n)),
        ]
        variants.append(
            (f'DeLaN (default) with {args.threads2} threads', lambda: DelanModel(['revolute'] * n))
        )
        for name, make in variants:
            torch.set_num_threads(args.threads2 if 'threads' in name else args.threads)
            torch.manual_seed(0)
            tr = Trainer(make(), TrainConfig(batch_size=B), norm)
            for _ in range(args.warmup):
                tr.step(batch)
            dt = time_steps(lambda: tr.step(batch), args.steps, args.repeats)
            rows.append((f'{n}-DoF', name, B / dt, dt * 1e3))
        torch.set_num_threads(args.threads)
        if args.compile and n == 2:
            torch.manual_seed(0)
            m = DelanModel(['revolute'] * n)
            tr = Trainer(m, TrainConfig(batch_size=B), norm)
            tr.model.forward = torch.compile(tr.model.forward)
            t0 = time.perf_counter()
            tr.step(batch)
            compile_s = time.perf_counter() - t0
            for _ in range(args.warmup):
                tr.step(batch)
            dt = time_steps(lambda: tr.step(batch), args.steps, args.repeats)
            rows.append(
                (f'{n}-DoF', f'DeLaN torch.compile (compile {compile_s:.0f} s)', B / dt, dt * 1e3)
            )
    return rows


def percentiles(fn, n_calls: int):
    for _ in range(200):
        fn()
    ts = np.empty(n_calls)
    for i in range(n_calls):
        t0 = time.perf_counter()
        fn()
        ts[i] = time.perf_counter() - t0
    return np.percentile(ts, 50) * 1e6, np.percentile(ts, 99) * 1e6


def latency(args) -> list:
    rows = []
    for n, label, urdf in (
        (2, '2-DoF (two_link_arm)', TWO_LINK_URDF),
        (7, '7-DoF (panda arm)', None),
    ):
        torch.manual_seed(0)
        m = DelanModel(['revolute'] * n).double().eval()
        with torch.no_grad():  # trained-looking scales; latency does not depend on values
            m.h_scale.fill_(0.5)
            m.v_scale.fill_(5.0)
        rng = np.random.default_rng(0)
        q, qd, qdd = (rng.normal(size=n) for _ in range(3))
        tq, tqd, tqdd = (torch.as_tensor(x)[None] for x in (q, qd, qdd))
        m32 = DelanModel(['revolute'] * n).float().eval()
        m32.load_state_dict({k: v.float() for k, v in m.state_dict().items()})
        fq, fqd, fqdd = (x.float() for x in (tq, tqd, tqdd))

        def torch64():
            with torch.no_grad():
                return m.inverse(tq, tqd, tqdd)

        def torch32():
            with torch.no_grad():
                return m32.inverse(fq, fqd, fqdd)

        fast = NumpyDelan(m)
        fast_np = NumpyDelan(m, use_c=False)
        try:
            pin, pm, pd = pinocchio_arm(urdf, n)
            pv, pc = np.array(pm.damping), np.array(pm.friction)

            def rnea():
                return pin.rnea(pm, pd, q, qd, qdd) + friction_torque(qd, pv, pc)

            def rnea_only():
                return pin.rnea(pm, pd, q, qd, qdd)
        except Exception as err:  # no panda model: say so, keep the rest
            print(f'(pinocchio {label}: {err})')
            rnea = rnea_only = None
        for name, fn in (
            ('DeLaN torch float64', torch64),
            ('DeLaN torch float32', torch32),
            (f'NumpyDelan ({fast.backend} kernel)', lambda: fast.inverse(q, qd, qdd)),
            ('NumpyDelan (numpy only)', lambda: fast_np.inverse(q, qd, qdd)),
            ('Pinocchio RNEA + friction', rnea),
            ('Pinocchio RNEA alone', rnea_only),
        ):
            if fn is None:
                continue
            p50, p99 = percentiles(fn, args.calls)
            rows.append((label, name, p50, p99))
    return rows


def accuracy(args) -> list:
    """Train on Pinocchio data of the 2-link arm, score on unseen trajectories."""
    import pinocchio as pin

    pm = pin.buildModelFromUrdf(TWO_LINK_URDF)
    pd = pm.createData()
    visc, coul = np.array(pm.damping), np.array(pm.friction)

    def make(seeds, speed=1.0):
        parts = []
        for k, seed in enumerate(seeds):
            tr = random_fourier_trajectory(
                pm.lowerPositionLimit,
                pm.upperPositionLimit,
                pm.velocityLimit,
                seed=seed,
                velocity_fraction=0.5,
            ).at_speed(speed)
            t = np.arange(0.0, 10.0 / speed, 0.01)
            q, qd, qdd = tr.sample(t)
            tau = np.stack([pin.rnea(pm, pd, a, b, c) for a, b, c in zip(q, qd, qdd)])
            parts.append((q, qd, qdd, tau + friction_torque(qd, visc, coul), np.full(len(t), k)))
        q, qd, qdd, tau, ids = (np.concatenate(x) for x in zip(*parts))
        return {
            'q': q,
            'qd': qd,
            'qdd': qdd,
            'tau': tau,
            'traj': ids,
            'joint_names': np.array(['shoulder', 'elbow']),
        }

    train = Dataset.from_arrays(make(range(12)))
    test, fast = make([100, 101, 102]), make([100, 101, 102], speed=2.0)
    rows = []
    for kind, epochs in (('delan', 150), ('mlp', 300)):
        cfg = TrainConfig(
            epochs=epochs, lr=1e-2, patience=0, time_budget=args.budget, lr_schedule='cosine'
        )
        t0 = time.perf_counter()
        res = train_model(train, kind, cfg)
        secs = time.perf_counter() - t0
        m = res.model
        with torch.no_grad():

            def pred(d):
                return m.inverse(*(torch.as_tensor(d[k]) for k in ('q', 'qd', 'qdd'))).numpy()

            nmse = np.mean((pred(test) - test['tau']) ** 2, 0) / np.var(test['tau'], 0)
            rms2x = float(np.sqrt(np.mean((pred(fast) - fast['tau']) ** 2)))
        H_err = g_err = float('nan')
        if kind == 'delan':
            npm = NumpyDelan(m)
            Ht = np.stack([pin.crba(pm, pd, x).copy() for x in test['q']])
            Ht = np.triu(Ht) + np.swapaxes(np.triu(Ht, 1), -1, -2)
            gt = np.stack([pin.computeGeneralizedGravity(pm, pd, x).copy() for x in test['q']])
            H_err = np.linalg.norm(npm.mass_matrix(test['q']) - Ht) / np.linalg.norm(Ht)
            g_err = np.linalg.norm(npm.gravity(test['q']) - gt) / np.linalg.norm(gt)
        rows.append((kind, len(res.history), secs, nmse.max(), H_err, g_err, rms2x))
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        '--threads',
        type=int,
        default=1,
        help='torch threads (1: at batch 512 the ops are too small to split well '
        'over 2 cores, and the second core stays free)',
    )
    p.add_argument('--threads2', type=int, default=2, help='threads of the comparison row')
    p.add_argument('--quick', action='store_true', help='fewer repeats, shorter training')
    p.add_argument('--compile', action='store_true', help='also time torch.compile')
    p.add_argument('--no-accuracy', action='store_true')
    args = p.parse_args()
    args.warmup, args.steps, args.repeats = (10, 20, 2) if args.quick else (20, 60, 4)
    args.calls = 1000 if args.quick else 5000
    args.budget = 10.0 if args.quick else 40.0
    torch.set_num_threads(args.threads)
    print(
        f'torch {torch.__version__}, {torch.get_num_threads()} thread(s), numpy '
        f'{np.__version__}, load average {os.getloadavg()[0]:.2f} '
        f'on {os.cpu_count()} CPUs'
    )

    print('\nTraining throughput (float32, width 64, 2 hidden layers, batch 512, AdamW step)')
    print(f'{"robot":7} {"model":44} {"samples/s":>11} {"ms/step":>8} {"x reference":>11}')
    for robot, name, rate, ms in throughput(args):
        print(
            f'{robot:7} {name:44} {fmt_rate(rate):>11} {ms:8.2f} '
            f'{rate / REFERENCE_SAMPLES_PER_S:10.1f}x'
        )
    print(
        f'{"":7} {"reference DeLaN (given), target = 5x":44} '
        f'{fmt_rate(REFERENCE_SAMPLES_PER_S):>11} {"":8} {"1.0x":>11}'
    )

    print('\nBatch-1 inverse dynamics latency [us] (target: p50 <= 50 us for 7-DoF)')
    print(f'{"robot":22} {"implementation":36} {"p50":>8} {"p99":>8}')
    for robot, name, p50, p99 in latency(args):
        print(f'{robot:22} {name:36} {p50:8.1f} {p99:8.1f}')

    if not args.no_accuracy:
        print(
            f'\n2-link arm accuracy (Pinocchio ground truth, 12 training trajectories, '
            f'3 unseen test trajectories; time budget {args.budget:.0f} s each)'
        )
        print(
            f'{"model":6} {"epochs":>6} {"train s":>8} {"max nMSE":>10} {"H err":>8} '
            f'{"g err":>8} {"RMS tau @2x speed":>18}'
        )
        for kind, epochs, secs, nmse, H_err, g_err, rms2x in accuracy(args):
            print(
                f'{kind:6} {epochs:6d} {secs:8.1f} {nmse:10.2e} {H_err:8.4f} {g_err:8.4f} '
                f'{rms2x:15.4f} Nm'
            )
    print(f'\nload average at the end {os.getloadavg()[0]:.2f}')
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
