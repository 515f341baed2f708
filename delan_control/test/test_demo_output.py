"""A demo run into an output folder an earlier run used: the earlier run's bags, checkpoints,
logs and report go first (the demo reads its bags back as a whole, and two runs' joint states,
both stamped from sim time 0, read together interleave into data no model explains); a folder
holding bags the demo did not write is refused, not emptied. A run that fails reports why,
before its evaluation or after its report."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from delan_control.demo import RUN_FOLDERS, DemoError, clear_previous_run
from delan_control.demo_report import write_failure


def _fill(out, names):
    for name in names:
        (out / name).mkdir(parents=True)
        (out / name / 'x').write_text('earlier run')


def test_an_earlier_demos_run_folders_and_report_are_removed(tmp_path):
    """Its report too: a run that fails before writing its own would leave the earlier run's
    verdict in the folder."""
    _fill(tmp_path, RUN_FOLDERS)
    (tmp_path / 'params.yaml').write_text('{}')
    for name in ('report.md', 'results.json', 'tracking_error.png'):
        (tmp_path / name).write_text('earlier report')
    (tmp_path / 'notes.txt').write_text("the user's")
    removed = clear_previous_run(str(tmp_path))
    assert removed == list(RUN_FOLDERS) + ['report.md', 'results.json', 'tracking_error.png']
    assert sorted(p.name for p in tmp_path.iterdir()) == ['notes.txt', 'params.yaml']


def test_bags_in_a_folder_no_demo_wrote_are_refused_and_kept(tmp_path):
    _fill(tmp_path, ['bags'])
    with pytest.raises(DemoError, match='no earlier demo wrote'):
        clear_previous_run(str(tmp_path))
    assert (tmp_path / 'bags' / 'x').read_text() == 'earlier run'


def test_a_new_or_empty_folder_has_nothing_to_remove(tmp_path):
    assert clear_previous_run(str(tmp_path / 'new')) == []
    (tmp_path / 'bags').mkdir()
    assert clear_previous_run(str(tmp_path)) == []


def _demo(out, reported):
    """What write_failure reads of a Demo: its folder, results so far, timing, joints."""
    return SimpleNamespace(
        out=str(out),
        reported=reported,
        results={'payload_mass': np.float64(0.4), 'gains': {'kp': np.array([1.0, 2.0])}},
        timing={'excitation_wall_s': 12.5},
        robot=SimpleNamespace(joint_names=['a', 'b']),
        urdf='/robots/arm.urdf',
    )


def test_a_run_that_ends_early_reports_why_with_what_it_measured(tmp_path):
    write_failure(_demo(tmp_path, reported=False), 'the learner exited with -9')
    res = json.loads((tmp_path / 'results.json').read_text())
    assert res['verdict'] == {
        'passed': False,
        'failures': ['the learner exited with -9'],
        'delan_vs_pinocchio_rms': {},
    }
    assert res['payload_mass'] == 0.4 and res['gains']['kp'] == [1.0, 2.0]
    assert res['joint_names'] == ['a', 'b'] and res['timing']['excitation_wall_s'] == 12.5
    assert (
        'FAILED** before its evaluation: the learner exited'
        in (tmp_path / 'report.md').read_text()
    )


def test_a_failure_after_the_report_is_added_to_it(tmp_path):
    (tmp_path / 'report.md').write_text('# delan_ros demo report\n\nthe tables\n')
    (tmp_path / 'results.json').write_text(
        json.dumps({'verdict': {'passed': True, 'failures': []}, 'tracking': [1]})
    )
    write_failure(_demo(tmp_path, reported=True), 'the learning-curve replay published nothing')
    res = json.loads((tmp_path / 'results.json').read_text())
    assert res['verdict'] == {
        'passed': False,
        'failures': ['the learning-curve replay published nothing'],
    }
    assert res['tracking'] == [1]
    report = (tmp_path / 'report.md').read_text()
    assert report.startswith('# delan_ros demo report\n\nthe tables\n')
    assert 'FAILED** after the report: the learning-curve' in report
