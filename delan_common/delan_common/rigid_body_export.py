"""A rigid-body model as a plain binary file for the compiled controller (``delan_control_rt``).

The compiled node links no Pinocchio: it evaluates recursive Newton-Euler
(``delan_control_rt/src/rigid_body.c``) on the tables this module writes from the model the
Python controller holds -- the URDF's (:class:`~delan_common.robot_model.RobotModel`: the
reduced Pinocchio model, locked joints folded into their parents' bodies) or identified
parameters on its kinematics (``delan_control.sysid.IdentifiedModel``) -- so that both compute

    tau = H(q) qdd + c(q, qd) + g(q) + armature qdd + viscous qd + coulomb tanh(qd / eps)

Layout, version 1 (little-endian, no padding; the frame -- magic, version, byte order,
checksum -- is :mod:`delan_common.binary_file`'s)::

    offset  size  field
    0       8     magic b'DELANRB\\0'
    8       4     uint32 format version (FORMAT_VERSION)
    12      4     uint32 0x01020304 (byte-order check)
    16      4     int32 n: movable joints (= moving bodies), in model order
    20      4     int32 source: 0 the URDF's parameters, 1 identified ones
    24      24    float64 gravity (3): the acceleration of gravity in the base frame [m/s^2]
    48      8     float64 eps: the Coulomb term's velocity scale (COULOMB_SMOOTHING)
    56      ...   joint names: n times (uint32 byte length, UTF-8 bytes)
            ...   n joint records of 232 bytes, each:
                  int32 parent: index of the parent joint, -1 for the base (parents first)
                  int32 type: 0 revolute, 1 prismatic, 2 continuous (revolute, angle unbounded)
                  float64 axis (3): unit vector in the joint's frame
                  float64 rotation (9, row-major) and translation (3): the joint's frame at
                          q = 0 in its parent joint's frame, x_parent = R x_joint + t
                          (Pinocchio's ``jointPlacements``)
                  float64 inertia (10): the body's m, m c (3), I_xx, I_xy, I_yy, I_xz, I_yz,
                          I_zz -- rotational inertia about the joint frame's origin (Pinocchio's
                          dynamic parameters; linear in the torque, so identified parameters of
                          any sign load as they are)
                  float64 armature, viscous, coulomb
    end-8   8     uint64 FNV-1a 64 of every byte before it

Pinocchio's joint models map onto (type, axis): RX/RY/RZ and RevoluteUnaligned to revolute,
their unbounded forms (RUBX/RUBY/RUBZ, RevoluteUnboundedUnaligned: a URDF ``continuous`` joint)
to continuous, PX/PY/PZ and PrismaticUnaligned to prismatic; any other (a mimic joint, a
free-flyer) is refused. A reader refuses another magic, a newer version, a size other than its
joint count gives, a wrong checksum, a parent after its child, an axis of other than unit length
and a rotation that is not one.
"""

from __future__ import annotations

import struct
from typing import Any, List, Optional

import numpy as np
import pinocchio as pin

from delan_common.binary_file import framed, write_atomic
from delan_common.dynamics import COULOMB_SMOOTHING
from delan_common.robot_model import RobotModel

MAGIC = b'DELANRB\0'
FORMAT_VERSION = 1
#: the suffix of an exported rigid-body model
SUFFIX = '.rbd'
#: the header's ``source``
SOURCE_URDF, SOURCE_IDENTIFIED = 0, 1
#: the record's ``type``
REVOLUTE, PRISMATIC, CONTINUOUS = 0, 1, 2

_REVOLUTE = ('JointModelRX', 'JointModelRY', 'JointModelRZ', 'JointModelRevoluteUnaligned')
_CONTINUOUS = (
    'JointModelRUBX',
    'JointModelRUBY',
    'JointModelRUBZ',
    'JointModelRevoluteUnboundedUnaligned',
)
_PRISMATIC = ('JointModelPX', 'JointModelPY', 'JointModelPZ', 'JointModelPrismaticUnaligned')
#: the ``inertia`` of a record: Pinocchio's dynamic parameters
PARAMS_PER_BODY = 10


class RigidBodyExportError(ValueError):
    """The model has no exported form (a joint the format has no type for, friction beyond the
    URDF's law)."""


def _joint_type(robot: RobotModel, jid: int, i: int) -> int:
    """The record's type of Pinocchio joint ``jid`` (model joint ``i``)."""
    name = robot.model.joints[jid].shortname()
    kind = robot.joint_types[i]
    if name in _REVOLUTE and kind == 'revolute':
        return REVOLUTE
    if name in _CONTINUOUS and kind == 'continuous':
        return CONTINUOUS
    if name in _PRISMATIC and kind == 'prismatic':
        return PRISMATIC
    raise RigidBodyExportError(
        f'joint {robot.joint_names[i]!r} ({kind}) is a Pinocchio {name}: no exported form'
    )


def _axis(robot: RobotModel, jid: int, joint_type: int) -> np.ndarray:
    """The joint's unit axis in its frame: its motion subspace, angular part for a revolute
    joint, linear part for a prismatic one."""
    jm = robot.model.joints[jid]
    data = jm.createData()
    jm.calc(data, pin.neutral(robot.model))
    S = np.asarray(data.S, dtype=np.float64).reshape(6)
    axis = S[:3] if joint_type == PRISMATIC else S[3:]
    return axis / np.linalg.norm(axis)


def rigid_body_bytes(
    robot: RobotModel,
    inertial: Optional[np.ndarray] = None,
    viscous: Optional[np.ndarray] = None,
    coulomb: Optional[np.ndarray] = None,
    source: int = SOURCE_URDF,
) -> bytes:
    """The file's bytes for ``robot``'s kinematics and gravity with its bodies' inertias and
    friction, or those given: ``inertial`` (``10 n``, Pinocchio's dynamic parameters per joint in
    model order), ``viscous`` / ``coulomb`` (``n``)."""
    effects = robot.effects
    if effects.shaped or effects.sprung:
        raise RigidBodyExportError(
            f'{robot.name}: Stribeck or asymmetric friction, or joint springs (a mismatched '
            'plant): the format holds viscous + smooth Coulomb friction only'
        )
    model, n = robot.model, robot.n
    jids = list(robot._jids)
    if model.njoints - 1 != n or jids != list(range(1, n + 1)):
        raise RigidBodyExportError(f'{robot.name}: joints other than the model joints')
    if inertial is None:
        inertial = np.concatenate([model.inertias[j].toDynamicParameters() for j in jids])
    inertial = np.asarray(inertial, dtype=np.float64).reshape(n, PARAMS_PER_BODY)
    viscous = np.asarray(robot.viscous if viscous is None else viscous, dtype=np.float64)
    coulomb = np.asarray(robot.coulomb if coulomb is None else coulomb, dtype=np.float64)
    armature = np.asarray(model.armature, dtype=np.float64)
    if viscous.shape != (n,) or coulomb.shape != (n,):
        raise RigidBodyExportError(f'viscous and coulomb need {n} values each')
    parts: List[bytes] = [
        struct.pack('<2i', n, source),
        struct.pack('<3d', *np.asarray(model.gravity.linear, dtype=np.float64)),
        struct.pack('<d', COULOMB_SMOOTHING),
    ]
    for name in robot.joint_names:
        raw = name.encode('utf-8')
        parts.append(struct.pack('<I', len(raw)) + raw)
    for i, jid in enumerate(jids):
        joint_type = _joint_type(robot, jid, i)
        placement = model.jointPlacements[jid]
        doubles = np.concatenate(
            [
                _axis(robot, jid, joint_type),
                np.asarray(placement.rotation, dtype=np.float64).reshape(9),
                np.asarray(placement.translation, dtype=np.float64),
                inertial[i],
                [armature[i], viscous[i], coulomb[i]],
            ]
        )
        if not np.all(np.isfinite(doubles)):
            raise RigidBodyExportError(f'joint {robot.joint_names[i]!r}: non-finite values')
        parts.append(struct.pack('<2i', model.parents[jid] - 1, joint_type))
        parts.append(doubles.astype('<f8').tobytes())
    return framed(MAGIC, FORMAT_VERSION, b''.join(parts))


def export_bytes(model: Any) -> bytes:
    """The file's bytes for a dynamics model the controller holds: a
    :class:`~delan_common.robot_model.RobotModel` (the URDF's parameters) or an identified model
    (``delan_control.sysid.IdentifiedModel``: its ``robot``'s kinematics with its
    ``inertial`` / ``viscous`` / ``coulomb``)."""
    if isinstance(model, RobotModel):
        return rigid_body_bytes(model)
    robot = getattr(model, 'robot', None)
    if isinstance(robot, RobotModel) and hasattr(model, 'inertial'):
        return rigid_body_bytes(
            robot, model.inertial, model.viscous, model.coulomb, SOURCE_IDENTIFIED
        )
    raise RigidBodyExportError(f'{type(model).__name__} is not a rigid-body model')


def export_rigid_body(model: Any, path: str) -> str:
    """Write ``model`` (as :func:`export_bytes` takes it) to ``path`` atomically; returns
    ``path``."""
    return write_atomic(path, export_bytes(model))
