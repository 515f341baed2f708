"""Online DeLaN learner node (skeleton: counts and validates joint states, reports status)."""
from __future__ import annotations

from typing import Dict, Optional

from delan_msgs.msg import ModelStatus
from rclpy.node import Node
from sensor_msgs.msg import JointState

from delan_learning.joint_state import JointStateError, JointStateMapper
from delan_learning.ros.params import declare, validating_callback
from delan_learning.ros.rejections import RejectionCounter
from delan_learning.ros.spin import run_node


class LearnerNode(Node):
    def __init__(self, **kwargs):
        super().__init__('learner', **kwargs)
        self._validators: Dict = {}
        self.joint_names = list(declare(
            self, 'joint_names', [''], 'Joints to learn, in model order; [""] = take them from '
            'the first joint state', registry=self._validators, read_only=True))
        rate = declare(self, 'status_rate', 1.0, 'ModelStatus publish rate [Hz]',
                       min_value=0.01, max_value=100.0, registry=self._validators, read_only=True)
        self.add_on_set_parameters_callback(validating_callback(self._validators))
        self._mapper: Optional[JointStateMapper] = (
            JointStateMapper(self.joint_names) if self.joint_names != [''] else None)
        self.rejected = RejectionCounter(self.get_logger(), 'joint state')
        self.samples_seen = 0
        self.status_pub = self.create_publisher(ModelStatus, 'learner/status', 10)
        self.create_subscription(JointState, 'joint_states', self._on_joint_state, 100)
        self.create_timer(1.0 / rate, self._publish_status)

    def _on_joint_state(self, msg: JointState) -> None:
        if self._mapper is None and msg.name:
            self.joint_names = list(msg.name)
            self._mapper = JointStateMapper(self.joint_names)
        if self._mapper is None:
            self.rejected.reject('empty', 'joint state has no names')
            return
        try:
            self._mapper.map(msg)
        except JointStateError as err:
            self.rejected.reject(err.reason, err.detail)
            return
        self.samples_seen += 1

    def _publish_status(self) -> None:
        msg = ModelStatus()
        msg.header.stamp = self.get_clock().now().to_msg()
        msg.joint_names = self.joint_names if self._mapper else []
        msg.state = ModelStatus.STATE_COLLECTING if self.samples_seen else ModelStatus.STATE_IDLE
        msg.samples_seen = self.samples_seen
        msg.samples_rejected = self.rejected.total
        msg.message = 'skeleton learner: no training yet'
        self.status_pub.publish(msg)


def main(args=None) -> int:
    return run_node(LearnerNode, args)


if __name__ == '__main__':
    raise SystemExit(main())
