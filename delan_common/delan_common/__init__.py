"""What learning and control share, so that neither needs the other.

Without ROS or torch: :mod:`~delan_common.urdf_joints` reads a description (joint selection,
limits, xacro), :mod:`~delan_common.joint_state` maps ``JointState`` fields by name,
:mod:`~delan_common.dynamics` is the protocol every dynamics model implements,
:mod:`~delan_common.robot_model` is the analytic Pinocchio model (with
:mod:`~delan_common.joint_effects`, the plant effects a mismatched model adds),
:mod:`~delan_common.excitation` the excitation trajectories, :mod:`~delan_common.command_order`
the joint order of torque commands and :mod:`~delan_common.decimation` rate reduction.

With rclpy: :mod:`delan_common.ros` holds what every node uses (parameter tables, QoS, the node
main, joint-state taking, diagnostics).
"""
