"""A demo's learning phase regenerated without ROS, to try what the data or the learner could
change: consecutive designed excitations (the reference node's, a new seed every ``--segment``
seconds, each joined to the last from its moving state) tracked with nominal computed torque on
the demo's mismatched plant at its rates and noise (``delan_control.replay.track``), the joint
states fed through the real learner node with its optimiser steps paced by the stamps
(``learner_replay.replay_learner``), and the last published version judged on the demo's
replayed evaluation loop: mean RMS tracking error at 1x and 2x over nominal Pinocchio's (the
demo's bound is 1/3). Unlike ``bench_learner_replay.py`` (a demo's own bag), the excitation can
be varied (``--base-freq``). One row per variant and seed.

    python bench/bench_learning_phase.py --demo out/demo_panda
    python bench/bench_learning_phase.py --demo out/demo_panda --base-freq 0.2 --set width=128
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
from learner_runs import add_learner_args, demo_learner, run_seeds
from node_set import log, provenance


def learning_phase(setup, sim_time: float, segment: float, base_freq: float) -> list:
    """JointState messages of ``sim_time`` seconds of excitation, as the demo's sim publishes
    them (stamped from 1 s on)."""
    from sensor_msgs.msg import JointState

    from delan_control.excitation_design import RegressorConditioning, robot_excitation
    from delan_control.replay import track
    from delan_control.trajectories import PiecewiseQuintic, make_reference

    r, nom, ref = setup.robot, setup.nominal, setup.reference
    design = (nom, RegressorConditioning.of(nom))
    candidates = int(ref.get('excitation_candidates', 8))

    def excitation(seed: int, velocity_fraction: float):
        return robot_excitation(r, seed, velocity_fraction, candidates, design, base_freq)

    parts, start, offset, seed = [], None, 0.0, 0
    while offset < sim_time:
        t, q, qd, qdd = make_reference(
            'excitation',
            r.lower,
            r.upper,
            r.planning_velocity_limits,
            setup.home if start is None else start[0],
            seed=seed,
            duration=segment,
            dt=1.0 / float(ref.get('point_rate', 100.0)),
            approach_time=setup.approach_time,
            excitation=excitation,
            start=start,
        )
        keep = t < t[-1]  # the last point is the next segment's first
        parts.append((t[keep] + offset, q[keep], qd[keep], qdd[keep]))
        start, offset, seed = (q[-1], qd[-1], qdd[-1]), offset + float(t[-1]), seed + 1
    path = PiecewiseQuintic(*(np.concatenate(x) for x in zip(*parts)))
    msgs = []

    def record(t: float, q: np.ndarray, qd: np.ndarray, effort: np.ndarray) -> None:
        m = JointState(
            name=list(r.joint_names),
            position=q.tolist(),
            velocity=qd.tolist(),
            effort=effort.tolist(),
        )
        ns = int(round((1.0 + t) * 1e9))
        m.header.stamp.sec, m.header.stamp.nanosec = divmod(ns, 1_000_000_000)
        msgs.append(m)

    run = track(setup, nom, path, diverge_error=np.inf, on_state=record)
    log(
        f'{len(msgs)} joint states over {offset:.0f} s of {seed} excitations; '
        f'clamped {np.max(run.saturated):.1%}, at an end stop {np.max(run.end_stops):.1%}'
    )
    return msgs[: int(sim_time * setup.rate)]


def main() -> int:
    from delan_control.replay import mean_rms

    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    add_learner_args(ap, seeds='0', threads=1)
    ap.add_argument(
        '--sim-time', type=float, default=270.0, help='seconds of excitation (the demo: 270)'
    )
    ap.add_argument('--segment', type=float, default=10.0, help="the demo's --segment [s]")
    ap.add_argument(
        '--base-freq', type=float, default=0.1, help="the excitation's fundamental [Hz]"
    )
    args = ap.parse_args()
    _, urdf, setup, overrides, rate = demo_learner(args)
    log(
        f'{provenance()}; {setup.robot.source}: {args.sim_time:.0f} s of excitation at '
        f'{args.base_freq:g} Hz, {rate:.0f} steps/s, learner {overrides}'
    )
    msgs = learning_phase(setup, args.sim_time, args.segment, args.base_freq)
    ratios = run_seeds(msgs, urdf, setup, overrides, rate, args, mean_rms(setup, setup.nominal))
    return 0 if ratios else 1


if __name__ == '__main__':
    sys.exit(main())
