import math

import numpy as np
import pytest

from delan_learning.online import DelayedDifferentiator, ReplayBuffer, Sample, held_out
from delan_learning.torque_kernel import interval_weights


def stream(diff, t, q, qd, tau):
    out = []
    for k in range(t.size):
        s = diff.push(t[k], q[k], qd[k], tau[k])
        if s is not None:
            out.append(s)
    return out


def test_delayed_differentiator_is_accurate_with_jittered_stamps():
    rng = np.random.default_rng(0)
    t = np.cumsum(0.002 + 0.0004 * rng.uniform(-1, 1, 2000))
    w = np.array([1.3, 2.1])
    q = np.sin(w * t[:, None])
    qd = w * np.cos(w * t[:, None])
    tau = np.zeros_like(q)
    out = stream(DelayedDifferentiator(window=11), t, q, qd, tau)
    assert len(out) == t.size - 10
    ts = np.array([s.t for s in out])
    qdd = np.stack([s.qdd for s in out])
    assert np.array_equal(ts, t[5:-5])  # delayed by window // 2 samples
    np.testing.assert_allclose(qdd, -(w**2) * np.sin(w * ts[:, None]), atol=2e-3)
    # velocity smoothed from q when asked
    out_v = stream(DelayedDifferentiator(window=11, smooth_velocity=True), t, q, qd, tau)
    np.testing.assert_allclose(
        np.stack([s.qd for s in out_v]), w * np.cos(w * ts[:, None]), atol=1e-4
    )


def test_delayed_differentiator_equals_a_least_squares_fit_of_each_window():
    rng = np.random.default_rng(1)
    t = np.cumsum(0.001 + 0.0003 * rng.uniform(-1, 1, 300))
    q = rng.normal(size=(300, 3)).cumsum(axis=0) * 1e-3
    qd, tau = rng.normal(size=(300, 3)), rng.normal(size=(300, 3))
    out = stream(
        DelayedDifferentiator(window=21, smooth_velocity=True, source='position'), t, q, qd, tau
    )
    for k in (0, 57, len(out) - 1):
        win = slice(k, k + 21)
        tc = t[k + 10]
        c = np.polynomial.polynomial.polyfit(t[win] - tc, q[win], 3)  # (4, 3)
        np.testing.assert_allclose(out[k].qdd, 2.0 * c[2], rtol=1e-6, atol=1e-9)
        np.testing.assert_allclose(out[k].qd, c[1], rtol=1e-6, atol=1e-9)
        np.testing.assert_allclose(out[k].q, c[0], rtol=1e-6, atol=1e-12)
        # the torque averaged with the kernel of that qdd estimate (test_torque_kernel.py)
        W = interval_weights(
            t[win], 2.0 * np.linalg.pinv(np.vander(t[win] - tc, 4, increasing=True))[2], tc, 2
        )
        np.testing.assert_allclose(out[k].tau, W @ tau[win], rtol=1e-6, atol=1e-9)
        assert out[k].t == tc
    raw = stream(
        DelayedDifferentiator(window=21, match_torque=False, source='position'), t, q, qd, tau
    )
    np.testing.assert_array_equal(raw[57].tau, tau[57 + 10])  # the centre sample's, as is


def test_qdd_from_the_velocities_is_their_fitted_derivative_and_far_less_noisy():
    """The default source: qdd is the derivative at the centre of a cubic fitted to qd (what
    the offline path does), its torque averaged with that estimate's kernel; on an arm's
    noise (0.1 mrad, 2 mrad/s) it is far less noisy than twice differentiated positions."""
    rng = np.random.default_rng(2)
    t = np.cumsum(0.004 + 0.0005 * rng.uniform(-1, 1, 400))
    q = rng.normal(size=(400, 2)).cumsum(axis=0) * 1e-3
    qd, tau = rng.normal(size=(400, 2)), rng.normal(size=(400, 2))
    out = stream(DelayedDifferentiator(window=15), t, q, qd, tau)
    for k in (0, 99, len(out) - 1):
        win = slice(k, k + 15)
        tc = t[k + 7]
        c = np.polynomial.polynomial.polyfit(t[win] - tc, qd[win], 3)
        np.testing.assert_allclose(out[k].qdd, c[1], rtol=1e-6, atol=1e-9)
        W = interval_weights(
            t[win], np.linalg.pinv(np.vander(t[win] - tc, 4, increasing=True))[1], tc, 1
        )
        np.testing.assert_allclose(out[k].tau, W @ tau[win], rtol=1e-6, atol=1e-9)
        np.testing.assert_array_equal(out[k].qd, qd[k + 7])
    # a smooth motion measured with noise: error of qdd from each source
    t = np.arange(3000) * 0.004
    w = np.array([0.9, 1.7])
    q_true, qd_true = np.sin(w * t[:, None]), w * np.cos(w * t[:, None])
    q_meas = q_true + 1e-4 * rng.normal(size=q_true.shape)
    qd_meas = qd_true + 2e-3 * rng.normal(size=q_true.shape)
    err = {}
    for source in ('velocity', 'position'):
        res = stream(
            DelayedDifferentiator(window=15, source=source),
            t,
            q_meas,
            qd_meas,
            np.zeros_like(q_true),
        )
        ts = np.array([s.t for s in res])
        qdd = np.stack([s.qdd for s in res])
        err[source] = np.sqrt(np.mean((qdd + w**2 * np.sin(w * ts[:, None])) ** 2))
    assert err['velocity'] < 0.5 * err['position'], err


@pytest.mark.parametrize('source', ['velocity', 'position'])
@pytest.mark.parametrize('epoch', [0.0, 1.8e9])  # sim time; a wall-clock stamp
def test_a_filter_reused_on_even_stamps_gives_what_a_fresh_fit_gives(source, epoch):
    """Evenly stamped windows reuse the last window's filter; stamps off by more than the
    tolerance (a driver's jitter, a late message) are fitted afresh. Either way each sample
    equals a fit of its window alone (a new differentiator fed only that window)."""
    rng = np.random.default_rng(1)
    n, window = 300, 9
    t = epoch + 0.002 * np.arange(n)
    t[150:] += 0.0003  # one late state: the windows around it are uneven
    q, qd, tau = (rng.standard_normal((n, 3)) for _ in range(3))
    out = stream(DelayedDifferentiator(window=window, source=source), t, q, qd, tau)
    assert len(out) == n - window + 1
    for k, s in enumerate(out):
        fresh = stream(
            DelayedDifferentiator(window=window, source=source),
            t[k : k + window],
            q[k : k + window],
            qd[k : k + window],
            tau[k : k + window],
        )[0]
        assert fresh.t == s.t
        # a wall-clock stamp's float rounding (~0.2 us) moves a fresh fit by up to ~2e-3 of its
        # size, the late state (0.3 ms) by ~0.1: a wrongly reused filter would show
        tol = 1e-9 if epoch == 0.0 else 1e-2
        scale = np.abs(fresh.qdd).max()
        np.testing.assert_allclose(s.qdd, fresh.qdd, rtol=0, atol=tol * scale)
        np.testing.assert_allclose(s.tau, fresh.tau, rtol=0, atol=tol * np.abs(fresh.tau).max())


def test_unknown_acceleration_source():
    with pytest.raises(ValueError, match='source'):
        DelayedDifferentiator(window=5, source='torque')


def test_gaps_and_backwards_stamps_restart_the_window():
    d = DelayedDifferentiator(window=5, max_gap=0.05)
    z = np.zeros(1)
    outs = [d.push(t, z, z, z) for t in (0.0, 0.01, 0.02, 0.03, 0.04, 0.5, 0.51, 0.49, 0.5)]
    assert outs[4] is not None and all(o is None for o in outs[5:])
    assert d.restarts == 2


def test_bad_window():
    with pytest.raises(ValueError):
        DelayedDifferentiator(window=4)


def test_replay_buffer_is_bounded_and_keeps_newest():
    buf = ReplayBuffer(capacity=100, n_joints=2)
    nbytes = buf.nbytes
    for k in range(250):
        v = np.full(2, float(k))
        buf.add(Sample(k, v, v, v, v))
    assert buf.size == 100 and buf.total_added == 250 and buf.nbytes == nbytes
    assert sorted(buf.all()['q'][:, 0]) == list(range(150, 250))
    b = buf.sample(32, np.random.default_rng(0))
    assert b['tau'].shape == (32, 2) and np.all(b['q'] >= 150)
    # rows by stamp, across the ring's wrap; limit keeps the newest
    assert sorted(buf.since(199.5)['q'][:, 0]) == list(range(200, 250))
    assert sorted(buf.since(199.5, limit=10)['tau'][:, 1]) == list(range(240, 250))
    assert sorted(buf.since(100.0, limit=60)['q'][:, 0]) == list(range(190, 250))
    assert len(buf.since(1e9)['q']) == 0 and buf.newest_t == 249.0
    buf.clear()
    assert buf.newest_t == -math.inf


def test_held_out_chunks_are_one_in_k_and_not_locked_to_a_period():
    for every in (2, 5, 10):
        start = 1_796_000_000  # wall-clock stamps, as a real driver sends
        flags = [held_out(start + c + 0.5, every) for c in range(20_000)]
        assert abs(sum(flags) / len(flags) - 1.0 / every) < 0.01
        # a whole chunk goes one way
        assert all(
            held_out(start + c + f, every) == flags[c]
            for c in range(50)
            for f in (0.0, 0.3, 0.999)
        )
    # a motion repeated every 10 s (or 5, 20): over a minute or two, every phase second is
    # trained on and every one is also validated -- never the same ones held out forever
    for period in (5, 10, 20):
        phases = {c % period for c in range(1000, 1000 + 12 * period) if held_out(c, 5)}
        assert phases == set(range(period)) or len(phases) >= period - 1, (period, phases)
        trained = {c % period for c in range(1000, 1000 + 12 * period) if not held_out(c, 5)}
        assert trained == set(range(period))


def test_divergence_needs_the_factor_and_the_floor():
    from delan_learning.online import diverged

    # a real excursion: 50x worse and far above the floor
    assert diverged(0.5, 0.01, factor=20.0, floor=1e-3)
    # an arm at rest: losses of 1e-8 .. 1e-5 jump 50x between rounds without meaning anything
    assert not diverged(8.7e-7, 1.7e-8, factor=20.0, floor=1e-3)
    # above the floor but not the factor worse
    assert not diverged(0.05, 0.01, factor=20.0, floor=1e-3)
    # a floor of 0 is the plain ratio test
    assert diverged(8.7e-7, 1.7e-8, factor=20.0, floor=0.0)


def test_split_buffers_hold_out_chunks_and_hand_out_a_rounds_data(monkeypatch):
    from delan_learning import online
    from delan_learning.online import SplitBuffers

    bufs = SplitBuffers(capacity=500, validation_every=5, n_joints=2, windows=True)
    assert bufs.val.capacity == 100 and bufs.train.capacity == 500  # at least 100
    assert bufs.newest_t() == -math.inf
    t = np.arange(0.0, 20.0, 0.01)  # 2000 samples, 20 one-second chunks
    for k, tk in enumerate(t):
        bufs.add(Sample(float(tk), np.full(2, tk), np.zeros(2), np.zeros(2), np.full(2, k)))
    n_train, n_val = bufs.sizes()
    assert (n_train, n_val) == (500, 100) and bufs.size == 600
    assert all(held_out(x, 5) for x in bufs.val.all()['q'][:, 0])
    assert not any(held_out(x, 5) for x in bufs.train.all()['q'][:, 0])
    assert bufs.newest_t() == t[-1]
    rng = np.random.default_rng(0)
    data, val = bufs.round_data(rng, n=64)
    assert len(data['q']) == 64 and len(val['q']) == 100
    runs = bufs.training_data(rng, n=64, min_run=5)
    assert 't' in runs and np.all(np.bincount(runs['traj']) >= 5)
    monkeypatch.setattr(online, 'VALIDATION_SAMPLES', 30)  # a random subset of a larger buffer
    assert len(bufs.round_data(rng, n=8)[1]['q']) == 30
    recent = bufs.validation_since(t[-1] - 3.0)
    assert len(recent['q']) == 30 and np.all(recent['q'][:, 0] > t[-1] - 3.0)
    bufs.clear()
    assert bufs.sizes() == (0, 0)
