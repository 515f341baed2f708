"""A shortened `make demo`: the whole suite as real processes over DDS, end to end, on the
mismatched 7-DoF arm (the 2-link arm of `make demo` runs the same chain with another
description). Asserts what the demo exists to show: models learned from the logged / streamed
data (identified, DeLaN) beat the nominal URDF model, in torque prediction and tracking, and the
report says so with its pictures."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: the sim's real_time_factor while the controllers are evaluated: 0, as fast as the controller
#: answers. The sim runs in lockstep, so the runs' states are those of real time (the replay in
#: test_short_demo_on_the_seven_dof_arm holds them to the ideal loop); the excitation, where the
#: learner trains in wall time, stays at the parameter file's 1.0
EVALUATION_RTF = '0'
#: seconds of the figure eight each controller tracks (at RTF 0 about as long in wall time)
TEST_DURATION = 3.0


def _replay_matches_the_demo(out, r, robot: str, test_duration: float) -> None:
    """The ROS-free replay of the evaluation (delan_control.replay, bench/bench_replay.py)
    measures what the demo measured over DDS: the sim runs in lockstep, so the same models
    give the same tracking errors, per joint."""
    import numpy as np

    from delan_common.robot_model import find_urdf
    from delan_control.model_loader import load_dynamics_model
    from delan_control.replay import EvaluationSetup, replay_tracking

    setup = EvaluationSetup.from_params(
        find_urdf(robot), os.path.join(ROOT, 'delan_bringup', 'config', 'sim_params.yaml')
    )
    models = {
        'pinocchio': setup.nominal,
        'identified': load_dynamics_model(
            'identified', setup.robot, identified_params=str(out / 'identified.json')
        ),
        'delan': load_dynamics_model('delan', setup.robot, checkpoint=r['learner']['checkpoint']),
    }
    measured = {(e['controller'], e['speed']): np.asarray(e['rms']) for e in r['tracking']}
    # a run where the controller answered late for the lockstep sim (a loaded machine) moved
    # the arm on stale commands: the replay, always in step, cannot match it
    late = {(e['controller'], e['speed']) for e in r['tracking'] if e['lockstep_misses'] != 0}
    compared = [k for k in measured if k[0] in models and k not in late]
    assert compared, f'every run was late for the lockstep sim: {sorted(late)}'
    for (name, speed), rms in measured.items():
        if (name, speed) in compared:
            replayed = replay_tracking(setup, models[name], speed, duration=test_duration)
            np.testing.assert_allclose(
                replayed, rms, rtol=0.05, atol=2e-5, err_msg=f'{name} at {speed}x'
            )


@pytest.mark.solo  # learns online for a fixed wall time
def test_short_demo_on_the_seven_dof_arm(tmp_path):
    """The any-arm chain on a 7-DoF arm (continuous wrist, light distal links), shortened: the
    true plant explains the excitation, a model is published, DeLaN tracks the unseen figure
    eight with at most 0.7 of nominal Pinocchio's error at 1x and 2x (the demo's own verdict;
    the full demo's bound is 1/3), no controller but PD diverges, and the identification is
    consistent.

    Its learning time stays fixed: stopped early at a validation target (0.03-0.04 on every
    joint, after 40-60 s), the version under test tracked with up to 0.41-0.57 of nominal's
    error at 2x, against 0.16-0.23 after 120 s; the validation nMSE of a young model is too
    loose a guide for this bound. After 75 s of learning: 0.10-0.17 / 0.19-0.33 at 1x / 2x over
    four runs; after 60 s it was 0.17 / 0.25, 0.32 / 0.36 and 0.51 / 0.76 (a failure), too
    close to the bound."""
    out = tmp_path / 'demo7'
    res = subprocess.run(
        [
            sys.executable,
            '-m',
            'delan_control.demo',
            '--out',
            str(out),
            '--robot',
            'seven_dof_arm.urdf',
            '--excitation',
            '45',
            '--max-extra',
            '30',
            '--plateau',
            '0',
            '--test-duration',
            str(TEST_DURATION),
            '--evaluation-rtf',
            EVALUATION_RTF,
            '--max-delan-ratio',
            '0.7',
        ],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=ROOT,
    )
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-4000:]
    r = json.loads((out / 'results.json').read_text())
    nmse = {(e['model'], e['speed']): sum(e['nmse']) / len(e['nmse']) for e in r['torque_nmse']}
    rms = {(e['controller'], e['speed']): sum(e['rms']) / len(e['rms']) for e in r['tracking']}
    print(
        f'\nDeLaN / nominal RMS: {r["verdict"]["delan_vs_pinocchio_rms"]} after '
        f'{r["timing"].get("excitation_sim_s", float("nan")):.0f} s of excitation; '
        f'torque nMSE { ({k: round(v, 4) for k, v in nmse.items()}) }, '
        f'RMS { ({k: round(v, 4) for k, v in rms.items()}) }'
    )
    assert r['verdict']['passed'] and not r['verdict']['failures']
    assert max(r['noise_floor_nmse']) < 0.1
    assert all(r['identification']['physically_consistent'])
    assert r['learner']['model_version'] >= 1
    assert not any(e['diverged'] for e in r['evaluation_runs'] if e['controller'] != 'pd')
    assert 'Traceback' not in res.stdout + res.stderr
    # the learned models predict the measured torque better than the URDF, and track better
    for speed in (1.0, 2.0):
        assert nmse[('identified', speed)] < 0.5 * nmse[('pinocchio', speed)]
        assert nmse[('delan', speed)] < 0.5 * nmse[('pinocchio', speed)]
    assert rms[('identified', 1.0)] < rms[('pinocchio', 1.0)] < rms[('pd', 1.0)]
    # the report: a row per controller and speed, its pictures drawn and linked
    report = (out / 'report.md').read_text()
    for ctrl in ('pd', 'pinocchio', 'identified', 'delan'):
        assert report.count(f'| {ctrl} |') == 2, ctrl  # 1x and 2x rows
    for png in (
        'learning_curve.png',
        'tracking_error.png',
        'torque_prediction.png',
        'dynamics_structure.png',
    ):
        assert (out / png).stat().st_size > 10_000, png
        assert f']({png})' in report
    # the bag the logger wrote was read back whole and used
    assert r['bag']['samples'] > 0.9 * r['timing']['excitation_sim_s'] * 250 * 0.5
    # the loop's floor (the sim's own model, replayed) is in the results and the report
    assert sorted(r['loop_floor_rms']) == ['1.0', '2.0'] and "the loop's floor" in report
    _replay_matches_the_demo(out, r, 'seven_dof_arm.urdf', test_duration=TEST_DURATION)


def test_a_start_posture_the_arm_cannot_hold_fails_before_launching(tmp_path):
    """A Talos arm at the middle of its limits holds its upper arm out sideways: 97 % of the
    shoulder's 22 N m by the URDF alone. Every model saturated there after six minutes of
    learning; the demo now says why at once and launches nothing. The folder an earlier
    run used holds this run's failure as its report, not the earlier run's."""
    out = tmp_path / 'demo'
    out.mkdir()
    (out / 'params.yaml').write_text('{}')
    (out / 'results.json').write_text('{"verdict": {"passed": true}}')
    (out / 'tracking_error.png').write_bytes(b'earlier plot')
    res = subprocess.run(
        [
            sys.executable,
            '-m',
            'delan_control.demo',
            '--out',
            str(out),
            '--robot',
            'talos_left_arm.urdf',
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    text = res.stdout + res.stderr
    assert res.returncode == 1, text[-4000:]
    assert 'FAILED: holding the start posture' in text and 'arm_left_2_joint' in text, text
    assert 'payload 0.6 kg lowered to 0.406 kg' in text
    assert not (out / 'bags').exists() and 'launching' not in text
    results = json.loads((out / 'results.json').read_text())
    assert results['verdict']['passed'] is False
    assert 'holding the start posture' in results['verdict']['failures'][0]
    assert results['payload_mass'] == pytest.approx(0.406, abs=1e-3)
    assert 'FAILED' in (out / 'report.md').read_text()
    assert not (out / 'tracking_error.png').exists()


def test_limits_given_on_the_command_line_reach_every_node_and_the_checks(tmp_path):
    """--effort-limits overrides the URDF's limits for the demo's own checks and every node (the
    parameter file the nodes are launched with); a wrong count is a clear usage error."""
    import yaml

    from delan_common.robot_model import find_urdf
    from delan_control.replay import EvaluationSetup

    out = tmp_path / 'demo'

    def demo(*extra: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, '-m', 'delan_control.demo', '--out', str(out)]
            + ['--robot', 'talos_left_arm.urdf', *extra],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=ROOT,
        )

    res = demo('--effort-limits', '25,0,0,0,0,0.5', '--velocity-limits', '0,0,0,0,0,1.5')
    text = res.stdout + res.stderr
    # 22 N m -> 25: still more than the start posture may take, now 92 % of the new limit
    assert res.returncode == 1 and "arm_left_2_joint's effort limit (25;" in text, text[-4000:]
    assert 'launching' not in text
    raw = (out / 'params.yaml').read_text()
    assert '&id' not in raw and '*id' not in raw  # rcl refuses YAML aliases
    params = yaml.safe_load(raw)
    for node in ('sim', 'torque_controller', 'learner', 'reference'):
        section = params[f'/**/{node}']['ros__parameters']
        assert section['effort_limits'] == [25, 0, 0, 0, 0, 0.5], node
        assert section['velocity_limits'] == [0, 0, 0, 0, 0, 1.5], node
    setup = EvaluationSetup.from_params(find_urdf('talos_left_arm.urdf'), str(out / 'params.yaml'))
    assert setup.robot.effort_limits[0] == 25 and setup.robot.effort_limits[5] == 0.5
    assert setup.robot.velocity_limits[5] == 1.5
    bad = demo('--effort-limits', '25,30')
    assert bad.returncode == 2 and 'effort_limits: 2 values for the 6 joints' in bad.stderr
    assert 'Traceback' not in bad.stderr
