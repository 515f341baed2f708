"""The robot descriptions: valid URDF trees (as check_urdf would see them), physically valid
inertias, complete limits, and ros2_control / Gazebo blocks consistent with the controller
configs."""

import os
import xml.etree.ElementTree as ET

import numpy as np
import pinocchio as pin
import pytest
import yaml

from delan_common.robot_model import RobotModel, find_urdf, resolve_package_paths

ROBOTS = {
    'two_link_arm.urdf': 'two_link_arm_controllers.yaml',
    'seven_dof_arm.urdf': 'seven_dof_arm_controllers.yaml',
}
CONFIG_DIR = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    'delan_bringup',
    'config',
)


@pytest.fixture(params=sorted(ROBOTS))
def urdf(request):
    path = find_urdf(request.param)
    return request.param, path, ET.parse(path).getroot()


def test_tree_structure(urdf):
    """What check_urdf verifies: one root link, every joint links existing links, a tree."""
    _, _, root = urdf
    links = [ln.get('name') for ln in root.findall('link')]
    assert len(links) == len(set(links))
    children, parents = {}, {}
    for j in root.findall('joint'):
        p, c = j.find('parent').get('link'), j.find('child').get('link')
        assert p in links and c in links, j.get('name')
        assert c not in parents, f'link {c} has two parent joints'
        parents[c] = p
        children.setdefault(p, []).append(c)
        assert j.get('type') in ('fixed', 'revolute', 'continuous', 'prismatic')
    roots = [ln for ln in links if ln not in parents]
    assert roots == ['world']
    seen, stack = set(), ['world']
    while stack:  # reachable from the root without revisiting = a tree
        ln = stack.pop()
        assert ln not in seen
        seen.add(ln)
        stack += children.get(ln, [])
    assert seen == set(links)


def test_inertias_are_physical(urdf):
    _, _, root = urdf
    for ln in root.findall('link'):
        inertial = ln.find('inertial')
        if inertial is None:
            continue
        m = float(inertial.find('mass').get('value'))
        i = {k: float(v) for k, v in inertial.find('inertia').attrib.items()}
        I = np.array(
            [
                [i['ixx'], i['ixy'], i['ixz']],
                [i['ixy'], i['iyy'], i['iyz']],
                [i['ixz'], i['iyz'], i['izz']],
            ]
        )
        ev = np.linalg.eigvalsh(I)
        assert m > 0 and ev[0] > 0, ln.get('name')
        assert ev[0] + ev[1] >= ev[2] - 1e-12, f'{ln.get("name")}: triangle inequality'


def test_actuated_joints_have_limits_and_dynamics(urdf):
    _, _, root = urdf
    for j in root.findall('joint'):
        if j.get('type') == 'fixed':
            continue
        lim, dyn = j.find('limit'), j.find('dynamics')
        assert lim is not None and dyn is not None, j.get('name')
        assert float(lim.get('effort')) > 0 and float(lim.get('velocity')) > 0
        if j.get('type') != 'continuous':
            assert float(lim.get('lower')) < float(lim.get('upper'))
        assert float(dyn.get('damping')) >= 0 and float(dyn.get('friction')) >= 0
        # the moving child has mass (else the mass matrix is singular)
        child = j.find('child').get('link')
        assert root.find(f"link[@name='{child}']/inertial") is not None


def test_pinocchio_parses_it(urdf):
    name, path, _ = urdf
    model = pin.buildModelFromUrdf(path)
    m = RobotModel(path)
    assert list(model.names)[1:] == m.joint_names
    np.testing.assert_allclose(model.damping, m.spec.damping)
    np.testing.assert_allclose(model.friction, m.spec.friction)


def test_ros2_control_block(urdf):
    name, path, root = urdf
    m = RobotModel(path)
    blocks = root.findall('ros2_control')
    assert len(blocks) == 1
    block = blocks[0]
    assert block.get('type') == 'system'
    assert block.find('hardware/plugin').text.strip() == 'gz_ros2_control/GazeboSimSystem'
    joints = block.findall('joint')
    assert [j.get('name') for j in joints] == m.joint_names
    for j, limit in zip(joints, m.spec.effort_limit):
        cmd = j.findall('command_interface')
        assert [c.get('name') for c in cmd] == ['effort']
        params = {p.get('name'): float(p.text) for p in cmd[0].findall('param')}
        assert params == {'min': -limit, 'max': limit}
        assert [s.get('name') for s in j.findall('state_interface')] == [
            'position',
            'velocity',
            'effort',
        ]


def test_gazebo_block_points_to_the_controller_config(urdf):
    name, path, root = urdf
    plugin = root.find('gazebo/plugin')
    assert plugin.get('filename') == 'gz_ros2_control-system'
    assert plugin.get('name') == 'gz_ros2_control::GazeboSimROS2ControlPlugin'
    params = plugin.find('parameters').text.strip()
    assert params == f'$(find delan_bringup)/config/{ROBOTS[name]}'
    assert os.path.isfile(os.path.join(CONFIG_DIR, ROBOTS[name]))
    resolved = resolve_package_paths(params)
    assert '$(find' not in resolved and resolved.endswith(f'/config/{ROBOTS[name]}')
    assert os.path.isabs(resolved)


def test_controller_config_matches_urdf(urdf):
    name, path, _ = urdf
    with open(os.path.join(CONFIG_DIR, ROBOTS[name])) as fh:
        cfg = yaml.safe_load(fh)
    cm = cfg['controller_manager']['ros__parameters']
    assert cm['update_rate'] >= 500
    assert cm['joint_state_broadcaster']['type'] == 'joint_state_broadcaster/JointStateBroadcaster'
    assert cm['effort_controller']['type'] == 'forward_command_controller/ForwardCommandController'
    effort = cfg['effort_controller']['ros__parameters']
    assert effort['interface_name'] == 'effort'
    # the torque_controller commands in this order, whatever it is: the model's is the obvious one
    assert effort['joints'] == RobotModel(path).joint_names
