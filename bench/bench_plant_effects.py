"""Plant joint effects benchmark: what they cost the simulator, and what identification leaves.

1. Plant stepping at 1 kHz (as ``bench_sim.py``'s plant table: end stops on, a torque that keeps
   the arm moving), the nominal friction against the ``realistic`` preset (Stribeck and
   asymmetric friction, springs, payload, friction x2): CPU microseconds per physics step, best
   and median of repetitions.
2. Rigid-body least-squares identification (``sysid.identify_dataset``, the physically
   consistent estimator the demo uses) on ``datagen`` excitation data of the plant with each
   mismatch (exact accelerations, no noise, the last trajectory held out): held-out torque nMSE
   per joint. ``payload`` (0.6 kg, friction x2) lies in the model's parameter space; the preset
   and each of its effects alone (on top of ``payload``) do not.

Run: ``source env.sh && python bench/bench_plant_effects.py [--quick] [--only step|sysid]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from dataclasses import replace

import numpy as np

from delan_common.robot_model import Mismatch, RobotModel
from delan_control.datagen import generate_dataset
from delan_control.plant import Plant
from delan_control.sysid import identify_dataset

ROBOTS = ('two_link_arm.urdf', 'seven_dof_arm.urdf')
PAYLOAD = Mismatch(payload_mass=0.6, viscous_scale=2.0, coulomb_scale=2.0)


def mismatches(robot: RobotModel) -> dict:
    """``payload``, the preset, and each of the preset's effects alone on top of ``payload``."""
    full = Mismatch.from_preset('realistic', robot)
    return {
        'payload': PAYLOAD,
        'realistic': full,
        '+ Stribeck': replace(
            PAYLOAD,
            stribeck_static_ratio=full.stribeck_static_ratio,
            stribeck_velocity=full.stribeck_velocity,
        ),
        '+ asymmetry': replace(PAYLOAD, coulomb_asymmetry=full.coulomb_asymmetry),
        '+ spring': replace(
            PAYLOAD, spring_stiffness=full.spring_stiffness, spring_offset=full.spring_offset
        ),
    }


def bench_step(quick: bool) -> None:
    steps, repeat = (200, 10) if quick else (500, 30)
    print('\n### Plant at 1 kHz physics, CPU us per step (best / median)\n')
    print('| robot | integrator | nominal friction | realistic preset |')
    print('|---|---|---:|---:|')
    for urdf in ROBOTS:
        for integrator in ('rk4', 'semi_implicit_euler'):
            cells = []
            for mm in (Mismatch(), Mismatch(preset='realistic')):
                plant = Plant(urdf, mm, integrator=integrator)
                tau = plant.truth.gravity(np.zeros(plant.n)) * 0.5 + 0.3  # keeps it moving
                plant.reset(np.full(plant.n, 0.2), np.full(plant.n, 0.5))
                cpu = []
                for _ in range(repeat):
                    c0 = time.thread_time()
                    plant.step(tau, steps)
                    cpu.append((time.thread_time() - c0) / steps * 1e6)
                cells.append(f'{min(cpu):.1f} / {statistics.median(cpu):.1f}')
            print(f'| {urdf.split(".")[0]} | {integrator} | {cells[0]} | {cells[1]} |')


def bench_sysid(quick: bool) -> None:
    trajectories, duration = (3, 4.0) if quick else (4, 8.0)
    print(
        f'\n### Rigid-body identification, held-out torque nMSE per joint ({trajectories} x '
        f'{duration:g} s at 500 Hz, last trajectory held out)\n'
    )
    print('| robot | plant mismatch | nMSE per joint | worst |')
    print('|---|---|---|---:|')
    for urdf in ROBOTS:
        nominal = RobotModel(urdf)
        for name, mm in mismatches(nominal).items():
            data = generate_dataset(
                urdf, trajectories=trajectories, duration=duration, seed=3, mismatch=mm
            )
            _, report = identify_dataset(nominal, data)
            e = list(report['nmse_test'].values())
            print(
                f'| {urdf.split(".")[0]} | {name} | '
                + ' '.join(f'{x:.1e}' for x in e)
                + f' | {max(e):.1e} |'
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--quick', action='store_true', help='fewer repetitions, shorter data')
    ap.add_argument(
        '--only',
        choices=('step', 'sysid'),
        action='append',
        help='run only these parts (repeatable)',
    )
    args = ap.parse_args()
    parts = args.only or ['step', 'sysid']
    load = os.getloadavg()
    print(
        f'# bench_plant_effects ({os.cpu_count()} CPUs, load average {load[0]:.2f} '
        f'{load[1]:.2f} {load[2]:.2f})'
    )
    for part, fn in (('step', bench_step), ('sysid', bench_sysid)):
        if part in parts:
            fn(args.quick)


if __name__ == '__main__':
    main()
