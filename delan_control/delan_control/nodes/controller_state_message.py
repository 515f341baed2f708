"""``~/controller_state`` of one control cycle: the torque controller's
:class:`~delan_control.control_cycle.CycleState` as a ``delan_msgs/ControllerState``, built off
the control loop (by the node's state worker thread)."""

from __future__ import annotations

from typing import List, Sequence

from delan_common.ros.stamps import set_seconds
from delan_control.control_cycle import CycleState
from delan_control.evaluation import joint_errors
from delan_msgs.msg import ControllerState


def controller_state_message(
    s: CycleState, joint_names: List[str], joint_types: Sequence[str]
) -> ControllerState:
    """The message of cycle ``s`` of the joints ``joint_names`` (model order) of
    ``joint_types`` (the position error of a continuous joint is wrapped); the feedforward is
    zero where no model was in the torque."""
    msg = ControllerState(
        joint_names=joint_names,
        model=s.model,
        model_version=s.model_version,
        law=s.law,
        fallback=s.fallback,
        holding=s.holding,
    )
    set_seconds(msg.header.stamp, s.stamp)
    ref, fb, err = msg.reference, msg.feedback, msg.error
    ref.positions, ref.velocities = s.q_ref.tolist(), s.qd_ref.tolist()
    ref.accelerations = s.qdd_ref.tolist()
    fb.positions, fb.velocities = s.q.tolist(), s.qd.tolist()
    if s.effort is not None:
        fb.effort = s.effort.tolist()
    err.positions = joint_errors(s.q_ref, s.q, joint_types).tolist()
    err.velocities = (s.qd_ref - s.qd).tolist()
    msg.feedforward = [0.0] * len(s.q) if s.feedforward is None else s.feedforward.tolist()
    msg.command = s.command.tolist()
    return msg
