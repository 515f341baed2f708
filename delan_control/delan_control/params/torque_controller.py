"""Parameters of the ``torque_controller`` node, after the robot's
(``param_table.robot_table``).

The node adds what needs the node itself: ``model``, ``delan_checkpoint`` and
``identified_params`` are refused at runtime unless the model loads, and
``effort_controller_name`` must resolve as a node name.
"""

from __future__ import annotations

import math

from delan_common.model_kinds import CONTROLLER_KINDS
from delan_common.param_table import Param, per_joint_in
from delan_control.control_laws import LAWS


def _gain(name: str, description: str) -> Param:
    return Param(
        name,
        [math.nan],
        description + ' (one or per joint; [nan] = from the URDF, see control_rate)',
        check=per_joint_in(0.0, 1e6),
    )


TABLE = (
    _gain('ct_kp', 'Computed-torque stiffness [1/s^2]'),
    _gain('ct_kd', 'Computed-torque damping [1/s]'),
    _gain('kp', 'PD stiffness [N*m/rad] for pd and feedforward_pd'),
    _gain('kd', 'PD damping [N*m*s/rad] for pd and feedforward_pd'),
    Param(
        'control_rate',
        250.0,
        'Rate of the joint states the controller answers [Hz]: '
        'the gains not given are derived for it (control_laws.arm_gains)',
        min=1.0,
        max=100000.0,
        read_only=True,
    ),
    Param('law', 'computed_torque', 'Control law', choices=LAWS),
    Param('model', 'pd', 'Dynamics model for the feed-forward', choices=CONTROLLER_KINDS),
    Param(
        'delan_checkpoint',
        '',
        "Checkpoint for model=delan or delan_residual ('' = "
        "take the learner's latest from learner/model_update)",
    ),
    Param(
        'identified_params',
        '',
        'Identified parameters (delan-sysid output) for model=identified',
    ),
    Param(
        'watchdog_timeout',
        0.1,
        'Joint states older than this stop the commands [s]',
        min=0.001,
        max=10.0,
    ),
    Param('switch_blend_time', 0.2, 'Cross-fade after a model switch [s]', min=0.0, max=5.0),
    Param(
        'effort_limit_scale',
        1.0,
        'Fraction of the URDF effort limits to clamp to',
        min=0.01,
        max=1.0,
    ),
    Param(
        'resume_tolerance',
        1.0,
        'When joint states (re)start, or the arm jumps '
        '(a sim reset: a step beyond twice the velocity limits), a reference farther '
        'than this from the measured position [rad or m, any joint] is dropped and the arm '
        'held where it is (the arm is elsewhere: a restarted driver, a moved arm); a nearer '
        'one is rejoined smoothly over resume_time',
        min=0.0,
        max=1e3,
    ),
    Param(
        'resume_time',
        1.0,
        'After joint states (re)start, the command goes from the '
        "arm's state back onto the reference over at least this time [s] (longer for a "
        'larger offset: catching up adds at most 25 % of the velocity limits); a stall '
        'let the reference move on while the arm did not, and chasing it at once would '
        'kick the arm',
        min=0.0,
        max=60.0,
    ),
    Param(
        'realtime_priority',
        0,
        'SCHED_FIFO priority of the control path (executor and '
        "middleware threads), as ros2_control's controller manager uses: joint states are "
        "answered ahead of every normal process (the learner's training). 0 = normal "
        'scheduling; needs CAP_SYS_NICE or an rtprio limit (a warning says so otherwise). '
        'Applied at start-up',
        min=0,
        max=98,
        read_only=True,
    ),
    Param(
        'state_publish_rate',
        100.0,
        'Rate of ~/controller_state [Hz of wall time]: '
        'at most one control cycle per 1/rate is published (reference, feedback, error, '
        "the model's torque, the command); 0 = off",
        min=0.0,
        max=10000.0,
    ),
    Param(
        'command_joints',
        [],
        'Joint order of the effort commands: the joints '
        'parameter of the controller applying them; [] = read it from the node '
        'effort_controller_name',
        read_only=True,
        items=str,
    ),
    Param(
        'effort_controller_name',
        'effort_controller',
        'Node whose joints parameter '
        'gives the command order when command_joints is [] (the ros2_control controller '
        "on effort_controller/commands; relative to this node's namespace)",
        read_only=True,
    ),
    Param(
        'effort_controller_timeout',
        5.0,
        'Wait this long for the joints of '
        'effort_controller_name, not commanding meanwhile; then command in the model '
        'order, with a warning [s]',
        min=0.1,
        max=600.0,
        read_only=True,
    ),
)
