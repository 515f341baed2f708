"""The sim's real-time pacing (``pacing.RealTimePacer``), driven by a hand-stepped wall clock."""

import pytest

from delan_control.pacing import FLAT_OUT_CHUNK_S, MAX_WAIT_S, RealTimePacer

DT = 1e-3


def _run(
    pacer: RealTimePacer,
    rtf: float,
    wall_end: float,
    wall_step: float,
    t: float = 0.0,
    wall: float = 0.0,
):
    """Step the physics as told while the wall clock goes from ``wall`` to ``wall_end``;
    returns the sim time reached and the sim seconds dropped."""
    dropped = 0.0
    while wall < wall_end - 1e-12:
        wall += wall_step
        while True:
            p = pacer.pace(wall, t, rtf)
            dropped += p.dropped_s
            if p.steps == 0:
                assert 0.0 <= p.wait_s <= MAX_WAIT_S
                break
            t += p.steps * DT
    return t, dropped


@pytest.mark.parametrize('rtf', [1.0, 0.5, 3.0])
def test_the_physics_follows_the_wall_clock_at_the_real_time_factor(rtf):
    pacer = RealTimePacer(DT, max_lag_s=0.2, resume_steps=1, wall=0.0, sim_t=0.0)
    t, dropped = _run(pacer, rtf, wall_end=2.0, wall_step=0.004)
    assert dropped == 0.0
    assert t == pytest.approx(2.0 * rtf, abs=DT)  # never ahead, at most one step behind
    assert t <= 2.0 * rtf + 1e-9


def test_nothing_is_due_ahead_of_time_and_the_wait_ends_at_the_next_step():
    pacer = RealTimePacer(DT, max_lag_s=0.2, resume_steps=1, wall=10.0, sim_t=5.0)
    assert pacer.pace(10.0, 5.0, 1.0).steps == 0
    p = pacer.pace(10.0004, 5.0, 1.0)
    assert p.steps == 0 and p.wait_s == pytest.approx(0.0006)
    assert pacer.pace(10.0010, 5.0, 1.0).steps == 1
    assert pacer.pace(10.0, 5.0, 1.0e-3).wait_s == MAX_WAIT_S  # a long wait comes in slices


def test_a_stall_beyond_the_lag_drops_the_backlog_and_the_schedule_resumes_from_there():
    pacer = RealTimePacer(DT, max_lag_s=0.2, resume_steps=1, wall=0.0, sim_t=0.0)
    t, _ = _run(pacer, 1.0, wall_end=1.0, wall_step=0.004)
    p = pacer.pace(1.0 + 0.15, t, 1.0)  # 150 ms behind: caught up step by step
    assert p.steps == pytest.approx(150, abs=1) and p.dropped_s == 0.0
    t += p.steps * DT
    p = pacer.pace(1.15 + 2.0, t, 1.0)  # a 2 s stall (a debugger): dropped
    assert p.steps == 1
    assert p.dropped_s == pytest.approx(2.0 - DT, abs=DT)
    t += DT
    t2, dropped = _run(pacer, 1.0, wall_end=4.15, wall_step=0.004, t=t, wall=3.15)
    assert dropped == 0.0
    assert t2 - t == pytest.approx(1.0, abs=2 * DT)  # real time again, without a catch-up


def test_a_rebase_applies_a_new_factor_from_now_without_catch_up_or_pause():
    pacer = RealTimePacer(DT, max_lag_s=0.2, resume_steps=1, wall=0.0, sim_t=0.0)
    t, _ = _run(pacer, 1.0, wall_end=1.0, wall_step=0.004)
    pacer.rebase(1.0, t)
    t2, dropped = _run(pacer, 2.0, wall_end=2.0, wall_step=0.004, t=t, wall=1.0)
    assert dropped == 0.0
    assert t2 - t == pytest.approx(2.0, abs=2 * DT)


def test_flat_out_steps_in_chunks_and_lockstep_sleeps_only_when_ahead():
    pacer = RealTimePacer(DT, max_lag_s=0.2, resume_steps=1, wall=0.0, sim_t=0.0)
    assert pacer.pace(0.0, 123.0, 0.0).steps == round(FLAT_OUT_CHUNK_S / DT)
    assert pacer.ahead_s(0.5, 1.0, 1.0) == pytest.approx(0.5)  # 1 s simulated after 0.5 s
    assert pacer.ahead_s(0.5, 0.25, 1.0) < 0  # behind: no sleep
    assert pacer.ahead_s(0.5, 1.0, 2.0) == pytest.approx(0.0)
    assert pacer.ahead_s(0.5, 9.0, 0.0) == 0.0  # flat out: never sleeps


@pytest.mark.parametrize('dt,lag,resume', [(0.0, 0.2, 1), (DT, 0.0, 1), (DT, 0.2, 0)])
def test_a_pacer_that_cannot_pace_is_refused(dt, lag, resume):
    with pytest.raises(ValueError):
        RealTimePacer(dt, lag, resume, wall=0.0, sim_t=0.0)
