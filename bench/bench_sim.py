"""Simulator and dynamics-call benchmark: prints markdown tables.

1. Plant stepping at 1 kHz physics (friction on, end stops on, a torque that keeps the arm
   moving): CPU microseconds per physics step and real-time factor (RTF) per CPU second, 2-DoF
   and 7-DoF, both integrators. Best of several repetitions (the least disturbed by other load)
   and median.
2. The ``sim`` node in-process with ``real_time_factor = 0`` (as fast as possible), joint states
   at 100 Hz and at the default 500 Hz, spun by the executor ``run_node`` uses: sim seconds per
   wall second and per CPU second of the process (the latter is the "on one core" number on a
   loaded machine), best and median of several runs.
3. Call times of Pinocchio's algorithms and of the suite's model classes (single state, and
   per sample in a batch of 256).

Run: ``source env.sh && python bench/bench_sim.py [--quick] [--only plant|node|calls]``.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time

import numpy as np
import pinocchio as pin

from delan_common.robot_model import RobotModel
from delan_control.plant import Plant
from delan_control.sysid import IdentifiedModel, nominal_parameters, regressor

ROBOTS = ('two_link_arm.urdf', 'seven_dof_arm.urdf')


def timed(fn, number, repeat):
    """(best, median) seconds per call over ``repeat`` runs of ``number`` calls."""
    runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        runs.append((time.perf_counter() - t0) / number)
    return min(runs), statistics.median(runs)


def bench_plant(quick):
    """Per CPU second of the stepping thread (``time.thread_time``): the "on one core" number,
    which other load on the machine disturbs far less than wall time."""
    rows = []
    steps = 200 if quick else 500
    repeat = 10 if quick else 30
    for urdf in ROBOTS:
        for integrator in ('rk4', 'semi_implicit_euler'):
            plant = Plant(urdf, integrator=integrator, physics_rate=1000.0)
            tau = plant.truth.gravity(np.zeros(plant.n)) * 0.5 + 0.3  # keeps it moving
            plant.reset(np.full(plant.n, 0.2), np.full(plant.n, 0.5))
            cpu, wall = [], []
            for _ in range(repeat):
                c0, w0 = time.thread_time(), time.perf_counter()
                plant.step(tau, steps)
                cpu.append((time.thread_time() - c0) / steps)
                wall.append((time.perf_counter() - w0) / steps)
            best, med = min(cpu), statistics.median(cpu)
            rows.append(
                (
                    urdf.split('.')[0],
                    integrator,
                    best * 1e6,
                    med * 1e6,
                    1e-3 / best,
                    1e-3 / med,
                    sum(cpu) / sum(wall),
                )
            )
    print('\n### Plant at 1 kHz physics (friction + end stops on), per CPU second\n')
    print(
        '| robot | integrator | us/step best | us/step median | RTF best | RTF median |'
        ' CPU share |'
    )
    print('|---|---|---:|---:|---:|---:|---:|')
    for r in rows:
        print(
            f'| {r[0]} | {r[1]} | {r[2]:.1f} | {r[3]:.1f} | {r[4]:.1f}x | {r[5]:.1f}x |'
            f' {r[6]:.2f} |'
        )


def bench_node(quick):
    import rclpy
    from rclpy.parameter import Parameter

    from delan_common.ros import spin
    from delan_control.nodes.sim import SimNode

    # a domain of its own: a demo or test on this machine must not hear (or be) this sim
    os.environ.setdefault('ROS_DOMAIN_ID', str(random.SystemRandom().randint(101, 200)))
    os.environ.setdefault('ROS_AUTOMATIC_DISCOVERY_RANGE', 'LOCALHOST')
    seconds = 1.5 if quick else 3.0
    repeat = 2 if quick else 5
    # the executor run_node spins the node with (DELAN_EXECUTOR selects another one)
    make_executor = getattr(spin, 'make_executor', None)
    kind = os.environ.get('DELAN_EXECUTOR', '') or ('events' if make_executor else 'single')
    runs = {}
    for _ in range(repeat):
        for urdf, rate, integrator in [
            (u, r, i)
            for u in ROBOTS
            for r in (100.0, 500.0)
            for i in ('rk4', 'semi_implicit_euler')
        ]:
            rclpy.init()
            try:
                node = SimNode(
                    parameter_overrides=[
                        Parameter('urdf_path', value=urdf),
                        Parameter('real_time_factor', value=0.0),
                        Parameter('publish_rate', value=rate),
                        Parameter('integrator', value=integrator),
                    ]
                )
                if make_executor is not None:
                    ex = make_executor()
                else:
                    from rclpy.executors import SingleThreadedExecutor

                    ex = SingleThreadedExecutor()
                ex.add_node(node)
                time.sleep(0.3)
                t0, w0, c0 = node.plant.t, time.monotonic(), time.process_time()
                p0 = node.stats['published']
                while time.monotonic() - w0 < seconds:
                    ex.spin_once(timeout_sec=0.05)
                wall, cpu = time.monotonic() - w0, time.process_time() - c0
                sim = node.plant.t - t0
                runs.setdefault((urdf.split('.')[0], integrator, rate), []).append(
                    (sim / wall, sim / cpu, (node.stats['published'] - p0) / max(sim, 1e-9))
                )
                node.close()
                ex.shutdown()
                node.destroy_node()
            finally:
                rclpy.try_shutdown()
    print(
        f'\n### `sim` node in-process, real_time_factor = 0 (1 kHz physics, {kind} '
        f'executor; best / median of {repeat} runs of {seconds:g} s)\n'
    )
    print(
        '| robot | integrator | joint_states rate [Hz sim] | sim s / wall s | sim s / CPU s |'
        ' published per sim s |'
    )
    print('|---|---|---:|---:|---:|---:|')
    for (robot, integrator, rate), r in runs.items():
        w, c = [x[0] for x in r], [x[1] for x in r]
        print(
            f'| {robot} | {integrator} | {rate:g} | {max(w):.1f}x / '
            f'{statistics.median(w):.1f}x |'
            f' {max(c):.1f}x / {statistics.median(c):.1f}x | {r[-1][2]:.0f} |'
        )


def bench_calls(quick):
    number = 500 if quick else 2000
    repeat = 5 if quick else 9
    print('\n### Call times [us] (best / median of repetitions)\n')
    print('| call | two_link_arm | seven_dof_arm |')
    print('|---|---:|---:|')
    results = {}
    for urdf in ROBOTS:
        m = RobotModel(urdf)
        n = m.n
        rng = np.random.default_rng(0)
        q, qd, qdd = (rng.normal(size=n) for _ in range(3))
        Q, QD, QDD = (rng.normal(size=(256, n)) for _ in range(3))
        model, data, cfg = m.model, m.data, m.configuration(q)
        ident = IdentifiedModel(m, nominal_parameters(m) * 1.01)
        calls = {
            'pinocchio rnea': lambda: pin.rnea(model, data, cfg, qd, qdd),
            'pinocchio aba': lambda: pin.aba(model, data, cfg, qd, qdd),
            'pinocchio crba': lambda: pin.crba(model, data, cfg),
            'pinocchio computeJointTorqueRegressor': lambda: pin.computeJointTorqueRegressor(
                model, data, cfg, qd, qdd
            ),
            'RobotModel.inverse': lambda: m.inverse(q, qd, qdd),
            'RobotModel.forward': lambda: m.forward(q, qd, qdd),
            'RobotModel.mass_matrix': lambda: m.mass_matrix(q),
            'RobotModel.coriolis': lambda: m.coriolis(q, qd),
            'RobotModel.gravity': lambda: m.gravity(q),
            'RobotModel.energy': lambda: m.energy(q, qd),
            'RobotModel.inverse, batch 256 (per sample)': lambda: m.inverse(Q, QD, QDD),
            'sysid regressor (12n columns)': lambda: regressor(m, q, qd, qdd),
            'IdentifiedModel.inverse': lambda: ident.inverse(q, qd, qdd),
            'IdentifiedModel.mass_matrix': lambda: ident.mass_matrix(q),
            'IdentifiedModel.forward': lambda: ident.forward(q, qd, qdd),
        }
        for name, fn in calls.items():
            k = number // 64 if 'batch' in name else number
            best, med = timed(fn, k, repeat)
            if 'batch' in name:
                best, med = best / 256, med / 256
            results.setdefault(name, []).append((best * 1e6, med * 1e6))
    for name, vals in results.items():
        print(f'| {name} | ' + ' | '.join(f'{b:.1f} / {md:.1f}' for b, md in vals) + ' |')


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--quick', action='store_true', help='fewer repetitions')
    ap.add_argument(
        '--only',
        choices=('plant', 'node', 'calls'),
        action='append',
        help='run only these parts (repeatable)',
    )
    args = ap.parse_args()
    parts = args.only or ['plant', 'node', 'calls']
    load = os.getloadavg()
    print(
        f'# bench_sim ({os.cpu_count()} CPUs, load average {load[0]:.2f} {load[1]:.2f} '
        f'{load[2]:.2f})'
    )
    for part, fn in (('plant', bench_plant), ('node', bench_node), ('calls', bench_calls)):
        if part in parts:
            fn(args.quick)


if __name__ == '__main__':
    main()
