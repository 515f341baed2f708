"""Learning curves side by side: plain DeLaN and the residual on the nominal model, learned
online from the same demo bag, judged on the demo's evaluation loop as data come in
(:mod:`delan_control.learning_curves`). The table gives the data each kind needed to first meet
the demo's bound (1/3 of nominal's error) at 1x and 2x; the figure the curves.

    python bench/bench_learning_curves.py --demo out/demo_ur5
    python bench/bench_learning_curves.py --demo out/demo_panda --rate 90 --every 2
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from node_set import log, provenance

from delan_control.learning_curves import compare, plot, table


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--demo', required=True, help='a demo output folder (bags/, params.yaml)')
    ap.add_argument('--models', default='delan,delan_residual', help='learned kinds to compare')
    ap.add_argument(
        '--rate',
        type=float,
        default=0.0,
        help="optimiser steps per second of stamps (default: the demo learner's own rate)",
    )
    ap.add_argument('--until', type=float, default=0.0, help='seconds of the bag (0: all)')
    ap.add_argument('--seed', type=int, default=0)
    ap.add_argument('--every', type=int, default=1, help='track every k-th version (and the last)')
    ap.add_argument('--threads', type=int, default=2)
    ap.add_argument('--plot', default='', help='figure path (default: <demo>/learning_curves.png)')
    args = ap.parse_args()
    from delan_common.robot_model import find_urdf

    with open(os.path.join(args.demo, 'results.json')) as f:
        res = json.load(f)
    urdf = find_urdf(res['robot']['urdf'])
    log(provenance())
    curves = compare(
        args.demo,
        urdf,
        res['robot']['joints'],
        [k.strip() for k in args.models.split(',')],
        rate=args.rate or float(res['learner']['steps_per_s']),
        until=args.until,
        seed=args.seed,
        threads=args.threads,
        every=args.every,
        say=log,
    )
    print(table(curves))
    path = args.plot or os.path.join(args.demo, 'learning_curves.png')
    plot(curves, f'{os.path.basename(urdf)}: learned online from the same bag', path)
    print(f'figure: {path}')
    failed = [c.kind for c in curves if not c.seconds]
    if failed:
        print(f'FAILED: no version published by {failed}', file=sys.stderr)
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
