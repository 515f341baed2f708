"""The learner's checkpoint folder (ROS-free): versions written with their compiled weights,
pruned to ``keep_versions``, numbered on from the folder's highest after a restart, partial
checkpoints of a save cut short removed, and what it refuses to continue from."""

from __future__ import annotations

import os
import struct

import pytest
import torch

from delan_learning.c_export import export_bytes, file_role, weights_path
from delan_learning.checkpoint import CheckpointError, load_model
from delan_learning.models import build_model
from delan_learning.version_store import VERSION_RE, VersionStore
from delan_testing.logs import Log

JOINTS = ['shoulder', 'elbow']


def _model(kind: str = 'delan', seed: int = 0):
    torch.manual_seed(seed)
    return build_model(kind, ['revolute', 'revolute'], width=8, depth=1).double().eval()


def _store(path, keep: int = 3, kind: str = 'delan', log=None) -> VersionStore:
    return VersionStore(str(path), keep, JOINTS, kind, log or Log())


def _meta(version: int, model_id: str = 'lineage0') -> dict:
    return {'joint_names': JOINTS, 'model_id': model_id, 'model_version': version}


def test_versions_are_written_numbered_with_weights_and_pruned_to_keep_versions(tmp_path):
    store = _store(tmp_path / 'ck', keep=2)
    assert os.path.isdir(store.directory) and store.newest() == 0 and store.versions() == []
    paths = [store.write(_model(seed=v), v, _meta(v)) for v in (1, 2, 3)]
    assert [os.path.basename(p) for p in paths] == [f'model_v0000{v}.pt' for v in (1, 2, 3)]
    assert all(os.path.isfile(weights_path(p)) for p in paths)  # the compiled controller's
    model, meta = load_model(paths[-1])
    assert meta['model_version'] == 3 and meta['model_id'] == 'lineage0'
    store.prune()
    assert store.versions() == [(2, paths[1]), (3, paths[2])]
    assert not os.path.exists(paths[0]) and not os.path.exists(weights_path(paths[0]))
    assert store.newest() == 3
    # keep_versions may change at runtime
    store.keep_versions = 1
    store.prune()
    assert store.versions() == [(3, paths[2])]


def test_each_version_of_a_kind_it_commands_has_weights_of_its_role(tmp_path):
    """A residual's compiled weights say so (format version 3, role field 1), which a compiled
    node following a whole model refuses; a whole model's are written as before (version 1).
    Either equals the export of the checkpoint's model."""
    for kind, version, role in (('delan', 1, None), ('delan_residual', 3, 1)):
        store = _store(tmp_path / kind, kind=kind)
        path = store.write(_model(kind), 7, _meta(7))
        assert file_role(weights_path(path)) == kind
        with open(weights_path(path), 'rb') as f:
            data = f.read()
        assert struct.unpack_from('<I', data, 8)[0] == version
        if role is not None:
            assert struct.unpack_from('<i', data, 96)[0] == role
        assert data == export_bytes(load_model(path)[0], JOINTS, 7)


@pytest.mark.parametrize('kind', ['hamiltonian', 'mlp'])
def test_a_variant_version_has_no_compiled_weights(tmp_path, kind):
    """Not even weights an earlier delan run left under the version's name."""
    _store(tmp_path).write(_model(), 1, _meta(1))
    path = _store(tmp_path, kind=kind).write(_model(kind), 1, _meta(1))
    assert os.path.isfile(path) and not os.path.exists(weights_path(path))


def test_numbering_goes_on_from_the_highest_on_disk_after_a_restart(tmp_path):
    first = _store(tmp_path, keep=5)
    for v in (1, 2, 7):
        first.write(_model(), v, _meta(v))
    (tmp_path / 'model_v00099.pt.bak').write_text('not a version')  # not matched
    (tmp_path / 'saved_model.pt').write_text('not a version either')
    again = _store(tmp_path, keep=5)
    assert again.newest() == 7
    assert [v for v, _ in again.versions()] == [1, 2, 7]
    assert VERSION_RE.search(again.path(8)) and again.path(8).endswith('model_v00008.pt')


def test_partial_checkpoints_of_a_save_cut_short_are_removed_on_start(tmp_path):
    store = _store(tmp_path)
    store.write(_model(), 1, _meta(1))
    partial = tmp_path / '.model_v00002.pt.abc123.tmp'  # save_model's temporary file
    partial.write_bytes(b'half a checkpoint')
    other = tmp_path / '.something_else.tmp'
    other.write_bytes(b'not ours')
    log = Log()
    again = _store(tmp_path, log=log)
    assert not partial.exists() and other.exists()
    assert [v for v, _ in again.versions()] == [1]
    assert any(level == 'warning' and str(partial) in m for level, m in log.lines)


def test_read_checks_joints_and_kind_and_names_a_lineage(tmp_path):
    store = _store(tmp_path)
    path = store.write(_model(), 1, {'joint_names': JOINTS})  # no model_id in it
    model, meta = store.read(path)
    assert model.kind == 'delan' and len(meta['model_id']) == 12
    assert store.read(path)[1]['model_id'] != meta['model_id']  # a new one each time
    with pytest.raises(CheckpointError, match="'delan' model, the learner learns delan_residual"):
        _store(tmp_path, kind='delan_residual').read(path)
    with pytest.raises(CheckpointError, match='were expected'):
        VersionStore(str(tmp_path), 3, ['elbow', 'shoulder'], 'delan', Log()).read(path)


def test_the_newest_readable_version_is_found_past_a_corrupt_one(tmp_path):
    store = _store(tmp_path, keep=10)
    assert store.newest_readable() is None
    for v in (1, 2):
        store.write(_model(seed=v), v, _meta(v))
    (tmp_path / 'model_v00003.pt').write_bytes(b'truncated by a power loss')
    log = Log()
    store.log = log
    version, path, (model, meta) = store.newest_readable()
    assert version == 2 and path == store.path(2) and meta['model_version'] == 2
    assert store.newest() == 3  # numbering still goes on past the unreadable file
    assert any('skipping' in m and 'model_v00003.pt' in m for _, m in log.lines)


def test_copy_saves_a_version_again_by_default_beside_the_versions(tmp_path):
    store = _store(tmp_path)
    src = store.write(_model(), 1, _meta(1))
    dst = store.copy(src, '')
    assert dst == os.path.join(store.directory, 'saved_model.pt')
    assert load_model(dst)[1]['model_version'] == 1
    elsewhere = store.copy(src, str(tmp_path / 'sub' / 'mine.pt'))
    assert os.path.isfile(elsewhere)
    assert [v for v, _ in store.versions()] == [1]
    with pytest.raises(CheckpointError):
        store.copy(str(tmp_path / 'missing.pt'), '')
