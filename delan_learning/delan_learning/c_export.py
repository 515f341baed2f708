"""A trained DeLaN as a plain binary file for the compiled controller (``delan_control_rt``).

The compiled node evaluates the same C kernel as :mod:`delan_learning.c_kernel`
(``delan_kernel.c``, whose ``delan_t`` it fills from this file), so the file holds exactly the
arrays ``NumpyDelan._c_setup`` hands that kernel, without torch or Python on the control path.

Layout, version 3 (all little-endian, no padding; the frame -- magic, version, byte order,
checksum -- is :mod:`delan_common.binary_file`'s)::

    offset  size  field
    0       8     magic b'DELANCW\\0'
    8       4     uint32 format version (the oldest that holds the model, below)
    12      4     uint32 0x01020304 (byte-order check)
    16      40    int32 n, m, n_ang, K, W, depth, P, n_l, act (0 softplus, 1 tanh), friction
                  (the law, :data:`~delan_learning.friction.FRICTION_IDS`: 0 none,
                  1 coulomb_viscous, 2 stribeck)
    56      32    float64 v_scale, eps, diag_offset, inv_smooth
    88      8     int64 model_version (the learner's, 0 when unknown)
    96      4     int32 role (:data:`ROLES`: 0 a whole ``delan`` model, 1 the residual of a
                  ``delan_residual``, added to the URDF's rigid-body model)
    100     ...   joint names: n times (uint32 byte length, UTF-8 bytes)
            ...   int32 arrays: feat (n), is_ang (n), rows (n_l), cols (n_l)
            ...   float64 arrays: w_in (K m W), w_hid (max(depth-1, 1) K W W; zeros when
                  depth is 1), bias (depth K W), head (K W P), head_b (P), friction
                  coefficients (F n: the rows of friction.COEFFICIENTS, F = 5 for stribeck,
                  else 2 -- viscous, coulomb; zeros without friction), root (n_l)
    end-8   8     uint64 FNV-1a 64 of every byte before it

Versions 1 and 2 have no role field (the joint names start at 96) and hold whole models: the
same networks are a fraction of the torque as a residual's and the whole of it as a model's,
so a reader checks the role against the model it was asked for and refuses the other one.
Version 1 has friction 0 or 1 only (the field was ``use_friction``, the coefficients
``viscous (n), coulomb (n)``); version 2 adds ``friction`` 2. A file is written in the oldest
version that holds it: a whole model without the Stribeck law as version 1, with it as version
2, byte for byte what older writers wrote and what older readers read; a residual as version 3,
which older readers refuse (newer) rather than take for a whole model. A reader refuses another
magic, a newer version, a law or role its version does not have, a size other than the one the
dimensions give and a wrong checksum. The file is written to a temporary name and renamed, so a
reader never sees half of it.
"""

from __future__ import annotations

import struct
from typing import Optional, Sequence

import numpy as np

from delan_common.binary_file import fnv1a64, framed, write_atomic
from delan_learning.friction import FRICTION_IDS

__all__ = [
    'FORMAT_VERSION',
    'MAGIC',
    'ROLES',
    'SUFFIX',
    'export_bytes',
    'export_delan',
    'file_role',
    'fnv1a64',
]

MAGIC = b'DELANCW\0'
#: the newest format written and read
FORMAT_VERSION = 3
#: the first format version of each friction law number
FRICTION_SINCE = {0: 1, FRICTION_IDS['coulomb_viscous']: 1, FRICTION_IDS['stribeck']: 2}
#: the role field's value of each model kind whose networks the file can hold
ROLES = {'delan': 0, 'delan_residual': 1}
#: the first format version of each role (before version 3 a file holds a whole model)
ROLE_SINCE = {0: 1, 1: 3}
#: the first format version with the role field (at offset 96)
ROLE_FIELD_SINCE = 3
#: the suffix the exported file takes beside a checkpoint (``model.pt`` -> ``model.pt.cw``)
SUFFIX = '.cw'

_INTS = ('n', 'm', 'n_ang', 'K', 'W', 'depth', 'P', 'n_l', 'act', 'friction')
_DOUBLES = ('v_scale', 'eps', 'diag_offset', 'inv_smooth')
_INT_ARRAYS = ('feat', 'is_ang', 'rows', 'cols')
_DOUBLE_ARRAYS = ('w_in', 'w_hid', 'bias', 'head', 'head_b', 'friction_coef', 'root')
_HEADER_BYTES = 96


def weights_path(checkpoint: str) -> str:
    """Where the exported weights of ``checkpoint`` go (and where the compiled node looks)."""
    return checkpoint + SUFFIX


def export_bytes(
    model, joint_names: Optional[Sequence[str]] = None, model_version: int = 0
) -> bytes:
    """The file's bytes for a :class:`~delan_learning.lagrangian.DelanModel` (a
    ``delan_residual``'s residual too: its kind is the file's role). ValueError for a model of
    another kind, whose networks the compiled node would follow as a DeLaN's."""
    from delan_learning.numpy_delan import NumpyDelan

    kind = getattr(model, 'kind', 'delan')
    if kind not in ROLES:
        raise ValueError(f'a {kind!r} model has no compiled weights (only {list(ROLES)})')
    role = ROLES[kind]
    fast = NumpyDelan(model, joint_names, use_c=False)
    _, st, _, arrays, _, _ = fast._c_setup(model, None)
    n = st.n
    version = max(FRICTION_SINCE[st.friction], ROLE_SINCE[role])
    names = [s.encode('utf-8') for s in fast.joint_names]
    parts = [
        struct.pack('<10i', *(getattr(st, k) for k in _INTS)),
        struct.pack('<4d', *(getattr(st, k) for k in _DOUBLES)),
        struct.pack('<q', int(model_version)),
    ]
    if version >= ROLE_FIELD_SINCE:
        parts.append(struct.pack('<i', role))
    parts += [struct.pack('<I', len(s)) + s for s in names]
    sizes = {'w_hid': max(st.depth - 1, 1) * st.K * st.W * st.W}
    for k in _INT_ARRAYS:
        parts.append(np.ascontiguousarray(arrays[k], dtype='<i4').tobytes())
    for k in _DOUBLE_ARRAYS:
        a = np.ascontiguousarray(arrays[k], dtype='<f8').ravel()
        if k in sizes and a.size != sizes[k]:
            a = np.zeros(sizes[k])
        parts.append(a.tobytes())
    assert len(names) == n
    return framed(MAGIC, version, b''.join(parts))


def export_delan(
    model, path: str, joint_names: Optional[Sequence[str]] = None, model_version: int = 0
) -> str:
    """Write ``model`` (a DelanModel) to ``path`` atomically; returns ``path``."""
    return write_atomic(path, export_bytes(model, joint_names, model_version))


def file_role(path: str) -> Optional[str]:
    """The model kind whose networks the file at ``path`` holds (``delan`` for versions 1 and
    2), from its header alone; None when it is missing, not a weights file, of a version or
    role this module does not know or too short to say: a file to write again, not to trust."""
    try:
        with open(path, 'rb') as f:
            head = f.read(_HEADER_BYTES + 4)
    except OSError:
        return None
    if len(head) < _HEADER_BYTES or head[:8] != MAGIC:
        return None
    version = struct.unpack_from('<I', head, 8)[0]
    if not 1 <= version <= FORMAT_VERSION:
        return None
    if version < ROLE_FIELD_SINCE:
        return 'delan'
    if len(head) < _HEADER_BYTES + 4:
        return None
    role = struct.unpack_from('<i', head, _HEADER_BYTES)[0]
    return {v: k for k, v in ROLES.items()}.get(role)
