"""Torque controller node (skeleton: PD hold of the first received position)."""
from __future__ import annotations

from typing import Dict, Optional

import numpy as np
from rclpy.node import Node
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray

from delan_learning.joint_state import JointStateError, JointStateMapper
from delan_learning.ros.params import declare, validating_callback
from delan_learning.ros.rejections import RejectionCounter
from delan_learning.ros.spin import run_node


class TorqueControllerNode(Node):
    def __init__(self, **kwargs):
        super().__init__('torque_controller', **kwargs)
        self._validators: Dict = {}
        self.joint_names = list(declare(self, 'joint_names', [''], 'Controlled joints, in command '
                                        'order; [""] = from the first joint state',
                                        registry=self._validators, read_only=True))
        self.kp = declare(self, 'kp', 50.0, 'Proportional gain [Nm/rad]', min_value=0.0,
                          max_value=1e5, registry=self._validators)
        self.kd = declare(self, 'kd', 5.0, 'Derivative gain [Nm s/rad]', min_value=0.0,
                          max_value=1e4, registry=self._validators)
        self.effort_limit = declare(self, 'effort_limit', 10.0, 'Torque clamp [Nm]',
                                    min_value=0.0, max_value=1e4, registry=self._validators)
        self.add_on_set_parameters_callback(validating_callback(self._validators, self._on_params))
        self._mapper: Optional[JointStateMapper] = (
            JointStateMapper(self.joint_names) if self.joint_names != [''] else None)
        self._hold: Optional[np.ndarray] = None
        self.rejected = RejectionCounter(self.get_logger(), 'joint state')
        self.cmd_pub = self.create_publisher(Float64MultiArray, 'effort_controller/commands', 10)
        self.create_subscription(JointState, 'joint_states', self._on_joint_state, 10)

    def _on_params(self, params) -> None:
        for p in params:
            if p.name in ('kp', 'kd', 'effort_limit'):
                setattr(self, p.name, p.value)

    def _on_joint_state(self, msg: JointState) -> None:
        if self._mapper is None and msg.name:
            self.joint_names = list(msg.name)
            self._mapper = JointStateMapper(self.joint_names)
        try:
            js = self._mapper.map(msg)
        except (JointStateError, AttributeError) as err:
            self.rejected.reject(getattr(err, 'reason', 'empty'), str(err))
            return
        if self._hold is None:
            self._hold = js.position.copy()
        tau = self.kp * (self._hold - js.position) - self.kd * js.velocity
        tau = np.clip(tau, -self.effort_limit, self.effort_limit)
        self.cmd_pub.publish(Float64MultiArray(data=tau.tolist()))


def main(args=None) -> int:
    return run_node(TorqueControllerNode, args)


if __name__ == '__main__':
    raise SystemExit(main())
