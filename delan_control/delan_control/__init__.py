"""Torque control with learned (DeLaN) or analytic (Pinocchio) dynamics.

Control laws, trajectories, the analytic model and the plant integrator are pure numpy/Pinocchio;
``delan_control.nodes`` holds the thin rclpy wrappers.
"""

__version__ = '0.1.0'
