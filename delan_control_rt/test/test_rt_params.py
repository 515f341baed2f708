"""What the launch files give the compiled controller (``delan_control.rt_params``) for the
URDF-feedback laws: the URDF's rigid-body model with every model, so the node starts on a
parameter file's ``feedforward_urdf_pd`` (the demo's law); a law it cannot apply (none such, or
a model's feedback without the URDF's inertias) stops the launch before the node starts."""

import os
import subprocess
import time

import pytest
import yaml
from rt_build import NODE, ROOT, require

from delan_control.rt_params import RT_LAWS, controller_node

URDF = os.path.join(ROOT, 'delan_bringup', 'urdf', 'two_link_arm.urdf')
#: two joints without inertias: no mass matrix to feed back through
BARE = """<robot name="bare">
  <link name="base"/><link name="l1"/><link name="l2"/>
  <joint name="j1" type="revolute"><parent link="base"/><child link="l1"/><axis xyz="0 0 1"/>
    <limit lower="-2" upper="2" effort="10" velocity="2"/></joint>
  <joint name="j2" type="revolute"><parent link="l1"/><child link="l2"/><axis xyz="0 1 0"/>
    <origin xyz="0 0 0.3"/><limit lower="-2" upper="2" effort="10" velocity="2"/></joint>
</robot>
"""


def params_file(folder, law):
    """A parameter file whose torque_controller section sets ``law``."""
    path = os.path.join(folder, f'{law}.yaml')
    with open(path, 'w') as f:
        yaml.safe_dump({'/**/torque_controller': {'ros__parameters': {'law': law}}}, f)
    return path


def start_log(tmp, params, extra):
    """Start the compiled node on the parameter file ``params`` and the values ``extra`` as the
    launch files start it; its output once it controls or exits, and its exit code (None: it
    was running)."""
    from delan_testing.processes import node_process

    derived = os.path.join(tmp, 'derived.yaml')
    with open(derived, 'w') as f:
        yaml.safe_dump({'/**/torque_controller': {'ros__parameters': extra}}, f)
    log_path = os.path.join(tmp, 'node.log')
    with open(log_path, 'w') as log:
        proc = node_process(
            'delan_control_rt',
            'torque_controller_rt',
            ['-r', '__node:=torque_controller', '--params-file', params, '--params-file', derived],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 20.0
        while proc.poll() is None and 'controlling' not in open(log_path).read():
            assert time.monotonic() < deadline, open(log_path).read()
            time.sleep(0.05)
        return open(log_path).read(), proc.poll()
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_every_law_is_compiled():
    from delan_control.control_laws import LAWS

    assert tuple(RT_LAWS) == tuple(LAWS)


def test_the_demo_law_starts_with_every_model(tmp_path, monkeypatch):
    """``feedforward_urdf_pd`` from the parameter file: the URDF's model file comes with
    model:=delan (no rigid-body model of its own) as with pd and pinocchio, and the node starts
    on it."""
    require(NODE)
    monkeypatch.setenv('DELAN_RT_MODEL_DIR', str(tmp_path / 'models'))
    path = params_file(str(tmp_path), 'feedforward_urdf_pd')
    for model in ('pd', 'pinocchio', 'delan'):
        params = controller_node('rt', URDF, path, model=model)[2]
        assert os.path.isfile(params['rigid_body_file']), model
    text, code = start_log(str(tmp_path), path, {**params, 'model': 'delan'})
    assert code is None, text
    assert 'controlling 2 joints with model=delan law=feedforward_urdf_pd' in text, text


def test_laws_the_compiled_node_cannot_apply_stop_the_launch(tmp_path, monkeypatch):
    """An unknown law; a URDF-feedback law with a model on a URDF without inertias (the node
    would refuse it); with pd (plain PD: nothing fed back through a model) it starts."""
    monkeypatch.setenv('DELAN_RT_MODEL_DIR', str(tmp_path / 'models'))
    bare = tmp_path / 'bare.urdf'
    bare.write_text(BARE)
    with pytest.raises(ValueError, match='law=sliding_mode is not one of'):
        controller_node('rt', URDF, params_file(str(tmp_path), 'sliding_mode'), model='pd')
    path = params_file(str(tmp_path), 'computed_torque_urdf_feedback')
    with pytest.raises(ValueError, match="model=delan needs the URDF's mass matrix"):
        controller_node('rt', str(bare), path, model='delan')
    params = controller_node('rt', str(bare), path, model='pd')[2]
    assert 'rigid_body_file' not in params
    require(NODE)
    text, code = start_log(str(tmp_path), path, {**params, 'model': 'pd'})
    assert code is None, text
    assert 'controlling 2 joints with model=pd law=computed_torque_urdf_feedback' in text, text
