"""Parameters of the ``sim`` node: the robot's (:data:`ROBOT`, ``param_table.robot_table``),
then :data:`TABLE`. ``{n}`` in a description is the number of joints."""

from __future__ import annotations

from typing import Any, Optional

from delan_common.param_table import (
    Param,
    ParamContext,
    all_of,
    at_most,
    finite,
    per_joint,
    vector,
)
from delan_common.robot_model import JOINT_EFFECT_FIELDS, PRESETS
from delan_control.plant import INTEGRATORS

#: ``robot_table`` arguments: the sim has a robot to start with, found in the workspace
ROBOT = dict(
    default_path='two_link_arm.urdf',
    path_help='URDF file (path, or a file name of the workspace urdf/ folder); used '
    'when robot_description is empty',
    description_help='URDF XML of the robot; when set, it is used instead of urdf_path',
)

FLAT_OUT = (
    'real_time_factor=0 (as fast as possible) cannot run under '
    'realtime_priority: it would starve every other process'
)


def _not_flat_out_under_realtime(value: Any, ctx: ParamContext) -> Optional[str]:
    """real_time_factor: not 0 while realtime_priority is set (declared after it)."""
    return FLAT_OUT if ctx.values.get('realtime_priority') and value == 0 else None


def _no_flat_out(value: Any, ctx: ParamContext) -> Optional[str]:
    """realtime_priority: not with real_time_factor 0."""
    return FLAT_OUT if value and ctx.values['real_time_factor'] == 0 else None


def _all_or_none_urdf(value: Any, ctx: ParamContext) -> Optional[str]:
    """Friction per joint: negative (= the URDF's) for every joint or for none."""
    vals = list(value)
    if any(x < 0 for x in vals) and not all(x < 0 for x in vals):
        return f'{ctx.name}: mix of negative (= URDF) and set values; give all or none'
    return None


TABLE = (
    Param(
        'actuated_joints',
        [],
        "Joints with a motor: the others are passive (a Furuta pendulum's pendulum) and get no "
        'torque whatever they are commanded; their effort in joint_states is that 0. [] = every '
        'joint',
        read_only=True,
        items=str,
    ),
    Param('physics_rate', 1000.0, 'Physics rate [Hz]', min=1000.0, max=20000.0, read_only=True),
    Param('integrator', 'rk4', 'Integrator of the plant', choices=INTEGRATORS, read_only=True),
    Param(
        'publish_rate',
        500.0,
        'joint_states rate [Hz, sim time]',
        min=1.0,
        max=20000.0,
        check=at_most('physics_rate'),
    ),
    Param(
        'real_time_factor',
        1.0,
        'Sim seconds per wall second; 0 = as fast as possible',
        min=0.0,
        max=1000.0,
        check=all_of(finite, _not_flat_out_under_realtime),
    ),
    Param(
        'publish_clock',
        False,
        'Publish /clock (sim time, from 0) for nodes with use_sim_time',
        read_only=True,
    ),
    Param(
        'lockstep',
        False,
        'Step only after the command answering '
        'each published state (or lockstep_timeout): control results '
        'independent of CPU load; real_time_factor is then an upper '
        'bound. The first state waits as long for a subscriber and a commander to connect',
        read_only=True,
    ),
    Param(
        'hold_until_commanded',
        False,
        'In lockstep, keep the physics paused (the '
        'first state republished every lockstep_timeout) until the first command arrives: '
        'the arm does not fall against its stops before its controller is up',
        read_only=True,
    ),
    Param(
        'realtime_priority',
        0,
        "SCHED_FIFO priority of the sim's threads (physics, "
        "publishing, command subscription): the sim stands for a robot's real-time driver "
        'and publishes on time whatever else runs. 0 = normal scheduling; needs '
        'CAP_SYS_NICE or an rtprio limit; not with real_time_factor 0 (a flat-out '
        'real-time thread would starve the machine)',
        min=0,
        max=98,
        read_only=True,
        check=_no_flat_out,
    ),
    Param(
        'lockstep_timeout',
        0.05,
        'Wall time to wait for the answer to a state in lockstep [s]',
        min=1e-4,
        max=10.0,
    ),
    Param(
        'clock_rate',
        100.0,
        '/clock rate [Hz, sim time]; every message is a callback in each node on sim time',
        min=1.0,
        max=20000.0,
        check=at_most('physics_rate'),
    ),
    Param(
        'command_timeout',
        0.1,
        'Zero torque when the last valid command is older than this [s, sim time]; 0 = never',
        min=0.0,
        max=3600.0,
    ),
    Param(
        'initial_position',
        [float('nan')],
        'Initial joint positions: 1 '
        "(all) or {n} values [rad|m]; [nan] = the middle of each joint's limits "
        '(0 where it has none)',
        read_only=True,
        check=per_joint(nan_default=True),
    ),
    Param(
        'initial_velocity',
        [0.0],
        'Initial joint velocities: 1 or {n} values',
        read_only=True,
        check=per_joint(),
    ),
    Param(
        'mass_scale',
        [1.0],
        'Mismatch: link mass (and inertia) scale, 1 or {n} values (one per moving body)',
        read_only=True,
        check=per_joint(positive=True),
    ),
    Param(
        'inertia_scale',
        [1.0],
        'Mismatch: rotational inertia scale about the centre of mass, 1 or {n} values',
        read_only=True,
        check=per_joint(positive=True),
    ),
    Param(
        'payload_mass',
        0.0,
        'Mismatch: payload on the last link [kg] at its tool point',
        min=0.0,
        max=1000.0,
        read_only=True,
    ),
    Param(
        'payload_offset',
        [0.0, 0.0, 0.0],
        'Payload position relative to the tool point, last joint frame [m]',
        read_only=True,
        check=vector(3),
    ),
    Param(
        'payload_radius',
        0.0,
        'Payload sphere radius [m] (0 = point mass)',
        min=0.0,
        max=10.0,
        read_only=True,
    ),
    Param(
        'viscous',
        [-1.0],
        'Mismatch: viscous friction per joint [N m s/rad]; negative = the URDF damping',
        read_only=True,
        check=all_of(per_joint(), _all_or_none_urdf),
    ),
    Param(
        'coulomb',
        [-1.0],
        'Mismatch: Coulomb friction per joint [N m]; negative = the URDF friction',
        read_only=True,
        check=all_of(per_joint(), _all_or_none_urdf),
    ),
    Param(
        'friction_scale',
        1.0,
        'Mismatch: scales both friction terms',
        min=0.0,
        max=100.0,
        read_only=True,
    ),
    Param(
        'torque_noise',
        0.0,
        'Torque disturbance std per physics step [N m]',
        min=0.0,
        max=1e4,
    ),
    Param('position_noise', 0.0, 'Position measurement noise std [rad|m]', min=0.0, max=10.0),
    Param(
        'velocity_noise',
        0.0,
        'Velocity measurement noise std [rad/s|m/s]',
        min=0.0,
        max=100.0,
    ),
    Param(
        'seed',
        0,
        'Seed of the noise generator',
        min=0,
        max=2**31 - 1,
        read_only=True,
    ),
    Param(
        'position_limits',
        True,
        'URDF position limits act as inelastic end stops',
        read_only=True,
    ),
    Param(
        'stribeck_static_ratio',
        [1.0],
        'Mismatch: break-away over Coulomb friction fs/fc >= 1, 1 or {n} values (1 = off)',
        read_only=True,
        check=per_joint(positive=True),
    ),
    Param(
        'stribeck_velocity',
        [0.1],
        'Mismatch: Stribeck velocity [rad/s|m/s], 1 or {n} values',
        read_only=True,
        check=per_joint(positive=True),
    ),
    Param(
        'coulomb_asymmetry',
        [0.0],
        'Mismatch: Coulomb level fc (1 + a) moving '
        'forward, fc (1 - a) backward; a in [-1, 1], 1 or {n} values',
        read_only=True,
        check=per_joint(),
    ),
    Param(
        'spring_stiffness',
        [0.0],
        'Mismatch: joint spring torque -k (q - q0), '
        'k >= 0 [N m/rad|N/m], 1 or {n} values (0 = off)',
        read_only=True,
        check=per_joint(nonnegative=True),
    ),
    Param(
        'spring_offset',
        [0.0],
        'Mismatch: spring rest position q0, 1 or {n} values [rad|m]',
        read_only=True,
        check=per_joint(),
    ),
    Param(
        'mismatch_preset',
        '',
        "Mismatch preset: '' or 'realistic' "
        '(payload 0.6 kg, friction x2, Stribeck, asymmetric Coulomb, springs '
        'on the first two joints gravity loads); parameters not at their off '
        'value override it',
        choices=tuple(PRESETS),
        read_only=True,
    ),
)

#: the parameters of the plant's mismatch (``robot_model.Mismatch.from_params``), the preset
#: first: the others override it
MISMATCH = (
    'mismatch_preset',
    'mass_scale',
    'inertia_scale',
    'payload_mass',
    'payload_offset',
    'payload_radius',
    'viscous',
    'coulomb',
    'friction_scale',
    *JOINT_EFFECT_FIELDS,
)
#: the parameters of the plant's noise: a disturbance torque, measurement noise
NOISE = ('torque_noise', 'position_noise', 'velocity_noise')
