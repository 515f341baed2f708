"""The compiled node's reference (src/reference.c) against delan_control.trajectories: the same
q, qd, qdd of a quintic waypoint trajectory anywhere (before, on, between and after the
waypoints) and the same rejoin offset; bad waypoints refused."""

import ctypes

import numpy as np
import pytest
from rt_build import library

from delan_control.trajectories import PiecewiseQuintic, rejoin_offset

P = ctypes.POINTER(ctypes.c_double)


def reference_lib():
    lib = library()
    lib.reference_create.restype = ctypes.c_void_p
    lib.reference_create.argtypes = [
        ctypes.c_int,
        ctypes.c_int,
        P,
        P,
        P,
        P,
        ctypes.c_char_p,
        ctypes.c_int,
    ]
    lib.reference_free.argtypes = [ctypes.c_void_p]
    lib.reference_sample.argtypes = [ctypes.c_void_p, ctypes.c_double, P, P, P]
    lib.reference_rejoin.restype = ctypes.c_void_p
    lib.reference_rejoin.argtypes = [
        ctypes.c_int,
        ctypes.c_double,
        P,
        P,
        P,
        P,
        ctypes.c_double,
        ctypes.c_double,
    ]
    return lib


def ptr(a):
    return None if a is None else np.ascontiguousarray(a, dtype=np.float64).ctypes.data_as(P)


def sample(lib, handle, n, t):
    out = [np.zeros(n) for _ in range(3)]
    lib.reference_sample(handle, t, *(ptr(o) for o in out))
    return out


def create(lib, t, q, qd=None, qdd=None):
    err = ctypes.create_string_buffer(128)
    handle = lib.reference_create(
        q.shape[1], len(t), ptr(t), ptr(q), ptr(qd), ptr(qdd), err, len(err)
    )
    return handle, err.value.decode()


@pytest.mark.parametrize('given', ['all', 'positions'])
def test_sampled_as_the_python_reference(given):
    lib = reference_lib()
    rng = np.random.default_rng(4)
    n, k = 3, 7
    t = 100.0 + np.cumsum(rng.uniform(0.05, 0.8, k))
    q, qd, qdd = rng.normal(size=(k, n)), rng.normal(size=(k, n)), rng.normal(size=(k, n))
    if given == 'positions':
        qd = qdd = None
    handle, err = create(lib, t, q, qd, qdd)
    assert handle, err
    py = PiecewiseQuintic(t, q, qd, qdd)
    times = np.concatenate([t, rng.uniform(t[0] - 1, t[-1] + 1, 200), [t[0] - 1e-9]])
    try:
        for tt in times:
            want = [a[0] for a in py.sample(tt)]
            for got, w in zip(sample(lib, handle, n, tt), want):
                np.testing.assert_allclose(got, w, rtol=1e-12, atol=1e-9)
    finally:
        lib.reference_free(handle)


@pytest.mark.parametrize('dqdd', [None, np.array([-0.7, 0.2, 1.5])])
def test_rejoin_as_the_python_offset(dqdd):
    """From an offset at rest in acceleration (a stall on the reference) and from one that
    accelerates (a stall during a rejoin)."""
    lib = reference_lib()
    dq, dqd = np.array([0.3, -0.05, 2.0]), np.array([0.4, 0.0, -1.0])
    vmax = np.array([2.0, 0.0, np.inf])  # 0 and inf: 1 rad/s, as the Python side
    vmax_c = np.where(np.isfinite(vmax), vmax, 0.0)
    handle = lib.reference_rejoin(3, 50.0, ptr(dq), ptr(dqd), ptr(dqdd), ptr(vmax_c), 1.0, 0.25)
    assert handle
    py = rejoin_offset(50.0, dq, dqd, vmax, 1.0, 0.25, dqdd=dqdd)
    if dqdd is not None:
        np.testing.assert_allclose(py.sample(50.0)[2][0], dqdd)
    try:
        for tt in np.linspace(49.0, 50.0 + 1.2 * (py.end_time - 50.0), 60):
            want = [a[0] for a in py.sample(tt)]
            for got, w in zip(sample(lib, handle, 3, tt), want):
                np.testing.assert_allclose(got, w, rtol=1e-12, atol=1e-9)
    finally:
        lib.reference_free(handle)


@pytest.mark.parametrize(
    't,q,why',
    [
        ([0.0, 1.0, 1.0], np.zeros((3, 2)), 'increase strictly'),
        ([0.0, np.nan], np.zeros((2, 2)), 'non-finite'),
        ([0.0, 1.0], np.array([[0.0, np.inf], [0.0, 0.0]]), 'non-finite'),
    ],
)
def test_bad_waypoints_refused(t, q, why):
    handle, err = create(reference_lib(), np.array(t, dtype=float), q)
    assert not handle and why in err
