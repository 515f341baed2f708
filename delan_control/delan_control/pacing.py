"""Real-time pacing of the simulated plant: how many physics steps are due at a wall time.

The sim's physics thread asks :class:`RealTimePacer` before every chunk of steps. The pacer
maps wall time to the sim time the physics should have reached at the real-time factor
``rtf`` (sim seconds per wall second; ``rtf <= 0``: as fast as the CPU goes) and answers with
the steps to take now, or how long to wait for the next one. When the physics falls further
behind than ``max_lag_s`` (a CPU stall, a debugger), the backlog is dropped instead of being
raced through: a controller would otherwise see sim time run at many times real time.
ROS-free, so the policy is unit-tested without a node.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: longest single wait: the physics loop looks at stop, reset and parameter changes this often
MAX_WAIT_S = 0.01
#: sim seconds per chunk when running flat out (``rtf <= 0``)
FLAT_OUT_CHUNK_S = 0.01
_EPS = 1e-9


@dataclass(frozen=True)
class Pace:
    """What the physics loop does now."""

    steps: int  # physics steps to take now; 0: wait ``wait_s`` and ask again
    wait_s: float = 0.0  # wall seconds until the next step is due (``steps == 0``)
    dropped_s: float = 0.0  # sim seconds of backlog dropped by this call (0: none)


class RealTimePacer:
    """Schedule of a fixed-step simulation against the wall clock.

    ``dt``: the physics step [s]; ``max_lag_s``: wall seconds behind schedule before the
    backlog is dropped; ``resume_steps``: the steps granted right after a drop (the loop's
    command-check chunk). The schedule starts at (``wall``, ``sim_t``); :meth:`rebase` starts it
    over, e.g. when the real-time factor changes (the new factor applies from now on, without
    a catch-up or a pause)."""

    def __init__(self, dt: float, max_lag_s: float, resume_steps: int, wall: float, sim_t: float):
        if not dt > 0 or not max_lag_s > 0 or resume_steps < 1:
            raise ValueError(
                f'dt {dt} and max_lag_s {max_lag_s} must be > 0, resume_steps {resume_steps} >= 1'
            )
        self.dt, self.max_lag_s, self.resume_steps = dt, max_lag_s, int(resume_steps)
        self.rebase(wall, sim_t)

    def rebase(self, wall: float, sim_t: float) -> None:
        """Start the schedule over: sim time ``sim_t`` is due at wall time ``wall``."""
        self.wall0, self.sim0 = float(wall), float(sim_t)

    def pace(self, wall: float, sim_t: float, rtf: float) -> Pace:
        """The physics is at ``sim_t`` at wall time ``wall``: the steps due now."""
        dt = self.dt
        if rtf <= 0:
            return Pace(steps=max(1, int(round(FLAT_OUT_CHUNK_S / dt))))
        due = int(math.floor((self.sim0 + (wall - self.wall0) * rtf - sim_t) / dt + _EPS))
        if due <= 0:
            wake = self.wall0 + (sim_t + dt - self.sim0) / rtf
            return Pace(steps=0, wait_s=min(max(wake - wall, 0.0), MAX_WAIT_S))
        lag_steps = int(self.max_lag_s * rtf / dt)
        if due > lag_steps + self.resume_steps:
            dropped = (due - self.resume_steps) * dt
            self.rebase(wall - self.resume_steps * dt / rtf, sim_t)
            return Pace(steps=self.resume_steps, dropped_s=dropped)
        return Pace(steps=due)

    def ahead_s(self, wall: float, sim_t: float, rtf: float) -> float:
        """Wall seconds the physics at ``sim_t`` is ahead of the schedule (<= 0: not ahead);
        the lockstep loop sleeps this long before its next step. 0 when ``rtf <= 0``."""
        if rtf <= 0:
            return 0.0
        return (sim_t - self.sim0) / rtf - (wall - self.wall0)
