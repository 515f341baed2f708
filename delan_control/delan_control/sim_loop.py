"""The sim's physics thread, free of ROS: when to step, publish, wait for commands and reset.

The ``sim`` node runs :meth:`SimLoop.run` in a dedicated thread, not a timer: a 1 kHz rclpy
timer on a loaded 2-core machine fires late and in bursts, and the physics would inherit that
jitter. The loop keeps sim time locked to a monotonic clock: it wakes up, runs every physics
step that is due (``(now - start) * real_time_factor``, :class:`~delan_control.pacing.
RealTimePacer`), publishes at the publish instants on the way, then sleeps until the next step
is due. Every step has exactly ``dt = 1/physics_rate``, so the sim is deterministic given the
command sequence; only *when* (in wall time) states are published jitters by up to a wake-up
(~0.1-1 ms). Commands are picked up between physics steps (every ``COMMAND_CHECK_S`` of sim
time when paced). If the loop falls more than ``MAX_LAG_S`` behind (an overloaded machine, or a
``real_time_factor`` the CPU cannot reach), the backlog is dropped -- the sim then runs slower
than asked rather than in bursts -- and :attr:`SimLoop.stats` counts it.
``real_time_factor = 0`` runs as fast as the CPU allows, picking up commands once per publish
period (a controller cannot keep up then; use it for open-loop or offline runs).

Lockstep (``lockstep``): publish a state, wait for the command that answers it (at most
``lockstep_timeout`` wall seconds, counted), step one publish period -- like Gazebo with
ros2_control in lockstep. The first state waits (as long) for ``peers_ready()``: a controller
connected both ways.

The command timeout (``command_timeout``, sim seconds; 0 = never) zeroes the torque when no
command arrived for that long, like a motor driver's watchdog.

A publish that fails (an RCLError under load, ...) loses that sample only: it is counted
(``stats['publish_errors']``) and reported, and the physics goes on.

The loop reaches the outside only through callables (publish a state, publish the clock, report
a lag, a blow-up or a failed publish) and takes its clock and waits as callables too, so tests
drive it with a fake clock and no ROS.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass
from typing import Callable, Dict, Optional

import numpy as np

from delan_control.pacing import MAX_WAIT_S, RealTimePacer
from delan_control.plant import Plant

MAX_LAG_S = 0.2  # wall seconds behind schedule before the backlog is dropped
COMMAND_CHECK_S = 1e-3  # sim seconds between looks at the latest command
_EPS = 1e-9


@dataclass
class SimSettings:
    """The loop's timing, named and defaulted as the sim's parameters; the rates, timeouts and
    ``real_time_factor`` may change while it runs (read at every step), ``lockstep`` and
    ``hold_until_commanded`` are read at start."""

    publish_rate: float = 500.0  # joint states per sim second
    real_time_factor: float = 1.0  # sim seconds per wall second; 0 = flat out
    clock_rate: float = 100.0  # /clock ticks per sim second (when published)
    command_timeout: float = 0.1  # sim seconds without a command before zero torque; 0 = never
    lockstep: bool = False
    lockstep_timeout: float = 0.05  # wall seconds a lockstep state waits for its command
    hold_until_commanded: bool = False  # lockstep: no step before the first command


def _wait_event(event: threading.Event, timeout: float) -> bool:
    return event.wait(timeout)


def _ignore(*_args: object) -> None:
    pass


def new_stats() -> Dict[str, float]:
    """The loop's counters, all zero (the keys of the sim's diagnostics)."""
    return {
        'steps': 0,
        'published': 0,
        'commands': 0,
        'timeouts': 0,
        'blowups': 0,
        'dropped_backlog_s': 0.0,
        'lag_events': 0,
        'lockstep_timeouts': 0,
        'publish_errors': 0,
    }


class SimLoop:
    """Steps ``plant`` in real time (or lockstep) and says when to publish.

    ``publish_state()`` publishes the plant's state, ``publish_clock()`` (None: no /clock)
    its time; either raises when it fails, which ``on_publish_error(what, exc, count)`` is told
    (``what``: ``'state'`` or ``'clock'``; ``count``: failures so far) unless the loop is
    ending. ``on_lag(dropped_s, rtf)`` is told of a dropped backlog, ``on_blowup()`` of a new
    integration blow-up (``plant.blowups``). ``keep_running()`` is asked between steps,
    ``peers_ready()`` (lockstep) before the first state.
    ``clock()`` is the wall clock [s]; ``wait(event, timeout)`` sleeps until ``event`` is set
    or ``timeout`` passed.
    :meth:`command`, :meth:`request_reset` and :meth:`stop` may be called from other threads.
    """

    def __init__(
        self,
        plant: Plant,
        settings: SimSettings,
        *,
        publish_state: Callable[[], None],
        publish_clock: Optional[Callable[[], None]] = None,
        on_publish_error: Callable[[str, Exception, int], None] = _ignore,
        on_lag: Callable[[float, float], None] = _ignore,
        on_blowup: Callable[[], None] = _ignore,
        keep_running: Callable[[], bool] = lambda: True,
        peers_ready: Callable[[], bool] = lambda: True,
        clock: Callable[[], float] = time.monotonic,
        wait: Callable[[threading.Event, float], bool] = _wait_event,
    ):
        self.plant, self.settings = plant, settings
        self._publish_state, self._publish_clock = publish_state, publish_clock
        self._on_publish_error, self._on_lag, self._on_blowup = on_publish_error, on_lag, on_blowup
        self._keep_running, self._clock, self._wait = keep_running, clock, wait
        self._peers_ready = peers_ready
        self.q0, self.qd0 = plant.q.copy(), plant.qd.copy()  # what a reset goes back to
        self.stats = new_stats()
        self._zero = np.zeros(plant.n)
        self._cmd = (self._zero, -math.inf)  # (clamped torque, sim time received)
        self._cmd_seq = 0
        self._cmd_event = threading.Event()
        self._timed_out = True
        self._reset_requested = threading.Event()
        self._stop = threading.Event()
        self._rtf = settings.real_time_factor  # the factor the pacer's schedule runs at

    # ------------------------------------------------------------------ from other threads
    def command(self, tau: np.ndarray) -> None:
        """A valid torque command in model order: clamped, it applies from the next step."""
        self._cmd = (self.plant.clamp(tau), self.plant.t)  # one atomic tuple swap
        self.stats['commands'] += 1
        self._cmd_seq += 1
        self._cmd_event.set()

    def request_reset(self) -> None:
        """Put the robot back to its initial state before the next step (time goes on)."""
        self._reset_requested.set()

    def stop(self) -> None:
        """End :meth:`run` (at the next step or wait)."""
        self._stop.set()

    @property
    def stopped(self) -> bool:
        """Whether :meth:`stop` was called."""
        return self._stop.is_set()

    # ------------------------------------------------------------------ the loop
    def torque(self) -> np.ndarray:
        """The torque to apply now: the latest command, or zero once it timed out."""
        tau, t_cmd = self._cmd
        timeout = self.settings.command_timeout
        if timeout > 0 and self.plant.t - t_cmd > timeout:
            if not self._timed_out and t_cmd > -math.inf:
                self.stats['timeouts'] += 1
            self._timed_out = True
            return self._zero
        self._timed_out = False
        return tau

    def run(self) -> None:
        """Step, publish and wait until :meth:`stop` or ``keep_running()`` is false."""
        if self.settings.lockstep:
            self._run_lockstep()
        else:
            self._run_paced()

    def _running(self) -> bool:
        return not self._stop.is_set() and self._keep_running()

    def _reset_if_requested(self) -> None:
        if self._reset_requested.is_set():
            self._reset_requested.clear()
            self.plant.reset(self.q0, self.qd0, t=self.plant.t)

    def _new_pacer(self) -> RealTimePacer:
        dt = self.plant.dt
        check_steps = max(1, int(round(COMMAND_CHECK_S / dt)))
        return RealTimePacer(dt, MAX_LAG_S, check_steps, self._clock(), self.plant.t)

    def _rebase_on_new_factor(self, pacer: RealTimePacer) -> float:
        """The real-time factor now; a new one restarts the schedule from here (applied at
        once, without a catch-up or a pause)."""
        rtf = self.settings.real_time_factor
        if rtf != self._rtf:
            self._rtf = rtf
            pacer.rebase(self._clock(), self.plant.t)
        return rtf

    def _publish(self) -> None:
        plant = self.plant
        if plant.blowups != self.stats['blowups']:
            self.stats['blowups'] = plant.blowups
            self._on_blowup()
        if self._send(self._publish_state, 'state'):
            self.stats['published'] += 1

    def _send(self, publish: Callable[[], None], what: str) -> bool:
        """Publish; a failure is counted and reported, and the physics goes on: a lost sample
        must not stop the robot. While the loop ends it is ignored."""
        try:
            publish()
            return True
        except Exception as exc:  # noqa: BLE001 -- any failure of one publish
            if not self._running():
                return False
            self.stats['publish_errors'] += 1
            self._on_publish_error(what, exc, int(self.stats['publish_errors']))
            return False

    def _run_lockstep(self) -> None:
        """Publish a state, wait for the command that answers it, step to the next state: the
        controller sees every state and its command acts for exactly one publish period,
        however slow the CPU. ``/clock`` ticks with every state."""
        plant, settings = self.plant, self.settings
        self._await_peers()
        pacer = self._new_pacer()
        while self._running():
            self._reset_if_requested()
            seq = self._cmd_seq
            self._cmd_event.clear()
            if self._publish_clock is not None:
                self._send(self._publish_clock, 'clock')
            self._publish()
            self._await_command(seq)
            if settings.hold_until_commanded and self._cmd_seq == 0:
                continue  # nobody commands the arm yet
            # in short waits, so a new real_time_factor applies at once (a wait computed with
            # the new factor on the old schedule could last for hours)
            while not self._stop.is_set():
                rtf = self._rebase_on_new_factor(pacer)
                ahead = pacer.ahead_s(self._clock(), plant.t, rtf)
                if ahead <= 0:
                    break
                self._wait(self._stop, min(ahead, MAX_WAIT_S))
            k = max(1, int(round(1.0 / (settings.publish_rate * plant.dt))))
            plant.advance(self.torque(), k)
            self.stats['steps'] += k

    def _await_command(self, seq: int) -> None:
        """Wait until a command newer than ``seq`` arrives; a wait past ``lockstep_timeout``
        is counted and given up."""
        deadline = self._clock() + self.settings.lockstep_timeout
        while self._cmd_seq == seq and not self._stop.is_set():
            remaining = deadline - self._clock()
            if remaining <= 0:
                self.stats['lockstep_timeouts'] += 1
                return
            self._wait(self._cmd_event, min(remaining, 0.01))

    def _await_peers(self) -> None:
        """Before the first state: wait (at most ``lockstep_timeout``) until ``peers_ready()``.
        A state sent before DDS has matched the controller is lost, and its answer with it:
        the loop would stand still for a whole ``lockstep_timeout``."""
        deadline = self._clock() + self.settings.lockstep_timeout
        while not self._peers_ready() and not self._stop.is_set():
            remaining = deadline - self._clock()
            if remaining <= 0:
                return
            self._wait(self._stop, min(remaining, 0.01))

    def _run_paced(self) -> None:
        plant, settings, clock = self.plant, self.settings, self._clock
        dt = plant.dt
        next_pub = next_clock = plant.t
        pacer = self._new_pacer()
        check_steps = pacer.resume_steps  # steps between looks at the latest command
        publish_clock = self._publish_clock

        def publish_due() -> None:
            nonlocal next_pub, next_clock
            if publish_clock is not None and plant.t >= next_clock - _EPS:
                self._send(publish_clock, 'clock')
                next_clock = max(next_clock + 1.0 / settings.clock_rate, plant.t + 0.5 * dt)
            if plant.t >= next_pub - _EPS:
                self._publish()
                next_pub = max(next_pub + 1.0 / settings.publish_rate, plant.t + 0.5 * dt)

        publish_due()  # the initial state
        stopped, advance, torque, stats = self._stop.is_set, plant.advance, self.torque, self.stats
        while self._running():
            self._reset_if_requested()
            rtf = self._rebase_on_new_factor(pacer)
            pace = pacer.pace(clock(), plant.t, rtf)
            if pace.steps == 0:
                self._wait(self._stop, pace.wait_s)
                continue
            if pace.dropped_s > 0:
                stats['dropped_backlog_s'] += pace.dropped_s
                stats['lag_events'] += 1
                self._on_lag(pace.dropped_s, rtf)
            due = pace.steps
            # commands are looked at every COMMAND_CHECK_S of sim time when paced; flat out,
            # once per publish period (a controller cannot keep up with rtf = 0 anyway)
            chunk = check_steps if rtf > 0 else due
            while due > 0 and not stopped():
                k = min(due, chunk, max(1, math.ceil((next_pub - plant.t) / dt - _EPS)))
                if publish_clock is not None:
                    k = min(k, max(1, math.ceil((next_clock - plant.t) / dt - _EPS)))
                advance(torque(), k)
                due -= k
                stats['steps'] += k
                publish_due()
