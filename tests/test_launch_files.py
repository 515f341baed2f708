"""Launch files: valid Python; every package, executable and parameter they name exists (entry
points, parameters the nodes really declare, files); the YAML values pass the nodes' validation;
`launch`/`launch_ros` (installed by `make setup`, as on an apt ROS 2 machine) build the launch
descriptions of those that need nothing beyond them; robot.launch.py runs next to a stand-in for
ros2_control (the sim named effort_controller) and stops on Ctrl-C. tests/test_ros2_cli.py runs
sim.launch.py as the README types it. The compiled controller (controller_impl:=rt) is checked
against the parameters its C source reads, and its own start-up validation runs on them."""

import ast
import importlib
import inspect
import os
import re
import subprocess
import time

import launch
import pytest
import yaml
from launch.launch_description_sources import get_launch_description_from_python_launch_file
from rclpy.node import Node
from rclpy.parameter import Parameter

from delan_testing.ros import ros_context

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BRINGUP = os.path.join(ROOT, 'delan_bringup')
LAUNCH = os.path.join(BRINGUP, 'launch')
FILES = sorted(f for f in os.listdir(LAUNCH) if f.endswith('.launch.py'))
OURS = ('delan_control', 'delan_learning')
#: the compiled controller's package (ament_cmake, C: no entry points, no Python node class)
RT = 'delan_control_rt'
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
    """(package, executable, name, literal parameter keys, yaml path variables, derived) per
    Node(...); derived: it takes a variable assigned from ``rt_controller_parameters(...)``
    (the compiled controller's parameters computed from the URDF)."""
    tree = ast.parse(open(path).read(), path)
    assigned = {
        t.id: n.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Assign)
        for t in n.targets
        if isinstance(t, ast.Name)
    }
    out = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Call) and getattr(n.func, 'id', None) == 'Node':
            kw = {k.arg: k.value for k in n.keywords}
            get = lambda k: kw[k].value if k in kw and isinstance(kw[k], ast.Constant) else None  # noqa
            keys, yamls, derived = set(), [], False
            for el in kw['parameters'].elts if 'parameters' in kw else []:
                call = assigned.get(el.id) if isinstance(el, ast.Name) else None
                if (
                    isinstance(call, ast.Call)
                    and getattr(call.func, 'id', None) == 'rt_controller_parameters'
                ):
                    derived = True
                    continue
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
            out.append((get('package'), get('executable'), get('name'), keys, yamls, derived))
    return out


def yaml_of(path):
    """The default parameter file of a launch file: its ``PARAMS``,
    ``PathJoinSubstitution([FindPackageShare('delan_bringup'), 'config', 'x.yaml'])``."""
    tree = ast.parse(open(path).read())
    for n in ast.walk(tree):
        if isinstance(n, ast.Assign) and any(
            getattr(t, 'id', None) == 'PARAMS' for t in n.targets
        ):
            parts = [
                e.args[0].value if isinstance(e, ast.Call) else e.value
                for e in n.value.args[0].elts
            ]
            assert parts[0] == 'delan_bringup', parts
            return os.path.join(BRINGUP, *parts[1:])
    raise AssertionError(f'PARAMS not found in {path}')


@pytest.mark.parametrize('name', FILES)
def test_launch_file_is_valid_python_with_generate_function(name):
    tree = ast.parse(open(os.path.join(LAUNCH, name)).read())
    assert any(
        isinstance(n, ast.FunctionDef) and n.name == 'generate_launch_description'
        for n in tree.body
    )


def node_class(module_name):
    mod = importlib.import_module(module_name)
    classes = [
        c
        for _, c in inspect.getmembers(mod, inspect.isclass)
        if issubclass(c, Node) and c is not Node and c.__module__ == mod.__name__
    ]
    assert len(classes) == 1, classes
    return classes[0]


CASES = [
    (f, call) for f in FILES for call in node_calls(os.path.join(LAUNCH, f)) if call[0] in OURS
]


RT_CASES = [
    (f, call) for f in FILES for call in node_calls(os.path.join(LAUNCH, f)) if call[0] == RT
]


def test_launch_files_start_all_our_nodes():
    started = {(p, e) for _, (p, e, *_) in CASES + RT_CASES}
    assert {
        ('delan_control', 'sim'),
        ('delan_control', 'torque_controller'),
        ('delan_control', 'reference'),
        ('delan_learning', 'learner'),
        ('delan_learning', 'data_logger'),
        (RT, 'torque_controller_rt'),
    } <= started
    # controller_impl:=rt in the launch files that start the Python controller
    python_ctl = {f for f, (p, e, *_) in CASES if e == 'torque_controller'}
    assert python_ctl == {f for f, _ in RT_CASES}


@pytest.mark.parametrize('fname,call', CASES, ids=[f'{f}:{c[1]}' for f, c in CASES])
def test_nodes_and_parameters_exist(fname, call, tmp_path):
    package, executable, name, keys, yaml_vars, _ = call
    eps = entry_points()
    assert (package, executable) in eps, f'{package}/{executable} is not an entry point'
    assert name == executable
    cls = node_class(eps[(package, executable)])
    overrides = {} if executable == 'data_logger' else {'urdf_path': URDF}
    if yaml_vars:  # the launch file's default parameter file
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
        node = cls(
            context=ctx, parameter_overrides=[Parameter(k, value=v) for k, v in overrides.items()]
        )
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


def rt_parameters_read():
    """The parameters the compiled controller reads, from its C source: the ``param_*(P,
    "name"`` calls, the per-joint list and the early look-up of ``realtime_priority``."""
    src = open(os.path.join(ROOT, RT, 'src', 'torque_controller_rt.c')).read()
    names = set(re.findall(r'param_\w+\(&?P, "(\w+)"', src))
    per_joint = re.search(r'per_joint\[\d+\] = \{([^}]*)\}', src)
    names |= set(re.findall(r'"(\w+)"', per_joint.group(1)))
    if '"realtime_priority"' in src:
        names.add('realtime_priority')
    assert {'joint_names', 'kp', 'model', 'law', 'watchdog_timeout'} <= names, names
    return names


#: parameter-file keys of the torque_controller section the compiled node does not read:
#: control_rate is what the launch file derives the gains for (controller_node), the effort
#: controller's joint order is asked for by the Python node only
RT_NOT_READ = {'control_rate', 'effort_controller_name'}


@pytest.mark.parametrize('fname,call', RT_CASES, ids=[f'{f}:{c[1]}' for f, c in RT_CASES])
def test_compiled_controller_and_its_parameters(fname, call, tmp_path):
    """The compiled node: installed by its CMakeLists, named as the Python node (the parameter
    file's section and the tools find it), given only parameters its C source reads; then the
    node itself validates them (it exits with the reason when one is bad)."""
    from delan_control.rt_params import RT_MODELS, controller_node

    package, executable, name, keys, yaml_vars, derived = call
    cmake = open(os.path.join(ROOT, RT, 'CMakeLists.txt')).read()
    assert f'add_executable({executable} ' in cmake and re.search(
        rf'install\(TARGETS {executable}\b', cmake
    ), executable
    assert name == 'torque_controller'
    assert derived, 'the compiled node needs the URDF-derived parameters (controller_node)'
    read = rt_parameters_read()
    assert yaml_vars
    path = yaml_of(os.path.join(LAUNCH, fname))
    section = yaml.safe_load(open(path)).get(f'/**/{name}', {}).get('ros__parameters', {})
    given = controller_node('rt', URDF, path)[2]
    unread = (set(keys) | set(given)) - read
    assert not unread, f'{executable} reads no {sorted(unread)}'
    assert not set(section) - read - RT_NOT_READ, sorted(set(section) - read - RT_NOT_READ)
    assert section.get('model', 'pd') in RT_MODELS
    # the node's own validation of the file + the derived values
    from delan_testing.processes import node_process

    exe = os.path.join(ROOT, 'install', RT, 'lib', RT, executable)
    if not os.path.exists(exe):
        pytest.skip(f'{RT} is not built ({exe} missing; make setup builds it)')
    derived_file = tmp_path / 'derived.yaml'
    derived_file.write_text(yaml.safe_dump({f'/**/{name}': {'ros__parameters': given}}))
    log = open(tmp_path / 'node.log', 'w+')
    proc = node_process(
        package,
        executable,
        [
            '-r',
            f'__node:={name}',
            '--params-file',
            path,
            '--params-file',
            str(derived_file),
            '-p',
            'realtime_priority:=0',
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 20.0
        while proc.poll() is None and 'controlling' not in open(log.name).read():
            assert time.monotonic() < deadline, open(log.name).read()
            time.sleep(0.05)
        text = open(log.name).read()
        assert proc.poll() is None, text
        n = len(given['joint_names'])
        assert (
            f'controlling {n} joints with model={section.get("model", "pd")} '
            f'law={section.get("law", "computed_torque")}' in text
        ), text
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()  # not left behind to load the tests after this one
            proc.wait()
            raise AssertionError(f'no exit 10 s after SIGTERM: {open(log.name).read()}')
        finally:
            log.close()
