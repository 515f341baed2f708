"""The whole suite against the simulated arm: sim + reference + torque controller + data logger +
online learner.

    ros2 launch delan_bringup sim.launch.py model:=pd record:=true
    ros2 launch delan_bringup sim.launch.py urdf:=seven_dof_arm.urdf namespace:=arm1
    ros2 launch delan_bringup sim.launch.py controller_impl:=rt   # the compiled controller

Parameters come from config/sim_params.yaml of this package (``params_file:=`` names another);
the arguments below override them.
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

PARAMS = PathJoinSubstitution([FindPackageShare('delan_bringup'), 'config', 'sim_params.yaml'])


def _nodes(context):
    args = resolved(context)
    params = LaunchConfiguration('params_file')
    output = LaunchConfiguration('output')
    sim_time = ParameterValue(LaunchConfiguration('use_sim_time'), value_type=bool)
    common = {'urdf_path': args.urdf, 'use_sim_time': sim_time}
    if LaunchConfiguration('controller_impl').perform(context) == 'rt':
        # named torque_controller, so the parameter file's section applies to it too
        derived = rt_controller_parameters(context, args, params)
        controller = Node(
            package='delan_control_rt',
            executable='torque_controller_rt',
            name='torque_controller',
            output=output,
            parameters=[
                params,
                derived,
                {'model': args.model, 'delan_checkpoint': args.delan_checkpoint},
            ],
        )
    else:
        controller = Node(
            package='delan_control',
            executable='torque_controller',
            name='torque_controller',
            output=output,
            parameters=[
                params,
                common,
                {
                    'model': args.model,
                    'delan_checkpoint': args.delan_checkpoint,
                    'identified_params': LaunchConfiguration('identified_params'),
                },
            ],
        )
    return [
        GroupAction(
            [
                PushRosNamespace(LaunchConfiguration('namespace')),
                Node(
                    package='delan_control',
                    executable='sim',
                    name='sim',
                    output=output,
                    parameters=[params, {'urdf_path': args.urdf, 'publish_clock': sim_time}],
                ),
                Node(
                    package='delan_control',
                    executable='reference',
                    name='reference',
                    output=output,
                    parameters=[params, common],
                ),
                controller,
                Node(
                    package='delan_learning',
                    executable='data_logger',
                    name='data_logger',
                    output=output,
                    condition=IfCondition(LaunchConfiguration('record')),
                    parameters=[
                        params,
                        {'use_sim_time': sim_time, 'bag_dir': LaunchConfiguration('bag_dir')},
                    ],
                ),
                Node(
                    package='delan_learning',
                    executable='learner',
                    name='learner',
                    output=output,
                    parameters=[
                        params,
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
                'params_file',
                default_value=PARAMS,
                description='Node parameter file (the arguments here override it)',
            ),
            DeclareLaunchArgument(
                'output',
                default_value='screen',
                choices=['screen', 'log', 'both', 'own_log', 'full'],
                description="Nodes' output (launch's output configurations; "
                'own_log: a file per node in the launch log folder)',
            ),
            DeclareLaunchArgument(
                'use_sim_time',
                default_value='true',
                choices=['true', 'false'],
                description='Run on the /clock the sim publishes',
            ),
            OpaqueFunction(function=_nodes),
        ]
    )
