"""The compiled node's rigid-body model (src/rigid_body.c) on files of
delan_common.rigid_body_export: its recursive Newton-Euler equals the Python models' inverse
dynamics (Pinocchio's RNEA + the URDF's friction; identified parameters) to 1e-10 on random
states of the suite's arms, a UR5, a Panda (fingers locked) and an arm of every joint type, and
its mass matrix products (the URDF-feedback laws' H(q) x) equal Pinocchio's CRBA times x; a
truncated, foreign, newer or inconsistent file is refused."""

import ctypes
import os
import struct

import numpy as np
import pinocchio as pin
import pytest
from rt_build import ROOT, library

from delan_common.binary_file import fnv1a64
from delan_common.rigid_body_export import (
    FORMAT_VERSION,
    SOURCE_IDENTIFIED,
    SOURCE_URDF,
    RigidBodyExportError,
    export_bytes,
    export_rigid_body,
)
from delan_common.robot_model import Mismatch, RobotModel, example_robot_data_files
from delan_control.sysid import IdentifiedModel, nominal_parameters

URDF_DIR = os.path.join(ROOT, 'delan_bringup', 'urdf')
HEADER = 56
RECORD = 232

#: every joint type and axis the format has: an axis along -z and unaligned ones (Pinocchio's
#: RevoluteUnaligned, PrismaticUnaligned, RevoluteUnboundedUnaligned), rotated placements,
#: inertias off their frames' axes, and a joint locked between two moving ones
MIXED = """<robot name="mixed">
  <link name="base"/>
  <link name="l1"><inertial><mass value="2"/><origin xyz="0.1 0.02 0.3" rpy="0.1 0.2 0.3"/>
    <inertia ixx="0.05" ixy="0.001" ixz="0.002" iyy="0.04" iyz="0.003" izz="0.03"/></inertial>
  </link>
  <link name="l2"><inertial><mass value="1.5"/><origin xyz="0.2 0 0.1"/>
    <inertia ixx="0.02" ixy="0" ixz="0" iyy="0.03" iyz="0" izz="0.01"/></inertial></link>
  <link name="l3"><inertial><mass value="1.0"/><origin xyz="0 0.1 0.05"/>
    <inertia ixx="0.01" ixy="0" ixz="0" iyy="0.01" iyz="0" izz="0.01"/></inertial></link>
  <link name="l4"><inertial><mass value="0.5"/><origin xyz="0.05 0 0"/>
    <inertia ixx="0.004" ixy="0" ixz="0" iyy="0.005" iyz="0" izz="0.006"/></inertial></link>
  <link name="l5"><inertial><mass value="0.4"/><origin xyz="0.0 0.03 0.02"/>
    <inertia ixx="0.002" ixy="0" ixz="0" iyy="0.002" iyz="0" izz="0.002"/></inertial></link>
  <link name="l6"><inertial><mass value="0.3"/><origin xyz="0.01 0.0 0.04"/>
    <inertia ixx="0.001" ixy="0" ixz="0" iyy="0.001" iyz="0" izz="0.001"/></inertial></link>
  <joint name="j1" type="revolute"><parent link="base"/><child link="l1"/>
    <origin xyz="0 0 0.2" rpy="0 0 0.3"/><axis xyz="0 0 -1"/>
    <limit lower="-2" upper="2" effort="100" velocity="2"/>
    <dynamics damping="0.2" friction="0.5"/></joint>
  <joint name="j2" type="prismatic"><parent link="l1"/><child link="l2"/>
    <origin xyz="0.1 0.2 0.3" rpy="0.4 -0.2 0.1"/><axis xyz="1 0 0"/>
    <limit lower="-0.5" upper="0.5" effort="100" velocity="1"/>
    <dynamics damping="3" friction="2"/></joint>
  <joint name="j3" type="revolute"><parent link="l2"/><child link="l3"/>
    <origin xyz="0.3 0 0" rpy="0 0.5 0"/><axis xyz="0 0.6 0.8"/>
    <limit lower="-2" upper="2" effort="50" velocity="2"/></joint>
  <joint name="locked" type="revolute"><parent link="l3"/><child link="l4"/>
    <origin xyz="0 0.2 0" rpy="0.3 0 0"/><axis xyz="1 0 0"/>
    <limit lower="-2" upper="2" effort="50" velocity="2"/></joint>
  <joint name="j5" type="continuous"><parent link="l4"/><child link="l5"/>
    <origin xyz="0.1 0 0.1"/><axis xyz="0.6 0 -0.8"/><limit effort="20" velocity="3"/>
    <dynamics damping="0.05" friction="0.1"/></joint>
  <joint name="j6" type="prismatic"><parent link="l5"/><child link="l6"/>
    <origin xyz="0 0 0.1"/><axis xyz="0 -0.6 0.8"/>
    <limit lower="-0.2" upper="0.2" effort="20" velocity="0.5"/></joint>
</robot>
"""
MIXED_SELECTION = {'joints': ['j1', 'j2', 'j3', 'j5', 'j6'], 'locked': {'locked': 0.4}}


def robot(name):
    """The models the C RNEA is checked on, by name."""
    if name == 'mixed':
        return RobotModel(MIXED, **MIXED_SELECTION)
    if name in ('ur5_robot.urdf', 'panda.urdf'):
        files = example_robot_data_files()
        if name not in files:
            pytest.skip(f'example-robot-data has no {name}')
        return RobotModel(files[name])  # the Panda's fingers locked: its default selection
    return RobotModel(os.path.join(URDF_DIR, name))


ROBOTS = ['two_link_arm.urdf', 'seven_dof_arm.urdf', 'ur5_robot.urdf', 'panda.urdf', 'mixed']


def load(lib, path):
    err = ctypes.create_string_buffer(1024)
    handle = lib.rigid_body_load(str(path).encode(), err, len(err))
    return handle, err.value.decode()


def worst_difference(lib, model, path, samples=40, seed=0):
    """max |C - Python| of inverse dynamics over random (q, qd, qdd), and max |Python|."""
    handle, err = load(lib, path)
    assert handle, err
    try:
        n = len(model.joint_names)
        assert lib.rigid_body_dof(handle) == n
        assert [lib.rigid_body_joint_name(handle, i).decode() for i in range(n)] == list(
            model.joint_names
        )
        rng = np.random.default_rng(seed)
        worst, scale = 0.0, 0.0
        for _ in range(samples):
            q, qd, qdd = (np.ascontiguousarray(rng.uniform(-3.0, 3.0, n)) for _ in range(3))
            tau = np.zeros(n)
            args = (q.ctypes.data, qd.ctypes.data, qdd.ctypes.data, tau.ctypes.data)
            assert lib.rigid_body_inverse(handle, *args) == 0
            ref = np.asarray(model.inverse(q, qd, qdd))
            worst = max(worst, float(np.abs(tau - ref).max()))
            scale = max(scale, float(np.abs(ref).max()))
        return worst, scale
    finally:
        lib.rigid_body_free(handle)


@pytest.mark.parametrize('name', ROBOTS)
def test_rnea_equals_the_urdf_model(tmp_path, name):
    lib = library()
    model = robot(name)
    path = export_rigid_body(model, str(tmp_path / 'model.rbd'))
    worst, scale = worst_difference(lib, model, path)
    assert scale > 1.0
    assert worst <= 1e-10, (name, worst)
    handle, _ = load(lib, path)
    assert lib.rigid_body_source(handle) == SOURCE_URDF
    continuous = [lib.rigid_body_continuous(handle, i) for i in range(model.n)]
    assert continuous == [int(t == 'continuous') for t in model.joint_types]
    lib.rigid_body_free(handle)


def crba(model, q):
    """Pinocchio's mass matrix of ``model`` at ``q`` (its armature on the diagonal), made
    symmetric from the upper triangle it computes."""
    m = pin.crba(model.model, model.model.createData(), model.configuration(q))
    return np.triu(m) + np.triu(m, 1).T


def worst_mass_product(lib, model, path, samples=40, seed=1):
    """max |C H(q) x - pin.crba(q) x| over random ``q`` and ``x`` (and the unit vectors, every
    column of H), and max |pin.crba(q) x|."""
    handle, err = load(lib, path)
    assert handle, err
    try:
        n = model.n
        rng = np.random.default_rng(seed)
        worst, scale = 0.0, 0.0
        for k in range(samples):
            q = np.ascontiguousarray(rng.uniform(-3.0, 3.0, n))
            h = crba(model, q)
            xs = np.eye(n) if k == 0 else rng.uniform(-3.0, 3.0, (1, n))
            for x in xs:
                x = np.ascontiguousarray(x)
                out = np.full(n, np.nan)
                assert (
                    lib.rigid_body_mass_times(
                        handle, q.ctypes.data, x.ctypes.data, out.ctypes.data
                    )
                    == 0
                )
                worst = max(worst, float(np.abs(out - h @ x).max()))
                scale = max(scale, float(np.abs(h @ x).max()))
        return worst, scale
    finally:
        lib.rigid_body_free(handle)


@pytest.mark.parametrize('name', ROBOTS)
def test_mass_matrix_product_equals_crba(tmp_path, name):
    """H(q) x as the URDF-feedback laws take it: no gravity, Coriolis or friction term (the
    URDF's friction is not zero on all of these), the URDF's inertias only."""
    lib = library()
    model = robot(name)
    path = export_rigid_body(model, str(tmp_path / 'model.rbd'))
    worst, scale = worst_mass_product(lib, model, path)
    assert scale > 0.1
    assert worst <= 1e-10, (name, worst)


@pytest.mark.parametrize('name', ['seven_dof_arm.urdf', 'ur5_robot.urdf'])
def test_mass_matrix_product_includes_armature(tmp_path, name):
    """A rotor's reflected inertia (Pinocchio's armature, which its CRBA adds to the diagonal)
    is part of H: the file's armature enters the product as it enters the RNEA."""
    lib = library()
    model = robot(name)
    model.model.armature = np.linspace(0.1, 0.7, model.model.nv)
    path = export_rigid_body(model, str(tmp_path / 'armature.rbd'))
    worst, _ = worst_mass_product(lib, model, path)
    assert worst <= 1e-10, (name, worst)
    plain = export_rigid_body(robot(name), str(tmp_path / 'plain.rbd'))
    handles = [load(lib, p)[0] for p in (path, plain)]
    q, x = np.full(model.n, 0.3), np.ones(model.n)
    outs = [np.zeros(model.n) for _ in handles]
    for handle, out in zip(handles, outs):
        lib.rigid_body_mass_times(handle, q.ctypes.data, x.ctypes.data, out.ctypes.data)
        lib.rigid_body_free(handle)
    np.testing.assert_allclose(outs[0] - outs[1], model.model.armature, rtol=0, atol=1e-12)


@pytest.mark.parametrize('name', ['seven_dof_arm.urdf', 'panda.urdf', 'mixed'])
def test_rnea_equals_identified_parameters(tmp_path, name):
    """Identified parameters: other inertias and friction on the URDF's kinematics, through
    Pinocchio (every mass > 0) and through the regressor (a body of mass 0: the file holds the
    parameters Pinocchio cannot)."""
    lib = library()
    kinematics = robot(name)
    n = kinematics.n
    rng = np.random.default_rng(5)
    theta = nominal_parameters(kinematics) * rng.uniform(0.7, 1.3, 12 * n)
    theta[10 * n :] = rng.uniform(0.0, 2.0, 2 * n)  # viscous, Coulomb
    massless = theta.copy()
    massless[10 * (n - 1) : 10 * n] = 0.0
    massless[10 * (n - 1) + 4] = 0.01  # a rotational inertia without mass
    for k, th in enumerate((theta, massless)):
        model = IdentifiedModel(kinematics, th)
        assert model.uses_pinocchio == (k == 0)
        path = export_rigid_body(model, str(tmp_path / f'identified{k}.rbd'))
        worst, scale = worst_difference(lib, model, path, seed=k)
        assert scale > 1.0
        assert worst <= 1e-10, (name, k, worst)
        handle, _ = load(lib, path)
        assert lib.rigid_body_source(handle) == SOURCE_IDENTIFIED
        lib.rigid_body_free(handle)


def test_mismatched_bodies_export_and_shaped_friction_is_refused(tmp_path):
    """Scaled masses and a payload are inertias; Stribeck friction has no exported form."""
    lib = library()
    nominal = robot('seven_dof_arm.urdf')
    heavier = nominal.mismatched(Mismatch(mass_scale=1.3, payload_mass=0.5, viscous_scale=2.0))
    path = export_rigid_body(heavier, str(tmp_path / 'heavier.rbd'))
    worst, _ = worst_difference(lib, heavier, path)
    assert worst <= 1e-10
    stribeck = nominal.mismatched(Mismatch(stribeck_static_ratio=1.5))
    with pytest.raises(RigidBodyExportError, match='Stribeck'):
        export_bytes(stribeck)
    with pytest.raises(RigidBodyExportError, match='not a rigid-body model'):
        export_bytes(object())


def resealed(body: bytes) -> bytes:
    """``body`` (a file without its checksum) with a matching checksum."""
    return body + struct.pack('<Q', fnv1a64(body))


def test_refuses_truncated_foreign_newer_and_inconsistent_files(tmp_path):
    lib = library()
    data = export_bytes(robot('two_link_arm.urdf'))
    body = data[:-8]
    names = len(body) - HEADER - 2 * RECORD  # the joint names' bytes
    first = HEADER + names  # the first joint record

    def edited(offset, fmt, *values):
        b = bytearray(body)
        struct.pack_into(fmt, b, offset, *values)
        return resealed(bytes(b))

    flipped = bytearray(data)
    flipped[first + 40] ^= 0x40
    cases = {
        'truncated': (data[:-100], 'checksum'),
        'short': (resealed(body[:-16]), 'truncated'),
        'longer': (resealed(body + bytes(8)), 'more than its joints'),
        'empty': (b'', 'too short'),
        'foreign': (b'PK\x03\x04' + data[4:], 'not a rigid-body model'),
        'weights': (b'DELANCW\0' + data[8:], 'not a rigid-body model'),
        'newer': (edited(8, '<I', FORMAT_VERSION + 1), 'format version'),
        'corrupt': (bytes(flipped), 'checksum'),
        'no joints': (edited(16, '<i', 0), 'joints'),
        'source': (edited(20, '<i', 7), 'unknown source'),
        'parent': (edited(first + RECORD, '<i', 1), 'parent'),
        'type': (edited(first + 4, '<i', 9), 'joint type'),
        'axis': (edited(first + 8, '<d', 0.5), 'unit length'),
        'rotation': (edited(first + 32, '<d', -1.0), 'rotation'),
        'nan': (edited(first + 8 + 8 * 15, '<d', float('nan')), 'non-finite'),
        'smoothing': (edited(48, '<d', 0.0), 'smoothing'),
    }
    for name, (blob, reason) in cases.items():
        path = tmp_path / name.replace(' ', '_')
        path.write_bytes(blob)
        handle, err = load(lib, path)
        assert not handle, name
        assert reason in err, (name, err)
    handle, err = load(lib, tmp_path / 'missing')
    assert not handle and 'cannot open' in err
    good = tmp_path / 'good'
    good.write_bytes(data)
    handle, err = load(lib, good)
    assert handle, err
    lib.rigid_body_free(handle)


def test_file_layout_is_the_documented_one():
    model = robot('mixed')
    data = export_bytes(model)
    assert data[:8] == b'DELANRB\0'
    assert struct.unpack_from('<II', data, 8) == (FORMAT_VERSION, 0x01020304)
    n, source = struct.unpack_from('<2i', data, 16)
    assert (n, source) == (5, SOURCE_URDF)
    assert struct.unpack_from('<3d', data, 24) == (0.0, 0.0, -9.81)
    assert struct.unpack_from('<d', data, 48) == (0.05,)
    names = sum(4 + len(j) for j in model.joint_names)
    assert len(data) == HEADER + names + n * RECORD + 8
    types = [struct.unpack_from('<2i', data, HEADER + names + i * RECORD) for i in range(n)]
    # parents in order (the locked joint folded away), types revolute/prismatic/continuous
    assert types == [(-1, 0), (0, 1), (1, 0), (2, 2), (3, 1)]
    assert struct.unpack_from('<Q', data, len(data) - 8)[0] == fnv1a64(data[:-8])
