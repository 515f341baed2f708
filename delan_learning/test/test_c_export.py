"""The exported weights file (delan_learning.c_export) has the documented layout: header
fields, array sizes that add up to the file, and a checksum over everything before it; a model
with the default friction law is written as version 1, byte for byte that version's layout."""

import os
import struct

import numpy as np
import pytest
import torch

from delan_learning.c_export import (
    FORMAT_VERSION,
    MAGIC,
    export_bytes,
    export_delan,
    fnv1a64,
    weights_path,
)
from delan_learning.lagrangian import DelanModel
from delan_learning.numpy_delan import NumpyDelan


@pytest.mark.parametrize(
    'friction_model,version,law,rows', [('coulomb_viscous', 1, 1, 2), ('stribeck', 2, 2, 5)]
)
def test_layout_and_checksum(tmp_path, friction_model, version, law, rows):
    torch.manual_seed(0)
    m = DelanModel(
        ['revolute', 'prismatic'], width=8, depth=2, friction_model=friction_model
    ).double()
    path = export_delan(
        m.eval(), weights_path(str(tmp_path / 'model.pt')), ['shoulder', 'slide'], 3
    )
    assert path.endswith('model.pt.cw') and os.listdir(tmp_path) == ['model.pt.cw']
    data = open(path, 'rb').read()
    assert data[:8] == MAGIC
    got_version, bom = struct.unpack_from('<II', data, 8)
    n, mf, n_ang, K, W, depth, P, n_l, act, fric = struct.unpack_from('<10i', data, 16)
    assert (got_version, bom) == (version, 0x01020304) and version <= FORMAT_VERSION
    assert (n, mf, n_ang, K, W, depth, P, n_l, act, fric) == (2, 3, 1, 2, 8, 2, 4, 3, 0, law)
    assert struct.unpack_from('<q', data, 88)[0] == 3
    names = 4 + len('shoulder') + 4 + len('slide')
    ints = 4 * (2 * n + 2 * n_l)
    doubles = 8 * (
        K * mf * W + (depth - 1) * K * W * W + depth * K * W + K * W * P + P + rows * n + n_l
    )
    assert len(data) == 96 + names + ints + doubles + 8
    assert struct.unpack('<Q', data[-8:])[0] == fnv1a64(data[:-8])


@pytest.mark.parametrize('friction', [True, False])
def test_default_law_is_version_1_byte_for_byte(friction):
    """Version 1 as its writer laid it out (``use_friction``, then ``viscous``, ``coulomb``
    among the arrays), packed here from the model's own arrays."""
    torch.manual_seed(1)
    m = DelanModel(['revolute'] * 3, width=8, depth=2, friction=friction).double().eval()
    fast = NumpyDelan(m, use_c=False)
    _, st, _, arrays, _, _ = fast._c_setup(m, None)
    viscous, coulomb = (c.detach().numpy() for c in m.friction_coefficients())
    ints = (st.n, st.m, st.n_ang, st.K, st.W, st.depth, st.P, st.n_l, st.act, int(friction))
    body = struct.pack('<10i', *ints)
    body += struct.pack('<4d', st.v_scale, st.eps, st.diag_offset, st.inv_smooth)
    body += struct.pack('<q', 5)
    body += b''.join(struct.pack('<I', 1) + s.encode() for s in 'abc')
    for k in ('feat', 'is_ang', 'rows', 'cols'):
        body += np.ascontiguousarray(arrays[k], dtype='<i4').tobytes()
    doubles = [arrays[k] for k in ('w_in', 'w_hid', 'bias', 'head', 'head_b')]
    for a in doubles + [viscous, coulomb, arrays['root']]:
        body += np.ascontiguousarray(a, dtype='<f8').tobytes()
    head = MAGIC + struct.pack('<II', 1, 0x01020304) + body
    v1 = head + struct.pack('<Q', fnv1a64(head))
    assert export_bytes(m, ['a', 'b', 'c'], 5) == v1
