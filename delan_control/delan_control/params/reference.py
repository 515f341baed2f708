"""Parameters of the ``reference`` node, after the robot's (``param_table.robot_table``)."""

from __future__ import annotations

from delan_common.param_table import Param
from delan_control.trajectories import REFERENCE_KINDS

TABLE = (
    Param('trajectory', 'excitation', 'Reference to publish', choices=REFERENCE_KINDS),
    Param('speed', 1.0, 'Time scaling (2.0 = same path twice as fast)', min=0.05, max=4.0),
    Param('seed', 0, 'Seed of the excitation', min=0, max=2**31 - 1),
    Param('duration', 20.0, 'Length of one trajectory [s]', min=0.1, max=3600.0),
    Param('period', 4.0, 'Period of the figure eight at 1x [s]', min=0.5, max=60.0),
    Param('point_rate', 100.0, 'Waypoints per second', min=1.0, max=1000.0),
    Param(
        'approach_time', 2.0, 'Smooth approach from the current position [s]', min=0.0, max=30.0
    ),
    Param('repeat', True, 'Follow a finished excitation with the next seed'),
    Param(
        'excitation_candidates',
        8,
        'Random excitations '
        'drawn per seed; the one whose identification regressor is '
        'best conditioned is published (1 = the first, no Pinocchio '
        'model needed)',
        min=1,
        max=256,
        read_only=True,
    ),
    Param(
        'max_test_speed',
        2.0,
        'The figure eight is sized '
        'so that at this speed it needs at most 80 % of the '
        'effort limits by the URDF model (one path for every '
        'speed)',
        min=0.05,
        max=4.0,
        read_only=True,
    ),
    Param(
        'wait_for_joint_states',
        5.0,
        'Wait this long for a joint state to start a reference from (at start-up and after '
        'a change of trajectory, speed or seed) [s]; then start anyway, at its own first point',
        min=0.0,
        max=600.0,
    ),
)
