import os

import pinocchio as pin
import pytest

from delan_learning.urdf_joints import UrdfError, actuated_joints

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
URDFS = sorted(os.path.join(ROOT, 'urdf', f) for f in os.listdir(os.path.join(ROOT, 'urdf'))
               if f.endswith('.urdf'))

BRANCHED = '''<robot name="y">
  <link name="base"/><link name="a"/><link name="b"/><link name="c"/>
  <joint name="zeta" type="revolute"><parent link="base"/><child link="a"/>
    <limit lower="-1" upper="1" effort="5" velocity="2"/><dynamics damping="0.5"/></joint>
  <joint name="alpha" type="prismatic"><parent link="base"/><child link="b"/>
    <limit lower="0" upper="0.3" effort="50" velocity="0.5"/></joint>
  <joint name="mid" type="continuous"><parent link="a"/><child link="c"/></joint>
</robot>'''


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
    assert [(j.name, j.type) for j in joints] == [('alpha', 'prismatic'), ('zeta', 'revolute'),
                                                  ('mid', 'continuous')]
    assert joints[2].lower == float('-inf') and joints[1].damping == 0.5
    model = pin.buildModelFromXML(BRANCHED)
    assert [j.name for j in joints] == [model.names[i] for i in range(1, model.njoints)]


@pytest.mark.parametrize('bad,match', [
    ('<robot name="x"><link name="a"/>', 'does not parse'),
    ('<notrobot/>', 'expected <robot>'),
    ('<robot name="x"><link name="a"/></robot>', 'no actuated'),
    ('/nonexistent/robot.urdf', 'not found'),
])
def test_bad_urdf_is_a_clear_error(bad, match):
    with pytest.raises(UrdfError, match=match):
        actuated_joints(bad)
