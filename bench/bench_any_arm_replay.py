"""The any-arm chain's control side in seconds, without ROS: every arm excited and tracked with
its nominal model, as the demo does before anything is learned.

Per arm (``delan_control.replay``, the demo's loop in one process): the computed-torque
gains derived from the URDF (``control_laws.robot_gains``), the payload the demo gives it, one
10 s excitation of the reference node tracked with nominal Pinocchio (largest RMS error, share
of the time any joint sits at an end stop or a command is clamped), and the figure eight at 1x
and 2x with nominal and with the sim's own model. An arm whose excitation reaches an end stop
(data with a force no model has) or whose nominal tracking diverges fails: exit 1.

    python bench/bench_any_arm_replay.py                    # the arms of bench_any_arm.py
    python bench/bench_any_arm_replay.py --robots so101.urdf z1.urdf
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
from bench_any_arm import MORE_ROBOTS, ROBOTS
from node_set import PARAMS_FILE, log, provenance

from delan_common.robot_model import find_urdf
from delan_control.replay import EvaluationSetup, mean_rms, replay_tracking, track, true_model

#: share of the excitation any joint may spend at an end stop (the demo's bound)
MAX_END_STOP_SHARE = 0.02


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--robots', nargs='+', default=list({**ROBOTS, **MORE_ROBOTS}.values()))
    ap.add_argument('--params', default=PARAMS_FILE)
    args = ap.parse_args()
    log(provenance())
    print(
        '| robot | omega [rad/s] | payload [kg] | excitation: max RMS [rad] / end stop / '
        'clamped | nominal figure eight 1x / 2x [rad] | true plant 2x [rad] | s |'
    )
    print('|---|---|---|---|---|---|---|')
    failed = []
    for name in args.robots:
        t0 = time.monotonic()
        setup = EvaluationSetup.from_params(find_urdf(name), args.params).carrying_what_it_can()
        excitation = setup.excitation(seed=0, duration=10.0)
        run = track(setup, setup.nominal, excitation, diverge_error=np.inf)
        fig = list(mean_rms(setup, setup.nominal, duration=4.0).values())
        floor = np.mean(replay_tracking(setup, true_model(setup), 2.0, duration=4.0))
        bad = np.max(run.end_stops) > MAX_END_STOP_SHARE or not np.all(np.isfinite(fig))
        if bad:
            failed.append(name)
        print(
            f'| {name} | {np.sqrt(setup.gains().ct_kp[0]):.1f} | '
            f'{setup.mismatch.payload_mass:.3g} | {np.max(run.rms):.3f} / '
            f'{np.max(run.end_stops):.1%} / {np.max(run.saturated):.1%} | '
            f'{fig[0]:.4f} / {fig[1]:.4f} | {floor:.4f} | {time.monotonic() - t0:.1f} |'
            + (' **FAILED**' if bad else ''),
            flush=True,
        )
    if failed:
        log(f'FAILED: {failed} (an end stop during the excitation, or nominal tracking lost)')
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
