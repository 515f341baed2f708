"""Where the compiled controller and its model library are, or why the tests skip."""

import ctypes
import os

import pytest

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), '..', '..'))
PREFIX = os.path.join(ROOT, 'install', 'delan_control_rt')
NODE = os.path.join(PREFIX, 'lib', 'delan_control_rt', 'torque_controller_rt')
LIBRARY = os.path.join(PREFIX, 'lib', 'libdelan_rt.so')


def require(path: str) -> str:
    """``path``, or the test is skipped: the C build is optional (make setup warns when it
    fails, the rest of the suite works without it)."""
    if not os.path.exists(path):
        pytest.skip(f'delan_control_rt is not built ({path} missing; make setup builds it)')
    return path


def library():
    """The model library (loaders, DeLaN kernel, RNEA, mass matrix products) with its C
    signatures."""
    lib = ctypes.CDLL(require(LIBRARY))
    lib.delan_model_load.restype = ctypes.c_void_p
    lib.delan_model_load.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
    lib.delan_model_free.argtypes = [ctypes.c_void_p]
    lib.delan_model_dof.argtypes = [ctypes.c_void_p]
    lib.delan_model_version.restype = ctypes.c_int64
    lib.delan_model_version.argtypes = [ctypes.c_void_p]
    lib.delan_model_joint_name.restype = ctypes.c_char_p
    lib.delan_model_joint_name.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.delan_model_inverse.argtypes = [ctypes.c_void_p] + [ctypes.c_void_p] * 4
    lib.rigid_body_load.restype = ctypes.c_void_p
    lib.rigid_body_load.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
    lib.rigid_body_free.argtypes = [ctypes.c_void_p]
    for f in ('rigid_body_dof', 'rigid_body_source'):
        getattr(lib, f).argtypes = [ctypes.c_void_p]
    lib.rigid_body_continuous.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.rigid_body_joint_name.restype = ctypes.c_char_p
    lib.rigid_body_joint_name.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.rigid_body_inverse.argtypes = [ctypes.c_void_p] + [ctypes.c_void_p] * 4
    lib.rigid_body_mass_times.argtypes = [ctypes.c_void_p] + [ctypes.c_void_p] * 3
    return lib
