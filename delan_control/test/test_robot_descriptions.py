"""Robot descriptions as vendors ship them (example-robot-data), through both readers: the
Pinocchio model (RobotModel) and the pure-XML reader of the nodes (RobotDescription) select the
same joints in the same order, lock the rest, read limits left at 0 as not given, and expand
xacro."""

import glob
import os
import random

import numpy as np
import pinocchio as pin
import pytest

from delan_common.robot_model import Mismatch, RobotModel
from delan_common.urdf_joints import JointSelectionError, RobotDescription, UrdfError
from delan_control.model_loader import load_dynamics_model
from delan_control.plant import Plant

HERE = os.path.dirname(os.path.abspath(__file__))
XACRO = os.path.join(HERE, 'data', 'three_link_arm.urdf.xacro')


def _robots_dir() -> str:
    prefixes = [os.path.join(os.path.dirname(pin.__file__), '..', '..', '..', '..')]
    prefixes += os.environ.get('AMENT_PREFIX_PATH', '').split(os.pathsep)
    for prefix in prefixes:
        hits = glob.glob(os.path.join(prefix, 'share', 'example-robot-data', 'robots'))
        if hits:
            return os.path.normpath(hits[0])
    pytest.skip('example-robot-data not installed')


ROBOTS = _robots_dir()
PANDA = os.path.join(ROBOTS, 'panda_description', 'urdf', 'panda.urdf')
PENDULUM = os.path.join(ROBOTS, 'double_pendulum_description', 'urdf', 'double_pendulum.urdf')
PANDA_ARM = [f'panda_joint{i}' for i in range(1, 8)]
FINGERS = {'panda_finger_joint1': 0.0, 'panda_finger_joint2': 0.0}

# fixed-base arms: file, joints selected by default (the single gripper joint at the end of
# the Z1's and the SO-100's chains is left out and locked)
ARMS = {
    'ur5': (
        'ur_description/urdf/ur5_joint_limited_robot.urdf',
        [
            'shoulder_pan_joint',
            'shoulder_lift_joint',
            'elbow_joint',
            'wrist_1_joint',
            'wrist_2_joint',
            'wrist_3_joint',
        ],
    ),
    'xarm7': ('xarm_description/urdf/xarm7.urdf', [f'joint{i}' for i in range(1, 8)]),
    'kinova': (
        'kinova_description/robots/kinova.urdf',
        [f'j2s6s200_joint_{i}' for i in range(1, 7)],
    ),
    'z1': ('z1_description/urdf/z1.urdf', [f'joint{i}' for i in range(1, 7)]),
    'so100': (
        'so_arm_description/urdf/so100.urdf',
        ['shoulder_pan', 'shoulder_lift', 'elbow_flex', 'wrist_flex', 'wrist_roll'],
    ),
}
GRIPPERS = {'z1': ['jointGripper'], 'so100': ['gripper']}


def _agree(urdf, **selection):
    """Both readers on one description; asserts they select the same joints the same way."""
    robot = RobotDescription.load(urdf, **selection)
    model = RobotModel(urdf, **selection)
    assert model.joint_names == robot.joint_names
    assert model.joint_types == robot.joint_types
    assert model.locked == pytest.approx(robot.locked)
    assert model.warnings == robot.warnings
    for mine, theirs in (
        (model.spec.lower, robot.lower),
        (model.spec.upper, robot.upper),
        (model.spec.effort_limit, robot.effort_limits),
        (model.spec.velocity_limit, robot.velocity_limits),
        (model.spec.effort_given, robot.effort_given),
        (model.spec.velocity_given, robot.velocity_given),
        (model.spec.position_given, robot.position_given),
    ):
        np.testing.assert_array_equal(mine, theirs)
    return robot, model


def _random_q(model, count, seed=0):
    lo, hi = model.sample_bounds()
    return np.random.default_rng(seed).uniform(lo, hi, (count, model.n))


def test_panda_default_is_the_arm_with_the_fingers_locked():
    robot, model = _agree(PANDA)
    assert robot.joint_names == PANDA_ARM and model.n == 7 and model.model.nv == 7
    assert robot.locked == FINGERS
    assert any('panda_finger_joint2=0 (mimics panda_finger_joint1)' in w for w in robot.warnings)
    full = pin.buildModelFromUrdf(PANDA)
    # the locked fingers ride on the last body: all the mass is still there
    assert model.spec.total_mass == pytest.approx(sum(i.mass for i in full.inertias))
    eig = np.linalg.eigvalsh(model.mass_matrix(_random_q(model, 20)))
    assert eig.min() > 1e-6


@pytest.mark.parametrize('finger', ['panda_finger_joint1', 'panda_finger_joint2'])
def test_selecting_a_mimic_joint_or_its_master_is_a_clear_error(finger):
    for load in (RobotDescription.load, RobotModel):
        with pytest.raises(JointSelectionError, match='mimic') as err:
            load(PANDA, joints=PANDA_ARM + [finger])
        assert finger in str(err.value) and 'Pinocchio' in str(err.value)


def test_pinocchio_mimic_models_still_lack_aba():
    """Why a master cannot be selected (urdf_joints.MIMIC_UNSUPPORTED): if a Pinocchio update
    makes this fail, the mimic model can serve and the refusal can go."""
    with open(PANDA) as fh:
        model = pin.buildModelFromXML(fh.read(), mimic=True)
    assert model.nv == 8  # the mimic finger has no dof
    data = model.createData()
    q, v = pin.neutral(model), np.zeros(model.nv)
    assert pin.rnea(model, data, q, v, v).shape == (8,)
    with pytest.raises(RuntimeError, match='Mimic'):
        pin.aba(model, data, q, v, v)
    with pytest.raises(RuntimeError, match='Mimic'):
        pin.computeJointTorqueRegressor(model, data, q, v, v)


def test_double_pendulum_limits_not_given():
    robot, model = _agree(PENDULUM)
    text = ' '.join(robot.warnings)
    assert 'no position limits' in text and 'no effort limit' in text
    assert 'no velocity limit' in text and len(robot.warnings) == 3
    spec = model.spec
    assert np.all(np.isneginf(spec.lower)) and np.all(np.isposinf(spec.upper))
    assert np.all(np.isposinf(spec.effort_limit)) and np.all(np.isposinf(spec.velocity_limit))
    assert not spec.position_given.any() and not spec.effort_given.any()
    default = model.default_effort_limit()
    q = _random_q(model, 200, seed=3)
    assert np.all(np.isfinite(default)) and np.all(default > np.abs(model.gravity(q)).max(0))
    np.testing.assert_array_equal(model.default_velocity_limit(), [2.0, 2.0])
    # overrides, one per joint in model order; 0 keeps the URDF's (none)
    over, over_model = _agree(PENDULUM, effort_limits=[5.0, 0.0], velocity_limits=[0, 3.0])
    np.testing.assert_array_equal(over.effort_limits, [5.0, np.inf])
    np.testing.assert_array_equal(over_model.spec.effort_given, [True, False])
    np.testing.assert_array_equal(over_model.spec.velocity_limit, [np.inf, 3.0])
    assert 'no velocity limit' in over.warnings[-1] and "['joint1']" in over.warnings[-1]


@pytest.mark.parametrize('name', sorted(ARMS))
def test_vendor_arms_load_with_positive_definite_mass_matrix(name):
    path, joints = ARMS[name]
    robot, model = _agree(os.path.join(ROBOTS, path))
    gripper = GRIPPERS.get(name, [])
    assert robot.joint_names == joints and robot.locked == {nm: 0.0 for nm in gripper}
    full = pin.buildModelFromUrdf(os.path.join(ROBOTS, path))
    # Pinocchio's order
    assert [full.names[i] for i in range(1, full.njoints)] == joints + gripper
    eig = np.linalg.eigvalsh(model.mass_matrix(_random_q(model, 30)))
    assert eig.min() > 1e-8
    assert np.all(model.spec.effort_given) and np.all(np.isfinite(model.spec.effort_limit))


#: example-robot-data's descriptions that cannot be learned as they come, and why
REFUSED = {
    'quadrotor_base.urdf': 'no actuated',
    'iris_simple.urdf': 'no actuated',
    'ur3.urdf': 'no <link>',  # xacro's output on a file of macros
    'icub.urdf': 'singular mass matrix',  # a massless moving chain: the joints to leave out
    'romeo_laas_small.urdf': 'singular mass matrix',
}
ALL = sorted(glob.glob(os.path.join(ROBOTS, '**', '*.urdf'), recursive=True))


@pytest.mark.parametrize('path', ALL, ids=os.path.basename)
def test_every_description_of_example_robot_data_loads_or_says_why(path):
    """Robots nobody here named (legs, hands, humanoids, flying arms, mobile manipulators):
    both readers agree and give a positive definite mass matrix with the default joints, or
    refuse with a clear reason; never another exception."""
    why = REFUSED.get(os.path.basename(path))
    if why is not None:
        with pytest.raises(UrdfError, match=why):
            RobotModel(path)
        return
    robot, model = _agree(path)
    assert np.linalg.eigvalsh(model.mass_matrix(_random_q(model, 8))).min() > 0


@pytest.mark.parametrize(
    'urdf, selection, invariant',
    [
        (PANDA, {}, ['panda_joint1']),
        (os.path.join(ROBOTS, ARMS['ur5'][0]), {}, ['shoulder_pan_joint']),
        (PENDULUM, {}, ['joint1']),
        # the first joints locked: the first selected one moves the rest rigidly all the same
        (PANDA, {'joints': PANDA_ARM[2:]}, ['panda_joint3']),
        # two subtrees of a mobile manipulator (the torso locked): one joint of each
        (
            os.path.join(ROBOTS, 'tiago_description', 'robots', 'tiago.urdf'),
            {'joints': ['arm_1_joint', 'arm_2_joint', 'arm_4_joint', 'head_1_joint']},
            ['arm_1_joint', 'head_1_joint'],
        ),
        (
            os.path.join(ROBOTS, 'baxter_description', 'urdf', 'baxter.urdf'),
            {},
            ['head_pan', 'left_s0', 'right_s0'],
        ),
    ],
)
def test_inertia_invariant_joints_leave_pinocchios_mass_matrix_unchanged(
    urdf, selection, invariant
):
    """The joints the learner's mass matrix ignores (``inertia_invariant_joints``): exactly
    those below no other selected joint, and Pinocchio's H does not move with any of them,
    whatever their axis (the double pendulum's first axis is horizontal)."""
    robot, model = _agree(urdf, **selection)
    assert [robot.joint_names[i] for i in robot.inertia_invariant_joints] == invariant
    q = _random_q(model, 10, seed=5)
    H = model.mass_matrix(q)
    for j in robot.inertia_invariant_joints:
        moved = q.copy()
        moved[:, j] += np.random.default_rng(j).uniform(-2.0, 2.0, len(q))
        np.testing.assert_allclose(model.mass_matrix(moved), H, rtol=1e-10, atol=1e-12)
    # the next joint down the chain does move it: the check can fail
    others = [j for j in range(model.n) if j not in robot.inertia_invariant_joints]
    moved = q.copy()
    moved[:, others[0]] += 0.7
    assert np.abs(model.mass_matrix(moved) - H).max() > 1e-6


def test_tree_branching_at_the_base_selects_every_joint_but_grippers():
    robot, model = _agree(os.path.join(ROBOTS, 'baxter_description', 'urdf', 'baxter.urdf'))
    assert model.n == 15 and robot.joint_names[0] == 'head_pan'
    assert sorted(robot.locked) == [
        'l_gripper_l_finger_joint',
        'l_gripper_r_finger_joint',
        'r_gripper_l_finger_joint',
        'r_gripper_r_finger_joint',
    ]


def test_shuffled_joints_come_in_depth_first_order_and_others_lock_clamped():
    chosen = ['panda_joint7', 'panda_joint1', 'panda_joint5', 'panda_joint2']
    random.Random(1).shuffle(chosen)
    robot, model = _agree(PANDA, joints=chosen)
    assert robot.joint_names == ['panda_joint1', 'panda_joint2', 'panda_joint5', 'panda_joint7']
    # panda_joint4 lives in [-3.0718, -0.0698]: 0 is clamped into it
    assert robot.locked['panda_joint4'] == pytest.approx(-0.0698)
    assert robot.locked['panda_joint3'] == 0.0 and 'panda_finger_joint1' in robot.locked


@pytest.mark.parametrize(
    'selection, match',
    [
        ({'joints': ['panda_joint1', 'elbow']}, r"unknown joints \['elbow'\] in joints"),
        ({'joints': ['panda_joint8']}, 'unknown joints'),  # a fixed joint
        ({'locked': {'gripper': 0.1}}, r"unknown joints \['gripper'\] in locked"),
        (
            {'joints': ['panda_joint1'], 'locked': {'panda_joint1': 0.0}},
            'both selected and locked',
        ),
        ({'joints': ['panda_joint1', 'panda_joint1']}, 'repeat'),
    ],
)
def test_bad_selections_are_clear_errors(selection, match):
    for load in (RobotDescription.load, RobotModel):
        with pytest.raises(JointSelectionError, match=match) as err:
            load(PANDA, **selection)
        if 'unknown' in match:
            assert 'panda_finger_joint1' in str(err.value)  # the movable joints listed


def test_xacro_loads_in_both_readers():
    robot, model = _agree(XACRO)
    assert robot.joint_names == ['base_yaw', 'shoulder', 'elbow'] and robot.warnings == []
    np.testing.assert_allclose(robot.effort_limits, [40.0, 30.0, 20.0])
    np.testing.assert_allclose(model.spec.upper, np.pi / 2)
    assert '$(find' not in robot.xml and 'share/delan_control/config/' in robot.xml
    assert model.spec.total_mass == pytest.approx(4.5)


def test_locked_positions_change_gravity_as_a_hand_built_reduced_model():
    locked = {'panda_joint5': 0.7, 'panda_joint6': 1.9, 'panda_finger_joint1': 0.03}
    arm = PANDA_ARM[:4] + ['panda_joint7']
    robot, model = _agree(PANDA, joints=arm, locked=locked)
    assert robot.locked == dict(locked, panda_finger_joint2=0.03)  # the mimic follows
    full = pin.buildModelFromUrdf(PANDA)
    q_ref = pin.neutral(full)
    for name, value in robot.locked.items():
        q_ref[full.joints[full.getJointId(name)].idx_q] = value
    by_hand = pin.buildReducedModel(full, [full.getJointId(nm) for nm in robot.locked], q_ref)
    data = by_hand.createData()
    other = RobotModel(PANDA, joints=arm)  # joints 5 and 6 at 0: other gravity
    for q in _random_q(model, 10, seed=5):
        g = pin.computeGeneralizedGravity(by_hand, data, q)
        np.testing.assert_allclose(model.gravity(q), g, rtol=1e-10, atol=1e-10)
        assert np.abs(other.gravity(q) - g).max() > 1e-3


def test_mismatched_copy_plant_and_loader_keep_the_selection():
    selection = {'joints': PANDA_ARM[:6], 'locked': {'panda_joint7': 0.4}}
    model = RobotModel(PANDA, **selection)
    heavy = model.mismatched(Mismatch(payload_mass=1.0))
    for other in (heavy, model.copy()):
        assert other.joint_names == model.joint_names and other.locked == model.locked
    q = _random_q(model, 1)[0]
    assert np.abs(heavy.gravity(q) - model.gravity(q)).max() > 1e-2
    plant = Plant(model, Mismatch(mass_scale=1.1), q0=q)
    assert plant.joint_names == model.joint_names and plant.truth.locked == model.locked
    plant.step(model.gravity(q), 10)
    assert np.all(np.isfinite(plant.q))
    loaded = load_dynamics_model('pinocchio', RobotDescription.load(PANDA, **selection))
    assert loaded.joint_names == model.joint_names and loaded.locked == model.locked
    np.testing.assert_allclose(loaded.gravity(q), model.gravity(q))


def test_continuous_joints_of_a_vendor_arm_in_the_plant():
    """Kinova's continuous joints: the plant's revolute twin keeps the selection too."""
    path = os.path.join(ROBOTS, ARMS['kinova'][0])
    model = RobotModel(path, joints=ARMS['kinova'][1][:5])
    assert model.locked == {'j2s6s200_joint_6': 0.0}
    plant = Plant(model, q0=_random_q(model, 1)[0])
    plant.step(np.zeros(5), 5)
    assert plant.joint_names == model.joint_names and np.all(np.isfinite(plant.q))


def test_a_floating_base_joint_is_held_at_its_neutral_pose(tmp_path):
    """A humanoid's URDF written for a simulator declares its pelvis on a ``floating`` joint
    (the G1's, commented out as shipped): an arm on it is learned on a fixed torso, as with the
    joint left out, and both readers say so."""
    shipped = os.path.join(ROBOTS, 'g1_description', 'urdf', 'g1_29dof_rev_1_0.urdf')
    with open(shipped) as f:
        xml = f.read()
    floating = xml.replace(
        '<!-- <link name="world"></link>', '<link name="world"></link>'
    ).replace('<child link="pelvis"/>\n  </joint> -->', '<child link="pelvis"/>\n  </joint>')
    assert floating.count('type="floating"') == 1 and '<!-- <link name="world">' not in floating
    path = tmp_path / 'g1_floating.urdf'
    path.write_text(floating)
    arm = [
        f'left_{j}_joint'
        for j in ('shoulder_pitch', 'shoulder_roll', 'shoulder_yaw', 'elbow')
        + ('wrist_roll', 'wrist_pitch', 'wrist_yaw')
    ]
    robot, model = _agree(str(path), joints=arm[::-1])
    assert robot.joint_names == arm
    assert [robot.joint_names[i] for i in robot.inertia_invariant_joints] == [arm[0]]
    said = "joint 'floating_base_joint' is floating: held at its neutral pose (the base fixed)"
    assert said in model.warnings
    fixed = RobotModel(shipped, joints=arm)
    q = _random_q(model, 6, seed=2)
    qd = np.random.default_rng(3).normal(size=q.shape)
    np.testing.assert_allclose(model.mass_matrix(q), fixed.mass_matrix(q), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(
        model.inverse(q, qd, qd), fixed.inverse(q, qd, qd), rtol=1e-12, atol=1e-12
    )
    # the default selection (no joints given) reads it too
    robot, model = _agree(str(path))
    assert said in model.warnings and model.n > 0
