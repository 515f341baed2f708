"""Parameters of the ``torque_controller`` node, after the robot's
(``param_table.robot_table``).

The node adds what needs the node itself: ``model``, ``delan_checkpoint`` and
``identified_params`` are refused at runtime unless the model loads (and, under law ``energy``,
unless the law can be built on it), and ``effort_controller_name`` must resolve as a node
name.
"""

from __future__ import annotations

import math
from typing import Any, Dict, Optional

from delan_common.model_kinds import CONTROLLER_KINDS
from delan_common.param_table import Param, ParamContext, per_joint, per_joint_in
from delan_control.control_laws import LAWS
from delan_control.energy_control import EnergyControlConfig

_ENERGY = EnergyControlConfig()


def _gain(name: str, description: str) -> Param:
    return Param(
        name,
        [math.nan],
        description + ' (one or per joint; [nan] = from the URDF, see control_rate)',
        check=per_joint_in(0.0, 1e6),
    )


def _lqr_weights(value: Any, ctx: ParamContext) -> Optional[str]:
    """energy_lqr_q: ``[nan]`` (the default weights) or 2 n finite weights >= 0."""
    vals = list(value)
    if len(vals) == 1 and math.isnan(vals[0]):
        return None
    if len(vals) != 2 * ctx.n_joints or not all(math.isfinite(x) and x >= 0 for x in vals):
        return f'{ctx.name} needs {2 * ctx.n_joints} finite weights >= 0 (or [nan])'
    return None


def _above_catch(value: Any, ctx: ParamContext) -> Optional[str]:
    """energy_release_angle: beyond energy_catch_angle (declared before it)."""
    catch = ctx.values['energy_catch_angle']
    if value > catch:
        return None
    return f'{ctx.name}={value} must exceed energy_catch_angle={catch}: the gap is the hysteresis'


#: the parameters of law energy -> the EnergyControlConfig fields they set
ENERGY_FIELDS: Dict[str, str] = {
    'energy_gain': 'k_energy',
    'energy_pump_accel': 'pump_accel',
    'energy_kp': 'kp',
    'energy_kd': 'kd',
    'energy_catch_angle': 'catch_angle',
    'energy_catch_rate': 'catch_rate',
    'energy_release_angle': 'release_angle',
    'energy_lqr_q': 'lqr_q',
    'energy_lqr_r': 'lqr_r',
    'energy_compensate_friction': 'compensate_friction',
}


def energy_config(values: Dict[str, Any]) -> EnergyControlConfig:
    """The :class:`EnergyControlConfig` of the node's ``energy_*`` parameter values."""
    kwargs = {field: values[name] for name, field in ENERGY_FIELDS.items()}
    q = list(kwargs['lqr_q'])
    kwargs['lqr_q'] = None if len(q) == 1 and math.isnan(q[0]) else q
    return EnergyControlConfig(**kwargs)


TABLE = (
    _gain('ct_kp', 'Computed-torque stiffness [1/s^2]'),
    _gain('ct_kd', 'Computed-torque damping [1/s]'),
    _gain('kp', 'PD stiffness [N*m/rad] for pd and feedforward_pd'),
    _gain('kd', 'PD damping [N*m*s/rad] for pd and feedforward_pd'),
    Param(
        'control_rate',
        250.0,
        'Rate of the joint states the controller answers [Hz]: '
        'the gains not given are derived for it (control_laws.robot_gains)',
        min=1.0,
        max=100000.0,
        read_only=True,
    ),
    Param(
        'law',
        'computed_torque',
        'Control law; energy: swing-up and balance of an under-actuated robot on the '
        "model's energies (needs actuated_joints and upright_position; no reference tracked)",
        choices=LAWS,
    ),
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
        'one is rejoined smoothly over resume_time. A new reference whose first point lies '
        'farther than this from the arm is dropped too',
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
        "kick the arm. The target starts at the arm and with the last target's "
        'acceleration (no feed-forward step). A new reference begins there too and joins '
        'its course the same way (one that continues the current reference replaces it as '
        'it is)',
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
        'actuated_joints',
        [],
        "Joints with a motor; the others are passive (a Furuta pendulum's pendulum): "
        'commanded 0 by every law, their reference ignored. [] = every joint',
        read_only=True,
        items=str,
    ),
    Param(
        'upright_position',
        [math.nan],
        'Law energy: the posture it swings up to and balances at, 1 or {n} values [rad|m]: the '
        "passive joints' upright, where the actuated joints are held; [nan] = not set (law "
        'energy refused)',
        read_only=True,
        check=per_joint(nan_default=True),
    ),
    Param(
        'energy_gain',
        _ENERGY.k_energy,
        'Law energy: pumping gain k_E [rad/s^2 per J kg m^2 rad/s]; large: bang-bang '
        '(energy_control.EnergyControlConfig)',
        min=0.0,
        max=1e12,
        read_only=True,
    ),
    Param(
        'energy_pump_accel',
        _ENERGY.pump_accel,
        'Law energy: amplitude of the pumping acceleration of the actuated joints [rad/s^2|m/s^2]',
        min=0.0,
        max=1e4,
        read_only=True,
    ),
    Param(
        'energy_kp',
        _ENERGY.kp,
        'Law energy: stiffness holding the actuated joints at their upright entries while '
        'swinging [1/s^2]',
        min=0.0,
        max=1e6,
        read_only=True,
    ),
    Param(
        'energy_kd',
        _ENERGY.kd,
        'Law energy: damping of the actuated joints while swinging [1/s]',
        min=0.0,
        max=1e4,
        read_only=True,
    ),
    Param(
        'energy_catch_angle',
        _ENERGY.catch_angle,
        'Law energy: swing -> balance (LQR) once every passive joint is within this angle of '
        'the upright [rad] ...',
        min=0.0,
        max=math.pi,
        read_only=True,
    ),
    Param(
        'energy_catch_rate',
        _ENERGY.catch_rate,
        '... and slower than this [rad/s]',
        min=0.0,
        max=1e3,
        read_only=True,
    ),
    Param(
        'energy_release_angle',
        _ENERGY.release_angle,
        'Law energy: balance -> swing once a passive joint is farther than this from the '
        'upright [rad] (> energy_catch_angle: the hysteresis)',
        min=0.0,
        max=math.pi,
        read_only=True,
        check=_above_catch,
    ),
    Param(
        'energy_lqr_q',
        [math.nan],
        'Law energy: LQR state weights diag(Q) on [q - upright; qd], 2 x {n} values; [nan] = '
        '1 / 10 on actuated / passive positions, 0.1 / 0.5 on their velocities',
        read_only=True,
        check=_lqr_weights,
    ),
    Param(
        'energy_lqr_r',
        _ENERGY.lqr_r,
        'Law energy: LQR torque weight (R = r I)',
        min=1e-9,
        max=1e9,
        read_only=True,
    ),
    Param(
        'energy_compensate_friction',
        _ENERGY.compensate_friction,
        "Law energy: add the model's friction torque on the actuated joints",
        read_only=True,
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
