"""``delan-bag2npz``: a joint-state rosbag2 bag -> the ``.npz`` training file ``delan-train``
reads.

Keys written: q, qd, qdd, tau (N x n float64), traj (N,) int64, t (N,) float64 [s],
joint_names (n,) str, and joint_types (n,) str only when ``--joint-types`` is given.
Exit codes: 0 ok, 2 bad input (missing/damaged bag, no usable data, bad arguments).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import warnings
from typing import List, Optional

import numpy as np

from delan_common.command_order import add_command_order_args, command_joints_of, csv_list
from delan_learning.bags import BagError, BagWarning, read_bag_arrays, recover_bag

NPZ_KEYS = ('q', 'qd', 'qdd', 'tau', 'traj', 't', 'joint_names', 'joint_types')


def build_parser() -> argparse.ArgumentParser:
    """The ``delan-bag2npz`` command line."""
    p = argparse.ArgumentParser(
        prog='delan-bag2npz',
        description='Convert a rosbag2 bag of sensor_msgs/JointState (written by data_logger or '
        '`ros2 bag record`, mcap or sqlite3) into a DeLaN training .npz file. tau is '
        "the joint states' effort, or the latest torque command when they carry none; "
        'qdd (and qd if missing) is estimated with a Savitzky-Golay filter.',
    )
    p.add_argument(
        '--bag',
        required=True,
        help='bag directory, .mcap/.db3 file, or a directory of bags (a logger '
        'session split into several bags)',
    )
    p.add_argument('--out', required=True, help='output .npz file')
    p.add_argument(
        '--joints',
        type=csv_list,
        default=None,
        help='comma-separated joint names (order of the arrays); default: the joints '
        'of the messages (required when several robots share the topic)',
    )
    p.add_argument(
        '--topic',
        default=None,
        help='sensor_msgs/JointState topic (default: the only one, else /joint_states)',
    )
    p.add_argument(
        '--command-topic',
        default=None,
        help='std_msgs/Float64MultiArray torque commands, used when the joint states '
        'carry no effort (default: the one ending in effort_controller/commands)',
    )
    add_command_order_args(p)
    p.add_argument('--tau-source', choices=('auto', 'effort', 'command'), default='auto')
    p.add_argument(
        '--joint-types',
        type=csv_list,
        default=None,
        help='comma-separated joint types (revolute, continuous, prismatic); omitted '
        'from the file when not given',
    )
    p.add_argument(
        '--gap-factor',
        type=float,
        default=5.0,
        help='a time step above this x the median step starts a new trajectory',
    )
    p.add_argument(
        '--strict',
        action='store_true',
        help='fail on a damaged bag (truncated file, missing metadata.yaml) instead of '
        'reading what is readable',
    )
    p.add_argument(
        '--recover',
        action='store_true',
        help='first repair a bag cut off by a crash in place (recover_bag)',
    )
    return p


def _write_npz_atomic(path: str, arrays: dict) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix='.bag2npz-', suffix='.npz', dir=directory)
    try:
        with os.fdopen(fd, 'wb') as f:
            np.savez(f, **arrays)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point of ``delan-bag2npz``; returns the exit code."""
    args = build_parser().parse_args(argv)
    try:
        if args.recover:
            recover_bag(args.bag)
        with warnings.catch_warnings():
            warnings.simplefilter('ignore', BagWarning)  # reported from info['recovered']
            res = read_bag_arrays(
                args.bag,
                joint_names=args.joints,
                joint_state_topic=args.topic,
                command_topic=args.command_topic,
                gap_factor=args.gap_factor,
                joint_types=args.joint_types,
                tau_source=args.tau_source,
                strict=args.strict,
                command_joints=command_joints_of(args),
            )
    except (BagError, ValueError) as exc:
        print(f'delan-bag2npz: error: {exc}', file=sys.stderr)
        return 2
    for note in res['info']['recovered']:
        print(f'delan-bag2npz: warning: {note}', file=sys.stderr)
    arrays = {k: res[k] for k in NPZ_KEYS if k in res}
    arrays['joint_names'] = np.asarray([str(s) for s in arrays['joint_names']], dtype=str)
    try:
        _write_npz_atomic(args.out, arrays)
    except OSError as exc:
        print(f'delan-bag2npz: error: cannot write {args.out}: {exc}', file=sys.stderr)
        return 2
    info = res['info']
    rejected = ', '.join(f'{k} {v}' for k, v in sorted(res['rejected'].items())) or 'none'
    names = ','.join(str(s) for s in arrays['joint_names'])
    print(
        f'{args.out}: {info["samples"]} samples, {info["trajectories"]} trajectories, joints '
        f'{names}; tau from {info["tau_source"]}, t from '
        f'{info["time_source"]}, qd from {info["qd_source"]}; dropped: {rejected}'
    )
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
