"""The analytic model: algorithms agree, protocol and shapes, joint mapping, bad URDFs, the 7-DoF
arm."""

from types import SimpleNamespace

import numpy as np
import pytest

from delan_common.dynamics import COULOMB_SMOOTHING, DynamicsModel
from delan_common.joint_state import JointStateError
from delan_common.robot_model import Mismatch, RobotDescriptionError, RobotModel, find_urdf

ROBOTS = ['two_link_arm.urdf', 'seven_dof_arm.urdf']


@pytest.fixture(scope='module', params=ROBOTS)
def robot(request):
    return RobotModel(request.param)


def random_states(m, B, seed=0):
    rng = np.random.default_rng(seed)
    lo = np.where(np.isfinite(m.spec.lower), m.spec.lower, -np.pi)
    hi = np.where(np.isfinite(m.spec.upper), m.spec.upper, np.pi)
    q = rng.uniform(lo, hi, size=(B, m.n))
    qd = rng.normal(size=(B, m.n)) * 2.0
    qdd = rng.normal(size=(B, m.n)) * 5.0
    return q, qd, qdd


def test_rnea_and_aba_are_inverses(robot):
    q, qd, qdd = random_states(robot, 50)
    tau = robot.inverse(q, qd, qdd)
    np.testing.assert_allclose(robot.forward(q, qd, tau), qdd, atol=1e-9)
    tau2 = np.random.default_rng(1).normal(size=q.shape) * 3
    np.testing.assert_allclose(robot.inverse(q, qd, robot.forward(q, qd, tau2)), tau2, atol=1e-9)


def test_mass_matrix_matches_rnea_columns(robot):
    q, _, _ = random_states(robot, 10, seed=2)
    z = np.zeros(robot.n)
    for qi in q:
        H = robot.mass_matrix(qi)
        g = robot.rigid_body_torque(qi, z, z)
        cols = np.stack([robot.rigid_body_torque(qi, z, e) - g for e in np.eye(robot.n)], axis=1)
        np.testing.assert_allclose(H, cols, atol=1e-12)
        np.testing.assert_array_equal(H, H.T)
        assert np.linalg.eigvalsh(H)[0] > 0
        np.testing.assert_allclose(g, robot.gravity(qi), atol=1e-12)


def test_decomposition_and_protocol(robot):
    assert isinstance(robot, DynamicsModel)
    q, qd, qdd = random_states(robot, 8, seed=3)
    H = robot.mass_matrix(q)
    lhs = (
        np.einsum('bij,bj->bi', H, qdd)
        + robot.coriolis(q, qd)
        + robot.gravity(q)
        + robot.friction(qd)
    )
    np.testing.assert_allclose(lhs, robot.inverse(q, qd, qdd), atol=1e-10)
    # friction is the suite's model with the URDF's <dynamics>
    np.testing.assert_allclose(
        robot.friction(qd),
        robot.spec.damping * qd + robot.spec.friction * np.tanh(qd / COULOMB_SMOOTHING),
    )
    # C qd = c
    C = robot.coriolis_matrix(q, qd)
    np.testing.assert_allclose(np.einsum('bij,bj->bi', C, qd), robot.coriolis(q, qd), atol=1e-10)


def test_batched_equals_loop_and_shapes(robot):
    q, qd, qdd = random_states(robot, 6, seed=4)
    n = robot.n
    assert robot.inverse(q, qd, qdd).shape == (6, n)
    assert robot.mass_matrix(q).shape == (6, n, n)
    T, V = robot.energy(q, qd)
    assert T.shape == (6,) and V.shape == (6,)
    for name, args in [
        ('inverse', (q, qd, qdd)),
        ('forward', (q, qd, qdd)),
        ('mass_matrix', (q,)),
        ('coriolis', (q, qd)),
        ('gravity', (q,)),
        ('friction', (qd,)),
    ]:
        fn = getattr(robot, name)
        batch = fn(*args)
        loop = np.stack([fn(*(a[i] for a in args)) for i in range(6)])
        np.testing.assert_allclose(batch, loop, atol=1e-12, err_msg=name)
        assert fn(*(a[0] for a in args)).shape == batch.shape[1:]
    T1, V1 = robot.energy(q[0], qd[0])
    assert np.ndim(T1) == 0 and np.isclose(T1, T[0]) and np.isclose(V1, V[0])
    with pytest.raises(ValueError):
        robot.inverse(q[:, :-1], qd[:, :-1], qdd[:, :-1])


def test_energy_consistent_with_gravity_and_coriolis(robot):
    """g = dV/dq and c = dH/dt qd - 1/2 d/dq (qd^T H qd), by central differences."""
    q, qd, _ = random_states(robot, 3, seed=5)
    h = 1e-6
    for qi, qdi in zip(q, qd):
        E = np.eye(robot.n)
        dV = np.array(
            [
                (robot.energy(qi + h * e, qdi)[1] - robot.energy(qi - h * e, qdi)[1]) / (2 * h)
                for e in E
            ]
        )
        np.testing.assert_allclose(dV, robot.gravity(qi), rtol=1e-5, atol=1e-6)
        Hdot = (robot.mass_matrix(qi + h * qdi) - robot.mass_matrix(qi - h * qdi)) / (2 * h)
        dT = np.array(
            [
                (
                    qdi @ robot.mass_matrix(qi + h * e) @ qdi
                    - qdi @ robot.mass_matrix(qi - h * e) @ qdi
                )
                / (2 * h)
                for e in E
            ]
        )
        c = Hdot @ qdi - 0.5 * dT
        np.testing.assert_allclose(c, robot.coriolis(qi, qdi), rtol=1e-5, atol=1e-6)
        T, _ = robot.energy(qi, qdi)
        assert np.isclose(T, 0.5 * qdi @ robot.mass_matrix(qi) @ qdi)


def test_continuous_joint_is_one_angle():
    m = RobotModel('seven_dof_arm.urdf')
    assert m.spec.joint_types[-1] == 'continuous'
    assert m.model.nq == 8 and m.n == 7
    assert np.isinf(m.spec.lower[-1]) and np.isinf(m.spec.upper[-1])
    q, qd, qdd = random_states(m, 4, seed=6)
    q2 = q.copy()
    q2[:, -1] += 2 * np.pi
    np.testing.assert_allclose(m.inverse(q, qd, qdd), m.inverse(q2, qd, qdd), atol=1e-9)
    for qi in q:
        cfg = m.configuration(qi)
        assert cfg.shape == (8,)
        np.testing.assert_allclose(m.angles(cfg), qi, atol=1e-12)


def test_joint_state_mapping():
    m = RobotModel('two_link_arm.urdf')
    assert m.joint_names == ['shoulder', 'elbow']
    msg = SimpleNamespace(
        name=['elbow', 'shoulder'], position=[0.2, 0.1], velocity=[2.0, 1.0], effort=[]
    )
    js = m.map_joint_state(msg)
    np.testing.assert_array_equal(js.position, [0.1, 0.2])
    np.testing.assert_array_equal(js.velocity, [1.0, 2.0])
    with pytest.raises(JointStateError) as err:
        m.map_joint_state(
            SimpleNamespace(name=['shoulder'], position=[0.0], velocity=[0.0], effort=[])
        )
    assert err.value.reason == 'missing_joints' and 'elbow' in str(err.value)
    extra = SimpleNamespace(
        name=['shoulder', 'elbow', 'gripper'], position=[0, 0, 0], velocity=[0, 0, 0], effort=[]
    )
    with pytest.raises(JointStateError) as err:
        m.map_joint_state(extra)
    assert err.value.reason == 'unknown_joints' and 'gripper' in str(err.value)
    assert m.map_joint_state(extra, allow_extra=True).position.shape == (2,)
    np.testing.assert_array_equal(
        m.to_model_order(['elbow', 'shoulder'], [[1.0, 2.0]]), [[2.0, 1.0]]
    )
    with pytest.raises(JointStateError):
        m.to_model_order(['elbow', 'wrist'], [1.0, 2.0])


def test_broken_urdfs_give_clear_errors(tmp_path):
    with pytest.raises(RobotDescriptionError, match='not valid XML'):
        RobotModel('<robot name="x"><link name="a"></robot>')
    bad = tmp_path / 'broken.urdf'
    bad.write_text(
        '<robot name="x"><link name="a"/><joint name="j" type="revolute">'
        '<parent link="a"/><child link="missing"/></joint></robot>'
    )
    with pytest.raises(ValueError) as err:
        RobotModel(str(bad))
    assert str(bad) in str(err.value)
    with pytest.raises(FileNotFoundError):
        RobotModel(str(tmp_path / 'nope.urdf'))
    # no <inertial> on the moving link: singular mass matrix, named in the error
    no_inertia = tmp_path / 'no_inertia.urdf'
    no_inertia.write_text(
        '<robot name="x"><link name="base"/><link name="arm"/>'
        '<joint name="j" type="revolute"><parent link="base"/><child link="arm"/>'
        '<axis xyz="0 0 1"/><limit lower="-1" upper="1" effort="1" velocity="1"/></joint>'
        '</robot>'
    )
    with pytest.raises(RobotDescriptionError, match='arm') as err:
        RobotModel(str(no_inertia))
    assert "moves joints ['j']" in str(err.value)
    floating = (
        '<robot name="x"><link name="a"/><link name="b"><inertial><mass value="1"/>'
        '<inertia ixx="1" ixy="0" ixz="0" iyy="1" iyz="0" izz="1"/></inertial></link>'
        '<joint name="f" type="floating"><parent link="a"/><child link="b"/></joint>'
        '</robot>'
    )
    with pytest.raises(RobotDescriptionError, match='floating'):
        RobotModel(floating)


def test_from_robot_description_string_equals_file():
    path = find_urdf('two_link_arm.urdf')
    with open(path) as fh:
        xml = fh.read()
    a, b = RobotModel(path), RobotModel.from_xml(xml)
    q, qd, qdd = random_states(a, 3)
    np.testing.assert_array_equal(a.inverse(q, qd, qdd), b.inverse(q, qd, qdd))
    assert b.source == '<robot_description string>'


def test_seven_dof_arm_is_realistic():
    m = RobotModel('seven_dof_arm.urdf')
    s = m.spec
    assert s.n == 7 and len(set(s.joint_names)) == 7
    assert 10.0 < s.total_mass < 40.0 and 8.0 < s.moving_mass < s.total_mass
    assert np.all(s.effort_limit > 0) and np.all(np.isfinite(s.effort_limit))
    assert np.all((s.velocity_limit > 0.5) & (s.velocity_limit < 10))
    assert np.all(s.damping > 0) and np.all(s.friction > 0)
    q, _, _ = random_states(m, 200, seed=7)
    eig = np.linalg.eigvalsh(m.mass_matrix(q))
    assert eig.min() > 1e-5 and eig.max() < 50
    # motors can hold the arm anywhere in its range with margin
    assert np.all(np.abs(m.gravity(q)).max(axis=0) < 0.5 * s.effort_limit)
    # shoulder_lift carries the most gravity load
    assert np.argmax(np.abs(m.gravity(q)).max(axis=0)) == 1


def test_mismatch_options():
    nom = RobotModel('two_link_arm.urdf')
    q, qd, qdd = random_states(nom, 5, seed=8)
    heavy = nom.mismatched(Mismatch(mass_scale=1.5))
    np.testing.assert_allclose(heavy.mass_matrix(q), 1.5 * nom.mass_matrix(q), rtol=1e-12)
    np.testing.assert_allclose(heavy.gravity(q), 1.5 * nom.gravity(q), rtol=1e-12, atol=1e-12)
    per_body = nom.mismatched(Mismatch(mass_scale=[1.0, 2.0]))
    assert np.isclose(per_body.spec.moving_mass, 2.0 + 2 * 1.0)
    payload = nom.mismatched(Mismatch(payload_mass=0.7))
    assert np.isclose(payload.spec.total_mass, nom.spec.total_mass + 0.7)
    # point mass at the tool (0.4 m along the forearm): extra gravity torque on the elbow at q=0
    dg = payload.gravity(np.zeros(2)) - nom.gravity(np.zeros(2))
    assert np.isclose(abs(dg[1]), 0.7 * 9.81 * 0.4, rtol=1e-9)
    fr = nom.mismatched(Mismatch(viscous=[0.5, 0.6], coulomb_scale=2.0))
    np.testing.assert_allclose(fr.spec.damping, [0.5, 0.6])
    np.testing.assert_allclose(fr.spec.friction, 2.0 * nom.spec.friction)
    # mismatched() starts from the nominal URDF, it does not compound
    assert np.isclose(heavy.mismatched(Mismatch()).spec.moving_mass, nom.spec.moving_mass)
    with pytest.raises(ValueError):
        nom.mismatched(Mismatch(mass_scale=[1.0, 2.0, 3.0]))
    with pytest.raises(ValueError):
        nom.mismatched(Mismatch(mass_scale=-1.0))


@pytest.mark.parametrize(
    'urdf,heavy',
    [('talos_left_arm.urdf', False), ('panda.urdf', True), ('double_pendulum.urdf', True)],
)
def test_payload_capacity_is_a_share_of_the_effort_limits(urdf, heavy):
    """The heaviest payload whose weight takes PAYLOAD_EFFORT_SHARE of a given effort limit: a
    Talos arm (22 N m shoulder) carries less than the demo's 0.6 kg, a Panda more; without
    given limits (the double pendulum's effort="0") nothing bounds it. The realistic preset
    takes the lighter of its payload and the capacity."""
    from delan_common.robot_model import PAYLOAD_EFFORT_SHARE, REALISTIC

    robot = RobotModel(find_urdf(urdf))
    cap = robot.payload_capacity()
    preset = Mismatch.from_preset('realistic', robot).payload_mass
    assert (cap >= REALISTIC['payload_mass']) == heavy
    assert preset == min(REALISTIC['payload_mass'], cap)
    if not np.isfinite(cap):
        assert not robot.spec.effort_given.any()
        return
    q = robot.configuration_samples(64)
    carried = robot.mismatched(Mismatch(payload_mass=cap))
    share = np.abs(carried.gravity(q) - robot.gravity(q)).max(axis=0) / robot.spec.effort_limit
    assert share.max() == pytest.approx(PAYLOAD_EFFORT_SHARE, rel=1e-6)


def test_payload_capacity_keeps_the_pull_below_the_loop_stiffness():
    """An SO-100 (0.6 kg of links, 35 N m URDF limits) cannot hold the demo's 0.6 kg under a
    400 1/s^2 computed-torque loop: its weight would pull the wrist over (every model diverged
    within a second); a UR5 carries it with ease."""
    from delan_common.robot_model import (
        PAYLOAD_PULL_SHARE,
        PULL_SAMPLES,
        REALISTIC,
        _gravity_pull,
    )

    so100 = RobotModel(find_urdf('so100.urdf'))
    assert so100.payload_capacity() > REALISTIC['payload_mass']  # the limits alone: yes
    cap = so100.payload_capacity(loop_stiffness=400.0)
    assert 0.01 < cap < 0.2
    carried = so100.mismatched(Mismatch(payload_mass=cap))
    pull = max(
        _gravity_pull(so100, carried, q) for q in so100.configuration_samples(64)[:PULL_SAMPLES]
    )
    assert pull == pytest.approx(PAYLOAD_PULL_SHARE * 400.0, rel=1e-4)
    ur5 = RobotModel(find_urdf('ur5_joint_limited_robot.urdf'))
    assert ur5.payload_capacity(loop_stiffness=400.0) > 2.0
