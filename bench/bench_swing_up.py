"""Energy swing-up of the Furuta pendulum on the plant: analytic model against a learned DeLaN.

The plant is ``furuta_pendulum.urdf`` with the pendulum passive (``Plant(actuated=...)``), RK4
at 1 kHz, the law at 250 Hz with the torque held between ticks, started near rest hanging down.
Rows: the law (:class:`~delan_control.energy_control.EnergySwingUp`) on the analytic Pinocchio
model; on a DeLaN trained here (seeded, one thread) on excitation data of the plant; and, for
reference, the textbook pumping ``u = k_E (E* - E) qd_a`` on the *total* energy (with a PD on
the arm, analytic model, ``k_E`` in 1/(J s)): it puts the energy into the light arm's own motion,
swinging the arm to most of its +-2.5 rad range, and whether the pendulum comes up at all
depends on the gain and the start.

Columns: time from the start to the first instant from which the pendulum stays within 0.1 rad
of the upright slower than 0.5 rad/s for 2 s; the largest |arm angle|; the pendulum's angle to
the upright at the end; ``E_p - E*`` at the switch to the LQR, as the law's model saw it and
as it truly was (E_p: the pendulum's energy, arm held still). ``--payload 0.03`` puts 30 g on
the pendulum's tip of the plant (not in the URDF): the analytic model is then wrong, the DeLaN
learns the plant as it is (``--steps 6000``: 3000 leave its potential ~8 % short there).

    python bench/bench_swing_up.py [--duration 20] [--seed 0] [--payload 0.03 --steps 6000]
                                   [--plot energy.png]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from delan_common.robot_model import Mismatch, RobotModel
from delan_control.energy_control import EnergySwingUp
from delan_control.plant import Plant
from delan_control.swing_up import (
    FURUTA,
    FURUTA_ACTUATED,
    FURUTA_UPRIGHT,
    SwingUpRun,
    excitation_data,
    run_swing_up,
    train_delan,
)


class TotalEnergyPumping(EnergySwingUp):
    """``u = k_E (E* - E) qd_a - k_p q_a - k_d qd_a + tau_f,a``: pumping on the total energy."""

    k_total, kp_total, kd_total = 2.0, 0.3, 0.02  # [1/(J s)], [N m/rad], [N m s/rad]

    def __init__(self, *args, k_total: float = 2.0, **kwargs):
        super().__init__(*args, **kwargs)
        self.k_total = k_total

    def swing_command(self, q: np.ndarray, qd: np.ndarray) -> np.ndarray:
        a = self.a_idx
        self.last_energy = self.passive_energy(q, qd)
        gap = self.e_target - self.energy(q, qd)
        return (
            self.k_total * gap * qd[a]
            - self.kp_total * (q[a] - self.reference)
            - self.kd_total * qd[a]
            + self._fric(qd)[a]
        )


def fmt(x, spec: str) -> str:
    return '-' if x is None or not np.isfinite(x) else format(x, spec)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--duration', type=float, default=20.0, help='seconds per run')
    p.add_argument('--rate', type=float, default=250.0, help='control rate [Hz]')
    p.add_argument('--start', type=float, nargs=2, default=[0.0, 0.05], help='q0: arm, pendulum')
    p.add_argument('--seed', type=int, default=0, help='data and training seed')
    p.add_argument('--trajectories', type=int, default=32)
    p.add_argument('--traj-duration', type=float, default=2.5)
    p.add_argument('--steps', type=int, default=3000, help='training steps')
    p.add_argument('--width', type=int, default=64)
    p.add_argument(
        '--payload',
        type=float,
        default=0.0,
        help='kg on the pendulum tip of the plant (the URDF, and so the analytic model, lack it)',
    )
    p.add_argument('--plot', default=None, help='save energy / arm angle over time (PNG)')
    args = p.parse_args(argv)
    torch.set_num_threads(1)

    robot = RobotModel(FURUTA)
    plant = Plant(robot, Mismatch(payload_mass=args.payload), actuated=FURUTA_ACTUATED)
    limit = float(robot.spec.effort_limit[0])
    t0 = time.perf_counter()
    data = excitation_data(
        plant,
        trajectories=args.trajectories,
        duration=args.traj_duration,
        seed=args.seed,
        upright=FURUTA_UPRIGHT,
    )
    t1 = time.perf_counter()
    learned = train_delan(data, seed=args.seed, width=args.width, steps=args.steps)
    t2 = time.perf_counter()
    if args.payload:
        print(f'plant: {args.payload} kg on the pendulum tip, not in the URDF')
    print(
        f'learned model: DeLaN width {args.width}, {len(data["q"])} samples '
        f'({args.trajectories} x {args.traj_duration} s at 200 Hz, data {t1 - t0:.1f} s), '
        f'{args.steps} steps in {t2 - t1:.1f} s'
    )
    laws = {
        'analytic': EnergySwingUp(robot, FURUTA_ACTUATED, FURUTA_UPRIGHT, limit),
        'learned (DeLaN)': EnergySwingUp(learned, FURUTA_ACTUATED, FURUTA_UPRIGHT, limit),
    }
    for k in (1.0, 2.0):
        laws[f'analytic, total-energy k_E={k:g}'] = TotalEnergyPumping(
            robot, FURUTA_ACTUATED, FURUTA_UPRIGHT, limit, k_total=k
        )
    runs = {}
    head = (
        f'| {"model":30s} | time to upright [s] | max arm excursion [rad] | final error [rad] '
        '| E_p - E* at switch, model / true [mJ] | run [s] |'
    )
    print(head)
    print('|' + '|'.join('-' * (len(c) + 2) for c in head.strip('| ').split(' | ')) + '|')
    for name, law in laws.items():
        t = time.perf_counter()
        run = runs[name] = run_swing_up(
            law, plant, q0=args.start, duration=args.duration, control_rate=args.rate
        )
        upright = run.time_to_upright
        print(
            f'| {name:30s} | {fmt(upright, ".2f") if upright is not None else "never":>19s} '
            f'| {run.max_excursion:23.2f} | {run.final_error:17.3g} '
            f'| {fmt(1e3 * run.catch_energy_error, ".1f"):>17s} / '
            f'{fmt(1e3 * run.catch_energy_error_true, ".1f"):<17s} '
            f'| {time.perf_counter() - t:7.1f} |'
        )
    print(
        f'E* = V(upright): analytic {laws["analytic"].e_target:.4f} J, '
        f'learned {laws["learned (DeLaN)"].e_target:.4f} J (its own potential, own offset)'
    )
    if args.plot:
        plot(runs, plant.truth, args.plot)
        print(f'figure: {args.plot}')
    return 0


def plot(runs: dict, truth: RobotModel, path: str) -> None:
    import matplotlib

    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    fig, (ax_e, ax_q) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    for name, run in runs.items():
        assert isinstance(run, SwingUpRun)
        T, V = truth.energy(run.q, run.qd * [0.0, 1.0])
        (line,) = ax_e.plot(run.t, T + V - run.e_target_true, label=f'{name}: E_p - E*')
        ax_e.plot(run.t, run.energy - run.e_target_true, color=line.get_color(), lw=0.6, ls=':')
        if run.balance.any():
            ax_e.axvline(run.t[int(np.argmax(run.balance))], color=line.get_color(), lw=0.8)
        ax_q.plot(run.t, run.q[:, 0], color=line.get_color(), label=name)
    ax_e.set_ylabel('true energy - E* [J]\n(dotted: total E)')
    ax_e.axhline(0.0, color='k', lw=0.5)
    ax_e.legend(fontsize=7)
    ax_q.set_ylabel('arm angle [rad]')
    ax_q.axhline(2.5, color='k', lw=0.5, ls='--')
    ax_q.axhline(-2.5, color='k', lw=0.5, ls='--')
    ax_q.set_xlabel('time [s] (vertical lines: switch to LQR)')
    ax_q.set_xlim(0.0, min(10.0, max(run.t[-1] for run in runs.values())))
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == '__main__':
    raise SystemExit(main())
