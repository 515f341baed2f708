"""A parameter given to a node that it does not declare is named in a warning, with the
declared ones it is closest to: rclpy keeps such a value and never uses it, so a misspelt
``-p`` would otherwise leave the node on its default without a word."""

import pytest
import rclpy
from rclpy.node import Node
from rclpy.parameter import Parameter

from delan_common.param_table import Param
from delan_common.ros.params import declare_table, undeclared_overrides

TABLE = (
    Param('urdf_path', '', 'the robot'),
    Param('real_time_factor', 1.0, 'sim speed', min=0.0),
    Param('seed', 0, 'noise seed', min=0),
)


@pytest.fixture
def context():
    ctx = rclpy.Context()
    rclpy.init(context=ctx)
    yield ctx
    rclpy.shutdown(context=ctx)


def _node(context, **overrides):
    node = Node(
        'undeclared_probe',
        context=context,
        parameter_overrides=[Parameter(k, value=v) for k, v in overrides.items()],
    )
    declare_table(node, TABLE)
    return node


def test_each_undeclared_override_is_named_with_the_closest_declared_ones(context):
    node = _node(context, urdf='arm.urdf', rael_time_factor=2.0, seed=3, zzz=1)
    try:
        warnings = undeclared_overrides(node)
        assert len(warnings) == 3  # seed is declared
        rael, urdf, zzz = warnings
        assert "'rael_time_factor'" in rael and 'did you mean real_time_factor' in rael
        assert "'urdf'" in urdf and 'did you mean urdf_path' in urdf
        assert "'zzz'" in zzz and 'did you mean' not in zzz
        assert node.get_parameter('seed').value == 3
    finally:
        node.destroy_node()


def test_no_warning_when_every_override_is_declared(context):
    node = _node(context, seed=3, use_sim_time=True)  # use_sim_time: rclpy's own
    try:
        assert undeclared_overrides(node) == []
    finally:
        node.destroy_node()
