"""What learning and control share about a robot, without ROS or torch.

:mod:`~delan_common.urdf_joints` reads a description (joint selection, limits, xacro),
:mod:`~delan_common.joint_state` maps ``JointState`` fields by name,
:mod:`~delan_common.dynamics` is the protocol every dynamics model implements, and
:mod:`~delan_common.robot_model` is the analytic Pinocchio model (with
:mod:`~delan_common.joint_effects`, the plant effects a mismatched model adds).
"""
