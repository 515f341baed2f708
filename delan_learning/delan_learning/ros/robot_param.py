"""The robot every node works on: ``robot_description`` (URDF XML, as robot_state_publisher
publishes it) or ``urdf_path``, declared the same way by every node."""
from __future__ import annotations

from typing import Dict, Optional, Tuple

from rclpy.node import Node

from delan_learning.ros.params import declare
from delan_learning.urdf_joints import RobotDescription, UrdfError

URDF_PATH_HELP = 'URDF file of the robot (ignored when robot_description is set)'
ROBOT_DESCRIPTION_HELP = 'URDF XML of the robot'


def declare_robot_params(node: Node, registry: Optional[Dict] = None, *, default_path: str = '',
                         path_help: str = URDF_PATH_HELP,
                         description_help: str = ROBOT_DESCRIPTION_HELP) -> Tuple[str, str]:
    """Declare ``urdf_path`` and ``robot_description`` (read-only); return ``(path, xml)``.

    For a node that loads the robot its own way (the sim builds a Pinocchio model from it);
    the others use :func:`declare_robot`.
    """
    path = declare(node, 'urdf_path', default_path, path_help, read_only=True, registry=registry)
    xml = declare(node, 'robot_description', '', description_help, read_only=True,
                  registry=registry)
    return path, xml


def declare_robot(node: Node, registry: Optional[Dict] = None) -> RobotDescription:
    """Declare ``urdf_path`` and ``robot_description`` (read-only) and load the robot.

    Raises ``ValueError`` with a clear message when neither is set or the URDF is unusable.
    """
    path, xml = declare_robot_params(node, registry)
    if not xml and not path:
        raise ValueError('no robot: set the robot_description or urdf_path parameter')
    try:
        robot = RobotDescription.load(xml or path)
    except UrdfError as err:
        raise ValueError(str(err)) from None
    node.get_logger().info(f'robot from {robot.source}: joints {robot.joint_names}')
    return robot
