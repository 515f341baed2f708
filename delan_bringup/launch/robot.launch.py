"""The suite next to a real arm (or Gazebo) driven by ros2_control: joint_states in,
``effort_controller/commands`` out (a ForwardCommandController, effort interface). No sim.

    ros2 launch delan_bringup robot.launch.py urdf:=/path/to/arm.urdf model:=pinocchio \
        joint_states:=/joint_states commands:=/effort_controller/commands \
        effort_controller:=/effort_controller

The torque controller sends its commands in the joint order of that controller, read from its
``joints`` parameter (``effort_controller``, relative to ``namespace``).

``controller_impl:=rt`` starts the compiled controller (delan_control_rt) instead; it asks the
effort controller for its joints the same way.

Start it in the safe configuration (model:=pd, conservative gains in config/robot_params.yaml)
and switch at runtime with `ros2 param set /torque_controller model delan`.
"""

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, GroupAction, OpaqueFunction
from launch.conditions import IfCondition
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution
from launch_ros.actions import Node, PushRosNamespace
from launch_ros.parameter_descriptions import ParameterValue
from launch_ros.substitutions import FindPackageShare

from delan_bringup.launch_args import (
    declare_node_arguments,
    declare_suite_arguments,
    resolved,
    rt_controller_parameters,
)

PARAMS = PathJoinSubstitution([FindPackageShare('delan_bringup'), 'config', 'robot_params.yaml'])


def _nodes(context):
    args = resolved(context)
    sim_time = ParameterValue(LaunchConfiguration('use_sim_time'), value_type=bool)
    common = {'urdf_path': args.urdf, 'use_sim_time': sim_time}
    remaps = [
        ('joint_states', LaunchConfiguration('joint_states')),
        ('effort_controller/commands', LaunchConfiguration('commands')),
    ]
    if LaunchConfiguration('controller_impl').perform(context) == 'rt':
        derived = rt_controller_parameters(context, args, PARAMS)
        controller = Node(
            package='delan_control_rt',
            executable='torque_controller_rt',
            name='torque_controller',
            output='screen',
            remappings=remaps,
            parameters=[
                PARAMS,
                derived,
                {
                    'model': args.model,
                    'delan_checkpoint': args.delan_checkpoint,
                    'effort_controller_name': LaunchConfiguration('effort_controller'),
                },
            ],
        )
    else:
        controller = Node(
            package='delan_control',
            executable='torque_controller',
            name='torque_controller',
            output='screen',
            remappings=remaps,
            parameters=[
                PARAMS,
                common,
                {
                    'model': args.model,
                    'delan_checkpoint': args.delan_checkpoint,
                    'identified_params': LaunchConfiguration('identified_params'),
                    'effort_controller_name': LaunchConfiguration('effort_controller'),
                },
            ],
        )
    return [
        GroupAction(
            [
                PushRosNamespace(LaunchConfiguration('namespace')),
                Node(
                    package='delan_control',
                    executable='reference',
                    name='reference',
                    output='screen',
                    condition=IfCondition(LaunchConfiguration('reference')),
                    parameters=[PARAMS, common],
                    remappings=remaps,
                ),
                controller,
                Node(
                    package='delan_learning',
                    executable='data_logger',
                    name='data_logger',
                    output='screen',
                    condition=IfCondition(LaunchConfiguration('record')),
                    remappings=remaps,
                    parameters=[
                        PARAMS,
                        {'use_sim_time': sim_time, 'bag_dir': LaunchConfiguration('bag_dir')},
                    ],
                ),
                Node(
                    package='delan_learning',
                    executable='learner',
                    name='learner',
                    output='screen',
                    remappings=remaps,
                    parameters=[
                        PARAMS,
                        common,
                        {
                            'checkpoint_dir': LaunchConfiguration('checkpoint_dir'),
                            'model': args.learner_model,
                        },
                    ],
                ),
            ]
        )
    ]


def generate_launch_description():
    return LaunchDescription(
        [
            *declare_suite_arguments(),
            *declare_node_arguments(),
            DeclareLaunchArgument(
                'reference',
                default_value='true',
                choices=['true', 'false'],
                description='Start the reference node (excitation trajectories)',
            ),
            DeclareLaunchArgument(
                'use_sim_time', default_value='false', choices=['true', 'false']
            ),
            DeclareLaunchArgument(
                'joint_states',
                default_value='joint_states',
                description='Joint state topic of the robot',
            ),
            DeclareLaunchArgument(
                'commands',
                default_value='effort_controller/commands',
                description='Command topic of the effort controller',
            ),
            DeclareLaunchArgument(
                'effort_controller',
                default_value='effort_controller',
                description='Node name of the effort controller: the torque '
                'controller commands in the order of its joints',
            ),
            OpaqueFunction(function=_nodes),
        ]
    )
