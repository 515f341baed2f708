import os
import xml.etree.ElementTree as ET

import numpy as np
import pinocchio as pin
import pytest

from delan_common.urdf_joints import (
    JointSelectionError,
    RobotDescription,
    UrdfError,
    actuated_joints,
    select_joints,
)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHIPPED = os.path.join(ROOT, 'delan_bringup', 'urdf')
URDFS = sorted(os.path.join(SHIPPED, f) for f in os.listdir(SHIPPED) if f.endswith('.urdf'))

BRANCHED = """<robot name="y">
  <link name="base"/><link name="a"/><link name="b"/><link name="c"/>
  <joint name="zeta" type="revolute"><parent link="base"/><child link="a"/>
    <limit lower="-1" upper="1" effort="5" velocity="2"/><dynamics damping="0.5"/></joint>
  <joint name="alpha" type="prismatic"><parent link="base"/><child link="b"/>
    <limit lower="0" upper="0.3" effort="50" velocity="0.5"/></joint>
  <joint name="mid" type="continuous"><parent link="a"/><child link="c"/></joint>
</robot>"""


@pytest.mark.parametrize('path', URDFS, ids=os.path.basename)
def test_order_and_limits_match_pinocchio(path):
    model = pin.buildModelFromUrdf(path)
    joints = actuated_joints(path)
    assert [j.name for j in joints] == [model.names[i] for i in range(1, model.njoints)]
    for k, j in enumerate(joints):
        assert j.effort == pytest.approx(model.effortLimit[k])
        assert j.damping == pytest.approx(model.damping[k])


def test_branched_tree_string_and_types():
    joints = actuated_joints(BRANCHED)
    # depth first, siblings by name: alpha (base->b) before zeta (base->a) and its child mid
    assert [(j.name, j.type) for j in joints] == [
        ('alpha', 'prismatic'),
        ('zeta', 'revolute'),
        ('mid', 'continuous'),
    ]
    assert joints[2].lower == float('-inf') and joints[1].damping == 0.5
    model = pin.buildModelFromXML(BRANCHED)
    assert [j.name for j in joints] == [model.names[i] for i in range(1, model.njoints)]


@pytest.mark.parametrize(
    'bad,match',
    [
        ('<robot name="x"><link name="a"/>', 'does not parse'),
        ('<notrobot/>', 'expected <robot>'),
        ('<robot name="x"><link name="a"/></robot>', 'no actuated'),
        # example-robot-data's ur3.urdf: the output of xacro on a file of macros
        ('<robot xmlns:xacro="http://wiki.ros.org/xacro"><!-- x --></robot>', 'no <link>'),
        (
            '<robot name="x"><link name="a"/><link name="b"/>'
            '<joint name="j" type="revolute"><parent link="a"/><child link="b"/></joint>'
            '<joint name="k" type="revolute"><parent link="b"/><child link="a"/></joint></robot>',
            'no root link',
        ),
        ('/nonexistent/robot.urdf', 'not found'),
        (
            '<robot name="x"><link name="a"/><link name="b"/><joint type="revolute">'
            '<parent link="a"/><child link="b"/></joint></robot>',
            "<joint> element lacks its required 'name'",
        ),
        (
            '<robot name="x"><link name="a"/><link name="b"/><joint name="j" type="revolute">'
            '<parent/><child link="b"/></joint></robot>',
            "<parent> element lacks its required 'link'",
        ),
    ],
)
def test_bad_urdf_is_a_clear_error(bad, match):
    with pytest.raises(UrdfError, match=match):
        actuated_joints(bad)


# ---------------------------------------------------------------------------------- selection
def _tree(*joints):
    """A URDF of ``(name, type, parent, child, extra_xml)`` joints; links made from them."""
    links = {'base'} | {j[2] for j in joints} | {j[3] for j in joints}
    body = ''.join(f'<link name="{ln}"/>' for ln in sorted(links))
    for name, kind, parent, child, extra in joints:
        body += (
            f'<joint name="{name}" type="{kind}"><parent link="{parent}"/>'
            f'<child link="{child}"/>{extra}</joint>'
        )
    return f'<robot name="t">{body}</robot>'


LIM = '<limit lower="-1" upper="1" effort="5" velocity="2"/>'
FINGER = '<limit lower="0" upper="0.04" effort="20" velocity="0.2"/>'
HAND = _tree(
    ('j1', 'revolute', 'base', 'l1', LIM),
    ('j2', 'revolute', 'l1', 'l2', LIM),
    ('flange', 'fixed', 'l2', 'hand', ''),
    ('tcp', 'fixed', 'hand', 'tcp_link', ''),
    ('finger_a', 'prismatic', 'hand', 'fa', FINGER),
    ('finger_b', 'prismatic', 'hand', 'fb', FINGER),
)


def test_main_chain_stops_where_movable_branches_split():
    sel = select_joints(ET.fromstring(HAND))
    assert [j.name for j in sel.joints] == ['j1', 'j2']
    assert sel.locked == {'finger_a': 0.0, 'finger_b': 0.0}
    assert sel.movable == ('j1', 'j2', 'finger_a', 'finger_b')
    assert 'finger_a=0' in sel.warnings[0] and len(sel.warnings) == 1


def test_mimic_follows_its_locked_master_and_the_drive_is_not_selected():
    xml = _tree(
        ('j1', 'revolute', 'base', 'l1', LIM),
        ('drive', 'prismatic', 'l1', 'f1', FINGER),
        (
            'follow',
            'prismatic',
            'l1',
            'f2',
            '<limit lower="-0.1" upper="0.1"/>'
            '<mimic joint="drive" multiplier="-2" offset="0.01"/>',
        ),
    )
    sel = select_joints(ET.fromstring(xml), locked={'drive': 0.02})
    assert [j.name for j in sel.joints] == ['j1']
    assert sel.locked == pytest.approx({'drive': 0.02, 'follow': -0.03})
    assert 'follow=-0.03 (mimics drive)' in sel.warnings[0]
    with pytest.raises(JointSelectionError, match='mimic'):
        select_joints(ET.fromstring(xml), joints=['j1', 'drive'])
    # a single-joint gripper drive on the chain: left out (its mimic is locked with it)
    chain = _tree(
        ('j1', 'revolute', 'base', 'l1', LIM),
        ('drive', 'revolute', 'l1', 'l2', LIM),
        ('follow', 'revolute', 'l2', 'l3', LIM + '<mimic joint="drive"/>'),
    )
    assert [j.name for j in select_joints(ET.fromstring(chain)).joints] == ['j1']


def test_a_mimic_naming_no_movable_joint_moves_on_its_own_with_a_warning():
    # alex_psyonic_hands.urdf (example-robot-data): 'Left_index_q2' mimics 'index_q1', a name
    # the file does not have; Pinocchio loads it as an independent joint, so does the selection
    xml = _tree(
        ('j1', 'revolute', 'base', 'l1', LIM),
        ('j2', 'revolute', 'l1', 'l2', LIM + '<mimic joint="ghost" multiplier="2"/>'),
    )
    sel = select_joints(ET.fromstring(xml))
    assert [j.name for j in sel.joints] == ['j1', 'j2']
    assert all(j.mimic is None for j in sel.joints)
    assert any("j2 -> 'ghost'" in w and 'ignored' in w for w in sel.warnings)


def test_a_gripper_joint_at_the_end_of_the_chain_is_left_out():
    """A single jaw on the chain (SO-100, Z1, a Talos hand): locked by default, learnable on
    request; a gripper-named joint inside the chain and a description of a gripper alone keep
    every joint."""
    xml = _tree(
        ('j1', 'revolute', 'base', 'l1', LIM),
        ('wrist', 'revolute', 'l1', 'l2', LIM),
        ('Gripper_Jaw', 'revolute', 'l2', 'l3', LIM),
    )
    sel = select_joints(ET.fromstring(xml))
    assert [j.name for j in sel.joints] == ['j1', 'wrist'] and sel.locked == {'Gripper_Jaw': 0.0}
    assert any("left out: ['Gripper_Jaw']" in w for w in sel.warnings), sel.warnings
    chosen = select_joints(ET.fromstring(xml), joints=['j1', 'wrist', 'Gripper_Jaw'])
    assert [j.name for j in chosen.joints] == ['j1', 'wrist', 'Gripper_Jaw']
    assert not any('left out' in w for w in chosen.warnings)
    inside = _tree(
        ('finger_base', 'revolute', 'base', 'l1', LIM), ('j2', 'revolute', 'l1', 'l2', LIM)
    )
    assert [j.name for j in select_joints(ET.fromstring(inside)).joints] == ['finger_base', 'j2']
    alone = _tree(
        ('claw_a', 'revolute', 'base', 'l1', LIM), ('claw_b', 'revolute', 'l1', 'l2', LIM)
    )
    assert [j.name for j in select_joints(ET.fromstring(alone)).joints] == ['claw_a', 'claw_b']


def test_a_placeholder_velocity_limit_is_not_given():
    """velocity="1000" (finger_edu, solo, icub): an exporter's "unlimited"; planning with it let
    an evaluation ask for speeds no excitation had reached."""
    xml = _tree(
        (
            'a',
            'revolute',
            'base',
            'l1',
            '<limit lower="-1" upper="1" effort="5" velocity="1000"/>',
        ),
        ('b', 'revolute', 'l1', 'l2', '<limit lower="-1" upper="1" effort="5" velocity="99"/>'),
    )
    robot = RobotDescription.load(xml)
    np.testing.assert_array_equal(robot.velocity_given, [False, True])
    np.testing.assert_array_equal(robot.velocity_limits, [np.inf, 99.0])
    np.testing.assert_array_equal(robot.planning_velocity_limits, [2.0, 99.0])
    assert any(
        "['a']: no velocity limit" in w and 'placeholder of 100' in w for w in robot.warnings
    ), robot.warnings
    # an override is the user's word, however large
    over = RobotDescription.load(xml, velocity_limits=[500.0, 0.0])
    np.testing.assert_array_equal(over.velocity_limits, [500.0, 99.0])


def test_branching_at_the_base_falls_back_to_every_joint():
    # BRANCHED: two movable branches at the base, so no main chain
    assert [j.name for j in actuated_joints(BRANCHED)] == ['alpha', 'zeta', 'mid']
    robot = RobotDescription.load(BRANCHED)
    assert "branches at its root link 'base', so all 3 movable joints" in robot.warnings[0]
    # the user's choice is not second-guessed
    chosen = RobotDescription.load(BRANCHED, joints=['zeta'])
    assert not any('branch' in w for w in chosen.warnings)


def test_a_chain_that_ends_in_a_larger_tree_says_what_it_locked():
    # a torso joint, then two arms of two joints each (a PR2's shape): the default chain is
    # the torso alone
    arms = [
        (f'{side}{k}', 'revolute', f'{side}{k - 1}' if k > 1 else 'torso', f'{side}{k}', LIM)
        for side in ('l', 'r')
        for k in (1, 2)
    ]
    robot = RobotDescription.load(_tree(('lift', 'prismatic', 'base', 'torso', LIM), *arms))
    assert robot.joint_names == ['lift']
    assert "after 'lift': 1 joint(s) learned and the 4 movable joints" in robot.warnings[0]
    # an arm ending in a gripper (two fingers at the hand) is one chain: nothing to say
    assert not any('branch' in w for w in RobotDescription.load(HAND).warnings)


def test_limits_not_given_and_overrides():
    xml = _tree(
        ('r', 'revolute', 'base', 'a', '<limit lower="0" upper="0" effort="0" velocity="0"/>'),
        ('p', 'prismatic', 'a', 'b', '<limit lower="0.2" upper="0.2" effort="10"/>'),
        ('c', 'continuous', 'b', 'c', ''),
    )
    robot = RobotDescription.load(xml)
    np.testing.assert_array_equal(robot.lower, [-np.inf, 0.1, -np.inf])
    np.testing.assert_allclose(robot.upper, [np.inf, 0.3, np.inf])
    np.testing.assert_array_equal(robot.effort_limits, [np.inf, 10.0, np.inf])
    np.testing.assert_array_equal(robot.effort_given, [False, True, False])
    np.testing.assert_array_equal(robot.position_given, [False, False, False])
    assert not robot.velocity_given.any()
    text = '\n'.join(robot.warnings)
    assert "['r']: no position limits (lower == upper): unlimited" in text
    assert "['p']: no position limits (lower == upper): +-0.1 m" in text
    assert "['r', 'c']: no effort limit" in text and "['r', 'p', 'c']: no velocity" in text
    over = RobotDescription.load(
        xml, effort_limits=[7, 0, float('inf')], velocity_limits=[1.0, 0.5, 2.0]
    )
    np.testing.assert_array_equal(over.effort_limits, [7.0, 10.0, np.inf])
    np.testing.assert_array_equal(over.effort_given, [True, True, False])
    assert over.velocity_given.all() and not any('velocity' in w for w in over.warnings)
    assert over.selection_kwargs()['effort_limits'] == [7.0, 10.0, np.inf]
    with pytest.raises(UrdfError, match='3 joints'):
        RobotDescription.load(xml, effort_limits=[1.0, 2.0])
    with pytest.raises(UrdfError, match='>= 0'):
        RobotDescription.load(xml, velocity_limits=[1.0, -2.0, 1.0])


def test_lower_above_upper_is_an_error():
    xml = _tree(('r', 'revolute', 'base', 'a', '<limit lower="1" upper="-1"/>'))
    with pytest.raises(UrdfError, match='lower limit 1.0 > upper limit -1.0'):
        actuated_joints(xml)


def test_selection_matches_pinocchio_order_on_a_shuffled_request():
    chosen = ['mid', 'alpha']
    joints = actuated_joints(BRANCHED, joints=chosen)
    assert [j.name for j in joints] == ['alpha', 'mid']
    with pytest.raises(JointSelectionError, match=r"unknown joints \['nope'\].*'alpha'"):
        actuated_joints(BRANCHED, joints=['alpha', 'nope'])
    sel = select_joints(ET.fromstring(BRANCHED), joints=chosen, locked={'zeta': 0.5})
    assert sel.locked == {'zeta': 0.5}
    with pytest.raises(JointSelectionError, match='finite'):
        select_joints(ET.fromstring(BRANCHED), joints=chosen, locked={'zeta': float('nan')})


def test_locked_outside_limits_is_kept_and_warned_and_mimic_loops_are_errors():
    sel = select_joints(ET.fromstring(BRANCHED), joints=['alpha'], locked={'zeta': 2.0})
    assert sel.locked == {'zeta': 2.0, 'mid': 0.0}
    assert "outside their limits (kept there): ['zeta=2']" in sel.warnings[-1]
    loop = _tree(
        ('j1', 'revolute', 'base', 'l1', LIM),
        ('a', 'revolute', 'l1', 'l2', LIM + '<mimic joint="b"/>'),
        ('b', 'revolute', 'l1', 'l3', LIM + '<mimic joint="a"/>'),
    )
    with pytest.raises(UrdfError, match='loop'):
        select_joints(ET.fromstring(loop))
