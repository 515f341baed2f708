"""The whole suite against the simulated arm: sim + reference + torque controller + data logger +
online learner.

    ros2 launch launch/sim.launch.py controller:=pd record:=true
    ros2 launch launch/sim.launch.py robot:=urdf/seven_dof_arm.urdf namespace:=arm1

Parameters come from config/sim_params.yaml next to this file; the arguments below override them.
"""
import os

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, GroupAction
from launch.conditions import IfCondition
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node, PushRosNamespace
from launch_ros.parameter_descriptions import ParameterValue

HERE = os.path.dirname(os.path.abspath(__file__))
PARAMS = os.path.join(HERE, 'config', 'sim_params.yaml')
DEFAULT_ROBOT = os.path.normpath(os.path.join(HERE, '..', 'urdf', 'two_link_arm.urdf'))


def generate_launch_description():
    robot = LaunchConfiguration('robot')
    sim_time = ParameterValue(LaunchConfiguration('use_sim_time'), value_type=bool)
    common = {'urdf_path': robot, 'use_sim_time': sim_time}
    return LaunchDescription([
        DeclareLaunchArgument('robot', default_value=DEFAULT_ROBOT, description='URDF file'),
        DeclareLaunchArgument('controller', default_value='pd',
                              choices=['pd', 'pinocchio', 'identified', 'delan'],
                              description='Dynamics model of the torque controller'),
        DeclareLaunchArgument('record', default_value='true', choices=['true', 'false'],
                              description='Record joint states and commands to a rosbag2'),
        DeclareLaunchArgument('bag_dir', default_value='bags', description='Where bags go'),
        DeclareLaunchArgument('model', default_value='',
                              description="DeLaN checkpoint for controller:=delan ('' = the "
                                          "learner's latest)"),
        DeclareLaunchArgument('identified_params', default_value='',
                              description='delan-sysid output for controller:=identified'),
        DeclareLaunchArgument('checkpoint_dir', default_value='delan_checkpoints',
                              description="Learner's checkpoint folder"),
        DeclareLaunchArgument('use_sim_time', default_value='true', choices=['true', 'false'],
                              description='Run on the /clock the sim publishes'),
        DeclareLaunchArgument('namespace', default_value='', description='Namespace of all nodes'),
        GroupAction([
            PushRosNamespace(LaunchConfiguration('namespace')),
            Node(package='delan_control', executable='sim', name='sim', output='screen',
                 parameters=[PARAMS, {'urdf_path': robot,
                                      'publish_clock': sim_time}]),
            Node(package='delan_control', executable='reference', name='reference',
                 output='screen', parameters=[PARAMS, common]),
            Node(package='delan_control', executable='torque_controller',
                 name='torque_controller', output='screen',
                 parameters=[PARAMS, common, {
                     'model': LaunchConfiguration('controller'),
                     'delan_checkpoint': LaunchConfiguration('model'),
                     'identified_params': LaunchConfiguration('identified_params')}]),
            Node(package='delan_learning', executable='data_logger', name='data_logger',
                 output='screen', condition=IfCondition(LaunchConfiguration('record')),
                 parameters=[PARAMS, {'use_sim_time': sim_time,
                                      'bag_dir': LaunchConfiguration('bag_dir')}]),
            Node(package='delan_learning', executable='learner', name='learner', output='screen',
                 parameters=[PARAMS, common, {
                     'checkpoint_dir': LaunchConfiguration('checkpoint_dir')}]),
        ]),
    ])
