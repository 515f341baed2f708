"""Bad parameter values the nodes must refuse while they run (each set alone, the old value
kept): shared by the Python nodes' tests and the compiled controller's."""

from __future__ import annotations

import math
from typing import Any, List, Tuple


def torque_controller_bad_values(urdf_path: str) -> List[Tuple[str, Any]]:
    """The torque controller's: ``(name, value)`` pairs, ``urdf_path`` a URDF other than the
    node's (read-only; the compiled node has no such parameter, nor ``state_publish_rate``)."""
    return [
        ('kp', [-1.0]),
        ('kd', [math.nan, 1.0]),
        ('kd', [math.inf]),
        ('ct_kp', [1.0, 2.0, 3.0]),
        ('ct_kd', [1e9]),
        ('law', 'bang_bang'),
        ('model', 'mpc'),
        ('watchdog_timeout', -0.1),
        ('effort_limit_scale', 0.0),
        ('effort_limit_scale', 2.0),
        ('switch_blend_time', -1.0),
        ('urdf_path', urdf_path),
        ('command_joints', ['elbow', 'shoulder']),
        ('effort_controller_name', 'sim'),
        ('effort_controller_timeout', 1.0),
        ('state_publish_rate', -1.0),
        ('state_publish_rate', math.nan),
    ]
