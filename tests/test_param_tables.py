"""Every node declares exactly its parameter table (the robot's, then its own), in order:
names, defaults, read-only flags, ranges and descriptions."""

import importlib.util
import math
import os

import pytest

from delan_common.param_table import ParamContext, robot_table
from delan_control.params import reference, sim, torque_controller
from delan_learning.params import data_logger, learner

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
URDF = os.path.join(ROOT, 'delan_bringup', 'urdf', 'two_link_arm.urdf')

#: the 2-link arm the docs script builds the nodes on
CTX = ParamContext(n_joints=2)

TABLES = {
    'sim': robot_table(**sim.ROBOT) + sim.TABLE,
    'torque_controller': robot_table() + torque_controller.TABLE,
    'reference': robot_table() + reference.TABLE,
    'learner': robot_table() + learner.TABLE,
    'data_logger': data_logger.TABLE,
}


def _declared():
    spec = importlib.util.spec_from_file_location(
        'parameter_docs', os.path.join(ROOT, 'scripts', 'parameter_docs.py')
    )
    docs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(docs)
    return {name: specs for name, _, specs in docs.declared()}


@pytest.fixture(scope='module')
def declared():
    return _declared()


def _same_default(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same_default(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


@pytest.mark.parametrize('node', sorted(TABLES))
def test_a_node_declares_its_table(node, declared):
    specs, table = declared[node], TABLES[node]
    assert [s.name for s in specs] == [p.name for p in table]
    for s, p in zip(specs, table):
        assert _same_default(s.default, p.default), (p.name, s.default, p.default)
        assert s.read_only == p.read_only, p.name
        assert s.constraints == p.constraints(), p.name
        assert s.description == p.describe(CTX), p.name


def test_the_nodes_are_those_of_the_docs(declared):
    assert set(declared) == set(TABLES)


def _node_classes():
    from delan_control.nodes.reference import ReferenceNode
    from delan_control.nodes.sim import SimNode
    from delan_control.nodes.torque_controller import TorqueControllerNode
    from delan_learning.nodes.data_logger import DataLoggerNode
    from delan_learning.nodes.learner import LearnerNode

    return {
        'sim': SimNode,
        'torque_controller': TorqueControllerNode,
        'reference': ReferenceNode,
        'learner': LearnerNode,
        'data_logger': DataLoggerNode,
    }


def _first_ranged(table):
    """The table's first scalar parameter with a range, and a value above (or below) it."""
    for p in table:
        if p.items is None and not isinstance(p.default, bool) and p.max is not None:
            return p, type(p.default)(2 * abs(p.max) + 1)
        if p.items is None and not isinstance(p.default, bool) and p.min is not None:
            return p, type(p.default)(p.min - 2 * abs(p.min) - 1)
    raise AssertionError('no ranged parameter')


@pytest.mark.parametrize('node', sorted(TABLES))
def test_an_out_of_range_or_mistyped_start_up_value_is_a_clear_error(node):
    """rclpy checks a descriptor's range (and type) itself while declaring; that refusal is
    the same ``invalid parameter`` start-up error as the tables' own checks (exit 2 from
    run_node), not an exception of rclpy's with a traceback."""
    from rclpy.parameter import Parameter

    from delan_testing.ros import ros_context

    cls = _node_classes()[node]
    param, outside = _first_ranged(TABLES[node])
    mistyped = 'text'  # every ranged parameter is a number
    for value, words in ((outside, ('must be in', param.constraints())), (mistyped, ('type',))):
        with ros_context() as ctx:
            with pytest.raises(ValueError) as err:
                made = cls(context=ctx, parameter_overrides=[Parameter(param.name, value=value)])
                made.destroy_node()
        message = str(err.value)
        assert message.startswith('invalid parameter:') and param.name in message, message
        assert all(w in message for w in words), message


def test_an_out_of_range_start_up_value_ends_the_process_with_2():
    import subprocess

    from delan_testing.processes import node_process

    proc = node_process(
        'delan_control',
        'torque_controller',
        ros_args=['-p', 'watchdog_timeout:=30.0', '-p', f'urdf_path:={URDF}'],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2, err
    assert '[FATAL] could not start: invalid parameter: watchdog_timeout must be in' in err, err
    assert 'Traceback' not in err, err
