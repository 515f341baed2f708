"""The torque matched to an estimated acceleration (delan_learning.torque_kernel)."""

import numpy as np
import pytest
from scipy.signal import savgol_coeffs

from delan_learning.data import complete_derivatives
from delan_learning.online import DelayedDifferentiator
from delan_learning.torque_kernel import interval_weights, matched_torque_uniform


def _integrate(a: np.ndarray, t: np.ndarray, q0=0.2, v0=-0.3):
    """Exact q, qd at ``t`` under the acceleration ``a[j]`` held over ``(t[j-1], t[j]]``."""
    q, v = [q0], [v0]
    for j in range(1, len(t)):
        h = t[j] - t[j - 1]
        q.append(q[-1] + v[-1] * h + 0.5 * a[j] * h * h)
        v.append(v[-1] + a[j] * h)
    return np.array(q), np.array(v)


@pytest.mark.parametrize('deriv', [1, 2])
def test_kernel_reproduces_the_filter_exactly_on_piecewise_constant_acceleration(deriv):
    rng = np.random.default_rng(deriv)
    m = 15
    t = np.cumsum(rng.uniform(0.003, 0.005, m))  # jittered stamps
    tc = t[m // 2]
    V = np.vander(t - tc, 4, increasing=True)
    P = np.linalg.pinv(V)
    coef = P[deriv] * (2.0 if deriv == 2 else 1.0)
    W = interval_weights(t, coef, tc, deriv)
    assert W[0] == 0.0
    assert np.isclose(W.sum(), 1.0)
    for _ in range(5):
        a = rng.normal(size=m) * 10
        q, v = _integrate(a, t)
        x = q if deriv == 2 else v
        assert np.isclose(coef @ x, W @ a, rtol=1e-9, atol=1e-9)


def test_uniform_matching_keeps_edges_and_constants():
    dt = 0.004
    coef = savgol_coeffs(15, 3, deriv=2, delta=dt, use='dot')
    tau = np.tile([1.0, -2.0], (100, 1))
    assert np.allclose(matched_torque_uniform(tau, dt, coef, 2), tau)
    rough = np.random.default_rng(0).normal(size=(100, 2))
    out = matched_torque_uniform(rough, dt, coef, 2)
    assert np.array_equal(out[:7], rough[:7]) and np.array_equal(out[-7:], rough[-7:])
    assert out[7:-7].std() < 0.6 * rough[7:-7].std()  # a low-pass average


def _pd_rough_motion(seed=0, T=2000, dt=0.004):
    """A unit mass under a rough (PD-like, noisy) torque: qdd = tau exactly, tau held over each
    step, reported with the state that ends the step."""
    rng = np.random.default_rng(seed)
    t = dt * np.arange(T)
    smooth = np.sin(2 * np.pi * 0.5 * t) * 3
    tau = smooth + rng.normal(size=T) * 1.5  # changes every step
    q, v = _integrate(tau, t)
    return t, q[:, None], v[:, None], tau[:, None]


def test_matched_torque_removes_the_floor_offline():
    t, q, qd, tau = _pd_rough_motion()
    base = {'t': t, 'q': q, 'qd': qd, 'tau': tau}
    raw = complete_derivatives(base, match_torque=False)
    matched = complete_derivatives(base)
    sel = slice(20, -20)

    def err(d):
        return np.mean((d['qdd'][sel] - d['tau'][sel]) ** 2) / np.var(d['tau'][sel])

    assert err(raw) > 0.05  # the raw torque's step-to-step part is unexplained
    assert err(matched) < 1e-6  # qdd = tau holds for the matched pair
    assert np.array_equal(raw['tau'], tau)
    # given qdd: the torque is left alone
    kept = complete_derivatives(dict(base, qdd=raw['qdd']))
    assert np.array_equal(kept['tau'], tau)


def test_matched_torque_removes_the_floor_online():
    t, q, qd, tau = _pd_rough_motion(seed=1)
    for match, bound in ((False, None), (True, 1e-8)):
        diff = DelayedDifferentiator(window=15, match_torque=match)
        out = [diff.push(t[i], q[i], qd[i], tau[i]) for i in range(len(t))]
        out = [s for s in out if s is not None]
        qdd = np.array([s.qdd for s in out])
        tm = np.array([s.tau for s in out])
        e = np.mean((qdd - tm) ** 2) / np.var(tm)
        if bound is None:
            assert e > 0.05
        else:
            assert e < bound
