"""The sim's :class:`~delan_control.plant.Plant` from its parameter values, free of ROS, so
the defaults and refusals of the plant parameters are tested without a node."""

from __future__ import annotations

import math
from typing import Any, List, Mapping

from delan_common.robot_model import Mismatch, RobotModel
from delan_common.urdf_joints import middle_of_limits
from delan_control.params.sim import MISMATCH
from delan_control.plant import Plant


def initial_position(model: RobotModel, values: Mapping[str, Any]) -> List[float]:
    """``initial_position``, or the middle of every joint's limits for its default ``[nan]``
    (0 lies outside some arms' range, a Panda's elbow)."""
    q0 = [float(x) for x in values['initial_position']]
    if len(q0) == 1 and math.isnan(q0[0]):
        return middle_of_limits(model.spec.lower, model.spec.upper).tolist()
    return q0


def plant_from_params(model: RobotModel, values: Mapping[str, Any]) -> Plant:
    """The plant simulating ``model`` (the nominal robot) with the mismatch, noise, initial
    state and motors of ``values`` (the sim's parameters by name). ``ValueError('invalid
    parameter: ...')`` for a mismatch or ``actuated_joints`` the robot cannot have."""
    try:
        mismatch = Mismatch.from_params(
            {
                k: values[k] if isinstance(values[k], (str, float)) else list(values[k])
                for k in MISMATCH
            }
        )
    except ValueError as err:
        raise ValueError(f'invalid parameter: {err}') from None
    actuated = list(values['actuated_joints'])
    unknown = [j for j in actuated if j not in model.joint_names]
    if unknown:
        raise ValueError(
            f'invalid parameter: actuated_joints: {unknown} are not joints of the robot '
            f'({", ".join(model.joint_names)})'
        )
    return Plant(
        model,
        mismatch,
        physics_rate=values['physics_rate'],
        integrator=values['integrator'],
        torque_noise=values['torque_noise'],
        position_noise=values['position_noise'],
        velocity_noise=values['velocity_noise'],
        seed=values['seed'],
        q0=initial_position(model, values),
        qd0=list(values['initial_velocity']),
        position_limits=values['position_limits'],
        actuated=actuated or None,
    )
