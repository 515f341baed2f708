"""Malformed joint states every node that takes them must reject, each counted under its
reason: shared by the Python nodes' tests and the compiled controller's. The states are of a
two-joint arm (``shoulder``, ``elbow``); a test fills the fields a kind leaves out with good
values."""

from __future__ import annotations

import math
from typing import Any, Dict, Tuple

#: kind -> (the JointState fields it sets, the rejection reason)
BAD_JOINT_STATES: Dict[str, Tuple[Dict[str, Any], str]] = {
    'position_too_short': (dict(position=[0.1]), 'length_mismatch'),
    'velocity_too_long': (dict(velocity=[0.0, 0.0, 0.0]), 'length_mismatch'),
    'effort_too_short': (dict(effort=[1.0]), 'length_mismatch'),
    'all_empty': (dict(name=[], position=[], velocity=[], effort=[]), 'empty'),
    'names_but_no_values': (dict(position=[], velocity=[], effort=[]), 'length_mismatch'),
    'nan_position': (dict(position=[math.nan, 0.2]), 'non_finite'),
    'inf_velocity': (dict(velocity=[0.0, -math.inf]), 'non_finite'),
    'nan_effort': (dict(effort=[math.nan, 0.0]), 'non_finite'),
    'unknown_name': (dict(name=['shoulder', 'wrist']), 'missing_joints'),
    'missing_joint': (
        dict(name=['shoulder'], position=[0.1], velocity=[0.0], effort=[0.0]),
        'missing_joints',
    ),
    'duplicated_name': (
        dict(
            name=['shoulder', 'shoulder', 'elbow'],
            position=[0.1, 0.1, 0.2],
            velocity=[0.0, 0.0, 0.0],
            effort=[0.0, 0.0, 0.0],
        ),
        'duplicate_names',
    ),
    'no_velocity': (dict(velocity=[]), 'no_velocity'),
}
