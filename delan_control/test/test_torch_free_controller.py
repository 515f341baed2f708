"""A PD / Pinocchio controller without the learning stack: delan_control needs delan_learning
(and with it PyTorch) only for the learned model kinds, so an arm controlled with its URDF model
runs where torch is not installed."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np
import rclpy
from rclpy.parameter import Parameter
from rclpy.parameter_client import AsyncParameterClient
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray

from delan_testing.ros import (
    node_process,
    ros_context,
    spin_in_thread,
    stop_process,
    streaming_joint_states,
)

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), '..', '..'))
URDF = os.path.join(ROOT, 'delan_bringup', 'urdf', 'two_link_arm.urdf')
NAMES = ['shoulder', 'elbow']


def _hide_learning_stack(folder) -> str:
    """A folder that, first on ``PYTHONPATH``, makes ``torch`` and ``delan_learning`` fail to
    import as they do where they are not installed."""
    for name in ('torch', 'delan_learning'):
        pkg = folder / name
        pkg.mkdir()
        (pkg / '__init__.py').write_text(
            f'raise ModuleNotFoundError("No module named {name}", name="{name}")\n'
        )
    return str(folder)


def test_the_control_modules_import_without_the_learning_stack(tmp_path):
    hidden = _hide_learning_stack(tmp_path)
    code = (
        'import sys\n'
        'import delan_control.nodes.torque_controller, delan_control.nodes.sim, '
        'delan_control.nodes.reference, delan_control.sysid\n'
        'assert not {"torch", "delan_learning"} & set(sys.modules), sorted(sys.modules)\n'
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([hidden, os.environ['PYTHONPATH']]))
    done = subprocess.run(
        [sys.executable, '-c', code], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr


def test_pinocchio_controller_runs_without_torch_and_refuses_learned_models(tmp_path):
    hidden = _hide_learning_stack(tmp_path)
    log_path = tmp_path / 'controller.log'
    with open(log_path, 'w') as log:
        proc = node_process(
            'delan_control',
            'torque_controller',
            ['-p', f'urdf_path:={URDF}', '-p', 'model:=pinocchio', '-p', 'watchdog_timeout:=1.0'],
            env={'PYTHONPATH': os.pathsep.join([hidden, os.environ['PYTHONPATH']])},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        with ros_context() as ctx:
            commands = []
            node = rclpy.create_node('torch_free_probe', context=ctx)
            node.create_subscription(
                Float64MultiArray,
                'effort_controller/commands',
                lambda m: commands.append(np.array(m.data)),
                100,
            )
            pub = node.create_publisher(JointState, 'joint_states', 100)
            ex = rclpy.executors.SingleThreadedExecutor(context=ctx)
            ex.add_node(node)
            spin_in_thread(ex)
            with streaming_joint_states(pub, NAMES, [0.3, -0.2]):
                deadline = time.monotonic() + 60.0
                while len(commands) < 100:
                    assert proc.poll() is None, log_path.read_text()
                    assert time.monotonic() < deadline, 'no commands from the controller'
                    time.sleep(0.05)
                params = AsyncParameterClient(node, 'torque_controller')
                assert params.wait_for_services(timeout_sec=30.0)
                future = params.set_parameters([Parameter('model', value='delan')])
                while not future.done():
                    assert time.monotonic() < deadline + 30.0
                    time.sleep(0.01)
                result = future.result().results[0]
                sent = len(commands)
                time.sleep(0.5)
            # the URDF's gravity torque of the two-link arm at rest: finite, non-zero
            assert all(np.isfinite(c).all() and c.shape == (2,) for c in commands)
            assert np.abs(commands[-1]).max() > 0.1, commands[-1]
            assert not result.successful and 'delan_learning' in result.reason, result.reason
            assert len(commands) > sent, 'the controller stopped after the refused switch'
            ex.shutdown(timeout_sec=10.0)
            node.destroy_node()
    finally:
        stop_process(proc)
    text = log_path.read_text()
    assert 'learned models (delan, delan_residual) unavailable' in text, text
    assert proc.returncode == 0, text
