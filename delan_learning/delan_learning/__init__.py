"""Deep Lagrangian Networks for robot dynamics.

The package root and every module outside ``delan_learning.nodes`` are pure PyTorch/numpy: import
them in a notebook without ROS.
"""

__version__ = '0.1.0'
