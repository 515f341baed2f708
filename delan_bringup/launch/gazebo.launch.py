"""Gazebo (gz sim) with gz_ros2_control: spawns the URDF, loads joint_state_broadcaster and the
effort controller, then includes robot.launch.py on the same topics.

    ros2 launch delan_bringup gazebo.launch.py urdf:=two_link_arm.urdf model:=pinocchio

Needs ros_gz_sim, gz_ros2_control and controller_manager (apt ROS 2 Jazzy/Kilted); it cannot run
on the PyPI-wheel install of this repository. The URDF's <gazebo> block names the controllers file
as $(find delan_bringup)/config/<robot>_controllers.yaml: this launch file resolves that path (and
runs a .xacro through xacro) before handing the description to Gazebo.
"""

from launch import LaunchDescription
from launch.actions import IncludeLaunchDescription, OpaqueFunction, RegisterEventHandler
from launch.event_handlers import OnProcessExit
from launch.launch_description_sources import PythonLaunchDescriptionSource
from launch.substitutions import PathJoinSubstitution
from launch_ros.actions import Node
from launch_ros.substitutions import FindPackageShare

from delan_bringup.launch_args import declare_suite_arguments, resolved


def _nodes(context):
    from delan_common.robot_model import find_urdf, resolve_package_paths
    from delan_common.urdf_joints import read_description

    args = resolved(context)
    xml = resolve_package_paths(read_description(find_urdf(args.urdf))[0])
    state_publisher = Node(
        package='robot_state_publisher',
        executable='robot_state_publisher',
        parameters=[{'robot_description': xml, 'use_sim_time': True}],
    )
    spawn = Node(
        package='ros_gz_sim',
        executable='create',
        output='screen',
        arguments=['-topic', 'robot_description', '-name', 'delan_arm'],
    )
    broadcaster = Node(
        package='controller_manager', executable='spawner', arguments=['joint_state_broadcaster']
    )
    effort = Node(
        package='controller_manager', executable='spawner', arguments=['effort_controller']
    )
    clock_bridge = Node(
        package='ros_gz_bridge',
        executable='parameter_bridge',
        arguments=['/clock@rosgraph_msgs/msg/Clock[gz.msgs.Clock'],
    )
    suite = IncludeLaunchDescription(
        PythonLaunchDescriptionSource(
            PathJoinSubstitution([FindPackageShare('delan_bringup'), 'launch', 'robot.launch.py'])
        ),
        launch_arguments={
            'urdf': args.urdf,
            'model': args.model,
            'delan_checkpoint': args.delan_checkpoint,
            'use_sim_time': 'true',
        }.items(),
    )
    return [
        state_publisher,
        spawn,
        clock_bridge,
        RegisterEventHandler(OnProcessExit(target_action=spawn, on_exit=[broadcaster])),
        RegisterEventHandler(OnProcessExit(target_action=broadcaster, on_exit=[effort, suite])),
    ]


def generate_launch_description():
    gz = IncludeLaunchDescription(
        PythonLaunchDescriptionSource(
            PathJoinSubstitution([FindPackageShare('ros_gz_sim'), 'launch', 'gz_sim.launch.py'])
        ),
        launch_arguments={'gz_args': '-r empty.sdf'}.items(),
    )
    return LaunchDescription(
        [
            *declare_suite_arguments(),
            gz,
            OpaqueFunction(function=_nodes),
        ]
    )
