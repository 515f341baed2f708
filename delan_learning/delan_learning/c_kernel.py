"""The compiled batch-1 DeLaN inverse dynamics: ``delan_kernel.c`` (package data; the same
arithmetic as :class:`~delan_learning.numpy_delan.NumpyDelan`, written out as loops), built
once per machine with the system C compiler and loaded with ctypes. The compiled controller
(``delan_control_rt``) compiles the same file."""

from __future__ import annotations

import ctypes
import hashlib
import os
import subprocess
import sys
import tempfile
import warnings

#: the kernel's C source, beside this module
KERNEL_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'delan_kernel.c')

_C_FLAGS = ['-O3', '-shared', '-fPIC', '-std=c99']
_c_kernel_cache: dict = {}


class CModel(ctypes.Structure):
    """The kernel's ``delan_t``: sizes, pointers to the weight arrays, scalars (field order as
    in ``delan_kernel.c``)."""

    _fields_ = (
        [
            (name, ctypes.c_int)
            for name in ('n', 'm', 'n_ang', 'K', 'W', 'depth', 'P', 'n_l', 'act', 'friction')
        ]
        + [
            (name, ctypes.c_void_p)
            for name in (
                'feat',
                'is_ang',
                'rows',
                'cols',
                'w_in',
                'w_hid',
                'bias',
                'head',
                'head_b',
                'friction_coef',
                'root',
            )
        ]
        + [(name, ctypes.c_double) for name in ('v_scale', 'eps', 'diag_offset', 'inv_smooth')]
    )


def c_kernel():
    """The compiled kernel's ``delan_inverse`` (ctypes), or None where it cannot be built.

    Built once per machine with the system C compiler (``$CC``, else ``cc``) into
    ``$DELAN_CACHE_DIR`` (default ``~/.cache/delan_learning``), named by a hash of source and
    flags, written to a temporary file and renamed (safe with concurrent first uses). Set
    ``DELAN_NO_C_KERNEL=1`` to use numpy only. Portable flags (no ``-march=native``), so a cache
    on a shared home directory is safe across CPUs.
    """
    if 'fn' in _c_kernel_cache:
        return _c_kernel_cache['fn']
    fn = None
    if os.environ.get('DELAN_NO_C_KERNEL', '') not in ('1', 'true', 'yes'):
        try:
            fn = _build_c_kernel()
        except Exception as err:  # no compiler, read-only cache, ...
            warnings.warn(
                f'delan_learning: C fast path unavailable, using numpy ({err})',
                RuntimeWarning,
                stacklevel=3,
            )
    _c_kernel_cache['fn'] = fn
    return fn


def _build_c_kernel():
    cc = os.environ.get('CC', 'cc')
    with open(KERNEL_SOURCE, encoding='utf-8') as f:
        source = f.read()
    key = hashlib.sha1((source + ' '.join(_C_FLAGS) + cc + sys.platform).encode())
    cache = os.environ.get('DELAN_CACHE_DIR') or os.path.join(
        os.path.expanduser('~'), '.cache', 'delan_learning'
    )
    os.makedirs(cache, exist_ok=True)
    lib = os.path.join(cache, f'delan_kernel_{key.hexdigest()[:16]}.so')
    if not os.path.isfile(lib):
        with tempfile.TemporaryDirectory(dir=cache) as tmp:
            c_file = os.path.join(tmp, 'delan_kernel.c')
            with open(c_file, 'w') as f:
                f.write(source)
            out = os.path.join(tmp, 'k.so')
            proc = subprocess.run(
                [cc, *_C_FLAGS, '-o', out, c_file, '-lm'],
                capture_output=True,
                text=True,
                timeout=120,
            )
            if proc.returncode != 0:
                raise RuntimeError(f'{cc} failed: {proc.stderr.strip()[:300]}')
            os.replace(out, lib)
    fn = ctypes.CDLL(lib).delan_inverse
    fn.argtypes = [ctypes.POINTER(CModel)] + [ctypes.c_void_p] * 4
    fn.restype = ctypes.c_int
    return fn
