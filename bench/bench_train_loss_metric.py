"""What delan-train's ``--loss-metric`` changes: the same data trained to the plateau with each
metric, scored on held-out excitations by the torque nMSE and by the acceleration error it
causes in the true plant (``H_true^-1 e``, what a computed-torque loop turns into tracking
error).

Simulated excitation data of one arm (``--urdf``, default the 7-DoF arm) with a payload the
URDF lacks; one ``delan-train --urdf`` process per metric, side by side (one thread each).

    python bench/bench_train_loss_metric.py [--urdf panda.urdf] [--metrics torque,both]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np


def main() -> int:
    import torch

    from delan_common.robot_model import Mismatch, RobotModel
    from delan_control.datagen import generate_dataset
    from delan_learning.checkpoint import load_model
    from delan_learning.data import load_npz, save_npz

    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--urdf', default='seven_dof_arm.urdf')
    ap.add_argument(
        '--metrics', default='torque,both', help='--loss-metric values, comma separated'
    )
    ap.add_argument('--trajectories', type=int, default=6, help='10 s excitations to train on')
    ap.add_argument('--max-steps', type=int, default=20000)
    ap.add_argument('--seed', type=int, default=0)
    args = ap.parse_args()
    mismatch = Mismatch(payload_mass=0.5)
    keys = ('q', 'qd', 'qdd', 'tau', 'traj', 't', 'joint_names', 'joint_types')
    tmp = tempfile.mkdtemp(prefix='bench_loss_metric_')
    for name, seed, n in (('train', args.seed, args.trajectories), ('test', 1000 + args.seed, 2)):
        d = generate_dataset(
            args.urdf, trajectories=n, duration=10.0, rate=100.0, seed=seed, mismatch=mismatch
        )
        save_npz(os.path.join(tmp, f'{name}.npz'), {k: d[k] for k in keys if k in d})
    metrics = args.metrics.split(',')
    procs = {
        m: subprocess.Popen(
            ['delan-train', '--data', os.path.join(tmp, 'train.npz'), '--urdf', args.urdf]
            + ['--loss-metric', m, '--out', os.path.join(tmp, f'{m}.pt'), '--quiet']
            + ['--max-steps', str(args.max_steps), '--seed', str(args.seed)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for m in metrics
    }
    summaries = {}
    for m, proc in procs.items():
        out, _ = proc.communicate()
        if proc.returncode != 0:
            print(f'delan-train --loss-metric {m} failed (exit {proc.returncode})')
            return 1
        summaries[m] = json.loads(out)
    test = load_npz(os.path.join(tmp, 'test.npz'))
    w = RobotModel(args.urdf, mismatch).acceleration_metric(test.q)
    print(
        f'# {os.path.basename(args.urdf)}: {test.n_dof} joints, payload {mismatch.payload_mass} '
        f'kg; {args.trajectories} x 10 s to train on, 2 x 10 s held out'
    )
    print(
        f'{"metric":>8} {"steps":>6} {"seconds":>8} {"stop":>9} {"test nMSE mean":>15} '
        f'{"worst":>7} {"accel. error RMS":>17}  per joint [rad/s^2]'
    )
    for m in metrics:
        model, _ = load_model(os.path.join(tmp, f'{m}.pt'))
        with torch.no_grad():
            pred = model.inverse(*(torch.as_tensor(a) for a in (test.q, test.qd, test.qdd)))
        err = pred.numpy() - test.tau
        nmse = np.mean(err**2, axis=0) / np.var(test.tau, axis=0)
        acc = np.sqrt(np.mean(np.einsum('bij,bj->bi', w, err) ** 2, axis=0))
        s = summaries[m]
        print(
            f'{m:>8} {s["steps"]:>6} {s["train_seconds"]:>8.1f} {s["stop_reason"]:>9} '
            f'{nmse.mean():>15.4f} {nmse.max():>7.4f} {np.sqrt(np.mean(acc**2)):>17.1f}  '
            f'{np.round(acc, 1).tolist()}'
        )
    return 0


if __name__ == '__main__':
    sys.exit(main())
