"""The robot every node works on, declared the same way by every node: ``robot_description``
(URDF XML), ``urdf_path`` (``.urdf`` or ``.xacro``) or, when neither is set, the latched
``robot_description`` topic robot_state_publisher publishes; and which of its joints to learn
and control (``joints``, ``locked_joint_positions``) with limit overrides (``effort_limits``,
``velocity_limits``) -- see :mod:`delan_common.urdf_joints`."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from typing import Any, Dict, List, Optional

import rclpy
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from std_msgs.msg import String

from delan_common.param_table import (
    ROBOT_DESCRIPTION_HELP,
    URDF_PATH_HELP,
    robot_table,
)
from delan_common.ros.params import declare_table
from delan_common.ros.qos import LATCHED
from delan_common.urdf_joints import RobotDescription, UrdfError

DESCRIPTION_TOPIC = 'robot_description'


@dataclass(frozen=True)
class RobotParams:
    """A node's robot parameters: where the URDF comes from and which joints to use."""

    path: str
    xml: str  # the robot_description parameter, or the topic's message
    joints: List[str] = field(default_factory=list)
    locked: Dict[str, float] = field(default_factory=dict)
    effort_limits: List[float] = field(default_factory=list)
    velocity_limits: List[float] = field(default_factory=list)
    from_topic: bool = False

    @property
    def description(self) -> str:
        """What the loaders take: the XML when there is one, else the path."""
        return self.xml if self.xml.strip() else self.path

    def selection_kwargs(self) -> Dict[str, Any]:
        """Keyword arguments of ``RobotDescription.load`` and ``RobotModel``."""
        return {
            'joints': list(self.joints),
            'locked': dict(self.locked),
            'effort_limits': list(self.effort_limits),
            'velocity_limits': list(self.velocity_limits),
        }


def parse_locked(entries: List[str]) -> Dict[str, float]:
    """``['name=value', ...]`` as a dict; a malformed entry is a ValueError naming it."""
    out: Dict[str, float] = {}
    for entry in entries:
        name, sep, value = entry.partition('=')
        try:
            position = float(value)
        except ValueError:
            position = math.nan
        if not sep or not name.strip() or not math.isfinite(position):
            raise ValueError(
                f'invalid parameter: locked_joint_positions entry {entry!r} is not '
                f'name=value (a finite number)'
            )
        out[name.strip()] = position
    return out


def wait_for_description(node: Node, timeout_s: float) -> str:
    """The URDF of the latched ``robot_description`` topic (relative to the node's namespace),
    spinning ``node`` up to ``timeout_s``; a clear ValueError when none comes.

    Call it while the node is in no executor (during construction)."""
    got: List[str] = []
    sub = node.create_subscription(
        String, DESCRIPTION_TOPIC, lambda m: got.append(m.data), LATCHED
    )
    executor = SingleThreadedExecutor(context=node.context)
    topic = node.resolve_topic_name(DESCRIPTION_TOPIC)
    node.get_logger().info(
        f'no urdf_path or robot_description parameter: waiting up to '
        f'{timeout_s:g} s for the robot on {topic}'
    )
    deadline = time.monotonic() + timeout_s
    try:
        while not got:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            rclpy.spin_once(node, executor=executor, timeout_sec=min(left, 0.1))
    finally:
        node.executor = None
        executor.shutdown()
        node.destroy_subscription(sub)
    if not got:
        raise ValueError(
            f'no robot: set the robot_description or urdf_path parameter, or '
            f'publish it latched on {topic} (nothing came within {timeout_s:g} s, '
            f'robot_description_timeout)'
        )
    return got[-1]


def declare_robot_params(
    node: Node,
    registry: Optional[Dict] = None,
    *,
    default_path: str = '',
    path_help: str = URDF_PATH_HELP,
    description_help: str = ROBOT_DESCRIPTION_HELP,
) -> RobotParams:
    """Declare the robot parameters (read-only) and return them; wait for the
    ``robot_description`` topic when neither ``urdf_path`` nor ``robot_description`` is set.

    For a node that loads the robot its own way (the sim builds a Pinocchio model:
    ``RobotModel(params.description, **params.selection_kwargs())``); the others use
    :func:`declare_robot`.
    """
    v = declare_table(node, robot_table(default_path, path_help, description_help), registry)
    path, xml, joints = v.urdf_path, v.robot_description, v.joints
    locked = parse_locked(v.locked_joint_positions)
    effort, velocity, timeout = v.effort_limits, v.velocity_limits, v.robot_description_timeout
    params = RobotParams(path, xml, joints, locked, effort, velocity)
    if not xml.strip() and not path:
        params = replace(params, xml=wait_for_description(node, timeout), from_topic=True)
    return params


def declare_robot(node: Node, registry: Optional[Dict] = None) -> RobotDescription:
    """Declare the robot parameters (read-only) and load the robot with its joint selection;
    log what the loader read other than written.

    Raises ``ValueError`` with a clear message when there is no robot or it is unusable.
    """
    params = declare_robot_params(node, registry)
    try:
        robot = RobotDescription.load(params.description, **params.selection_kwargs())
    except UrdfError as err:
        raise ValueError(str(err)) from None
    if params.from_topic:
        robot = replace(robot, source=f'topic {node.resolve_topic_name(DESCRIPTION_TOPIC)}')
    for warning in robot.warnings:
        node.get_logger().warning(warning)
    node.get_logger().info(f'robot from {robot.source}: joints {robot.joint_names}')
    return robot
