"""How delan-train's defaults compare with fixed epoch counts, on a small and a larger data set.

Simulated excitation data of one arm (``--urdf``, default the 7-DoF arm) with the README's plant
mismatch; trajectories held out for the test score. For each setting: optimiser steps, wall
seconds, what stopped it, and the held-out torque nMSE (mean and worst joint). The settings:
the plateau default, 300 epochs of cosine decay (the earlier default) and 3,000 epochs.

    python bench/bench_train_defaults.py [--urdf two_link_arm.urdf] [--sizes 2000,20000]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
import torch


def main() -> int:
    from delan_common.robot_model import Mismatch
    from delan_control.datagen import generate_dataset
    from delan_learning.data import Dataset
    from delan_learning.train_config import TrainConfig
    from delan_learning.training import train_model

    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--urdf', default='seven_dof_arm.urdf')
    ap.add_argument('--sizes', default='2000,20000', help='training samples, comma separated')
    ap.add_argument(
        '--settings',
        default='plateau,300,3000',
        help="'plateau' and/or epoch counts (cosine decay)",
    )
    ap.add_argument('--seed', type=int, default=0)
    args = ap.parse_args()
    torch.set_num_threads(1)
    README_MISMATCH = Mismatch(payload_mass=0.6, viscous_scale=2.0, coulomb_scale=2.0)
    rate, duration = 100.0, 5.0
    test = generate_dataset(
        args.urdf,
        trajectories=4,
        duration=duration,
        rate=rate,
        seed=1000 + args.seed,
        mismatch=README_MISMATCH,
    )
    keys = ('q', 'qd', 'qdd', 'tau', 'traj', 'joint_names', 'joint_types')
    print(
        f'# {os.path.basename(args.urdf)}: {len(test["q"][0])} joints; held-out test '
        f'{len(test["q"])} samples'
    )
    print(
        f'{"samples":>8} {"setting":>8} {"steps":>7} {"seconds":>8} {"stop":>11} '
        f'{"test nMSE mean":>15} {"worst":>8}'
    )
    failed = False
    for size in (int(s) for s in args.sizes.split(',')):
        n_traj = max(2, int(round(size / (rate * duration))))
        data = Dataset.from_arrays(
            {
                k: v
                for k, v in generate_dataset(
                    args.urdf,
                    trajectories=n_traj,
                    duration=duration,
                    rate=rate,
                    seed=args.seed,
                    mismatch=README_MISMATCH,
                ).items()
                if k in keys
            }
        )
        for setting in args.settings.split(','):
            cfg = (
                TrainConfig(seed=args.seed)
                if setting == 'plateau'
                else TrainConfig(epochs=int(setting), lr_schedule='cosine', seed=args.seed)
            )
            t0 = time.perf_counter()
            res = train_model(data, 'delan', cfg)
            secs = time.perf_counter() - t0
            with torch.no_grad():
                pred = res.model.inverse(*(torch.as_tensor(test[k]) for k in ('q', 'qd', 'qdd')))
            nmse = np.mean((pred.numpy() - test['tau']) ** 2, 0) / np.var(test['tau'], 0)
            meta = res.metadata['training']
            failed |= not np.all(np.isfinite(nmse))
            print(
                f'{len(data):>8} {setting:>8} {meta["steps"]:>7} {secs:>8.1f} '
                f'{meta["stop_reason"]:>11} {nmse.mean():>15.2e} {nmse.max():>8.2e}',
                flush=True,
            )
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
