"""Decimator: the rate a fast stream is published at (controller state, dynamics estimates)."""

import numpy as np
import pytest

from delan_common.decimation import Decimator


def passed(dec: Decimator, times) -> np.ndarray:
    return np.array([t for t in times if dec.due(t)])


def test_a_1khz_stream_keeps_the_rate_and_its_phase_exactly():
    # stamps as a driver sends them: float seconds since the epoch, each a rounding off its slot
    t = 1.7e9 + np.arange(5000) / 1000.0
    out = passed(Decimator(100.0), t)
    assert len(out) == 500
    np.testing.assert_allclose(np.diff(out), 0.01, atol=1e-6)


def test_jitter_does_not_lower_the_average_rate():
    rng = np.random.default_rng(0)
    t = np.cumsum(rng.uniform(0.0005, 0.0015, 20000))  # ~1 kHz, +-50 % jitter
    out = passed(Decimator(50.0), t)
    assert len(out) == pytest.approx(50.0 * (t[-1] - t[0]), abs=2)
    assert np.diff(out).min() > 0.5 / 50.0  # never two in a row


def test_a_slower_input_passes_every_event():
    t = np.arange(100) * 0.05  # 20 Hz in, 100 Hz wanted
    assert len(passed(Decimator(100.0), t)) == 100


def test_a_gap_restarts_the_schedule_without_a_burst():
    t = np.concatenate([np.arange(0.0, 1.0, 0.001), 3.0 + np.arange(0.0, 1.0, 0.001)])
    out = passed(Decimator(10.0), t)
    assert len(out) == 20
    after = out[out >= 3.0]
    assert after[0] == 3.0 and np.diff(after).min() >= 0.1 - 1e-9


def test_a_clock_that_goes_back_restarts():
    dec = Decimator(10.0)
    assert passed(dec, np.arange(100.0, 101.0, 0.01)).size == 10
    out = passed(dec, np.arange(0.0, 1.0, 0.01))  # a restarted sim: stamps from 0
    assert out.size == 10 and out[0] == 0.0


def test_rate_zero_is_off_and_a_new_rate_applies_at_once():
    dec = Decimator(0.0)
    assert dec.rate_hz == 0.0 and passed(dec, np.arange(0.0, 1.0, 0.001)).size == 0
    dec.rate_hz = 20.0
    assert dec.rate_hz == pytest.approx(20.0)
    assert passed(dec, np.arange(1.0, 2.0, 0.001)).size == 20
    dec.rate_hz = 0.0
    assert passed(dec, np.arange(2.0, 3.0, 0.001)).size == 0


@pytest.mark.parametrize('rate', [-1.0, float('nan'), float('inf')])
def test_invalid_rates_are_refused(rate):
    with pytest.raises(ValueError):
        Decimator(rate)
