"""The compiled node's reader of delan_learning.c_export files: the kernel on the loaded
weights equals the torch model (float64) with either friction law, and a truncated, foreign,
newer or inconsistent file is refused."""

import ctypes
import struct

import numpy as np
import pytest
import torch
from rt_build import library

from delan_learning.c_export import FORMAT_VERSION, export_bytes, export_delan, fnv1a64
from delan_testing.models import random_delan

CASES = [
    (['revolute'] * 7, False, 'softplus', 2, 'coulomb_viscous'),
    (['revolute', 'prismatic', 'continuous'], True, 'tanh', 1, 'coulomb_viscous'),
    (['revolute'] * 2, False, 'softplus', 3, 'coulomb_viscous'),
    (['revolute'] * 7, False, 'softplus', 2, 'stribeck'),
    (['revolute', 'prismatic', 'continuous'], True, 'tanh', 1, 'stribeck'),
]


def delan(types, shared, activation, depth, friction_model='coulomb_viscous', seed=0):
    return random_delan(
        types,
        seed=seed,
        width=16,
        depth=depth,
        shared_trunk=shared,
        activation=activation,
        friction_model=friction_model,
    )


def load(lib, path):
    err = ctypes.create_string_buffer(512)
    handle = lib.delan_model_load(str(path).encode(), err, len(err))
    return handle, err.value.decode()


def resigned(data: bytes, offset: int, value: bytes) -> bytes:
    """``data`` with ``value`` written at ``offset`` and a matching checksum."""
    body = bytearray(data[:-8])
    body[offset : offset + len(value)] = value
    return bytes(body) + struct.pack('<Q', fnv1a64(bytes(body)))


@pytest.mark.parametrize('types,shared,activation,depth,friction_model', CASES)
def test_loaded_kernel_equals_torch(tmp_path, types, shared, activation, depth, friction_model):
    lib = library()
    m = delan(types, shared, activation, depth, friction_model)
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
        for k in range(8):  # the last ones at the velocities of the Stribeck bump
            width = 2.0 if k < 4 else 0.1
            q, qd, qdd = (np.ascontiguousarray(rng.uniform(-1, 1, n) * w) for w in (2, width, 2))
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
    stribeck = export_bytes(
        delan(['revolute'] * 3, False, 'softplus', 2, 'stribeck'), ['a', 'b', 'c']
    )
    assert struct.unpack_from('<I', stribeck, 8)[0] == FORMAT_VERSION == 2
    body = data[:-8]
    newer = resigned(data, 8, struct.pack('<I', FORMAT_VERSION + 1))
    # the friction law is the header's 10th int32; its coefficients sit before root (n_l)
    last_coef = len(stribeck) - 8 - 8 * 6 - 8
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
        'newer stribeck': (resigned(stribeck, 8, struct.pack('<I', 3)), 'format version'),
        'corrupt': (bytes(flipped), 'checksum'),
        'stribeck in version 1': (resigned(stribeck, 8, struct.pack('<I', 1)), 'friction law'),
        'unknown law': (resigned(data, 52, struct.pack('<i', 3)), 'friction law'),
        'negative law': (resigned(data, 52, struct.pack('<i', -1)), 'friction law'),
        'stribeck law, 2 rows': (resigned(data, 52, struct.pack('<i', 2)), 'friction law'),
        'zero Stribeck velocity': (
            resigned(stribeck, last_coef, struct.pack('<d', 0.0)),
            'friction coefficient',
        ),
        'negative Coulomb level': (
            resigned(stribeck, last_coef - 8 * 3 * 3, struct.pack('<d', -1.0)),
            'friction coefficient',
        ),
    }
    for name, (blob, reason) in cases.items():
        path = tmp_path / name
        path.write_bytes(blob)
        handle, err = load(lib, path)
        assert not handle, name
        assert reason in err, (name, err)
    handle, err = load(lib, tmp_path / 'missing')
    assert not handle and 'cannot open' in err
    for blob in (data, stribeck):
        good = tmp_path / 'good'
        good.write_bytes(blob)
        handle, err = load(lib, good)
        assert handle, err
        lib.delan_model_free(handle)
