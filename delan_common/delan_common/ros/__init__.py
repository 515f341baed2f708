"""Shared rclpy helpers for the suite's nodes (parameters, rejection counting, node main)."""
