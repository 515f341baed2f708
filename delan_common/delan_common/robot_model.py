"""The analytic rigid-body model of a robot, from its URDF, with Pinocchio.

:class:`RobotModel` implements the suite's :class:`~delan_common.dynamics.DynamicsModel`
protocol (``inverse``, ``forward``, ``mass_matrix``, ``coriolis``, ``gravity``, ``friction``,
``energy``; arrays ``(n,)`` or batched ``(B, n)``) so a controller can hold it or a learned model
interchangeably:

    tau = H(q) qdd + c(q, qd) + g(q) + tau_f(qd),   tau_f = b qd + fc tanh(qd / 0.05)

with ``b`` / ``fc`` the ``<dynamics damping= friction=>`` of each URDF joint.

The public API always uses **one coordinate per actuated joint** in model order
(:attr:`RobotModel.joint_names`): a ``continuous`` joint, which Pinocchio represents by
``(cos q, sin q)`` (nq = 2), is exposed as its angle; :meth:`RobotModel.configuration` and
:meth:`RobotModel.angles` convert.

:class:`Mismatch` builds the "true" robot that differs from the nominal URDF (scaled link
masses/inertias, a payload on the last link, other friction; Stribeck and asymmetric friction
and joint springs, :mod:`delan_common.joint_effects`, which the model's ``friction``,
``gravity``, ``inverse``, ``forward`` and ``energy`` then include) -- the plant uses it.

Vendors' descriptions load as their users mean them: the joints to learn are selected and the
others locked (``joints`` / ``locked``; by default the main chain, gripper fingers and other
branches locked), limits a description leaves at 0 or out count as not given (``RobotSpec``'s
``*_given``; :meth:`RobotModel.default_effort_limit` / :meth:`RobotModel.default_velocity_limit`
stand in) and ``.xacro`` files are expanded -- the rules are those of
:mod:`delan_common.urdf_joints`, which the learner reads the same description with, so both
select the same joints in the same order. What was read other than written is listed once in
:attr:`RobotModel.warnings`.

One :class:`RobotModel` owns one ``pinocchio.Data`` and is not thread-safe; give each thread its
own :meth:`RobotModel.copy`.
"""

from __future__ import annotations

import math
import os
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, fields
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union, cast

import numpy as np
import pinocchio as pin

from delan_common.dynamics import Energy, gravity_stiffness, pull_away
from delan_common.joint_effects import JointEffects
from delan_common.joint_state import JointStateError, JointStateMapper, MappedJointState
from delan_common.urdf_joints import (
    ACTUATED_TYPES,
    DEFAULT_VELOCITY,
    JointSelectionError,
    RobotDescription,
    UrdfError,
    is_xml,
    read_description,
    select_joints,
)

ArrayLike = Union[float, Sequence[float], np.ndarray]

JOINT_TYPES = ACTUATED_TYPES
#: Nominal acceleration [rad/s^2, m/s^2] and safety factor of
#: :meth:`RobotModel.default_effort_limit`.
NOMINAL_ACCELERATION = 10.0
EFFORT_SAFETY = 2.0
#: the package whose share folder holds the suite's URDFs, parameters and launch files
BRINGUP = 'delan_bringup'


class RobotDescriptionError(UrdfError):
    """A URDF that cannot serve as a dynamics model (no parse, unsupported joints, no mass)."""


def find_urdf(name: str) -> str:
    """Resolve a robot description file name.

    ``name`` may be a path (absolute or relative to the working directory), or a bare file name
    looked up in ``$DELAN_URDF_DIR``, then in the ``urdf/`` folder of the installed
    ``delan_bringup`` package (e.g. ``'seven_dof_arm.urdf'``), then among the robots of the
    ``example-robot-data`` package when it is installed (e.g. ``'panda.urdf'``).
    """
    if os.path.isfile(name):
        return os.path.abspath(name)
    base = os.path.basename(name)
    candidates = []
    env_dir = os.environ.get('DELAN_URDF_DIR')
    if env_dir:
        candidates.append(os.path.join(env_dir, base))
    try:
        candidates.append(os.path.join(package_share_directory(BRINGUP), 'urdf', base))
    except FileNotFoundError:
        pass
    for c in candidates:
        if os.path.isfile(c):
            return c
    shipped = example_robot_data_files().get(base)
    if shipped:
        return shipped
    raise FileNotFoundError(
        f'URDF {name!r} not found (looked at {name!r} and at {base} in '
        f'$DELAN_URDF_DIR, in the urdf/ folder of {BRINGUP} and in '
        'example-robot-data)'
    )


def example_robot_data_files() -> Dict[str, str]:
    """File name -> path of the URDF/xacro files ``example-robot-data`` ships ({} when it is
    not installed; the first of equal names in sorted path order)."""
    import sysconfig

    root = os.path.join(
        sysconfig.get_paths()['purelib'], 'cmeel.prefix', 'share', 'example-robot-data', 'robots'
    )
    found: Dict[str, str] = {}
    for dirpath, _, files in sorted(os.walk(root)):
        for f in sorted(files):
            if f.endswith(('.urdf', '.xacro')):
                found.setdefault(f, os.path.join(dirpath, f))
    return found


def package_share_directory(package: str) -> str:
    """``share/<package>`` of the first prefix in ``$AMENT_PREFIX_PATH`` whose ament index lists
    the package (what ``ament_index_python.get_package_share_directory`` returns)."""
    for prefix in os.environ.get('AMENT_PREFIX_PATH', '').split(os.pathsep):
        if prefix and os.path.isfile(
            os.path.join(prefix, 'share', 'ament_index', 'resource_index', 'packages', package)
        ):
            return os.path.join(prefix, 'share', package)
    raise FileNotFoundError(f'package {package!r} not found in AMENT_PREFIX_PATH')


def bringup_path(*parts: str) -> str:
    """A file of the installed ``delan_bringup`` share folder (its ``config/``, ``urdf/``,
    ``launch/``), e.g. ``bringup_path('config', 'sim_params.yaml')``."""
    return os.path.join(package_share_directory(BRINGUP), *parts)


def resolve_package_paths(xml: str) -> str:
    """Replace ``$(find pkg)`` with the package's installed share directory (as xacro would).

    The URDFs of this suite are plain URDF, but their ``<gazebo>`` block names the controller
    config as ``$(find delan_bringup)/config/...yaml``; gz_ros2_control reads ``<parameters>``
    verbatim, so a Gazebo launch passes the description through xacro or through this function.
    """
    return re.sub(
        r'\$\(find\s+([A-Za-z0-9_]+)\)', lambda match: package_share_directory(match.group(1)), xml
    )


@dataclass(frozen=True)
class RobotSpec:
    """What a controller or planner needs to know of the actuated joints, in model order.

    ``lower``/``upper`` are -inf/+inf for continuous joints and revolute ones without limits;
    ``velocity_limit`` and ``effort_limit`` are +inf where the URDF gives none. ``damping``
    (viscous, N m s/rad) and ``friction`` (Coulomb, N m) are the URDF's ``<dynamics>`` after any
    mismatch. ``position_given`` / ``velocity_given`` / ``effort_given`` say which limits the
    description (or an override) gave; by default, where the limit is finite.
    """

    name: str
    joint_names: List[str]
    joint_types: List[str]
    lower: np.ndarray
    upper: np.ndarray
    velocity_limit: np.ndarray
    effort_limit: np.ndarray
    damping: np.ndarray
    friction: np.ndarray
    link_names: List[str]  # child link of each joint
    total_mass: float  # all links, fixed ones included [kg]
    moving_mass: float  # links that move with some joint [kg]
    position_given: Optional[np.ndarray] = None
    velocity_given: Optional[np.ndarray] = None
    effort_given: Optional[np.ndarray] = None

    def __post_init__(self) -> None:
        finite = {
            'position_given': np.isfinite(self.lower) & np.isfinite(self.upper),
            'velocity_given': np.isfinite(self.velocity_limit),
            'effort_given': np.isfinite(self.effort_limit),
        }
        for name, default in finite.items():
            if getattr(self, name) is None:
                object.__setattr__(self, name, default)

    @property
    def n(self) -> int:
        """Number of actuated joints."""
        return len(self.joint_names)

    def to_dict(self) -> Dict:
        """JSON-ready dict of every field (infinite limits as float infinities, the ``*_given``
        flags as bools)."""

        def arr(x):
            return [
                float(v) if math.isfinite(v) else (math.inf if v > 0 else -math.inf) for v in x
            ]

        # __post_init__ fills the *_given fields left at None
        assert self.position_given is not None and self.velocity_given is not None
        assert self.effort_given is not None
        return {
            'name': self.name,
            'joint_names': list(self.joint_names),
            'joint_types': list(self.joint_types),
            'lower': arr(self.lower),
            'upper': arr(self.upper),
            'velocity_limit': arr(self.velocity_limit),
            'effort_limit': arr(self.effort_limit),
            'damping': arr(self.damping),
            'friction': arr(self.friction),
            'link_names': list(self.link_names),
            'total_mass': self.total_mass,
            'moving_mass': self.moving_mass,
            'position_given': [bool(v) for v in self.position_given],
            'velocity_given': [bool(v) for v in self.velocity_given],
            'effort_given': [bool(v) for v in self.effort_given],
        }


@dataclass(frozen=True)
class Mismatch:
    """How the "true" robot differs from its nominal URDF.

    * ``mass_scale``: scalar or one factor per moving body (model order; a body is the link a
      joint moves plus everything fixed to it). Scales mass, first moment and rotational inertia
      together (same geometry, other density), so the body stays physically consistent.
    * ``inertia_scale``: scalar or per body; scales only the rotational inertia about the centre
      of mass (mass and centre of mass kept).
    * ``payload_mass`` [kg]: a solid sphere of ``payload_radius`` (0 = point mass) on the last
      body, at the tool point (origin of the deepest frame fixed to the last link, e.g. the
      flange; the last link's centre of mass when none) plus ``payload_offset`` (xyz in the
      last joint's frame).
    * ``viscous`` / ``coulomb``: per-joint overrides of the URDF friction (None keeps the URDF
      values); then ``viscous_scale`` / ``coulomb_scale`` multiply them.
    * effects a rigid-body model cannot fit (equations in :mod:`delan_common.joint_effects`),
      each a scalar or one value per joint, off at their defaults:
      ``stribeck_static_ratio`` ``r = fs / fc >= 1`` (break-away over Coulomb friction) and
      ``stribeck_velocity`` ``vs`` [rad/s, m/s] > 0 (how fast the level decays to ``fc``);
      ``coulomb_asymmetry`` ``a`` in [-1, 1] (level ``fc (1 + a)`` moving positive,
      ``fc (1 - a)`` negative); ``spring_stiffness`` ``k >= 0`` [N m/rad, N/m] and
      ``spring_offset`` ``q0`` [rad, m] (torque ``-k (q - q0)``, a potential the truth model's
      ``gravity`` and ``energy`` include).
    * ``preset``: ``''`` or a name of :data:`PRESETS`; every field left at its default takes the
      preset's value when the truth model is built (:meth:`resolved`, which needs the robot:
      the preset sizes springs to its gravity load), every other field keeps its own.
    """

    mass_scale: ArrayLike = 1.0
    inertia_scale: ArrayLike = 1.0
    payload_mass: float = 0.0
    payload_offset: Sequence[float] = (0.0, 0.0, 0.0)
    payload_radius: float = 0.0
    viscous: Optional[Sequence[float]] = None
    coulomb: Optional[Sequence[float]] = None
    viscous_scale: float = 1.0
    coulomb_scale: float = 1.0
    stribeck_static_ratio: ArrayLike = 1.0
    stribeck_velocity: ArrayLike = 0.1
    coulomb_asymmetry: ArrayLike = 0.0
    spring_stiffness: ArrayLike = 0.0
    spring_offset: ArrayLike = 0.0
    preset: str = ''

    def __post_init__(self) -> None:
        if self.preset not in PRESETS:
            raise ValueError(f'mismatch preset {self.preset!r} not in {tuple(PRESETS)}')

    @classmethod
    def from_params(cls, p: Mapping[str, Any]) -> 'Mismatch':
        """From the sim node's parameters (``payload_mass``, ``friction_scale``, ...; a
        ``viscous``/``coulomb`` list of negatives means the URDF's values; the effects by their
        field names, 1 value or one per joint; ``mismatch_preset``). A parameter at its off
        default leaves the preset's value in place, any other value replaces it."""

        def given(v):
            return None if v is None or all(x < 0 for x in v) else list(v)

        scale = float(p.get('friction_scale', 1.0))
        effects = {name: _param_array(p[name]) for name in JOINT_EFFECT_FIELDS if name in p}
        return cls(
            mass_scale=p.get('mass_scale', 1.0),
            inertia_scale=p.get('inertia_scale', 1.0),
            payload_mass=float(p.get('payload_mass', 0.0)),
            payload_offset=tuple(p.get('payload_offset', (0.0, 0.0, 0.0))),
            payload_radius=float(p.get('payload_radius', 0.0)),
            viscous=given(p.get('viscous')),
            coulomb=given(p.get('coulomb')),
            viscous_scale=scale,
            coulomb_scale=scale,
            preset=str(p.get('mismatch_preset', '')),
            **effects,
        )

    @classmethod
    def from_preset(cls, name: str, robot: 'RobotModel') -> 'Mismatch':
        """The preset ``name`` for ``robot`` (its nominal URDF), with concrete values."""
        return cls(preset=name).resolved(robot)

    def resolved(self, robot: 'RobotModel') -> 'Mismatch':
        """This mismatch with :attr:`preset` expanded for ``robot``'s nominal URDF: every field
        at its default takes the preset's value (``preset`` becomes ``''``)."""
        if not self.preset:
            return self
        preset = PRESETS[self.preset]
        assert preset is not None  # only '' (returned above) has none
        values = preset(robot.mismatched(Mismatch()))
        for f in fields(self):
            if f.name != 'preset' and not _at_default(getattr(self, f.name), f.default):
                values[f.name] = getattr(self, f.name)
        return Mismatch(**values)

    def has_joint_effects(self) -> bool:
        """Whether any effect of :mod:`delan_common.joint_effects` is on (or a preset)."""
        return bool(self.preset) or not all(
            _at_default(getattr(self, f.name), f.default)
            for f in fields(self)
            if f.name in JOINT_EFFECT_FIELDS
        )

    def is_identity(self) -> bool:
        """Whether the plant is the URDF model itself (no mismatch of any kind)."""
        return bool(
            np.all(np.asarray(self.mass_scale) == 1.0)
            and np.all(np.asarray(self.inertia_scale) == 1.0)
            and self.payload_mass == 0.0
            and self.viscous is None
            and self.coulomb is None
            and self.viscous_scale == 1.0
            and self.coulomb_scale == 1.0
            and not self.has_joint_effects()
        )


#: the per-joint effect fields of :class:`Mismatch` (and sim parameters of the same names)
JOINT_EFFECT_FIELDS = (
    'stribeck_static_ratio',
    'stribeck_velocity',
    'coulomb_asymmetry',
    'spring_stiffness',
    'spring_offset',
)
#: the largest share of a joint's effort limit that the weight of the demo's payload and of the
#: ``realistic`` preset's may take (:meth:`RobotModel.payload_capacity`)
PAYLOAD_EFFORT_SHARE = 0.15
#: the largest share of the computed-torque loop's stiffness that the payload's gravity pull
#: away from a posture may take (:meth:`RobotModel.payload_capacity`)
PAYLOAD_PULL_SHARE = 0.6
#: configurations (of :meth:`RobotModel.configuration_samples`) where the payload's pull is taken
PULL_SAMPLES = 32
#: ``realistic`` preset: break-away over Coulomb friction, Stribeck velocity [rad/s], Coulomb
#: asymmetry (sign alternating along the chain), spring stiffness per unit of the joint's
#: gravity torque scale [1/rad] on the first two joints with a gravity load, payload [kg, at
#: most :meth:`RobotModel.payload_capacity`], friction scale, and the Coulomb friction of a
#: joint whose URDF gives none (a fraction of its effort limit)
REALISTIC = {
    'stribeck_static_ratio': 1.5,
    'stribeck_velocity': 0.1,
    'coulomb_asymmetry': 0.25,
    'spring_fraction': 0.15,
    'payload_mass': 0.6,
    'friction_scale': 2.0,
    'coulomb_of_effort': 0.01,
}


def _realistic(nominal: 'RobotModel') -> Dict[str, Any]:
    """The ``realistic`` preset (:data:`REALISTIC`) for ``nominal``: the demo's payload (at most
    what the arm's effort limits carry, :meth:`RobotModel.payload_capacity`) and
    doubled friction, Stribeck friction and asymmetric Coulomb levels on every joint, and a
    spring centred in the joint range on the first two joints that carry gravity load, ``k =
    0.15 max_q |g_i(q)|`` per radian (15 % of the joint's gravity torque 1 rad off centre; a
    joint gravity never loads, e.g. a vertical base axis, gets none). A joint whose URDF gives
    no Coulomb friction (many vendor descriptions) gets 1 % of its effort limit, so that the
    friction effects act on every arm."""
    n, p = nominal.n, REALISTIC
    load = nominal.gravity_scale()
    loaded = np.flatnonzero(load > 0.01 * max(float(load.max()), 1e-12))[:2]
    stiffness = np.zeros(n)
    stiffness[loaded] = p['spring_fraction'] * load[loaded]
    lo, hi = nominal.sample_bounds()
    fc = np.asarray(nominal.spec.friction, dtype=np.float64)
    extra = {}
    if np.any(fc <= 0.0):
        extra['coulomb'] = np.where(
            fc > 0.0, fc, p['coulomb_of_effort'] * nominal.operating_effort_limit()
        ).tolist()
    return {
        **extra,
        'payload_mass': min(p['payload_mass'], nominal.payload_capacity()),
        'viscous_scale': p['friction_scale'],
        'coulomb_scale': p['friction_scale'],
        'stribeck_static_ratio': p['stribeck_static_ratio'],
        'stribeck_velocity': p['stribeck_velocity'],
        'coulomb_asymmetry': [p['coulomb_asymmetry'] * (-1.0) ** i for i in range(n)],
        'spring_stiffness': stiffness.tolist(),
        'spring_offset': (0.5 * (lo + hi)).tolist(),
    }


#: mismatch presets by name (``Mismatch.preset``, the sim's ``mismatch_preset``)
PRESETS = {'': None, 'realistic': _realistic}


def _at_default(value: Any, default: Any) -> bool:
    """Whether a :class:`Mismatch` field holds its default (a list of it counts as it)."""
    if value is None or default is None:
        return value is default
    a, b = np.asarray(value, dtype=np.float64), np.asarray(default, dtype=np.float64)
    try:
        return bool(np.all(a == b))
    except ValueError:  # shapes that do not broadcast
        return False


def _param_array(value: Any) -> Union[float, List[float]]:
    """A parameter value as a float or a list of floats (ROS gives arrays as sequences)."""
    if isinstance(value, (int, float)):
        return float(value)
    return [float(x) for x in value]


def _per_joint(
    value: ArrayLike, n: int, what: str, positive: bool = False, nonnegative: bool = False
) -> np.ndarray:
    arr = np.asarray(value, dtype=np.float64).reshape(-1)
    if arr.size == 1:
        arr = np.full(n, float(arr[0]))
    if arr.shape != (n,):
        raise ValueError(f'{what}: expected a scalar or {n} values, got {arr.size}')
    if not np.all(np.isfinite(arr)):
        raise ValueError(f'{what}: values must be finite, got {arr.tolist()}')
    if positive and np.any(arr <= 0):
        raise ValueError(f'{what}: values must be > 0, got {arr.tolist()}')
    if nonnegative and np.any(arr < 0):
        raise ValueError(f'{what}: values must be >= 0, got {arr.tolist()}')
    return arr


def _gravity_pull(
    nominal: 'RobotModel', carried: 'RobotModel', q: np.ndarray, step: float = 1e-6
) -> float:
    """How strongly [1/s^2] the payload ``carried`` adds to ``nominal`` pulls the arm away from
    ``q``: the largest ``lambda`` of ``-dG v = lambda H v``, ``dG`` the symmetric part of the
    payload's gravity stiffness ``d(g_carried - g_nominal)/dq`` and ``H`` the URDF's mass
    matrix (0 where the payload only pulls back)."""
    dg = gravity_stiffness(carried, q, step) - gravity_stiffness(nominal, q, step)
    return pull_away(dg, nominal.mass_matrix(q))


def _rename_namesakes(model: 'pin.Model', joint: str) -> None:
    """Renames the frames of ``model`` other than joint ``joint``'s own that share its name (a
    link named as its joint: an SO-100's ``gripper``), to ``<name>_<frame type>``: locking the
    joint (``buildReducedModel``) looks its frame up by name and refuses an ambiguous one."""
    taken = {f.name for f in model.frames}
    for i, frame in enumerate(model.frames):
        if frame.name == joint and frame.type != pin.FrameType.JOINT:
            new = f'{joint}_{str(frame.type).rsplit(".", 1)[-1].lower()}'
            while new in taken:
                new += '_'
            taken.add(new)
            frame.name = new
            model.frames[i] = frame


class RobotModel:
    """Rigid-body dynamics of a fixed-base robot with revolute/continuous/prismatic joints.

    ``RobotModel(urdf, mismatch=None, joints=None, locked=None, *, effort_limits=None,
    velocity_limits=None)``: ``urdf`` is a file path (``.urdf`` or ``.xacro``), a file name of
    the workspace's ``urdf/`` folder, or the XML text of a ``robot_description``. ``joints`` /
    ``locked`` / ``effort_limits`` / ``velocity_limits`` select the joints and override limits
    as :func:`delan_common.urdf_joints.select_joints` says; the other movable joints are locked
    (``pin.buildReducedModel``), floating and planar joints at their neutral pose (the base
    fixed). Raises :class:`~delan_common.urdf_joints.JointSelectionError`
    for joints that cannot be selected or locked, :class:`RobotDescriptionError` (a
    ``ValueError``) naming the source when the URDF does not parse, has no joint to learn,
    or a moving link chain without mass (a singular mass matrix: every moving link needs an
    ``<inertial>``); ``FileNotFoundError`` for a missing file.
    """

    def __init__(
        self,
        urdf: str,
        mismatch: Optional[Mismatch] = None,
        joints: Optional[Sequence[str]] = None,
        locked: Optional[Mapping[str, float]] = None,
        *,
        effort_limits: Optional[Sequence[float]] = None,
        velocity_limits: Optional[Sequence[float]] = None,
    ):
        if not isinstance(urdf, str) or not urdf.strip():
            raise RobotDescriptionError('empty robot description')
        if is_xml(urdf):
            self.xml = urdf
            self.source = '<robot_description string>'
        else:
            path = find_urdf(urdf)
            try:
                self.xml, _ = read_description(path)
            except UrdfError as err:
                raise RobotDescriptionError(str(err)) from None
            self.source = path
        self.mismatch = mismatch if mismatch is not None else Mismatch()
        self._selection_args = (
            list(joints or []),
            dict(locked or {}),
            effort_limits,
            velocity_limits,
        )
        self._build()

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_urdf_file(
        cls, path: str, mismatch: Optional[Mismatch] = None, **selection
    ) -> 'RobotModel':
        """The model of a URDF file (a path or a name :func:`find_urdf` resolves); ``selection`` as
        for the constructor."""
        return cls(path, mismatch, **selection)

    @classmethod
    def from_xml(cls, xml: str, mismatch: Optional[Mismatch] = None, **selection) -> 'RobotModel':
        """The model of a ``robot_description`` string; RobotDescriptionError when it is not XML (a
        path given by mistake would otherwise be read from disk)."""
        if not is_xml(xml):
            raise RobotDescriptionError('robot_description does not look like XML')
        return cls(xml, mismatch, **selection)

    @classmethod
    def from_description(cls, robot: RobotDescription) -> 'RobotModel':
        """The nominal model of what a node read with :mod:`~delan_common.urdf_joints`: the
        same joints, locks and limits."""
        return cls.from_xml(robot.xml, **robot.selection_kwargs())

    def mismatched(self, mismatch: Mismatch) -> 'RobotModel':
        """The same robot and joint selection with ``mismatch`` applied to the nominal URDF
        (not compounded)."""
        other = RobotModel.__new__(RobotModel)
        other.xml, other.source, other.mismatch = self.xml, self.source, mismatch
        other._selection_args = self._selection_args
        other._build()
        return other

    def copy(self) -> 'RobotModel':
        """An independent instance (own Pinocchio data) for another thread."""
        return self.mismatched(self.mismatch)

    def selection_kwargs(self) -> Dict:
        """What ``RobotModel(xml, **kwargs)`` needs for the same joints, locks and limits (of
        this or an edited XML of the same robot)."""
        return {
            'joints': list(self.joint_names),
            'locked': dict(self.locked),
            'effort_limits': self.spec.effort_limit.tolist(),
            'velocity_limits': self.spec.velocity_limit.tolist(),
        }

    def _fail(self, msg: str) -> RobotDescriptionError:
        return RobotDescriptionError(f'{self.source}: {msg}')

    def _full_model(self, root: ET.Element) -> 'pin.Model':
        """Pinocchio's model of the whole URDF (every movable joint free)."""
        try:
            return pin.buildModelFromXML(self.xml)
        except (ValueError, RuntimeError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise self._fail(f'Pinocchio cannot parse the URDF ({first})') from None

    def _select(self, root: ET.Element):
        joints, locked, effort_limits, velocity_limits = self._selection_args
        try:
            return select_joints(
                root, joints, locked, effort_limits=effort_limits, velocity_limits=velocity_limits
            )
        except JointSelectionError:
            raise
        except UrdfError as exc:
            raise self._fail(str(exc)) from None

    def _joint_id(self, full: 'pin.Model', name: str) -> int:
        """Pinocchio's id of joint ``name`` (a link of the same name renamed, as locking needs)."""
        jid = full.getJointId(name)
        if jid >= full.njoints:
            raise self._fail(f'Pinocchio has no joint {name!r}')
        _rename_namesakes(full, name)
        return jid

    def _reduced(
        self, full: 'pin.Model', locked: Dict[str, float], free_base: Sequence[str] = ()
    ) -> 'pin.Model':
        """``full`` with the ``locked`` joints fixed at their positions and the ``free_base``
        joints at their neutral pose."""
        if not locked and not free_base:
            return full
        q_ref = pin.neutral(full)
        ids = [self._joint_id(full, name) for name in free_base]
        for name, value in locked.items():
            jid = self._joint_id(full, name)
            jm = full.joints[jid]
            if jm.nq == 2:  # continuous: (cos, sin)
                q_ref[jm.idx_q : jm.idx_q + 2] = math.cos(value), math.sin(value)
            else:
                q_ref[jm.idx_q] = value
            ids.append(jid)
        return pin.buildReducedModel(full, sorted(ids), q_ref)

    def _build(self) -> None:
        try:
            root = ET.fromstring(self.xml)
        except ET.ParseError as exc:
            raise self._fail(f'not valid XML ({exc})') from None
        if root.tag != 'robot':
            raise self._fail(f'root element is <{root.tag}>, not <robot>')
        # the URDF reader before Pinocchio's: its errors name the description's structure (no
        # link, a loop, no movable joint) where Pinocchio's parser says only that it cannot parse
        selection = self._select(root)
        full = self._full_model(root)
        model = self._reduced(full, selection.locked, selection.free_base)
        self.locked: Dict[str, float] = dict(selection.locked)
        self.warnings: List[str] = list(selection.warnings)
        xml_links = {j.get('name'): j.find('child') for j in root.findall('joint')}

        # joints in velocity order (= Pinocchio's depth-first order)
        jids = sorted(range(1, model.njoints), key=lambda j: model.joints[j].idx_v)
        names = [model.names[j] for j in jids]
        selected = list(selection.joints)
        if names != [j.name for j in selected]:
            raise self._fail(
                f'Pinocchio orders the joints {names}, the URDF reader '
                f'{[j.name for j in selected]}'
            )
        for jid, name in zip(jids, names):
            if model.joints[jid].nv != 1:
                raise self._fail(
                    f'joint {name!r} has {model.joints[jid].nv} degrees of freedom (unsupported)'
                )
        types = [j.type for j in selected]
        links = [
            cast(str, c.get('link')) if (c := xml_links[nm]) is not None else '' for nm in names
        ]
        n = len(names)
        self.name = root.get('name', '')
        self.joint_names: List[str] = names
        self._jids = jids
        self._idx_q = np.array([model.joints[j].idx_q for j in jids], dtype=np.intp)
        self._idx_v = np.array([model.joints[j].idx_v for j in jids], dtype=np.intp)
        cont = np.array([t == 'continuous' for t in types])
        self._cont_v = np.flatnonzero(cont)
        self._cont_q = self._idx_q[cont]
        self._plain_v = np.flatnonzero(~cont)
        self._plain_q = self._idx_q[~cont]
        self._nq = model.nq
        self._identity_config = (
            model.nq == n
            and np.array_equal(self._idx_q, np.arange(n))
            and np.array_equal(self._idx_v, np.arange(n))
        )
        if not np.array_equal(self._idx_v, np.arange(n)):
            raise self._fail('unexpected Pinocchio velocity layout')

        # limits and friction as the URDF reader reads them (not given: see urdf_joints)
        def arr(key: str, dtype=np.float64) -> np.ndarray:
            return np.array([getattr(j, key) for j in selected], dtype=dtype)

        lower, upper, vel, eff = arr('lower'), arr('upper'), arr('velocity'), arr('effort')
        damping, friction = arr('damping'), arr('friction')
        given = {k: arr(k, bool) for k in ('position_given', 'velocity_given', 'effort_given')}
        if np.any(damping < 0) or np.any(friction < 0):
            raise self._fail('negative <dynamics> damping/friction')

        # tool point of the last body: the deepest frame fixed to it
        last = jids[-1]
        tool = None
        for f in model.frames:
            if (
                f.parentJoint == last
                and f.name != model.names[last]
                and f.type
                in (pin.FrameType.BODY, pin.FrameType.FIXED_JOINT, pin.FrameType.OP_FRAME)
            ):
                tool = f.placement.translation.copy()
        nominal_lever = model.inertias[last].lever.copy()
        if tool is None or (np.allclose(tool, 0.0) and model.inertias[last].mass > 0):
            tool = nominal_lever

        # ---- mismatch (a preset expanded to its values for this robot)
        mm = self.mismatch = self.mismatch.resolved(self)
        ms = _per_joint(mm.mass_scale, n, 'mass_scale', positive=True)
        isc = _per_joint(mm.inertia_scale, n, 'inertia_scale', positive=True)
        for i, jid in enumerate(jids):
            I = model.inertias[jid]
            if ms[i] != 1.0 or isc[i] != 1.0:
                model.inertias[jid] = pin.Inertia(
                    I.mass * ms[i], I.lever.copy(), I.inertia.copy() * ms[i] * isc[i]
                )
        if mm.payload_mass < 0 or mm.payload_radius < 0:
            raise ValueError('payload_mass and payload_radius must be >= 0')
        if mm.payload_mass > 0:
            off = np.asarray(mm.payload_offset, dtype=np.float64).reshape(-1)
            if off.shape != (3,):
                raise ValueError(f'payload_offset needs 3 values, got {off.size}')
            pos = tool + off
            r = float(mm.payload_radius)
            payload = pin.Inertia(
                float(mm.payload_mass), pos, np.eye(3) * (0.4 * mm.payload_mass * r * r)
            )
            model.inertias[last] = model.inertias[last] + payload
        if mm.viscous is not None:
            damping = _per_joint(mm.viscous, n, 'viscous', nonnegative=True)
        if mm.coulomb is not None:
            friction = _per_joint(mm.coulomb, n, 'coulomb', nonnegative=True)
        if mm.viscous_scale < 0 or mm.coulomb_scale < 0:
            raise ValueError('friction scales must be >= 0')
        damping = damping * float(mm.viscous_scale)
        friction = friction * float(mm.coulomb_scale)
        self.effects = JointEffects(
            damping,
            friction,
            static_ratio=_per_joint(mm.stribeck_static_ratio, n, 'stribeck_static_ratio'),
            stribeck_velocity=_per_joint(mm.stribeck_velocity, n, 'stribeck_velocity'),
            asymmetry=_per_joint(mm.coulomb_asymmetry, n, 'coulomb_asymmetry'),
            stiffness=_per_joint(mm.spring_stiffness, n, 'spring_stiffness'),
            offset=_per_joint(mm.spring_offset, n, 'spring_offset'),
        )

        # Pinocchio's own friction/damping fields are not used by its algorithms for the
        # suite's model; keep them equal to ours for anyone reading model.damping.
        model.damping = damping.copy()
        model.friction = friction.copy()
        model.armature = np.zeros(model.nv)
        self.model = model
        self.data = model.createData()
        self.viscous = damping
        self.coulomb = friction
        self.tool_point = tool
        self.spec = RobotSpec(
            name=self.name,
            joint_names=list(names),
            joint_types=types,
            lower=lower,
            upper=upper,
            velocity_limit=vel,
            effort_limit=eff,
            damping=damping.copy(),
            friction=friction.copy(),
            link_names=links,
            total_mass=float(sum(model.inertias[j].mass for j in range(model.njoints))),
            moving_mass=float(sum(model.inertias[j].mass for j in range(1, model.njoints))),
            **given,
        )
        self._config_fn = self._make_config_fn()
        self._mapper = JointStateMapper(names, allow_extra=False)
        self._mapper_extra = JointStateMapper(names, allow_extra=True)
        self._check_mass_matrix(root)

    def _check_mass_matrix(self, root) -> None:
        rng = np.random.default_rng(0)
        lo, hi = self.sample_bounds()
        worst, direction = np.inf, np.zeros(self.n)
        for q in [0.5 * (lo + hi)] + [rng.uniform(lo, hi) for _ in range(3)]:
            w, v = np.linalg.eigh(self.mass_matrix(q))
            if not w[0] >= worst:
                worst, direction = float(w[0]), v[:, 0]
        if not worst > 1e-10:
            moving = [
                nm
                for nm, c in zip(self.joint_names, np.abs(direction))
                if c > 0.2 * np.abs(direction).max()
            ]
            no_inertial = [
                ln.get('name')
                for ln in root.findall('link')
                if ln.find('inertial') is None and ln.get('name') in set(self.spec.link_names)
            ]
            raise self._fail(
                f'singular mass matrix (smallest eigenvalue {worst:.3g}): a moving link chain '
                f'has no mass/inertia; links without <inertial>: {no_inertial or "none"}; the '
                f'massless motion moves joints {moving}: leave them out of `joints` (locked)'
            )

    # ------------------------------------------------------------------ defaults
    def sample_bounds(self) -> Tuple[np.ndarray, np.ndarray]:
        """Where to sample configurations: the position limits, +-pi where there are none."""
        lo = np.where(np.isfinite(self.spec.lower), self.spec.lower, -np.pi)
        hi = np.where(np.isfinite(self.spec.upper), self.spec.upper, np.pi)
        return lo, hi

    def default_effort_limit(self, samples: int = 64) -> np.ndarray:
        """A conservative effort limit (n,) for joints whose URDF gives none.

        ``EFFORT_SAFETY * max_q (|g(q)| + diag H(q) * NOMINAL_ACCELERATION)`` over the middle of
        the limits and ``samples`` seeded random configurations within them: enough to hold
        the robot anywhere and accelerate each joint alone at ~10 rad/s^2. Use it where
        ``spec.effort_given`` is False: ``np.where(spec.effort_given, spec.effort_limit,
        model.default_effort_limit())``.
        """
        q = self.configuration_samples(samples)
        load = np.abs(self.gravity(q)) + (
            np.diagonal(self.mass_matrix(q), axis1=1, axis2=2) * NOMINAL_ACCELERATION
        )
        return EFFORT_SAFETY * load.max(axis=0)

    def gravity_scale(self, samples: int = 64) -> np.ndarray:
        """``max_q |g_i(q)|`` (n,) over the configurations of :meth:`default_effort_limit`:
        the gravity torque each joint must hold at worst (0 where gravity never loads it)."""
        return np.abs(self.gravity(self.configuration_samples(samples))).max(axis=0)

    def payload_capacity(
        self,
        share: float = PAYLOAD_EFFORT_SHARE,
        loop_stiffness: Optional[float] = None,
        pull_share: float = PAYLOAD_PULL_SHARE,
        samples: int = 64,
    ) -> float:
        """The heaviest payload [kg] at the tool point (where :class:`Mismatch` puts
        ``payload_mass``) whose weight takes at most ``share`` of each joint's given effort limit
        at the configurations of :meth:`default_effort_limit` -- a weak shoulder (a humanoid's
        arm) carries less than an industrial arm's -- and, with ``loop_stiffness`` (the
        computed-torque loop's ``omega^2`` [1/s^2] on the URDF's mass matrix), whose weight
        pulls the arm away from any of those configurations with at most ``pull_share`` of that
        stiffness: a payload heavy next to light distal links (a hobby arm's wrist) would
        topple the loop whatever model feeds it forward. inf where nothing bounds it."""
        lim = np.asarray(self.spec.effort_limit, dtype=np.float64)
        given = np.asarray(self.spec.effort_given, bool) & np.isfinite(lim) & (lim > 0)
        q = self.configuration_samples(samples)
        nominal = self.mismatched(Mismatch())
        carried = nominal.mismatched(Mismatch(payload_mass=1.0))
        capacity = math.inf
        per_kg = np.abs(carried.gravity(q) - nominal.gravity(q)).max(axis=0)
        loaded = given & (per_kg > 1e-12)
        if loaded.any():
            capacity = float(np.min(share * lim[loaded] / per_kg[loaded]))
        if loop_stiffness is not None:
            pull = max(_gravity_pull(nominal, carried, qk) for qk in q[:PULL_SAMPLES])
            if pull > 0.0:
                capacity = min(capacity, pull_share * float(loop_stiffness) / pull)
        return capacity

    def configuration_samples(self, samples: int = 64) -> np.ndarray:
        """``(samples + 1, n)``: the middle of the limits and ``samples`` seeded configurations
        within them (:meth:`sample_bounds`): where an arm may be held."""
        lo, hi = self.sample_bounds()
        rng = np.random.default_rng(0)
        return np.vstack([0.5 * (lo + hi), rng.uniform(lo, hi, (samples, self.n))])

    def default_velocity_limit(self) -> np.ndarray:
        """The velocity limit (n,) for joints whose URDF gives none (where
        ``spec.velocity_given`` is False): 2 rad/s, 0.5 m/s for prismatic joints."""
        return np.array([DEFAULT_VELOCITY[t] for t in self.joint_types])

    def operating_effort_limit(self) -> np.ndarray:
        """Effort limits (n,) to command with: the URDF's where given, the derived default
        (:meth:`default_effort_limit`) where not."""
        given = self.spec.effort_given
        assert given is not None  # RobotSpec.__post_init__ fills it
        if np.all(given):
            return self.spec.effort_limit.copy()
        return np.where(given, self.spec.effort_limit, self.default_effort_limit())

    # ------------------------------------------------------------------ spec helpers
    @property
    def n(self) -> int:
        """Number of actuated (selected) joints."""
        return len(self.joint_names)

    @property
    def joint_types(self) -> List[str]:
        """URDF types of the joints in model order ('revolute', 'continuous', 'prismatic')."""
        return self.spec.joint_types

    @property
    def effort_limit(self) -> np.ndarray:
        """The URDF's effort limits ``(n,)``, +inf where it gives none
        (:meth:`operating_effort_limit` fills those)."""
        return self.spec.effort_limit

    def clamp_effort(self, tau: np.ndarray) -> np.ndarray:
        """Torques ``tau`` (``(n,)`` or ``(B, n)``) clipped to ``+-effort_limit`` per joint."""
        lim = self.spec.effort_limit
        return np.minimum(np.maximum(tau, -lim), lim)

    def configuration(self, q: np.ndarray) -> np.ndarray:
        """Pinocchio configuration (nq) of one joint-angle vector (n,)."""
        return self._config_fn(q)

    def _make_config_fn(self):
        """A fast ``q -> configuration``: slices for runs of plain joints, scalar cos/sin for
        continuous ones (this runs in the simulator's inner loop)."""
        if self._identity_config:
            asarray = np.ascontiguousarray
            return lambda q: asarray(q, dtype=np.float64)
        runs = []  # (q_start, v_start, length) of consecutive plain joints
        for qi, vi in zip(self._plain_q.tolist(), self._plain_v.tolist()):
            if runs and runs[-1][0] + runs[-1][2] == qi and runs[-1][1] + runs[-1][2] == vi:
                runs[-1][2] += 1
            else:
                runs.append([qi, vi, 1])
        runs = [(slice(a, a + k), slice(b, b + k)) for a, b, k in runs]
        conts = list(zip(self._cont_q.tolist(), self._cont_v.tolist()))
        nq = self._nq
        cos, sin, empty = math.cos, math.sin, np.empty

        def config(q):
            c = empty(nq)
            for sq, sv in runs:
                c[sq] = q[sv]
            for iq, iv in conts:
                a = float(q[iv])
                c[iq] = cos(a)
                c[iq + 1] = sin(a)
            return c

        return config

    def angles(self, config: np.ndarray) -> np.ndarray:
        """Joint angles (n,) of a Pinocchio configuration (nq,); continuous joints in (-pi, pi]."""
        config = np.asarray(config, dtype=np.float64)
        if self._identity_config:
            return config.copy()
        q = np.empty(self.n)
        q[self._plain_v] = config[self._plain_q]
        q[self._cont_v] = np.arctan2(config[self._cont_q + 1], config[self._cont_q])
        return q

    # ------------------------------------------------------------------ joint-state mapping
    def map_joint_state(self, msg, allow_extra: bool = False) -> MappedJointState:
        """A JointState (any object with name/position/velocity/effort) in model order.

        Raises :class:`~delan_common.joint_state.JointStateError` (a ValueError with a
        countable ``reason``) on missing joints, unknown joints (unless ``allow_extra``),
        duplicated names, length mismatches or NaN/Inf.
        """
        return (self._mapper_extra if allow_extra else self._mapper).map(msg)

    def to_model_order(self, names: Sequence[str], values: np.ndarray) -> np.ndarray:
        """Reorder ``values`` (..., len(names)) given in ``names`` order into model order.

        Unknown or missing names raise :class:`JointStateError`.
        """
        names = list(names)
        if len(set(names)) != len(names):
            raise JointStateError('duplicate_names', f'joint names repeat: {names}')
        unknown = [nm for nm in names if nm not in set(self.joint_names)]
        if unknown:
            raise JointStateError(
                'unknown_joints', f'unknown joints {unknown} (model has {self.joint_names})'
            )
        pos = {nm: i for i, nm in enumerate(names)}
        missing = [nm for nm in self.joint_names if nm not in pos]
        if missing:
            raise JointStateError('missing_joints', f'missing joints {missing} (got {names})')
        values = np.asarray(values, dtype=np.float64)
        if values.shape[-1] != len(names):
            raise JointStateError(
                'length_mismatch', f'{len(names)} names but {values.shape[-1]} values'
            )
        return values[..., [pos[nm] for nm in self.joint_names]]

    # ------------------------------------------------------------------ dynamics
    def _prep(self, *arrays):
        out = [np.asarray(a, dtype=np.float64) for a in arrays]
        single = out[0].ndim == 1
        n = self.n
        for a in out:
            if a.shape[-1] != n or a.ndim not in (1, 2) or a.shape[:-1] != out[0].shape[:-1]:
                raise ValueError(
                    f'expected arrays shaped ({n},) or (B, {n}); got {[x.shape for x in out]}'
                )
        if single:
            out = [a[None, :] for a in out]
        return out, single

    def friction(self, qd: np.ndarray) -> np.ndarray:
        """``tau_f(qd)``, with any Stribeck / asymmetry of the mismatch."""
        return self.effects.friction(np.asarray(qd, dtype=np.float64))

    def inverse(self, q, qd, qdd) -> np.ndarray:
        """RNEA + friction (+ spring): the torque that produces ``qdd`` at ``(q, qd)``."""
        out = self.rigid_body_torque(q, qd, qdd)
        return out + self.effects.passive(
            np.asarray(q, dtype=np.float64), np.asarray(qd, dtype=np.float64)
        )

    def rigid_body_torque(self, q, qd, qdd) -> np.ndarray:
        """RNEA alone, ``H qdd + c + g_rigid`` (no friction, no spring of the mismatch)."""
        q = np.asarray(q, dtype=np.float64)
        if q.ndim == 1 and q.shape == (self.n,):  # fast path: one state (controllers)
            qd = np.asarray(qd, dtype=np.float64)
            qdd = np.asarray(qdd, dtype=np.float64)
            if qd.shape == q.shape and qdd.shape == q.shape:
                return pin.rnea(self.model, self.data, self._config_fn(q), qd, qdd).copy()
        (q, qd, qdd), single = self._prep(q, qd, qdd)
        out = np.empty_like(q)
        m, d = self.model, self.data
        for i in range(q.shape[0]):
            out[i] = pin.rnea(m, d, self.configuration(q[i]), qd[i], qdd[i])
        return out[0] if single else out

    def forward(self, q, qd, tau) -> np.ndarray:
        """ABA with friction (+ spring): the acceleration ``tau`` produces at ``(q, qd)``."""
        (q, qd, tau), single = self._prep(q, qd, tau)
        out = np.empty_like(q)
        m, d = self.model, self.data
        net = tau - self.effects.passive(q, qd)
        for i in range(q.shape[0]):
            out[i] = pin.aba(m, d, self.configuration(q[i]), qd[i], net[i])
        return out[0] if single else out

    def mass_matrix(self, q) -> np.ndarray:
        """CRBA, symmetrised: ``(n, n)`` or ``(B, n, n)``."""
        (q,), single = self._prep(q)
        B, n = q.shape
        out = np.empty((B, n, n))
        m, d = self.model, self.data
        for i in range(B):
            M = pin.crba(m, d, self.configuration(q[i]))
            out[i] = np.triu(M) + np.triu(M, 1).T
        return out[0] if single else out

    def acceleration_metric(self, q) -> np.ndarray:
        """``W(q) = H(q)^-1``, ``(n, n)`` or ``(B, n, n)``: ``W e`` is the acceleration a torque
        error ``e`` causes, so ``|W e|^2`` weighs the error as a computed-torque loop feels it (its
        tracking error is ``H^-1 e`` over the gain). Large along directions of little inertia
        (two joint axes that line up, a light wrist), where a small torque error moves the arm
        most: ``1 / lambda^2`` along an eigenvector of ``H`` with eigenvalue ``lambda``."""
        return np.linalg.inv(self.mass_matrix(q))

    def gravity(self, q) -> np.ndarray:
        """``g(q) = dV/dq``: gravity, plus the mismatch's spring ``k (q - q0)``."""
        (q,), single = self._prep(q)
        out = np.empty_like(q)
        m, d = self.model, self.data
        for i in range(q.shape[0]):
            out[i] = pin.computeGeneralizedGravity(m, d, self.configuration(q[i]))
        if self.effects.sprung:
            out += self.effects.spring_gradient(q)
        return out[0] if single else out

    def coriolis(self, q, qd) -> np.ndarray:
        """Coriolis/centrifugal torque ``c(q, qd) = rnea(q, qd, 0) - g(q)``."""
        (q, qd), single = self._prep(q, qd)
        out = np.empty_like(q)
        m, d = self.model, self.data
        for i in range(q.shape[0]):
            cfg = self.configuration(q[i])
            nle = pin.nonLinearEffects(m, d, cfg, qd[i]).copy()
            out[i] = nle - pin.computeGeneralizedGravity(m, d, cfg)
        return out[0] if single else out

    def nonlinear(self, q, qd) -> np.ndarray:
        """``c(q, qd) + g(q)`` in one pass (no friction; ``g`` as :meth:`gravity`)."""
        (q, qd), single = self._prep(q, qd)
        out = np.empty_like(q)
        m, d = self.model, self.data
        for i in range(q.shape[0]):
            out[i] = pin.nonLinearEffects(m, d, self.configuration(q[i]), qd[i])
        if self.effects.sprung:
            out += self.effects.spring_gradient(q)
        return out[0] if single else out

    def coriolis_matrix(self, q, qd) -> np.ndarray:
        """``C(q, qd)`` with ``C qd = c`` and ``dH/dt - 2 C`` skew-symmetric (Pinocchio's)."""
        (q, qd), single = self._prep(q, qd)
        B, n = q.shape
        out = np.empty((B, n, n))
        m, d = self.model, self.data
        for i in range(B):
            out[i] = pin.computeCoriolisMatrix(m, d, self.configuration(q[i]), qd[i])
        return out[0] if single else out

    def energy(self, q, qd) -> Tuple[Energy, Energy]:
        """Kinetic and potential energy (J); V (gravity relative to the world origin, plus
        any spring's ``k (q - q0)^2 / 2``)."""
        (q, qd), single = self._prep(q, qd)
        B = q.shape[0]
        T = np.empty(B)
        V = np.empty(B)
        m, d = self.model, self.data
        for i in range(B):
            cfg = self.configuration(q[i])
            T[i] = pin.computeKineticEnergy(m, d, cfg, qd[i])
            V[i] = pin.computePotentialEnergy(m, d, cfg)
        if self.effects.sprung:
            V += self.effects.spring_energy(q)
        if single:
            return np.float64(T[0]), np.float64(V[0])
        return T, V

    def __repr__(self) -> str:
        extra = '' if self.mismatch.is_identity() else ', mismatched'
        return f'RobotModel({self.name!r}, {self.n} joints{extra}, from {self.source})'
