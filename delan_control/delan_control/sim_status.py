"""The sim's periodic status, free of ROS: the real-time factor reached over the last period
and whether it saw trouble (blow-ups, lag, failed publishes), so the decision to warn is
tested without a node; the ``sim`` node publishes it on /diagnostics."""

from __future__ import annotations

from typing import Dict, List, Tuple

from delan_control.plant import Plant
from delan_control.sim_loop import SimLoop

#: counters whose growth over a period makes the status a warning
TROUBLE = ('blowups', 'lag_events', 'publish_errors')


def passive_joints(plant: Plant) -> List[str]:
    """The joints without a motor (``actuated_joints``)."""
    return [j for j, a in zip(plant.joint_names, plant.actuated) if not a]


class SimStatus:
    """Reports on ``loop`` period by period; ``wall`` is the wall clock [s] at the start."""

    def __init__(self, loop: SimLoop, wall: float):
        self.loop = loop
        self._last = (wall, loop.plant.t, dict(loop.stats))

    def report(self, wall: float) -> Tuple[bool, str, Dict[str, object]]:
        """``(trouble, message, values)`` of the period since the last report: ``trouble``
        when a counter of :data:`TROUBLE` grew (the message names them), else the message
        says the speed reached (or lockstep)."""
        loop, plant = self.loop, self.loop.plant
        t, stats = plant.t, dict(loop.stats)
        then, t_then, before = self._last
        self._last = (wall, t, stats)
        rtf = (t - t_then) / max(wall - then, 1e-9)
        new = {k: stats[k] - before.get(k, 0) for k in TROUBLE}
        trouble = [f'{n} {k.replace("_", " ")}' for k, n in new.items() if n]
        lockstep = loop.settings.lockstep
        if trouble:
            message = 'in the last period: ' + ', '.join(trouble)
        else:
            message = 'lockstep' if lockstep else f'running at {rtf:.2f}x real time'
        values = {
            'joints': plant.n,
            'passive_joints': ' '.join(passive_joints(plant)),
            'physics_rate': plant.physics_rate,
            'publish_rate': loop.settings.publish_rate,
            'real_time_factor_set': loop.settings.real_time_factor,
            'real_time_factor': f'{rtf:.3f}',
            'lockstep': lockstep,
            'sim_time': f'{t:.3f}',
            **stats,
        }
        return bool(trouble), message, values
