"""controller_state_message: ``~/controller_state`` of one cycle -- errors wrapped on continuous
joints, a zero feedforward where no model was in the torque, no effort when none was measured."""

import math

import numpy as np

from delan_control.control_cycle import CycleState
from delan_control.nodes.controller_state_message import controller_state_message


def _cycle(effort=None, feedforward=None):
    return CycleState(
        stamp=12.25,
        q_ref=np.array([0.1, math.pi - 0.1]),
        qd_ref=np.array([1.0, 0.0]),
        qdd_ref=np.array([0.5, 0.0]),
        q=np.array([0.0, -math.pi + 0.1]),
        qd=np.array([0.25, 0.0]),
        effort=effort,
        feedforward=feedforward,
        command=np.array([2.0, -1.0]),
        model='delan',
        model_version=7,
        law='feedforward_pd',
        fallback='none',
        holding=False,
    )


def test_the_message_is_the_cycle_with_its_errors():
    msg = controller_state_message(_cycle(), ['a', 'b'], ['revolute', 'continuous'])
    assert msg.joint_names == ['a', 'b'] and msg.model == 'delan' and msg.model_version == 7
    assert msg.law == 'feedforward_pd' and msg.fallback == 'none' and not msg.holding
    assert (msg.header.stamp.sec, msg.header.stamp.nanosec) == (12, 250_000_000)
    assert list(msg.reference.positions) == [0.1, math.pi - 0.1]
    assert list(msg.reference.accelerations) == [0.5, 0.0]
    assert list(msg.feedback.velocities) == [0.25, 0.0]
    # the continuous joint's error goes the short way round
    np.testing.assert_allclose(msg.error.positions, [0.1, -0.2], atol=1e-12)
    np.testing.assert_allclose(msg.error.velocities, [0.75, 0.0])
    assert list(msg.command) == [2.0, -1.0]


def test_no_model_is_a_zero_feedforward_and_no_effort_none():
    bare = controller_state_message(_cycle(), ['a', 'b'], ['revolute', 'revolute'])
    assert list(bare.feedforward) == [0.0, 0.0] and list(bare.feedback.effort) == []
    full = controller_state_message(
        _cycle(np.array([0.5, 0.25]), np.array([1.5, 0.5])), ['a', 'b'], ['revolute'] * 2
    )
    assert list(full.feedforward) == [1.5, 0.5] and list(full.feedback.effort) == [0.5, 0.25]
