"""Bringup of the delan_ros suite: its launch files, parameters, controller configs and URDFs
live in this package's share folder; :mod:`delan_bringup.launch_args` holds what the launch
files share."""
