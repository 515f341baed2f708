"""A shortened `make demo`: the whole suite as real processes over DDS, end to end, on the
mismatched 2-link arm. Asserts what the demo exists to show: models learned from the logged /
streamed data (identified, DeLaN) beat the nominal URDF model, in torque prediction and tracking."""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_short_demo_end_to_end(tmp_path):
    out = tmp_path / 'demo'
    res = subprocess.run([sys.executable, '-m', 'delan_control.demo', '--out', str(out),
                          '--excitation', '30', '--max-extra', '30', '--test-duration', '4'],
                         capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-4000:]
    report = (out / 'report.md').read_text()
    for ctrl in ('pd', 'pinocchio', 'identified', 'delan'):
        assert report.count(f'| {ctrl} |') == 2, ctrl  # 1x and 2x rows
    for png in ('learning_curve.png', 'tracking_error.png', 'torque_prediction.png',
                'dynamics_structure.png'):
        assert (out / png).stat().st_size > 10_000, png
        assert f']({png})' in report
    r = json.loads((out / 'results.json').read_text())
    nmse = {(e['model'], e['speed']): sum(e['nmse']) / len(e['nmse']) for e in r['torque_nmse']}
    rms = {(e['controller'], e['speed']): sum(e['rms']) / len(e['rms']) for e in r['tracking']}
    # the plant's own model predicts the measured torque: the data are consistent
    assert nmse[('true', 1.0)] < 0.01
    for speed in (1.0, 2.0):
        assert nmse[('identified', speed)] < 0.2 * nmse[('pinocchio', speed)]
        assert nmse[('delan', speed)] < 0.5 * nmse[('pinocchio', speed)]
    assert rms[('identified', 1.0)] < rms[('pinocchio', 1.0)]
    assert rms[('delan', 1.0)] < rms[('pinocchio', 1.0)]
    assert rms[('pinocchio', 1.0)] < rms[('pd', 1.0)]
    # the bag the logger wrote was read back whole and used
    assert r['bag']['samples'] > 0.9 * r['timing']['excitation_sim_s'] * 250 * 0.5
    assert r['learner']['model_version'] >= 1
    assert 'Traceback' not in res.stdout + res.stderr



def test_short_demo_on_a_vendor_arm(tmp_path):
    """The same chain on a 6-DoF arm nobody here wrote (the UR5 of example-robot-data: a
    vendor URDF without friction or the 2-link's tuning), shortened for CI. A 40 s excitation
    trains DeLaN enough to beat nominal Pinocchio at 1x; at 2x (a few mrad for every model on
    this arm) its lead after so short a training is within the run-to-run variance, so there the
    test only bounds it (2x nominal, no divergence): the full demo's 1/3 bound is measured by
    bench/bench_any_arm.py."""
    out = tmp_path / 'ur5'
    res = subprocess.run([sys.executable, '-m', 'delan_control.demo', '--out', str(out),
                          '--robot', 'ur5_joint_limited_robot.urdf', '--excitation', '40',
                          '--max-extra', '20', '--test-duration', '3',
                          '--max-delan-ratio', '2.0'],
                         capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-4000:]
    r = json.loads((out / 'results.json').read_text())
    assert len(r['joint_names']) == 6 and r['verdict']['passed']
    assert r['learner']['model_version'] >= 1
    ident = r['identification']
    assert ident['physically_consistent'] == [True] * 6 and ident['min_mass_matrix_eig'] > 0
    for e in r['tracking']:
        if e['controller'] != 'pd':        # PD gains from a light wrist's inertia may lose it
            assert not e['diverged'], e
    rms = {(e['controller'], e['speed']): sum(e['rms']) / len(e['rms']) for e in r['tracking']}
    for speed in (1.0, 2.0):
        assert rms[('identified', speed)] < rms[('pinocchio', speed)]
    assert rms[('delan', 1.0)] < rms[('pinocchio', 1.0)]
    assert rms[('delan', 2.0)] < 2.0 * rms[('pinocchio', 2.0)]
    assert 'Traceback' not in res.stdout + res.stderr
