"""The exported weights file (delan_learning.c_export) has the documented layout: header
fields, array sizes that add up to the file, and a checksum over everything before it."""

import os
import struct

import torch

from delan_learning.c_export import FORMAT_VERSION, MAGIC, export_delan, fnv1a64, weights_path
from delan_learning.lagrangian import DelanModel


def test_layout_and_checksum(tmp_path):
    torch.manual_seed(0)
    m = DelanModel(['revolute', 'prismatic'], width=8, depth=2).double().eval()
    path = export_delan(m, weights_path(str(tmp_path / 'model.pt')), ['shoulder', 'slide'], 3)
    assert path.endswith('model.pt.cw') and os.listdir(tmp_path) == ['model.pt.cw']
    data = open(path, 'rb').read()
    assert data[:8] == MAGIC
    version, bom = struct.unpack_from('<II', data, 8)
    n, mf, n_ang, K, W, depth, P, n_l, act, fric = struct.unpack_from('<10i', data, 16)
    assert (version, bom) == (FORMAT_VERSION, 0x01020304)
    assert (n, mf, n_ang, K, W, depth, P, n_l, act, fric) == (2, 3, 1, 2, 8, 2, 4, 3, 0, 1)
    assert struct.unpack_from('<q', data, 88)[0] == 3
    names = 4 + len('shoulder') + 4 + len('slide')
    ints = 4 * (2 * n + 2 * n_l)
    doubles = 8 * (
        K * mf * W + (depth - 1) * K * W * W + depth * K * W + K * W * P + P + 2 * n + n_l
    )
    assert len(data) == 96 + names + ints + doubles + 8
    assert struct.unpack('<Q', data[-8:])[0] == fnv1a64(data[:-8])
