"""Which term of each model makes the tracking error of a demo: inertia, Coriolis, gravity,
friction.

For a demo output folder: its learned model (the published checkpoint, or ``--checkpoint``),
nominal Pinocchio and the identified model, each against the sim's own model on the demo's
figure eight at 1x and 2x, split by term and taken through the URDF's inverse inertia (the
acceleration error the demo's loop turns into tracking error; ``delan_control.model_terms``),
and the tracking error that acceleration error predicts (it over the loop's stiffness
``ct_kp``: within a few per cent of the replayed loop's on the 2-link arm, UR5 and Panda with
nominal Pinocchio). ROS-free, seconds per model.

    python bench/bench_model_terms.py --demo out/demo_panda
    python bench/bench_model_terms.py --demo out/demo_panda --checkpoint ckpt/model_v00030.pt
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np
from node_set import log, provenance

from delan_common.robot_model import find_urdf
from delan_control.control_laws import URDF_FEEDBACK_LAWS
from delan_control.model_loader import load_dynamics_model
from delan_control.model_terms import TERMS, term_errors
from delan_control.replay import EvaluationSetup, node_parameters


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--demo', required=True, help='a demo output folder (results.json, ...)')
    ap.add_argument('--checkpoint', default='', help="default: the demo's published model")
    ap.add_argument('--speeds', default='1,2')
    args = ap.parse_args()
    with open(os.path.join(args.demo, 'results.json')) as f:
        res = json.load(f)
    setup = EvaluationSetup.from_params(
        find_urdf(res['robot']['urdf']),
        os.path.join(args.demo, 'params.yaml'),
        res['robot']['joints'],
    )
    models = {'pinocchio': load_dynamics_model('pinocchio', setup.robot)}
    identified = os.path.join(args.demo, 'identified.json')
    if os.path.isfile(identified):
        models['identified'] = load_dynamics_model('identified', setup.robot, '', identified)
    learned = res['learner']['model']
    checkpoint = args.checkpoint or res['learner'].get('checkpoint') or ''
    if checkpoint:
        models[learned] = load_dynamics_model(learned, setup.robot, checkpoint)
    stiffness = np.asarray(setup.gains().ct_kp, float)
    law = node_parameters(os.path.join(args.demo, 'params.yaml'), 'torque_controller').get(
        'law', 'feedforward_urdf_pd'
    )
    if law not in URDF_FEEDBACK_LAWS:
        log(
            f"the demo ran law {law}, whose feedback is not the URDF's mass matrix: the "
            'predicted tracking error below does not apply to it'
        )
    log(f'{provenance()}; {setup.robot.source}; learned: {checkpoint or "none"}')
    print(
        "RMS of H_URDF^-1 x (model's torque error against the sim's own model) per joint, "
        '[rad/s^2]; the torque error itself in brackets (mean over joints) [N m]'
    )
    print('| model | speed | term | ' + ' | '.join(setup.robot.joint_names) + ' | torque |')
    print('|---|---|---|' + '---|' * (len(setup.robot.joint_names) + 1))
    for name, model in models.items():
        for speed in (float(s) for s in args.speeds.split(',')):
            err = term_errors(setup, model, speed)
            for term in TERMS + ('total',):
                cells = ' | '.join(f'{x:.3f}' for x in err[term])
                torque = float(np.mean(err[f'torque {term}']))
                print(f'| {name} | {speed:g}x | {term} | {cells} | ({torque:.4f}) |')
            # the loop holds an acceleration error a at about a / omega^2
            tracking = 1e3 * err['total'] / stiffness
            cells = ' | '.join(f'{x:.2f}' for x in tracking)
            print(f'| {name} | {speed:g}x | *tracking [mrad] ~ total / ct_kp* | {cells} | |')
    return 0


if __name__ == '__main__':
    sys.exit(main())
