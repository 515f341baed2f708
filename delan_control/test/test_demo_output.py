"""A demo run into an output folder an earlier run used: the earlier run's bags, checkpoints,
logs and report go first (the demo reads its bags back as a whole, and two runs' joint states,
both stamped from sim time 0, read together interleave into data no model explains); a folder
holding bags the demo did not write is refused, not emptied."""

from __future__ import annotations

import pytest

from delan_control.demo import RUN_FOLDERS, DemoError, clear_previous_run


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
