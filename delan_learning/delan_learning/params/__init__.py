"""The parameter tables of the delan_learning nodes (ROS-free: readable without a node)."""
