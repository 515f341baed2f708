"""Gazebo (gz sim) with gz_ros2_control: spawns the URDF, loads joint_state_broadcaster and the
effort controller, then includes robot.launch.py on the same topics.

    ros2 launch launch/gazebo.launch.py robot:=urdf/two_link_arm.urdf controller:=pinocchio

Needs ros_gz_sim, gz_ros2_control and controller_manager (apt ROS 2 Jazzy/Kilted); it cannot run
on the PyPI-wheel install of this repository. The URDF's <gazebo> block names the controllers file
as $(find delan_control)/config/<robot>_controllers.yaml: this launch file resolves that path
before handing the description to Gazebo.
"""
import os
import re

from launch import LaunchDescription
from launch.actions import (DeclareLaunchArgument, IncludeLaunchDescription, OpaqueFunction,
                            RegisterEventHandler)
from launch.event_handlers import OnProcessExit
from launch.launch_description_sources import PythonLaunchDescriptionSource
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution
from launch_ros.actions import Node
from launch_ros.substitutions import FindPackageShare

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_ROBOT = os.path.normpath(os.path.join(HERE, '..', 'urdf', 'two_link_arm.urdf'))


def _robot_description(context):
    path = LaunchConfiguration('robot').perform(context)
    with open(path, encoding='utf-8') as f:
        xml = f.read()
    share = FindPackageShare('delan_control').perform(context)
    return re.sub(r'\$\(find delan_control\)', share, xml)


def _nodes(context):
    xml = _robot_description(context)
    state_publisher = Node(package='robot_state_publisher', executable='robot_state_publisher',
                           parameters=[{'robot_description': xml, 'use_sim_time': True}])
    spawn = Node(package='ros_gz_sim', executable='create', output='screen',
                 arguments=['-topic', 'robot_description', '-name', 'delan_arm'])
    broadcaster = Node(package='controller_manager', executable='spawner',
                       arguments=['joint_state_broadcaster'])
    effort = Node(package='controller_manager', executable='spawner',
                  arguments=['effort_controller'])
    clock_bridge = Node(package='ros_gz_bridge', executable='parameter_bridge',
                        arguments=['/clock@rosgraph_msgs/msg/Clock[gz.msgs.Clock'])
    suite = IncludeLaunchDescription(
        PythonLaunchDescriptionSource(os.path.join(HERE, 'robot.launch.py')),
        launch_arguments={'robot': LaunchConfiguration('robot'),
                          'controller': LaunchConfiguration('controller'),
                          'use_sim_time': 'true'}.items())
    return [state_publisher, spawn, clock_bridge,
            RegisterEventHandler(OnProcessExit(target_action=spawn, on_exit=[broadcaster])),
            RegisterEventHandler(OnProcessExit(target_action=broadcaster,
                                               on_exit=[effort, suite]))]


def generate_launch_description():
    gz = IncludeLaunchDescription(
        PythonLaunchDescriptionSource(PathJoinSubstitution(
            [FindPackageShare('ros_gz_sim'), 'launch', 'gz_sim.launch.py'])),
        launch_arguments={'gz_args': '-r empty.sdf'}.items())
    return LaunchDescription([
        DeclareLaunchArgument('robot', default_value=DEFAULT_ROBOT, description='URDF file'),
        DeclareLaunchArgument('controller', default_value='pd',
                              choices=['pd', 'pinocchio', 'identified', 'delan']),
        gz,
        OpaqueFunction(function=_nodes),
    ])
