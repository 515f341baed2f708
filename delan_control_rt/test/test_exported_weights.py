"""The compiled node's reader of delan_learning.c_export files: the kernel on the loaded
weights equals the torch model (float64), and a truncated, foreign or newer file is refused."""

import ctypes
import struct

import numpy as np
import pytest
import torch
from rt_build import library

from delan_learning.c_export import FORMAT_VERSION, export_bytes, export_delan, fnv1a64
from delan_learning.lagrangian import DelanModel

CASES = [
    (['revolute'] * 7, False, 'softplus', 2),
    (['revolute', 'prismatic', 'continuous'], True, 'tanh', 1),
    (['revolute'] * 2, False, 'softplus', 3),
]


def delan(types, shared, activation, depth, seed=0):
    torch.manual_seed(seed)
    m = DelanModel(
        types, width=16, depth=depth, shared_trunk=shared, activation=activation
    ).double()
    with torch.no_grad():
        for p in m.parameters():
            p.normal_(0.0, 0.4)
        m.head_weight.mul_(m.head_mask)
    return m.eval()


def load(lib, path):
    err = ctypes.create_string_buffer(512)
    handle = lib.delan_model_load(str(path).encode(), err, len(err))
    return handle, err.value.decode()


@pytest.mark.parametrize('types,shared,activation,depth', CASES)
def test_loaded_kernel_equals_torch(tmp_path, types, shared, activation, depth):
    lib = library()
    m = delan(types, shared, activation, depth)
    names = [f'j{i}' for i in range(len(types))]
    path = export_delan(m, str(tmp_path / 'w.cw'), names, model_version=7)
    handle, err = load(lib, path)
    assert handle, err
    try:
        n = len(types)
        assert lib.delan_model_dof(handle) == n
        assert lib.delan_model_version(handle) == 7
        assert [lib.delan_model_joint_name(handle, i).decode() for i in range(n)] == names
        rng = np.random.default_rng(1)
        for _ in range(5):
            q, qd, qdd = (np.ascontiguousarray(rng.uniform(-2, 2, n)) for _ in range(3))
            tau = np.zeros(n)
            assert (
                lib.delan_model_inverse(
                    handle, q.ctypes.data, qd.ctypes.data, qdd.ctypes.data, tau.ctypes.data
                )
                == 0
            )
            with torch.no_grad():
                ref = m.inverse(*(torch.as_tensor(x)[None] for x in (q, qd, qdd)))[0].numpy()
            assert np.abs(tau - ref).max() <= 1e-10 * max(np.abs(ref).max(), 1.0)
    finally:
        lib.delan_model_free(handle)


def test_refuses_truncated_foreign_and_newer_files(tmp_path):
    lib = library()
    data = export_bytes(delan(['revolute'] * 3, False, 'softplus', 2), ['a', 'b', 'c'])
    body = data[:-8]
    newer = bytearray(body)
    newer[8:12] = struct.pack('<I', FORMAT_VERSION + 1)
    newer = bytes(newer) + struct.pack('<Q', fnv1a64(bytes(newer)))
    flipped = bytearray(data)
    flipped[200] ^= 0x40
    # a consistent checksum over a truncated body: only the size check can refuse it
    short = body[:-16] + struct.pack('<Q', fnv1a64(body[:-16]))
    cases = {
        'truncated': (data[:-100], 'checksum'),
        'short': (short, 'truncated'),
        'empty': (b'', 'too short'),
        'foreign': (b'PK\x03\x04' + data[4:], 'not a DeLaN'),
        'newer': (newer, 'format version'),
        'corrupt': (bytes(flipped), 'checksum'),
    }
    for name, (blob, reason) in cases.items():
        path = tmp_path / name
        path.write_bytes(blob)
        handle, err = load(lib, path)
        assert not handle, name
        assert reason in err, (name, err)
    handle, err = load(lib, tmp_path / 'missing')
    assert not handle and 'cannot open' in err
    good = tmp_path / 'good'
    good.write_bytes(data)
    handle, err = load(lib, good)
    assert handle, err
    lib.delan_model_free(handle)
