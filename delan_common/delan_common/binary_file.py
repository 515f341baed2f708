"""The frame of the plain binary files the compiled controller (``delan_control_rt``) reads.

Every such file (the DeLaN weights of :mod:`delan_learning.c_export`, the rigid-body model of
:mod:`delan_common.rigid_body_export`) is, little-endian and without padding::

    offset  size  field
    0       8     magic (8 bytes, one per kind of file)
    8       4     uint32 format version
    12      4     uint32 0x01020304 (byte-order check)
    16      ...   the kind's header and payload
    end-8   8     uint64 FNV-1a 64 of every byte before it

A reader (``delan_control_rt/src/binary_file.c``) refuses another magic, a version newer than it
knows, a wrong byte order and a wrong checksum. Files are written to a temporary name and
renamed, so a reader never sees half of one.
"""

from __future__ import annotations

import os
import struct
import tempfile

#: the byte-order mark after the version
BYTE_ORDER_MARK = 0x01020304


def fnv1a64(data: bytes) -> int:
    """64-bit FNV-1a: a checksum the C reader computes in four lines."""
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def framed(magic: bytes, version: int, body: bytes) -> bytes:
    """A file's bytes: ``magic``, ``version``, the byte-order mark, ``body`` and the
    checksum."""
    if len(magic) != 8:
        raise ValueError(f'a magic has 8 bytes, not {len(magic)}')
    head = magic + struct.pack('<II', version, BYTE_ORDER_MARK) + body
    return head + struct.pack('<Q', fnv1a64(head))


def write_atomic(path: str, data: bytes) -> str:
    """Write ``data`` to ``path`` through a temporary file in the same folder and a rename (a
    reader sees the old file or the whole new one); returns ``path``."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(
        dir=folder, prefix='.' + os.path.basename(path) + '.', suffix='.tmp'
    )
    try:
        with os.fdopen(fd, 'wb') as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path
