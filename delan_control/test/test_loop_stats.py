"""The control loop's self-timing: percentiles from the histogram, missed cycles, windows."""

import numpy as np

from delan_control.loop_stats import (
    BIN_US,
    N_BINS,
    LoopStats,
    histogram_text,
    parse_histogram,
    percentile_us,
)

MS = 1_000_000


def _run(stats, latencies_us, period_ns=MS, t0=10**12):
    for k, lat in enumerate(latencies_us):
        s = t0 + k * period_ns
        stats.received([s])
        stats.command(s, s + int(lat * 1000))


def test_percentiles_within_one_bin():
    rng = np.random.default_rng(0)
    lat = rng.uniform(50, 900, size=5000)
    stats = LoopStats()
    _run(stats, lat)
    for q in (50, 99):
        got = percentile_us(stats.hist, q)
        assert np.percentile(lat, q) <= got <= np.percentile(lat, q) + BIN_US + 1e-9
    assert stats.max_us == max(lat) or abs(stats.max_us - max(lat)) < 1e-3
    assert stats.missed == 0 and stats.states == 5000


def test_missed_cycles_are_states_published_before_the_previous_answer():
    stats = LoopStats()
    # every 10th command comes 1.5 periods late: the next state was out before it
    lat = [1500 if k % 10 == 0 else 200 for k in range(100)]
    _run(stats, lat)
    assert stats.missed == 10
    assert percentile_us(stats.hist, 99) >= 1500


def test_windows_reset_and_the_cumulative_histogram_round_trips():
    stats = LoopStats()
    _run(stats, [100] * 50)
    w = stats.snapshot()['window']
    assert w['count'] == 50 and w['p50_us'] == 110 and w['max_us'] == 100
    _run(stats, [30000] * 5, t0=2 * 10**12)  # beyond the histogram: overflow bin
    w = stats.snapshot()['window']
    assert w['count'] == 5 and w['p99_us'] == float('inf') and w['max_us'] == 30000
    assert stats.snapshot()['window']['count'] == 0
    hist = parse_histogram(histogram_text(stats.hist))
    np.testing.assert_array_equal(hist, stats.hist)
    assert hist[N_BINS] == 5 and percentile_us(hist, 50) == 110


def test_negative_latency_is_counted_not_recorded():
    stats = LoopStats()
    stats.received([5 * MS])
    stats.command(5 * MS, 4 * MS)
    assert stats.clock_skew == 1 and stats.hist.sum() == 0


def test_superseded_states_are_missed():
    stats = LoopStats()
    stats.received([0])
    stats.command(0, 200_000)
    stats.received([1 * MS, 2 * MS, 3 * MS])  # a backlog: only the newest is answered
    stats.command(3 * MS, 3 * MS + 300_000)
    assert stats.states == 4 and stats.missed == 2


def test_snapshots_while_the_loop_writes():
    """The diagnostics timer reads while the loop thread writes (a controller once died of
    'number of non-zero array elements changed during function execution')."""
    import threading

    stats, n = LoopStats(), 200_000
    done = threading.Event()

    def loop():
        for k in range(n):
            stats.received([k * 1000])
            stats.command(k * 1000, k * 1000 + (k % 3000) * 1000)
        done.set()

    thread = threading.Thread(target=loop)
    thread.start()
    counted = 0
    while not done.is_set():
        s = stats.snapshot()
        histogram_text(s['hist'])
        counted += s['window']['count']
        # consistent: at most the state being answered right now lacks its command
        assert 0 <= s['states'] - int(s['hist'].sum()) - s['clock_skew'] <= 1
    thread.join()
    counted += stats.snapshot()['window']['count']
    assert counted == n and stats.states == n
