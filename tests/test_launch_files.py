"""Launch files: valid Python; every package, executable and parameter they name exists (entry
points, parameters the nodes really declare, files); the YAML values pass the nodes' validation;
`launch`/`launch_ros` (installed by `make setup`, as on an apt ROS 2 machine) build the launch
descriptions of those that need nothing beyond them; robot.launch.py runs next to a stand-in for
ros2_control (the sim named effort_controller) and stops on Ctrl-C. tests/test_ros2_cli.py runs
sim.launch.py as the README types it."""
import ast
import importlib
import inspect
import os

import launch
import pytest
import rclpy
import yaml
from launch.launch_description_sources import get_launch_description_from_python_launch_file
from rclpy.node import Node
from rclpy.parameter import Parameter

from delan_learning.ros.testing import ros_context

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BRINGUP = os.path.join(ROOT, 'delan_bringup')
LAUNCH = os.path.join(BRINGUP, 'launch')
FILES = sorted(f for f in os.listdir(LAUNCH) if f.endswith('.launch.py'))
OURS = ('delan_control', 'delan_learning')
URDF = os.path.join(ROOT, 'delan_bringup', 'urdf', 'two_link_arm.urdf')


def entry_points():
    eps = {}
    for pkg in OURS:
        tree = ast.parse(open(os.path.join(ROOT, pkg, 'setup.py')).read())
        for n in ast.walk(tree):
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and ' = ' in n.value:
                name, target = (s.strip() for s in n.value.split('=', 1))
                eps[(pkg, name)] = target.split(':')[0]
    return eps


def node_calls(path):
    """(package, executable, name, literal parameter keys, yaml path variables) per Node(...)."""
    tree = ast.parse(open(path).read(), path)
    assigned = {t.id: n.value for n in ast.walk(tree) if isinstance(n, ast.Assign)
                for t in n.targets if isinstance(t, ast.Name)}
    out = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Call) and getattr(n.func, 'id', None) == 'Node':
            kw = {k.arg: k.value for k in n.keywords}
            get = lambda k: kw[k].value if k in kw and isinstance(kw[k], ast.Constant) else None  # noqa
            keys, yamls = set(), []
            for el in (kw['parameters'].elts if 'parameters' in kw else []):
                if isinstance(el, ast.Name) and isinstance(assigned.get(el.id), ast.Dict):
                    el = assigned[el.id]
                if isinstance(el, ast.Dict):
                    for k, v in zip(el.keys, el.values):
                        if k is None and isinstance(v, ast.Name):  # {**common, ...}
                            keys |= {c.value for c in assigned[v.id].keys}
                        else:
                            keys.add(k.value)
                elif isinstance(el, ast.Name):
                    yamls.append(el.id)
            out.append((get('package'), get('executable'), get('name'), keys, yamls))
    return out


def yaml_of(path):
    """The default parameter file of a launch file: its ``PARAMS``,
    ``PathJoinSubstitution([FindPackageShare('delan_bringup'), 'config', 'x.yaml'])``."""
    tree = ast.parse(open(path).read())
    for n in ast.walk(tree):
        if isinstance(n, ast.Assign) and any(getattr(t, 'id', None) == 'PARAMS'
                                             for t in n.targets):
            parts = [e.args[0].value if isinstance(e, ast.Call) else e.value
                     for e in n.value.args[0].elts]
            assert parts[0] == 'delan_bringup', parts
            return os.path.join(BRINGUP, *parts[1:])
    raise AssertionError(f'PARAMS not found in {path}')


@pytest.mark.parametrize('name', FILES)
def test_launch_file_is_valid_python_with_generate_function(name):
    tree = ast.parse(open(os.path.join(LAUNCH, name)).read())
    assert any(isinstance(n, ast.FunctionDef) and n.name == 'generate_launch_description'
               for n in tree.body)


def node_class(module_name):
    mod = importlib.import_module(module_name)
    classes = [c for _, c in inspect.getmembers(mod, inspect.isclass)
               if issubclass(c, Node) and c is not Node and c.__module__ == mod.__name__]
    assert len(classes) == 1, classes
    return classes[0]


CASES = [(f, call) for f in FILES for call in node_calls(os.path.join(LAUNCH, f))
         if call[0] in OURS]


def test_launch_files_start_all_our_nodes():
    started = {(p, e) for _, (p, e, *_) in CASES}
    assert {('delan_control', 'sim'), ('delan_control', 'torque_controller'),
            ('delan_control', 'reference'), ('delan_learning', 'learner'),
            ('delan_learning', 'data_logger')} <= started


@pytest.mark.parametrize('fname,call', CASES, ids=[f'{f}:{c[1]}' for f, c in CASES])
def test_nodes_and_parameters_exist(fname, call, tmp_path):
    package, executable, name, keys, yaml_vars = call
    eps = entry_points()
    assert (package, executable) in eps, f'{package}/{executable} is not an entry point'
    assert name == executable
    cls = node_class(eps[(package, executable)])
    overrides = {} if executable == 'data_logger' else {'urdf_path': URDF}
    if yaml_vars:   # the launch file's default parameter file
        path = yaml_of(os.path.join(LAUNCH, fname))
        assert os.path.isfile(path), path
        doc = yaml.safe_load(open(path))
        section = doc.get(f'/**/{name}', {}).get('ros__parameters', {})
        overrides.update(section)
    if overrides.get('realtime_priority'):
        # validated here, then off: in this process it would put pytest itself under SCHED_FIFO
        assert 1 <= overrides['realtime_priority'] <= 98
        overrides['realtime_priority'] = 0
    if executable == 'data_logger':
        overrides['bag_dir'] = str(tmp_path / 'bags')
    if executable == 'learner':
        overrides['checkpoint_dir'] = str(tmp_path / 'ck')
    with ros_context() as ctx:
        # constructing the node with the YAML values runs their validation
        node = cls(context=ctx, parameter_overrides=[Parameter(k, value=v)
                                                     for k, v in overrides.items()])
        try:
            missing = [k for k in set(keys) | set(overrides) if not node.has_parameter(k)]
            assert not missing, f'{executable} does not declare {missing}'
        finally:
            close = getattr(node, 'close', None)
            if close:
                close()
            node.destroy_node()


def test_launch_files_find_their_files_through_the_package_share():
    for f in FILES:
        src = open(os.path.join(LAUNCH, f)).read()
        assert '__file__' not in src and 'HERE' not in src, f


@pytest.mark.parametrize('name', ['sim.launch.py', 'robot.launch.py'])
def test_launch_description_builds(name):
    ld = get_launch_description_from_python_launch_file(os.path.join(LAUNCH, name))
    assert isinstance(ld, launch.LaunchDescription)
    declared = {a.name for a in ld.get_launch_arguments()}
    assert {'urdf', 'model', 'delan_checkpoint', 'robot', 'controller'} <= declared
