"""The sim's physics loop (``sim_loop.SimLoop``) without ROS: a two-link plant, a wall clock
that moves only when the loop waits, and callbacks that record what would be published."""

from __future__ import annotations

import threading
from typing import Callable, List, Optional

import numpy as np
import pytest

from delan_control.plant import Plant
from delan_control.sim_loop import MAX_LAG_S, SimLoop, SimSettings
from delan_control.sim_status import SimStatus

DT = 1e-3
Q0 = [0.3, -0.2]


class FakeTime:
    """The loop's clock and waits: a wait that is not cut short by its event advances the
    clock by its timeout, then runs ``hooks`` (what happens meanwhile: a command arrives)."""

    def __init__(self):
        self.now = 0.0
        self.hooks: List[Callable[[], None]] = []

    def clock(self) -> float:
        return self.now

    def wait(self, event: threading.Event, timeout: float) -> bool:
        if not event.is_set():
            self.now += timeout
            for hook in list(self.hooks):
                hook()
        return event.is_set()


class Rig:
    """A loop over a two-link arm, recording ``(sim t, q)`` of every state and the sim time of
    every clock tick; ``on_state`` callables run after each state went out."""

    def __init__(
        self,
        until_wall: float,
        clock: bool = False,
        fail_states: int = 0,
        peers_ready: Callable[[], bool] = lambda: True,
        **settings,
    ):
        self.time = FakeTime()
        self.plant = Plant('two_link_arm.urdf', q0=Q0)
        self.settings = SimSettings(**settings)
        self.states: List[tuple] = []
        self.clocks: List[float] = []
        self.lags: List[tuple] = []
        self.errors: List[tuple] = []
        self.blowups = 0
        self.on_state: List[Callable[[], None]] = []
        self._fail = fail_states
        self.loop = SimLoop(
            self.plant,
            self.settings,
            publish_state=self._state,
            publish_clock=self.clocks_tick if clock else None,
            on_publish_error=lambda *a: self.errors.append(a),
            on_lag=lambda *a: self.lags.append(a),
            on_blowup=self._blowup,
            keep_running=lambda: self.time.now < until_wall,
            peers_ready=peers_ready,
            clock=self.time.clock,
            wait=self.time.wait,
        )

    def _state(self) -> None:
        if self._fail > 0:
            self._fail -= 1
            raise RuntimeError('publisher gone')
        self.states.append((self.plant.t, self.plant.q.copy()))
        for callback in self.on_state:
            callback()

    def clocks_tick(self) -> None:
        self.clocks.append(self.plant.t)

    def _blowup(self) -> None:
        self.blowups += 1

    def at(self, wall: float, action: Callable[[], None]) -> None:
        """Run ``action`` once, at the first wait ending at or after ``wall``."""
        done = [False]

        def hook():
            if not done[0] and self.time.now >= wall:
                done[0] = True
                action()

        self.time.hooks.append(hook)

    def run(self) -> 'Rig':
        self.loop.run()
        return self

    @property
    def stamps(self) -> np.ndarray:
        return np.array([t for t, _ in self.states])


# ---------------------------------------------------------------------- real time
@pytest.mark.parametrize('rtf', [1.0, 2.5])
def test_paced_physics_follows_the_wall_clock_and_publishes_at_the_rates(rtf):
    rig = Rig(
        until_wall=0.4, clock=True, real_time_factor=rtf, publish_rate=100.0, clock_rate=50.0
    ).run()
    assert rig.plant.t == pytest.approx(0.4 * rtf, abs=2 * DT)
    assert rig.loop.stats['steps'] == rig.plant.steps
    # a state every 10 ms of sim time from 0, a clock tick every 20 ms: the plant's own steps
    np.testing.assert_allclose(rig.stamps, 0.01 * np.arange(len(rig.states)), atol=1e-9)
    np.testing.assert_allclose(rig.clocks, 0.02 * np.arange(len(rig.clocks)), atol=1e-9)
    assert len(rig.states) == int(rig.plant.t / 0.01 + 1e-6) + 1
    assert rig.loop.stats['published'] == len(rig.states)
    assert rig.loop.stats['lag_events'] == 0 and rig.lags == []


def test_a_stall_drops_the_backlog_and_says_so():
    """Wall time jumps 1 s (a CPU stall): the physics resumes from there at real time instead of
    racing through the missed second."""
    rig = Rig(until_wall=1.4, publish_rate=100.0)

    def stall():
        rig.time.now += 1.0

    rig.at(0.2, stall)
    rig.run()
    stats = rig.loop.stats
    assert stats['lag_events'] == 1 and len(rig.lags) == 1
    dropped, rtf = rig.lags[0]
    assert rtf == 1.0 and dropped == pytest.approx(1.0, abs=0.01)
    assert stats['dropped_backlog_s'] == dropped
    assert rig.plant.t == pytest.approx(1.4 - dropped, abs=0.01)  # behind by the stall
    assert np.all(np.diff(rig.stamps) == pytest.approx(0.01))  # no burst of states, no gap
    assert MAX_LAG_S < dropped


def test_a_new_real_time_factor_applies_from_now_without_a_catch_up():
    rig = Rig(until_wall=1.0, real_time_factor=1.0)
    rig.at(0.5, lambda: setattr(rig.settings, 'real_time_factor', 4.0))
    rig.run()
    # 0.5 s at 1x, then 0.5 s at 4x -- not a schedule at 4x since the start (2.0 s behind)
    assert rig.plant.t == pytest.approx(0.5 + 4 * 0.5, abs=0.01)
    assert rig.loop.stats['lag_events'] == 0


# ---------------------------------------------------------------------- commands
def test_a_command_applies_clamped_until_it_times_out():
    rig = Rig(until_wall=0.3, command_timeout=0.05, publish_rate=100.0)
    torques: List[np.ndarray] = []
    rig.on_state.append(lambda: torques.append(rig.plant.last_torque.copy()))
    rig.loop.command(np.array([100.0, -1.0]))  # beyond the 40 N m limit of the shoulder
    rig.run()
    first = [tau for tau in torques[1:6]]
    assert all(list(tau) == [40.0, -1.0] for tau in first)  # clamped, applied
    assert list(torques[-1]) == [0.0, 0.0]  # no new command within 50 ms of sim time
    assert rig.loop.stats['timeouts'] == 1 and rig.loop.stats['commands'] == 1


def test_a_reset_puts_the_arm_back_while_time_goes_on():
    rig = Rig(until_wall=0.5, publish_rate=100.0, command_timeout=0.0)
    asked_at: List[float] = []

    def reset():
        asked_at.append(rig.plant.t)
        rig.loop.request_reset()

    rig.at(0.3, reset)
    rig.loop.command(np.array([20.0, 10.0]))  # a push, on all the time
    rig.run()
    away = np.array([np.abs(q - Q0).max() for _, q in rig.states])
    k = int(np.argmax(rig.stamps > asked_at[0]))  # the first state after the reset
    assert away[k - 1] > 0.1  # the push moved the arm away ...
    assert away[k] < 1e-3  # ... and it starts over, at most 10 ms from rest
    assert away[-1] > 0.01  # pushed away again
    assert np.all(np.diff(rig.stamps) > 0)  # sim time never jumps back


# ---------------------------------------------------------------------- lockstep
class Controller:
    """Answers every state with ``tau`` after ``latency`` wall seconds (or never: None)."""

    def __init__(self, rig: Rig, tau, latency: Optional[float]):
        self.rig, self.tau, self.latency = rig, np.asarray(tau, dtype=float), latency
        self.due: Optional[float] = None
        rig.time.hooks.append(self._answer)
        rig.on_state.append(self._state)

    def _state(self) -> None:
        if self.latency is not None:
            self.due = self.rig.time.now + self.latency

    def _answer(self) -> None:
        if self.due is not None and self.rig.time.now >= self.due:
            self.due = None
            self.rig.loop.command(self.tau)


def test_lockstep_steps_one_publish_period_per_answered_state():
    rig = Rig(until_wall=0.2, lockstep=True, publish_rate=100.0, lockstep_timeout=0.05)
    Controller(rig, [1.0, -0.5], latency=0.003)
    rig.run()
    n = len(rig.states)
    assert n >= 15
    np.testing.assert_allclose(rig.stamps, 0.01 * np.arange(n), atol=1e-9)
    assert rig.loop.stats['steps'] == 10 * rig.loop.stats['commands']
    assert rig.loop.stats['lockstep_timeouts'] == 0
    assert list(rig.plant.last_torque) == [1.0, -0.5]
    # paced at real time: the physics never runs ahead of the wall clock
    assert rig.plant.t <= rig.time.now + 1e-9


def test_lockstep_counts_unanswered_states_and_steps_on():
    rig = Rig(until_wall=0.5, lockstep=True, publish_rate=100.0, lockstep_timeout=0.05)
    rig.run()
    n = len(rig.states)
    assert n == pytest.approx(0.5 / 0.05, abs=1)  # each state waited the timeout out
    assert rig.loop.stats['lockstep_timeouts'] == n
    np.testing.assert_allclose(rig.stamps, 0.01 * np.arange(n), atol=1e-9)  # stepped on
    assert list(rig.plant.last_torque) == [0.0, 0.0]


@pytest.mark.parametrize('joined', [0.12, None])
def test_lockstep_sends_its_first_state_once_a_controller_is_connected(joined):
    """A state sent before DDS has matched the controller is lost and its answer with it: the
    first one waits for ``peers_ready`` (a controller connected at ``joined`` wall s), at most
    ``lockstep_timeout`` (no controller ever: then as without the wait)."""
    rig = Rig(
        until_wall=0.6,
        lockstep=True,
        publish_rate=100.0,
        lockstep_timeout=0.3,
        peers_ready=lambda: joined is not None and rig.time.now >= joined,
    )
    walls: List[float] = []
    rig.on_state.append(lambda: walls.append(rig.time.now))
    if joined is not None:
        Controller(rig, [0.5, 0.5], latency=0.003)
    rig.run()
    if joined is None:
        assert walls[0] == pytest.approx(0.3, abs=0.011)
        assert rig.loop.stats['lockstep_timeouts'] >= 1
        return
    assert walls[0] == pytest.approx(joined, abs=0.011)
    assert len(walls) >= 30 and np.all(np.diff(rig.stamps) > 0)
    assert rig.loop.stats['lockstep_timeouts'] == 0


def test_lockstep_holds_the_arm_until_the_first_command():
    rig = Rig(
        until_wall=0.3,
        lockstep=True,
        hold_until_commanded=True,
        publish_rate=100.0,
        lockstep_timeout=0.05,
    )
    rig.at(0.2, lambda: rig.loop.command(np.zeros(2)))
    rig.run()
    held = [t for t, q in rig.states if t == 0.0]
    assert len(held) >= 4 and all(np.all(q == Q0) for t, q in rig.states if t == 0.0)
    assert rig.plant.t > 0.0  # stepping since the command
    assert rig.loop.stats['lockstep_timeouts'] >= 4


# ---------------------------------------------------------------------- failures
def test_failing_publishes_are_counted_and_the_physics_goes_on():
    rig = Rig(until_wall=0.2, publish_rate=100.0, fail_states=5).run()
    assert rig.loop.stats['publish_errors'] == 5
    assert [(what, n) for what, _, n in rig.errors] == [('state', k) for k in range(1, 6)]
    assert rig.loop.stats['published'] == len(rig.states)
    assert rig.states[0][0] == pytest.approx(0.05)  # the first 5 were lost, not delayed
    assert rig.plant.t == pytest.approx(0.2, abs=2 * DT)


def test_a_failing_publish_while_stopping_is_not_an_error():
    rig = Rig(until_wall=1.0, fail_states=1)
    rig.loop.stop()  # shutting down: the initial state's publish fails, the loop ends
    rig.run()
    assert rig.loop.stats['publish_errors'] == 0 and rig.errors == []
    assert rig.plant.steps == 0


def test_a_blowup_is_reported_once_with_the_next_state():
    rig = Rig(until_wall=0.1, publish_rate=100.0)

    def blow_up():
        rig.plant.blowups += 1

    rig.at(0.05, blow_up)
    rig.run()
    assert rig.blowups == 1 and rig.loop.stats['blowups'] == 1


# ---------------------------------------------------------------------- status
def test_status_warns_about_the_trouble_of_the_last_period_only():
    rig = Rig(until_wall=0.5, publish_rate=100.0, real_time_factor=2.0)
    status = SimStatus(rig.loop, wall=0.0)
    rig.run()
    trouble, message, values = status.report(wall=0.5)
    assert not trouble and message.startswith('running at ') and 'x real time' in message
    assert float(values['real_time_factor']) == pytest.approx(2.0, abs=0.01)
    assert values['steps'] == rig.plant.steps
    assert values['passive_joints'] == '' and values['joints'] == 2
    rig.loop.stats['lag_events'] += 1
    rig.loop.stats['publish_errors'] += 2
    trouble, message, _ = status.report(wall=1.0)
    assert trouble and message == 'in the last period: 1 lag events, 2 publish errors'
    trouble, message, _ = status.report(wall=1.5)
    assert not trouble
