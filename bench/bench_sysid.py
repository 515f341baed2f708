"""Identification benchmark: the physically consistent estimator against the unconstrained one.

Per robot (2-link, 7-DoF, UR5 and Panda of example-robot-data) and data regime, simulated
excitation data of a mismatched plant (``datagen``: payload on the last link, other friction;
the mismatch lies in the model's parameter space), the last trajectory held out:

* ``full``: datagen's excitation (3 x 6 s at 500 Hz, exact accelerations);
* ``long``: 4 x 10 s, 1 % measurement noise (15,000 training samples: the speed target);
* ``short``: what an online demo records -- 2 x 2 s, velocities within 0.2 x the limits, 1 %
  measurement noise on q, qd, qdd, tau;
* ``fd``: 2 x 4 s at 100 Hz, velocities within 0.3 x the limits, accelerations by finite
  differences of the sampled velocities.

Columns: samples (train), seconds of ``identify`` (best of ``--repeat``; wall and process CPU,
the latter less disturbed by other load on the machine), held-out torque nMSE
(worst joint), smallest mass-matrix eigenvalue over the training data and over 50 random
configurations within the joint limits, bodies whose pseudo-inertia is positive definite, the
objective (weighted train misfit + ridge), and the RMS tracking error of computed-torque control
built on the identified model, run on the true plant (500 Hz, bandwidth 60 rad/s as datagen's,
6 s of a fresh excitation trajectory; friction fed forward on the reference velocity, as
``datagen`` does; ``diverged`` past 1 rad); the row ``true parameters`` is that loop on the
plant's own parameters (what Coulomb friction near velocity reversals leaves: ~0.02 rad on the
light 7-DoF wrist roll). ``--solvers`` adds the log-Cholesky trust-region solver of the
consistent estimator (slow to converge; see ``delan_control.sysid``).

Run: ``source env.sh && python bench/bench_sysid.py [--quick] [--robot 7dof] [--solvers]``.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from delan_common.robot_model import Mismatch, RobotDescriptionError, RobotModel, find_urdf
from delan_control.datagen import generate_dataset
from delan_control.evaluation import simulated_tracking_rms
from delan_control.sysid import identify, nmse

UR5 = find_urdf('ur5_joint_limited_robot.urdf')
ROBOTS = {
    '2link': (
        'two_link_arm.urdf',
        Mismatch(mass_scale=[1.2, 0.9], payload_mass=0.5, coulomb_scale=1.5, viscous_scale=0.6),
    ),
    '7dof': (
        'seven_dof_arm.urdf',
        Mismatch(
            mass_scale=1.15,
            inertia_scale=1.2,
            payload_mass=0.8,
            coulomb_scale=1.4,
            viscous_scale=0.7,
        ),
    ),
    # the UR5 URDF has no friction: the plant gets some
    'ur5': (
        UR5,
        Mismatch(
            payload_mass=1.0,
            viscous=[0.5, 0.5, 0.3, 0.1, 0.1, 0.05],
            coulomb=[1.0, 1.0, 0.6, 0.2, 0.2, 0.1],
        ),
    ),
    # fingers locked; needs robot_model's joint selection (skipped where it does not load)
    'panda': (
        find_urdf('panda.urdf'),
        Mismatch(payload_mass=0.5, viscous=[0.3] * 7, coulomb=[0.5] * 7),
    ),
}
REGIMES = {
    'full': dict(trajectories=3, duration=6.0),
    'long': dict(trajectories=4, duration=10.0, noise=0.01),
    'short': dict(trajectories=2, duration=2.0, velocity_fraction=0.2, noise=0.01),
    'fd': dict(
        trajectories=2,
        duration=4.0,
        velocity_fraction=0.3,
        rate=100.0,
        qdd_source='finite_difference',
    ),
}


def random_configurations(robot: RobotModel, count: int, seed: int = 0) -> np.ndarray:
    spec = robot.spec
    lo = np.where(np.isfinite(spec.lower), spec.lower, -np.pi)
    hi = np.where(np.isfinite(spec.upper), spec.upper, np.pi)
    return np.random.default_rng(seed).uniform(lo, hi, size=(count, robot.n))


def bench_robot(key: str, regimes, solvers, repeat: int, track: float):
    urdf, mismatch = ROBOTS[key]
    try:
        nominal = RobotModel(urdf)
    except RobotDescriptionError as exc:
        print(f'\n### {key}: skipped ({exc})')
        return
    Q = random_configurations(nominal, 50)
    rows = []
    if track > 0:
        rows.append(
            (
                '-',
                None,
                'true parameters',
                None,
                None,
                None,
                None,
                nominal.n,
                nominal.n,
                None,
                None,
                simulated_tracking_rms(nominal.mismatched(mismatch), nominal, mismatch, track),
            )
        )
    for regime in regimes:
        d = generate_dataset(urdf, mismatch=mismatch, seed=3, **REGIMES[regime])
        test = d['traj'] == d['traj'].max()
        train = ~test
        arrays = [d[k][train] for k in ('q', 'qd', 'qdd', 'tau')]
        for label, kw in [('unconstrained', dict(consistent=False))] + [
            (
                f'consistent ({s})' if len(solvers) > 1 else 'consistent',
                dict(consistent=True, solver=s),
            )
            for s in solvers
        ]:
            best = cpu = np.inf
            for _ in range(repeat):
                t0, c0 = time.perf_counter(), time.process_time()
                model = identify(nominal, *arrays, **kw)
                best = min(best, time.perf_counter() - t0)
                cpu = min(cpu, time.process_time() - c0)
            err = float(
                nmse(
                    model.inverse(d['q'][test], d['qd'][test], d['qdd'][test]), d['tau'][test]
                ).max()
            )
            eig_rand = float(np.linalg.eigvalsh(model.mass_matrix(Q))[:, 0].min())
            rms = simulated_tracking_rms(model, nominal, mismatch, track) if track > 0 else np.nan
            rows.append(
                (
                    regime,
                    int(train.sum()),
                    label,
                    (best, cpu),
                    err,
                    model.info['min_mass_matrix_eig'],
                    eig_rand,
                    sum(model.physically_consistent()),
                    nominal.n,
                    model.info['objective'],
                    model.info['iterations'],
                    rms,
                )
            )
    print(f'\n### {key}: {nominal.name} ({nominal.n} joints, {12 * nominal.n} parameters)\n')
    print(
        '| data | samples | estimator | seconds (wall / CPU) | held-out nMSE |'
        ' min eig H (data) | min eig H (50 random q) | consistent bodies | objective |'
        ' iterations | CT tracking RMS [rad] |'
    )
    print('|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|')

    def g(x, spec='.3g'):
        return '-' if x is None else format(x, spec)

    for r in rows:
        ct = (
            '-'
            if r[11] is None or np.isnan(r[11])
            else 'diverged'
            if not np.isfinite(r[11])
            else f'{r[11]:.2e}'
        )
        secs = '-' if r[3] is None else f'{r[3][0]:.3f} / {r[3][1]:.3f}'
        print(
            f'| {r[0]} | {g(r[1], "d")} | {r[2]} | {secs} | {g(r[4])} | {g(r[5])} |'
            f' {g(r[6])} | {r[7]}/{r[8]} | {g(r[9], ".4g")} | {g(r[10], "d")} | {ct} |'
        )


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument(
        '--quick',
        action='store_true',
        help='one repetition, full and short data only, 2 s of tracking',
    )
    ap.add_argument(
        '--robot', choices=sorted(ROBOTS), action='append', help='only these robots (repeatable)'
    )
    ap.add_argument(
        '--solvers',
        action='store_true',
        help='also the log-Cholesky solver of the consistent estimator',
    )
    ap.add_argument('--repeat', type=int, default=None, help='timing repetitions (default 3)')
    ap.add_argument(
        '--track',
        type=float,
        default=None,
        help='seconds of computed-torque tracking (0: skip; default 6)',
    )
    args = ap.parse_args()
    robots = args.robot or ['2link', '7dof', 'ur5', 'panda']
    regimes = ['full', 'short'] if args.quick else list(REGIMES)
    repeat = args.repeat or (1 if args.quick else 3)
    track = args.track if args.track is not None else (2.0 if args.quick else 6.0)
    solvers = ['interior_point', 'log_cholesky'] if args.solvers else ['interior_point']
    load = os.getloadavg()
    print(
        f'# bench_sysid ({os.cpu_count()} CPUs, load average {load[0]:.2f} {load[1]:.2f} '
        f'{load[2]:.2f})'
    )
    for key in robots:
        bench_robot(key, regimes, solvers, repeat, track)


if __name__ == '__main__':
    main()
