"""The sim's plant from its parameter values (``sim_plant``), without ROS."""

from __future__ import annotations

import numpy as np
import pytest

from delan_common.robot_model import RobotModel
from delan_control.params.sim import TABLE
from delan_control.sim_plant import plant_from_params


def _values(**changes):
    values = {p.name: p.default for p in TABLE}
    values.update(changes)
    return values


def test_the_default_start_is_the_middle_of_the_joint_ranges():
    model = RobotModel('panda.urdf')  # its elbow's range excludes 0
    plant = plant_from_params(model, _values())
    lower, upper = model.spec.lower, model.spec.upper
    np.testing.assert_allclose(plant.q[3], 0.5 * (lower[3] + upper[3]))
    assert np.all((plant.q > lower) & (plant.q < upper)) and np.all(plant.qd == 0.0)


def test_parameters_reach_the_plant():
    model = RobotModel('two_link_arm.urdf')
    plant = plant_from_params(
        model,
        _values(
            initial_position=[0.3, -0.2],
            initial_velocity=[0.1, 0.0],
            physics_rate=2000.0,
            integrator='semi_implicit_euler',
            payload_mass=1.0,
            actuated_joints=['elbow'],
        ),
    )
    assert list(plant.q) == [0.3, -0.2] and list(plant.qd) == [0.1, 0.0]
    assert plant.dt == 0.5e-3 and plant.integrator == 'semi_implicit_euler'
    assert plant.truth.spec.total_mass == pytest.approx(model.spec.total_mass + 1.0)
    assert list(plant.actuated) == [False, True]


@pytest.mark.parametrize(
    'changes, match',
    [
        ({'actuated_joints': ['wrist']}, r"actuated_joints: \['wrist'\] are not joints"),
        ({'mismatch_preset': 'nope'}, "invalid parameter: mismatch preset 'nope'"),
    ],
)
def test_what_the_robot_cannot_have_is_an_invalid_parameter(changes, match):
    with pytest.raises(ValueError, match=match):
        plant_from_params(RobotModel('two_link_arm.urdf'), _values(**changes))
