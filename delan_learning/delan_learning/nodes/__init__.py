"""Thin rclpy wrappers over the ROS-free core."""
