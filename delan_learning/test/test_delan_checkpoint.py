"""Checkpoints: round trip, refusal of foreign/corrupt/newer files, no code execution on load."""

import json
import os
import pickle

import pytest
import torch

import delan_learning
from delan_learning.checkpoint import FORMAT_VERSION, CheckpointError, load_model, save_model
from delan_learning.lagrangian import DelanModel
from delan_learning.mlp import MlpInverseModel

NAMES = ['shoulder', 'elbow']


def trained_like(kind='delan'):
    torch.manual_seed(3)
    m = (
        DelanModel(['revolute', 'prismatic'], width=16, friction=True)
        if kind == 'delan'
        else MlpInverseModel(['revolute', 'prismatic'], width=16)
    )
    with torch.no_grad():
        for p in m.parameters():
            p.add_(torch.randn_like(p) * 0.1)
        x = torch.randn(50, 2)
        m.init_scales(x, x * 2, x * 3, x * 4)
    return m.double().eval()


def states():
    g = torch.Generator().manual_seed(0)
    return [torch.randn(7, 2, generator=g, dtype=torch.float64) for _ in range(3)]


@pytest.mark.parametrize('kind', ['delan', 'mlp'])
def test_round_trip(tmp_path, kind):
    m = trained_like(kind)
    path = str(tmp_path / 'm.pt')
    save_model(
        m,
        path,
        {
            'joint_names': NAMES,
            'torque_normalisation': {'mean': [0.0, 1.0], 'std': [2.0, 3.0]},
            'note': 'hello',
        },
    )
    loaded, meta = load_model(path, expected_joint_names=NAMES)
    assert not loaded.training and loaded.dtype == torch.float64
    q, qd, qdd = states()
    with torch.no_grad():
        assert torch.equal(loaded.inverse(q, qd, qdd), m.inverse(q, qd, qdd))
    assert meta['model_kind'] == kind and meta['dof'] == 2
    assert meta['joint_names'] == NAMES and meta['joint_types'] == ['revolute', 'prismatic']
    assert meta['format_version'] == FORMAT_VERSION
    assert meta['library_version'] == delan_learning.__version__
    assert meta['hyperparameters']['width'] == 16
    assert meta['torque_normalisation']['std'] == [2.0, 3.0] and meta['note'] == 'hello'
    json.dumps(meta)  # JSON-able throughout
    assert loaded.joint_names == NAMES
    assert [f for f in os.listdir(tmp_path)] == ['m.pt']  # no temp file left behind


def test_float32_load(tmp_path):
    m = trained_like()
    save_model(m, str(tmp_path / 'm.pt'), {'joint_names': NAMES})
    m32, _ = load_model(str(tmp_path / 'm.pt'), dtype=torch.float32)
    q, qd, qdd = states()
    with torch.no_grad():
        a = m32.inverse(q.float(), qd.float(), qdd.float()).double()
        b = m.inverse(q, qd, qdd)
    assert float((a - b).abs().max() / b.abs().max()) < 1e-5


def test_wrong_joints_rejected(tmp_path):
    path = str(tmp_path / 'm.pt')
    save_model(trained_like(), path, {'joint_names': NAMES})
    with pytest.raises(CheckpointError, match='elbow.*expected'):
        load_model(path, expected_joint_names=['wrist', 'elbow'])
    with pytest.raises(CheckpointError):
        load_model(path, expected_joint_names=['elbow', 'shoulder'])  # order matters
    with pytest.raises(CheckpointError):
        load_model(path, expected_joint_names=['shoulder'])


def test_truncated_and_garbage_files(tmp_path):
    path = tmp_path / 'm.pt'
    save_model(trained_like(), str(path), {'joint_names': NAMES})
    data = path.read_bytes()
    for cut in (len(data) // 2, 100, 0):
        (tmp_path / 'cut.pt').write_bytes(data[:cut])
        with pytest.raises(CheckpointError, match='not a readable checkpoint'):
            load_model(str(tmp_path / 'cut.pt'))
    (tmp_path / 'junk.pt').write_bytes(os.urandom(4000))
    with pytest.raises(CheckpointError):
        load_model(str(tmp_path / 'junk.pt'))
    with pytest.raises(CheckpointError, match='no such checkpoint'):
        load_model(str(tmp_path / 'absent.pt'))


def test_newer_format_and_foreign_content(tmp_path):
    m = trained_like()
    good = str(tmp_path / 'good.pt')
    save_model(m, good, {'joint_names': NAMES})
    payload = torch.load(good, weights_only=True)
    payload['format_version'] = FORMAT_VERSION + 1
    torch.save(payload, tmp_path / 'newer.pt')
    with pytest.raises(CheckpointError, match='newer'):
        load_model(str(tmp_path / 'newer.pt'))
    torch.save(m.state_dict(), tmp_path / 'bare.pt')  # a bare state dict: not our format
    with pytest.raises(CheckpointError, match='not a delan_learning checkpoint'):
        load_model(str(tmp_path / 'bare.pt'))
    meta = json.loads(payload['metadata_json'])
    meta['hyperparameters']['width'] = 32  # weights no longer fit
    payload.update(format_version=FORMAT_VERSION, metadata_json=json.dumps(meta))
    torch.save(payload, tmp_path / 'mismatch.pt')
    with pytest.raises(CheckpointError, match='do not fit'):
        load_model(str(tmp_path / 'mismatch.pt'))


class _Payload:
    """Unpickling this calls open(marker, 'w'): creates the marker file."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, 'w'))


@pytest.mark.parametrize('writer', ['torch', 'pickle'])
def test_pickle_payload_is_not_executed(tmp_path, writer):
    marker = str(tmp_path / 'PWNED')
    path = str(tmp_path / 'evil.pt')
    content = {'format_version': 1, 'metadata_json': '{}', 'state_dict': _Payload(marker)}
    if writer == 'torch':
        torch.save(content, path)
    else:
        with open(path, 'wb') as f:
            pickle.dump(content, f)
    with pytest.raises(CheckpointError):
        load_model(path)
    assert not os.path.exists(marker)
    # the payload is live: an unsafe load would have run it
    if writer == 'torch':
        torch.load(path, weights_only=False)
    else:
        with open(path, 'rb') as f:
            pickle.load(f)
    assert os.path.exists(marker)


def test_save_is_atomic(tmp_path):
    path = str(tmp_path / 'm.pt')
    save_model(trained_like(), path, {'joint_names': NAMES})
    before = open(path, 'rb').read()
    with pytest.raises(TypeError):  # fails before anything is written
        save_model(trained_like(), path, {'joint_names': NAMES, 'bad': object()})
    with pytest.raises(ValueError):
        save_model(trained_like(), path, {'joint_names': ['just_one']})
    assert open(path, 'rb').read() == before
    assert sorted(os.listdir(tmp_path)) == ['m.pt']
    # replacing an existing checkpoint leaves exactly the new one
    m2 = trained_like('mlp')
    save_model(m2, path, {'joint_names': NAMES})
    assert load_model(path)[1]['model_kind'] == 'mlp'
    assert sorted(os.listdir(tmp_path)) == ['m.pt']


def test_checkpoint_without_per_joint_inertia_scales_loads_as_written(tmp_path):
    """A checkpoint from before ``h_rel`` existed: the model it describes had one inertia
    scale, which ``h_rel = 1`` reproduces."""
    m = trained_like()
    with torch.no_grad():
        m.h_rel.copy_(torch.tensor([3.0, 0.01]))  # per-joint scales in use
    path = str(tmp_path / 'old.pt')
    save_model(m, path, {'joint_names': NAMES})
    payload = torch.load(path, weights_only=True)
    del payload['state_dict']['h_rel']
    torch.save(payload, path)
    loaded, _ = load_model(path, expected_joint_names=NAMES)
    with torch.no_grad():
        m.h_rel.fill_(1.0)
        q, qd, qdd = states()
        assert torch.equal(loaded.inverse(q, qd, qdd), m.inverse(q, qd, qdd))
