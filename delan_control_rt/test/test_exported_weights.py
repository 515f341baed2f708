"""The compiled node's reader of delan_learning.c_export files: the kernel on the loaded
weights equals the torch model (float64) with either friction law and either role (a whole
delan model, a delan_residual's residual), the role read back as written, and a truncated,
foreign, newer or inconsistent file is refused."""

import ctypes
import os
import struct

import numpy as np
import pytest
import torch
from rt_build import library

from delan_control.rt_params import ensure_weights
from delan_learning.c_export import (
    FORMAT_VERSION,
    export_bytes,
    export_delan,
    file_role,
    fnv1a64,
    weights_path,
)
from delan_learning.checkpoint import save_model
from delan_learning.lagrangian import DelanModel
from delan_learning.residual_model import ResidualDelanModel
from delan_testing.models import random_delan

CASES = [
    (['revolute'] * 7, False, 'softplus', 2, 'coulomb_viscous'),
    (['revolute', 'prismatic', 'continuous'], True, 'tanh', 1, 'coulomb_viscous'),
    (['revolute'] * 2, False, 'softplus', 3, 'coulomb_viscous'),
    (['revolute'] * 7, False, 'softplus', 2, 'stribeck'),
    (['revolute', 'prismatic', 'continuous'], True, 'tanh', 1, 'stribeck'),
]


def delan(
    types,
    shared,
    activation,
    depth,
    friction_model='coulomb_viscous',
    seed=0,
    model_class=DelanModel,
):
    return random_delan(
        types,
        seed=seed,
        width=16,
        depth=depth,
        shared_trunk=shared,
        activation=activation,
        friction_model=friction_model,
        model_class=model_class,
    )


def reader():
    """The model library, with the signature of the role's getter (not in rt_build's list)."""
    lib = library()
    lib.delan_model_kind.restype = ctypes.c_char_p
    lib.delan_model_kind.argtypes = [ctypes.c_void_p]
    return lib


def load(lib, path):
    err = ctypes.create_string_buffer(512)
    handle = lib.delan_model_load(str(path).encode(), err, len(err))
    return handle, err.value.decode()


def version_of(data: bytes) -> int:
    return struct.unpack_from('<I', data, 8)[0]


def as_version(data: bytes, version: int, role: int = 0) -> bytes:
    """``data`` laid out as format ``version``: the role field (offset 96, from version 3)
    dropped or inserted with ``role``, the version and the checksum written again; what a
    writer of that version wrote for the same networks."""
    body = bytearray(data[:-8])
    if version_of(data) >= 3:
        del body[96:100]
    if version >= 3:
        body[96:96] = struct.pack('<i', role)
    body[8:12] = struct.pack('<I', version)
    return bytes(body) + struct.pack('<Q', fnv1a64(bytes(body)))


def assert_kernel_equals_torch(lib, handle, m):
    """The loaded kernel's inverse dynamics equal ``m``'s (float64) on random states."""
    n = m.n_dof
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


def resigned(data: bytes, offset: int, value: bytes) -> bytes:
    """``data`` with ``value`` written at ``offset`` and a matching checksum."""
    body = bytearray(data[:-8])
    body[offset : offset + len(value)] = value
    return bytes(body) + struct.pack('<Q', fnv1a64(bytes(body)))


@pytest.mark.parametrize('types,shared,activation,depth,friction_model', CASES)
def test_loaded_kernel_equals_torch(tmp_path, types, shared, activation, depth, friction_model):
    lib = reader()
    m = delan(types, shared, activation, depth, friction_model)
    names = [f'j{i}' for i in range(len(types))]
    path = export_delan(m, str(tmp_path / 'w.cw'), names, model_version=7)
    handle, err = load(lib, path)
    assert handle, err
    try:
        n = len(types)
        assert lib.delan_model_dof(handle) == n
        assert lib.delan_model_version(handle) == 7
        assert lib.delan_model_kind(handle) == b'delan'
        assert [lib.delan_model_joint_name(handle, i).decode() for i in range(n)] == names
        assert_kernel_equals_torch(lib, handle, m)
    finally:
        lib.delan_model_free(handle)


@pytest.mark.parametrize('friction_model', ['coulomb_viscous', 'stribeck'])
def test_the_role_round_trips_and_old_versions_hold_whole_models(tmp_path, friction_model):
    """A residual is written as version 3 with its role, a whole model as before (version 1,
    or 2 with the Stribeck law); the reader gives each back with its kind and kernel, reads a
    file of version 1 or 2 (no role field) as a whole model, as an older writer meant it, and a
    version 3 file by its role."""
    lib = reader()
    whole_version = 2 if friction_model == 'stribeck' else 1
    for model_class, kind, version in (
        (DelanModel, 'delan', whole_version),
        (ResidualDelanModel, 'delan_residual', 3),
    ):
        m = delan(['revolute'] * 2, False, 'softplus', 2, friction_model, 5, model_class)
        path = export_delan(m, str(tmp_path / f'{kind}.cw'), ['a', 'b'], model_version=4)
        data = open(path, 'rb').read()
        assert version_of(data) == version and file_role(path) == kind
        written = {
            'as written': (data, kind),
            'without role': (as_version(data, whole_version), 'delan'),
        }
        for role, role_kind in enumerate(('delan', 'delan_residual')):
            written[f'role {role}'] = (as_version(data, 3, role), role_kind)
        for name, (blob, expect) in written.items():
            copy = tmp_path / 'copy.cw'
            copy.write_bytes(blob)
            handle, err = load(lib, copy)
            assert handle, (kind, name, err)
            try:
                assert lib.delan_model_kind(handle).decode() == expect, (kind, name)
                assert file_role(str(copy)) == expect, (kind, name)
                assert lib.delan_model_version(handle) == 4
                assert_kernel_equals_torch(lib, handle, m)
            finally:
                lib.delan_model_free(handle)


def test_ensure_weights_writes_the_checkpoints_role(tmp_path):
    """The launch files' export writes a checkpoint's kind as the role, and writes again a
    residual's weights that a writer without roles left (version 1: a whole model), though
    newer than the checkpoint; a whole model's file is left as it is."""
    lib = reader()
    for model_class, kind in ((DelanModel, 'delan'), (ResidualDelanModel, 'delan_residual')):
        ckpt = str(tmp_path / f'{kind}.pt')
        save_model(
            delan(['revolute'] * 2, False, 'softplus', 2, model_class=model_class),
            ckpt,
            {'joint_names': ['a', 'b']},
        )
        path = ensure_weights(ckpt, kind)
        assert path == weights_path(ckpt) and file_role(path) == kind
        handle, err = load(lib, path)
        assert handle and lib.delan_model_kind(handle).decode() == kind, err
        lib.delan_model_free(handle)
        old = as_version(open(path, 'rb').read(), 1)
        with open(path, 'wb') as f:
            f.write(old)
        os.utime(path, (os.path.getmtime(ckpt) + 10,) * 2)
        assert ensure_weights(ckpt, kind) == path
        assert (open(path, 'rb').read() == old) == (kind == 'delan'), kind
        assert file_role(path) == kind


def test_refuses_truncated_foreign_and_newer_files(tmp_path):
    lib = reader()
    data = export_bytes(delan(['revolute'] * 3, False, 'softplus', 2), ['a', 'b', 'c'])
    stribeck = export_bytes(
        delan(['revolute'] * 3, False, 'softplus', 2, 'stribeck'), ['a', 'b', 'c']
    )
    assert (version_of(data), version_of(stribeck), FORMAT_VERSION) == (1, 2, 3)
    body = data[:-8]
    newer = resigned(data, 8, struct.pack('<I', FORMAT_VERSION + 1))
    # the friction law is the header's 10th int32; its coefficients sit before root (n_l)
    last_coef = len(stribeck) - 8 - 8 * 6 - 8
    flipped = bytearray(data)
    flipped[200] ^= 0x40
    # a consistent checksum over a truncated body: only the size check can refuse it
    short = body[:-16] + struct.pack('<Q', fnv1a64(body[:-16]))
    # version 3's header ends before its role field
    no_role = resigned(data[:96] + bytes(8), 8, struct.pack('<I', 3))
    cases = {
        'truncated': (data[:-100], 'checksum'),
        'short': (short, 'truncated'),
        'empty': (b'', 'too short'),
        'foreign': (b'PK\x03\x04' + data[4:], 'not a DeLaN'),
        'newer': (newer, 'format version'),
        'newer stribeck': (as_version(stribeck, FORMAT_VERSION + 1, 0), 'format version'),
        'unknown role': (as_version(data, 3, 2), 'unknown model role 2'),
        'negative role': (as_version(stribeck, 3, -1), 'unknown model role -1'),
        'no role field': (no_role, 'too short'),
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
    for blob in (data, stribeck):  # versions 1 and 2: whole models
        good = tmp_path / 'good'
        good.write_bytes(blob)
        handle, err = load(lib, good)
        assert handle, err
        assert lib.delan_model_kind(handle) == b'delan'
        lib.delan_model_free(handle)
