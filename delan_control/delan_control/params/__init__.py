"""The parameter tables of the delan_control nodes (ROS-free: readable without a node)."""
