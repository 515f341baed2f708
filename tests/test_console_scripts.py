"""Every installed console script of the Python packages starts: nodes come up on the ROS graph,
spin, and exit cleanly (code 0) on SIGINT and SIGTERM; CLIs answer --help."""

import ast
import os
import signal
import subprocess
import time

import pytest
import rclpy

from delan_testing.ros import node_process, ros_context

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
URDF = os.path.join(ROOT, 'delan_bringup', 'urdf', 'two_link_arm.urdf')

# Extra arguments a node needs to start (everything else has working defaults).
NODE_ARGS = {
    'sim': ['-p', f'urdf_path:={URDF}'],
    'torque_controller': ['-p', f'urdf_path:={URDF}'],
    'reference': ['-p', f'urdf_path:={URDF}'],
    'learner': ['-p', f'urdf_path:={URDF}'],
    'data_logger': [],  # bag_dir is set per test
}


def console_scripts(package):
    """(name, module) of each console script in the package's setup.py."""
    tree = ast.parse(open(os.path.join(ROOT, package, 'setup.py')).read())
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and ' = ' in node.value
            and ':' in node.value
        ):
            name, target = (s.strip() for s in node.value.split('=', 1))
            yield package, name, target.split(':')[0]


SCRIPTS = [s for p in ('delan_learning', 'delan_control') for s in console_scripts(p)]
NODES = [(p, n) for p, n, m in SCRIPTS if '.nodes.' in m]
CLIS = [(p, n) for p, n, m in SCRIPTS if '.nodes.' not in m]


def test_every_script_is_classified():
    assert len(NODES) >= 5 and len(CLIS) >= 4, SCRIPTS


def _wait_for_node(name, timeout=30.0):
    with ros_context() as ctx:
        probe = rclpy.create_node('script_probe', context=ctx)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if name in probe.get_node_names():
                return True
            time.sleep(0.1)
        return False


@pytest.mark.parametrize('package,executable', NODES)
@pytest.mark.parametrize('sig', [signal.SIGINT, signal.SIGTERM], ids=['SIGINT', 'SIGTERM'])
def test_node_starts_spins_and_exits_cleanly(package, executable, sig, tmp_path):
    # a unique node name: a node another test left on the graph must not be mistaken for this one
    unique = f'{executable}_{os.getpid()}_{sig}'
    args = list(NODE_ARGS.get(executable, [])) + ['-r', f'__node:={unique}']
    if executable == 'data_logger':
        args += ['-p', f'bag_dir:={tmp_path / "bags"}']
    proc = node_process(
        package,
        executable,
        args,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=tmp_path,
    )
    try:
        assert _wait_for_node(unique), f'{executable} never appeared on the ROS graph'
        assert proc.poll() is None, proc.stdout.read()
        proc.send_signal(sig)
        proc.wait(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    out = proc.stdout.read()
    assert proc.returncode == 0, f'exit {proc.returncode}:\n{out}'
    assert 'Traceback' not in out, out


@pytest.mark.parametrize('package,executable', CLIS)
def test_cli_help(package, executable):
    exe = os.path.join(ROOT, 'install', package, 'lib', package, executable)
    res = subprocess.run([exe, '--help'], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert 'usage' in res.stdout.lower()
