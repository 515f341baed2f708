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
