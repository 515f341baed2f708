"""The main job on several arms: learner throughput and time to target, tracking against nominal.

Runs ``python -m delan_control.demo`` (real nodes over DDS, as ``make demo ROBOT=...``) once per
robot and prints one table row each from its ``results.json``: optimiser steps per second of
the online learner beside the other nodes, wall and sim time until a published version reached
the demo's target, the demo's verdict (DeLaN's mean RMS tracking error over nominal Pinocchio's
at 1x and 2x), the identified model's consistency and the wall time of the whole demo.

    python bench/bench_any_arm.py                      # 2-link, 7-DoF, UR5, Panda (arm joints)
    python bench/bench_any_arm.py --robots ur5 --excitation 30
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from node_set import load_text, log, provenance

from delan_common.model_kinds import LEARNED_KINDS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


#: the demo resolves names of delan_bringup/urdf/ and of example-robot-data (robot_model.find_urdf)
ROBOTS = {
    'two_link': 'two_link_arm.urdf',
    'seven_dof': 'seven_dof_arm.urdf',
    'ur5': 'ur5_joint_limited_robot.urdf',
    'panda': 'panda.urdf',
}
#: more vendor arms of example-robot-data, run on request (--robots xarm7 z1 ...)
MORE_ROBOTS = {
    'xarm7': 'xarm7.urdf',
    'z1': 'z1.urdf',
    'kinova': 'kinova.urdf',
    'so100': 'so100.urdf',
    'so101': 'so101.urdf',
    'ur10': 'ur10_robot.urdf',
    'ur3': 'ur3_robot.urdf',
    'talos_arm': 'talos_left_arm.urdf',
    'finger_edu': 'finger_edu.urdf',
    'double_pendulum': 'double_pendulum.urdf',
    'tiago_arm': 'tiago_no_hand.urdf',
    'hextilt': 'hextilt_flying_arm_5.urdf',
    'borinot': 'borinot_flying_arm_2.urdf',
}
#: the joints to learn where the default (the description's arm chain) is not the arm
JOINTS = {'tiago_arm': ','.join(f'arm_{i}_joint' for i in range(1, 8))}


def run_demo(name: str, urdf: str, out: str, extra) -> dict:
    cmd = [sys.executable, '-m', 'delan_control.demo', '--robot', urdf, '--out', out] + extra
    if name in JOINTS:
        cmd += ['--joints', JOINTS[name]]
    log(f'{name}: {" ".join(cmd)}')
    t0 = time.monotonic()
    with open(os.path.join(out + '.log'), 'w') as logf:
        rc = subprocess.run(cmd, cwd=ROOT, stdout=logf, stderr=subprocess.STDOUT).returncode
    wall = time.monotonic() - t0
    try:
        with open(os.path.join(out, 'results.json')) as f:
            res = json.load(f)
    except (OSError, ValueError):
        res = {}
    res['_rc'], res['_wall'] = rc, wall
    return res


def read_demo(out: str) -> dict:
    """The results of a demo already run into ``out`` (``--existing``)."""
    with open(os.path.join(out, 'results.json')) as f:
        res = json.load(f)
    res['_rc'] = 0 if res.get('verdict', {}).get('passed') else 1
    res['_wall'] = res.get('timing', {}).get('total_wall_s', float('nan'))
    return res


def learned_kind(res: dict) -> str:
    """What the demo's learner learned (older results name it only in their tracking rows)."""
    kind = res.get('learner', {}).get('model')
    if kind:
        return kind
    rows = {e.get('controller') for e in res.get('tracking', [])}
    return 'delan_residual' if 'delan_residual' in rows else 'delan'


def row(name: str, res: dict) -> str:
    lr, t = res.get('learner', {}), res.get('timing', {})
    ratios = res.get('verdict', {}).get('delan_vs_pinocchio_rms', {})
    consistent = res.get('identification', {}).get('physically_consistent')
    tt = (
        f'{t["time_to_target_s"]:.0f} / {t["sim_time_to_target_s"]:.0f}'
        if 'time_to_target_s' in t
        else 'not reached'
    )
    verdict = res.get('verdict', {})
    return (
        f'| {name} | {len(res.get("joint_names", []))} | {learned_kind(res)} | '
        f'{lr.get("steps_per_s", 0):.0f} | '
        f'{lr.get("training_steps", "-")} | {tt} | '
        f'{ratios.get("1.0", float("nan")):.3f} / {ratios.get("2.0", float("nan")):.3f} | '
        f'{"all" if consistent and all(consistent) else consistent} | '
        f'{"passed" if verdict.get("passed") else "FAILED"} (rc {res["_rc"]}) | '
        f'{res["_wall"]:.0f} |'
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument(
        '--robots', nargs='+', default=list(ROBOTS), choices=list(ROBOTS) + list(MORE_ROBOTS)
    )
    ap.add_argument(
        '--existing',
        action='store_true',
        help='tabulate the demos already in --out instead of running them',
    )
    ap.add_argument('--out', default=os.path.join(ROOT, 'out', 'bench_any_arm'))
    ap.add_argument(
        '--excitation',
        type=float,
        default=None,
        help='sim seconds of excitation (demo default when omitted)',
    )
    ap.add_argument(
        '--learner-model',
        default=None,
        choices=LEARNED_KINDS,
        help="what the demos' learner learns (demo default when omitted)",
    )
    args = ap.parse_args()
    extra = [] if args.excitation is None else ['--excitation', str(args.excitation)]
    if args.learner_model:
        extra += ['--learner-model', args.learner_model]
    os.makedirs(args.out, exist_ok=True)
    rows = []
    failed = False
    for name in args.robots:
        out = os.path.join(args.out, name)
        res = (
            read_demo(out)
            if args.existing
            else run_demo(name, {**ROBOTS, **MORE_ROBOTS}[name], out, extra)
        )
        rows.append(row(name, res))
        failed = failed or res['_rc'] != 0
        log(rows[-1])
    print(f'# any-arm demo ({provenance()}; {load_text()})')
    print(
        '| robot | joints | learned | learner steps/s | steps | to target [s wall / s sim] | '
        'DeLaN / nominal RMS 1x / 2x | identified consistent | verdict | demo wall [s] |'
    )
    print('|---|---|---|---|---|---|---|---|---|---|')
    print('\n'.join(rows))
    return 1 if failed else 0


if __name__ == '__main__':
    raise SystemExit(main())
