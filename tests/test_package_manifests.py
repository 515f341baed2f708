"""package.xml files are valid format-3 manifests and declare every module the code imports, so
`rosdep install` + `colcon build` on an apt ROS 2 machine work unchanged."""

import ast
import os
import sys

import pytest
from catkin_pkg.package import parse_package

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = [
    'delan_msgs',
    'delan_common',
    'delan_learning',
    'delan_control',
    'delan_bringup',
    'delan_control_rt',
]

# top-level Python module -> rosdep key
ROSDEP_KEYS = {
    'numpy': 'python3-numpy',
    'scipy': 'python3-scipy',
    'torch': 'python3-torch',
    'yaml': 'python3-yaml',
    'matplotlib': 'python3-matplotlib',
    'pinocchio': 'pinocchio',
    'rosbags': 'python3-rosbags-pip',
    'mcap': 'python3-mcap-pip',
    'psutil': 'python3-psutil',
    'pytest': 'python3-pytest',
    'catkin_pkg': 'python3-catkin-pkg',
    'example_robot_data': 'example-robot-data',
    'launch': 'launch',
    'launch_ros': 'launch_ros',
    'ament_index_python': 'ament_index_python',
    'threadpoolctl': 'python3-threadpoolctl',
}
# ROS packages imported by their own name
ROS_PACKAGES = {
    'xacro',
    'rclpy',
    'std_msgs',
    'std_srvs',
    'sensor_msgs',
    'trajectory_msgs',
    'builtin_interfaces',
    'rosgraph_msgs',
    'rcl_interfaces',
    'diagnostic_msgs',
    'delan_msgs',
    'delan_common',
    'delan_learning',
    'delan_control',
    'delan_bringup',
}

# runtime imports a package makes only where used, declared as test dependencies: delan_control
# needs delan_learning (torch) only for the learned models, the demo and the offline swing-up's
# training (delan_control/test/test_torch_free_controller.py runs a controller without it)
OPTIONAL_RUNTIME = {'delan_control': {'delan_learning', 'python3-torch'}}


def imported_modules(package_dir):
    mods = {}
    for dirpath, _, files in os.walk(package_dir):
        if 'resource' in dirpath:
            continue
        for f in files:
            if not f.endswith('.py') or f == 'setup.py':
                continue
            path = os.path.join(dirpath, f)
            for node in ast.walk(ast.parse(open(path).read(), path)):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for n in names:
                    mods.setdefault(n.split('.')[0], []).append(os.path.relpath(path, ROOT))
    return mods


@pytest.mark.parametrize('name', PACKAGES)
def test_manifest_is_format_3_and_valid(name):
    pkg = parse_package(os.path.join(ROOT, name, 'package.xml'))
    pkg.validate()
    assert pkg.package_format == 3
    assert pkg.name == name
    assert pkg.licenses and pkg.maintainers and pkg.description


@pytest.mark.parametrize(
    'name',
    ['delan_common', 'delan_learning', 'delan_control', 'delan_bringup', 'delan_control_rt'],
)
def test_manifest_declares_every_import(name):
    pkg = parse_package(os.path.join(ROOT, name, 'package.xml'))
    runtime = {d.name for d in pkg.exec_depends + pkg.build_export_depends}
    test = {d.name for d in pkg.test_depends}
    stdlib = set(sys.stdlib_module_names)
    problems = []
    for sub, is_test in ((name, False), ('launch', False), ('test', True)):
        for mod, where in imported_modules(os.path.join(ROOT, name, sub)).items():
            if mod in stdlib or mod == name or mod.startswith('test_') or mod == 'conftest':
                continue
            if os.path.isfile(os.path.join(ROOT, name, sub, mod + '.py')):
                continue  # a helper module beside the tests (delan_control_rt/test/rt_build)
            if mod == 'delan_testing':
                continue  # the repository's test-only helpers (testing/), never installed
            key = mod if mod in ROS_PACKAGES else ROSDEP_KEYS.get(mod)
            if key is None:
                problems.append(f'{mod} (imported in {where[0]}) has no known rosdep key')
            elif key in OPTIONAL_RUNTIME.get(name, ()) and key in test:
                continue
            elif key not in runtime and not (is_test and key in test):
                problems.append(
                    f'{mod} -> <{"test_" if is_test else "exec_"}depend>{key}'
                    f' missing (imported in {where[0]})'
                )
    assert not problems, '\n'.join(problems)


@pytest.mark.parametrize('name', ['delan_common', 'delan_learning', 'delan_control'])
def test_ament_python_layout(name):
    base = os.path.join(ROOT, name)
    assert os.path.isfile(os.path.join(base, 'resource', name))
    setup = open(os.path.join(base, 'setup.py')).read()
    assert "'resource/' + package_name" in setup and "'package.xml'" in setup
    assert 'install_scripts=$base/lib/' + name in open(os.path.join(base, 'setup.cfg')).read()


def test_bringup_installs_its_launch_config_and_urdf_folders():
    """Launch files find these with FindPackageShare: they must be in the share folder."""
    setup = open(os.path.join(ROOT, 'delan_bringup', 'setup.py')).read()
    for folder, pattern in (('launch', '*.launch.py'), ('config', '*.yaml'), ('urdf', '*.urdf')):
        assert f"'/{folder}', glob('{folder}/{pattern}')" in setup
        assert os.listdir(os.path.join(ROOT, 'delan_bringup', folder))
    assert os.path.isfile(os.path.join(ROOT, 'delan_bringup', 'resource', 'delan_bringup'))
