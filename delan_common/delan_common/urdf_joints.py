"""The joints of a URDF to learn and control (names, types, limits), from the XML alone.

The learner needs only joint names and types to build a DeLaN model; reading them here keeps
``delan_learning`` free of the analytic-model stack. The order is the kinematic tree's depth-first
order with sibling joints sorted by name -- the order urdfdom and therefore Pinocchio use -- so
checkpoints of the learner and models of the controller agree on the joint order.
:class:`delan_common.robot_model.RobotModel` selects its joints with :func:`select_joints` too.

Descriptions as vendors ship them are read as their users mean them, never refused for an
exporter convention; each reading is reported once in ``warnings``.

Joint selection
    ``joints`` names the joints to learn and control, in any order; the model order is always
    the depth-first one. By default they are the movable (revolute, continuous, prismatic)
    joints of the **main chain**: from the root link, follow the tree while exactly one child
    branch holds movable joints, and stop where none or two or more do (a hand with fingers, two
    arms); mimic joints and the masters of mimic joints (a gripper's drive) are left out. When
    that leaves no joint (a tree that branches at its base), every movable joint but mimic
    joints and their masters is selected. Joints at the end of the chain named as a gripper's
    (:data:`GRIPPER_NAME`: the single jaw of a Z1, an SO-100, a Talos hand) are left out too: a
    gripper's effort carries its grasp, not the arm's dynamics, and it has its own controller.
    Name them in ``joints`` to learn them.

    Every other movable joint is **locked**: at ``locked[name]``, by default at 0 clamped into
    its limits; a mimic joint whose master is locked at ``multiplier * master + offset``.
    Selecting a mimic joint or the master of one is refused: the mimic joint would have to
    follow its master, and Pinocchio 4.1's mimic models (``buildModelFromXML(xml, mimic=True)``)
    have no ABA, joint-torque regressor or energy, which the simulator, system identification
    and controllers need.

Limits not given
    Exporters write ``lower="0" upper="0" effort="0" velocity="0"`` (or leave them out) for "not
    given". ``lower == upper`` on a revolute joint: no position limit (-inf, +inf; sampled as
    +-pi around 0, as a continuous joint). On a prismatic joint: +-``PRISMATIC_RANGE`` m around
    that value (a slide without stops would leave any workspace). ``effort`` / ``velocity`` 0 or
    missing: +inf; a velocity of :data:`PLACEHOLDER_VELOCITY` or more (1000, 10000: an exporter's
    "unlimited") too. ``lower > upper`` is an error. ``position_given`` / ``effort_given`` /
    ``velocity_given`` of each joint say what the description gave; ``effort_limits`` /
    ``velocity_limits`` overrides (one per selected joint in model order, 0 or inf = keep the
    URDF's) count as given.

``.xacro`` files are run through the ``xacro`` package (``$(find pkg)`` via AMENT_PREFIX_PATH).
"""

from __future__ import annotations

import math
import os
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field, replace
from typing import Any, Dict, List, Mapping, Optional, Sequence, Set, Tuple

ACTUATED_TYPES = ('revolute', 'continuous', 'prismatic')
#: joints of a moving base (a humanoid's pelvis, a mobile base): held at their neutral pose, the
#: base fixed, as a user running an arm on them means it
FREE_BASE_TYPES = ('floating', 'planar')
#: Half range [m] of a prismatic joint whose description gives lower == upper.
PRISMATIC_RANGE = 0.1
#: A velocity limit [rad/s, m/s] this large is an exporter's "unlimited" (1000, 10000), not a
#: joint's: no motor of an arm turns its joint at 100 rad/s (~950 rpm).
PLACEHOLDER_VELOCITY = 100.0
#: How close [rad or m] to a position limit a joint counts as at its end stop.
END_STOP_TOLERANCE = 1e-3
#: Velocity limit where the description gives none: rad/s (revolute, continuous), m/s (prismatic).
DEFAULT_VELOCITY = {'revolute': 2.0, 'continuous': 2.0, 'prismatic': 0.5}
#: A joint named like this (case-insensitive) at the end of the main chain drives a gripper.
GRIPPER_NAME = re.compile(r'gripper|finger|jaw|claw', re.IGNORECASE)
MIMIC_UNSUPPORTED = (
    "Pinocchio 4.1's mimic models (buildModelFromXML(xml, mimic=True)) have no "
    'ABA, joint-torque regressor or energy'
)


class UrdfError(ValueError):
    """A URDF that cannot be used, with the reason."""


class JointSelectionError(UrdfError):
    """``joints`` / ``locked`` name joints that cannot be selected or locked; lists the movable
    joints."""


@dataclass(frozen=True)
class Mimic:
    """``<mimic joint= multiplier= offset=>``: this joint's position is ``m * master + o``."""

    joint: str
    multiplier: float = 1.0
    offset: float = 0.0


@dataclass(frozen=True)
class UrdfJoint:
    """One joint as the URDF declares it (limits as written, before any default is applied)."""

    name: str
    type: str
    lower: float
    upper: float
    velocity: float
    effort: float
    damping: float
    friction: float
    position_given: bool = True
    velocity_given: bool = True
    effort_given: bool = True
    mimic: Optional[Mimic] = None


@dataclass(frozen=True)
class JointSelection:
    """Selected joints (model order), the position of every other movable joint, and what was
    read other than written (one line each)."""

    joints: Tuple[UrdfJoint, ...]
    locked: Dict[str, float]
    warnings: List[str]
    movable: Tuple[str, ...]  # every movable joint, depth first
    free_base: Tuple[str, ...] = ()  # floating / planar joints, held at their neutral pose


def middle_of_limits(lower, upper):
    """The middle of each joint's limits ``(n,)``, 0 where there are none: a start posture
    inside every arm's range (0 lies outside some, a Panda's elbow)."""
    import numpy as np

    lo, hi = np.asarray(lower, dtype=float), np.asarray(upper, dtype=float)
    finite = np.isfinite(lo) & np.isfinite(hi)
    return np.where(finite, 0.5 * (np.where(finite, lo, 0.0) + np.where(finite, hi, 0.0)), 0.0)


def at_position_limit(q, lower, upper, tol: float = END_STOP_TOLERANCE):
    """Where joint positions ``q`` (``(n,)`` or ``(k, n)``) are within ``tol`` of a finite
    limit (``lower``, ``upper`` ``(n,)``): at an end stop, whose force no dynamics model has."""
    import numpy as np

    q = np.asarray(q, dtype=np.float64)
    return (q <= np.asarray(lower) + tol) | (q >= np.asarray(upper) - tol)


def is_xml(text: str) -> bool:
    """Whether ``text`` is a robot description itself rather than a path to one."""
    return text.lstrip().startswith('<')


def read_description(xml_or_path: str) -> Tuple[str, str]:
    """``(urdf_xml, source)`` of XML text, a URDF file or a ``.xacro`` file (run through xacro)."""
    if is_xml(xml_or_path):
        return xml_or_path, 'robot_description'
    if not os.path.isfile(xml_or_path):
        raise UrdfError(f'URDF file not found: {xml_or_path}')
    if xml_or_path.endswith('.xacro'):
        return _run_xacro(xml_or_path), xml_or_path
    with open(xml_or_path, encoding='utf-8') as f:
        return f.read(), xml_or_path


def _run_xacro(path: str) -> str:
    try:
        import xacro
    except ImportError:
        raise UrdfError(
            f'{path}: reading .xacro needs the xacro package (pip install xacro)'
        ) from None
    try:
        return xacro.process_file(path).toprettyxml(indent='  ')
    except Exception as err:  # noqa: BLE001 -- xacro raises many kinds; all mean "unusable"
        raise UrdfError(f'xacro {path}: {type(err).__name__}: {err}') from None


def parse_xml(xml: str, source: str = 'robot_description') -> ET.Element:
    """The ``<robot>`` element of URDF XML text."""
    try:
        root = ET.fromstring(xml)
    except ET.ParseError as err:
        raise UrdfError(f'URDF {source} does not parse: {err}') from None
    if root.tag != 'robot':
        raise UrdfError(f'URDF {source}: root element is <{root.tag}>, expected <robot>')
    return root


def _parse(xml_or_path: str) -> ET.Element:
    xml, source = read_description(xml_or_path)
    return parse_xml(xml, source)


# ---------------------------------------------------------------------------------- the tree
def _attr(el: ET.Element, key: str) -> str:
    """An attribute URDF requires (a joint's or link's ``name``, a ``link``); a description
    without it is refused with a clear error, not read with ``None`` keys."""
    value = el.get(key)
    if value is None:
        raise UrdfError(f'URDF: a <{el.tag}> element lacks its required {key!r} attribute')
    return value


def _child_link(j: ET.Element) -> str:
    """The ``<child link=>`` of a joint of the tree (:func:`_depth_first` checks it has one)."""
    child = j.find('child')
    assert child is not None
    return _attr(child, 'link')


def _parent_link(j: ET.Element) -> str:
    """The ``<parent link=>`` of a joint of the tree (:func:`_depth_first` checks it has one)."""
    parent = j.find('parent')
    assert parent is not None
    return _attr(parent, 'link')


def _depth_first(root: ET.Element) -> Tuple[List[ET.Element], Dict[str, List[ET.Element]], str]:
    """All joints depth first (siblings by name), the child joints of each link, the root link."""
    children: Dict[str, List[ET.Element]] = {}
    child_links = set()
    for j in root.findall('joint'):
        parent, child = j.find('parent'), j.find('child')
        if parent is None or child is None:
            raise UrdfError(f'joint {j.get("name")!r} lacks <parent> or <child>')
        children.setdefault(_attr(parent, 'link'), []).append(j)
        child_links.add(_attr(child, 'link'))
    for js in children.values():
        js.sort(key=lambda e: _attr(e, 'name'))
    links = root.findall('link')
    if not links:
        raise UrdfError(
            'URDF has no <link>: a robot description defines its links and joints (a file '
            'of xacro macros that are never called defines none)'
        )
    roots = [_attr(ln, 'name') for ln in links if ln.get('name') not in child_links]
    if not roots:
        raise UrdfError('URDF has no root link: every link is the child of a joint (a loop)')
    if len(roots) != 1:
        raise UrdfError(f'URDF must have exactly one root link, found {roots}')
    order: List[ET.Element] = []
    visited = {roots[0]}
    stack = list(reversed(children.get(roots[0], [])))
    while stack:
        j = stack.pop()
        order.append(j)
        link = _child_link(j)
        if link in visited:
            raise UrdfError(f'URDF has a kinematic loop at link {link!r}')
        visited.add(link)
        stack.extend(reversed(children.get(link, [])))
    return order, children, roots[0]


def _main_chain(
    children: Dict[str, List[ET.Element]], order: List[ET.Element], root_link: str
) -> List[str]:
    """Movable joints from the root while exactly one child branch holds movable joints."""
    movable_below: Dict[str, bool] = {}
    for j in reversed(order):
        below = children.get(_child_link(j), [])
        movable_below[_attr(j, 'name')] = j.get('type') in ACTUATED_TYPES or any(
            movable_below[_attr(c, 'name')] for c in below
        )
    chain: List[str] = []
    link = root_link
    while True:
        branches = [j for j in children.get(link, []) if movable_below[_attr(j, 'name')]]
        if len(branches) != 1:
            return chain
        if branches[0].get('type') in ACTUATED_TYPES:
            chain.append(_attr(branches[0], 'name'))
        link = _child_link(branches[0])


# ---------------------------------------------------------------------------------- one joint
def _number(el: Optional[ET.Element], key: str, joint: str) -> Optional[float]:
    text = el.get(key) if el is not None else None
    if text is None or not text.strip():
        return None
    try:
        return float(text)
    except ValueError:
        raise UrdfError(f'joint {joint!r}: {key}={text!r} is not a number') from None


def _read_joint(j: ET.Element) -> UrdfJoint:
    """One movable joint with its limits read as the module docstring says."""
    name, jtype = _attr(j, 'name'), _attr(j, 'type')
    lim, dyn, mim = j.find('limit'), j.find('dynamics'), j.find('mimic')
    inf = math.inf
    lower, upper, position_given = -inf, inf, False
    if jtype != 'continuous':
        lo, hi = _number(lim, 'lower', name) or 0.0, _number(lim, 'upper', name) or 0.0
        if lo > hi:
            raise UrdfError(f'joint {name!r}: lower limit {lo} > upper limit {hi}')
        if lo < hi:
            lower, upper, position_given = lo, hi, True
        elif jtype == 'prismatic':
            lower, upper = lo - PRISMATIC_RANGE, lo + PRISMATIC_RANGE
    velocity, effort = _number(lim, 'velocity', name), _number(lim, 'effort', name)
    velocity_given = bool(velocity and 0 < velocity < PLACEHOLDER_VELOCITY)
    mimic = None
    if mim is not None:
        multiplier = _number(mim, 'multiplier', name)
        mimic = Mimic(
            mim.get('joint', ''),
            1.0 if multiplier is None else multiplier,
            _number(mim, 'offset', name) or 0.0,
        )
    return UrdfJoint(
        name=name,
        type=jtype,
        lower=lower,
        upper=upper,
        velocity=velocity if velocity is not None and velocity_given else inf,
        effort=effort if effort and effort > 0 else inf,
        damping=_number(dyn, 'damping', name) or 0.0,
        friction=_number(dyn, 'friction', name) or 0.0,
        position_given=position_given,
        velocity_given=velocity_given,
        effort_given=bool(effort and effort > 0),
        mimic=mimic,
    )


# ---------------------------------------------------------------------------------- selection
def select_joints(
    root: ET.Element,
    joints: Optional[Sequence[str]] = None,
    locked: Optional[Mapping[str, float]] = None,
    *,
    effort_limits: Optional[Sequence[float]] = None,
    velocity_limits: Optional[Sequence[float]] = None,
) -> JointSelection:
    """The joints to learn (``joints``, default: the main chain) and where the others are locked.

    Raises :class:`JointSelectionError` for unknown, repeated, mimic or mimic-master joints in
    ``joints`` and unknown or selected joints in ``locked``; :class:`UrdfError` for a URDF
    without a joint to learn.
    """
    order, children, root_link = _depth_first(root)
    movable = [_read_joint(j) for j in order if j.get('type') in ACTUATED_TYPES]
    free_base = [
        (_attr(j, 'name'), j.get('type')) for j in order if j.get('type') in FREE_BASE_TYPES
    ]
    if not movable:
        base = f' (only a {free_base[0][1]} base joint, {free_base[0][0]!r})' if free_base else ''
        raise UrdfError(f'URDF has no actuated (revolute/continuous/prismatic) joints{base}')
    names = [j.name for j in movable]
    dangling = [j for j in movable if j.mimic is not None and j.mimic.joint not in names]
    movable = [replace(j, mimic=None) if j in dangling else j for j in movable]
    by_name = {j.name: j for j in movable}
    masters = {j.mimic.joint for j in movable if j.mimic is not None}
    tied = {j.name for j in movable if j.mimic is not None} | masters
    gripper: List[str] = []
    branch_warning: Optional[str] = None  # for the default selection only
    if joints:
        chosen = _check_selection(list(joints), names, by_name, masters)
    else:
        chain = [nm for nm in _main_chain(children, order, root_link) if nm not in tied]
        gripper = _trailing_gripper(chain)
        arm = chain[: len(chain) - len(gripper)]
        chosen = set(arm) or set(names) - tied
        if not chosen:
            raise UrdfError(
                f'URDF has no joint to learn: its movable joints {names} are all '
                f'mimic joints or their masters ({MIMIC_UNSUPPORTED})'
            )
        branch_warning = _branch_warning(arm, chosen, names, tied, root_link)
    selected = tuple(j for j in movable if j.name in chosen)
    selected = _with_limits(selected, effort_limits, 'effort')
    selected = _with_limits(selected, velocity_limits, 'velocity')
    positions = _locked_positions(movable, chosen, dict(locked or {}), names)
    warnings = _lock_warnings(positions, by_name) + _limit_warnings(selected)
    if branch_warning:
        warnings.insert(0, branch_warning)
    if dangling:
        warnings.append(
            'mimic tags naming no movable joint ignored (the joints move on their own, as '
            'Pinocchio reads them): '
            + ', '.join(f'{j.name} -> {j.mimic.joint!r}' for j in dangling if j.mimic)
        )
    if gripper and not chosen & set(gripper):
        warnings.append(
            f'gripper joints at the end of the arm chain left out: {gripper} '
            '(name them in joints to learn them)'
        )
    outside = [
        f'{nm}={v:g}'
        for nm, v in positions.items()
        if by_name[nm].position_given and not by_name[nm].lower <= v <= by_name[nm].upper
    ]
    if outside:
        warnings.append(f'locked joints outside their limits (kept there): {outside}')
    warnings += [
        f'joint {name!r} is {kind}: held at its neutral pose (the base fixed)'
        for name, kind in free_base
    ]
    return JointSelection(
        selected, positions, warnings, tuple(names), tuple(name for name, _ in free_base)
    )


def _branch_warning(
    arm: Sequence[str], chosen: Set[str], names: Sequence[str], tied: Set[str], root_link: str
) -> Optional[str]:
    """What the default selection did on a tree that is not one arm (a mobile manipulator, a
    two-armed robot, legs): None for one chain, which may end in a gripper."""
    if not arm:
        return (
            f'no single arm chain: the tree branches at its root link {root_link!r}, so all '
            f'{len(chosen)} movable joints are learned; name the joints to learn in joints '
            '(--joints)'
        )
    beyond = [nm for nm in names if nm not in chosen and nm not in tied]
    if len(beyond) > len(chosen):
        return (
            f'the arm chain ends where the tree branches, after {arm[-1]!r}: {len(chosen)} '
            f'joint(s) learned and the {len(beyond)} movable joints beyond the branch locked; '
            'name the joints to learn in joints (--joints)'
        )
    return None


def inertia_invariant_joints(root: ET.Element, selected: Sequence[str]) -> List[str]:
    """The selected joints below no other selected joint, in depth-first order.

    With the base fixed and every other joint locked, such a joint moves its subtree rigidly
    and nothing else, so the mass matrix does not depend on its position (kinetic energy does
    not change under a rigid motion, whatever the joint's axis or the direction of gravity).
    On an arm it is the first joint of the chain."""
    order, _, _ = _depth_first(root)
    chosen = set(selected)
    parent_joint = {_child_link(j): j for j in order}
    out = []
    for j in order:
        if _attr(j, 'name') not in chosen:
            continue
        above = parent_joint.get(_parent_link(j))
        while above is not None and _attr(above, 'name') not in chosen:
            above = parent_joint.get(_parent_link(above))
        if above is None:
            out.append(_attr(j, 'name'))
    return out


def _trailing_gripper(chain: Sequence[str]) -> List[str]:
    """The joints at the end of ``chain`` named as a gripper's (:data:`GRIPPER_NAME`); none when
    every joint is (a description of a gripper alone)."""
    k = len(chain)
    while k > 0 and GRIPPER_NAME.search(chain[k - 1]):
        k -= 1
    return list(chain[k:]) if k > 0 else []


def _check_selection(
    joints: List[str], names: List[str], by_name: Dict[str, UrdfJoint], masters: set
) -> set:
    unknown = [nm for nm in joints if nm not in by_name]
    if unknown:
        raise JointSelectionError(
            f'unknown joints {unknown} in joints; the movable joints are {names}'
        )
    if len(set(joints)) != len(joints):
        raise JointSelectionError(f'joints repeat in {joints}')
    mimics = [nm for nm in joints if by_name[nm].mimic is not None]
    drives = [nm for nm in joints if nm in masters]
    if mimics or drives:
        raise JointSelectionError(
            f'cannot learn mimic joints {mimics} or masters of mimic joints {drives} '
            f'({MIMIC_UNSUPPORTED}); leave them out of joints: they are locked, the mimic '
            f'joints following their locked master'
        )
    return set(joints)


def _locked_positions(
    movable: Sequence[UrdfJoint], chosen: set, given: Dict[str, float], names: List[str]
) -> Dict[str, float]:
    unknown = [nm for nm in given if nm not in names]
    if unknown:
        raise JointSelectionError(
            f'unknown joints {unknown} in locked; the movable joints are {names}'
        )
    both = [nm for nm in given if nm in chosen]
    if both:
        raise JointSelectionError(f'joints {both} are both selected and locked')
    bad = {nm: v for nm, v in given.items() if not math.isfinite(float(v))}
    if bad:
        raise JointSelectionError(f'locked positions must be finite, got {bad}')
    by_name = {j.name: j for j in movable}

    def position(nm: str, seen: Tuple[str, ...] = ()) -> float:
        if nm in given:
            return float(given[nm])
        if nm in seen:
            raise UrdfError(f'mimic joints mimic each other in a loop: {list(seen)}')
        j = by_name[nm]
        if j.mimic is not None:
            return j.mimic.multiplier * position(j.mimic.joint, seen + (nm,)) + j.mimic.offset
        return min(max(0.0, j.lower), j.upper)

    return {j.name: position(j.name) for j in movable if j.name not in chosen}


def _with_limits(
    joints: Tuple[UrdfJoint, ...], values: Optional[Sequence[float]], kind: str
) -> Tuple[UrdfJoint, ...]:
    """``joints`` with the overrides of one limit (0 or inf entries keep the URDF's)."""
    if values is None or len(values) == 0:
        return joints
    vals = [float(v) for v in values]
    if len(vals) != len(joints):
        raise UrdfError(
            f'{kind}_limits: {len(vals)} values for the {len(joints)} joints '
            f'{[j.name for j in joints]}'
        )
    if any(math.isnan(v) or v < 0 for v in vals):
        raise UrdfError(f'{kind}_limits must be >= 0 (0 = from the URDF), got {vals}')

    def overridden(j: UrdfJoint, v: float) -> UrdfJoint:
        changes: Dict[str, Any] = {kind: v, f'{kind}_given': True}
        return replace(j, **changes)

    return tuple(overridden(j, v) if 0 < v < math.inf else j for j, v in zip(joints, vals))


def _lock_warnings(positions: Dict[str, float], by_name: Dict[str, UrdfJoint]) -> List[str]:
    if not positions:
        return []
    parts = [
        f'{nm}={v:g}' + (f' (mimics {m.joint})' if (m := by_name[nm].mimic) is not None else '')
        for nm, v in positions.items()
    ]
    return [f'locked joints (not learned or controlled): {", ".join(parts)}']


def _limit_warnings(joints: Sequence[UrdfJoint]) -> List[str]:
    def names(pred) -> List[str]:
        return [j.name for j in joints if pred(j)]

    out = []
    for what, sel in (
        (
            'no position limits (lower == upper): unlimited, like continuous joints',
            lambda j: j.type == 'revolute' and not j.position_given,
        ),
        (
            f'no position limits (lower == upper): +-{PRISMATIC_RANGE:g} m around lower',
            lambda j: j.type == 'prismatic' and not j.position_given,
        ),
        (
            'no effort limit (effort 0 or missing): unlimited; RobotModel.'
            'default_effort_limit() derives one from the inertia',
            lambda j: not j.effort_given,
        ),
        (
            'no velocity limit (velocity 0, missing or a placeholder of '
            f'{PLACEHOLDER_VELOCITY:g} or more): unlimited; the default is '
            f'{DEFAULT_VELOCITY["revolute"]:g} rad/s, {DEFAULT_VELOCITY["prismatic"]:g} m/s',
            lambda j: not j.velocity_given,
        ),
    ):
        hit = names(sel)
        if hit:
            out.append(f'joints {hit}: {what}')
    return out


def actuated_joints(
    xml_or_path: str,
    joints: Optional[Sequence[str]] = None,
    locked: Optional[Mapping[str, float]] = None,
) -> List[UrdfJoint]:
    """The selected joints of a URDF file path or XML string, in Pinocchio's order."""
    return list(select_joints(_parse(xml_or_path), joints, locked).joints)


@dataclass(frozen=True)
class RobotDescription:
    """A URDF's XML with its selected joints as arrays in model order, the positions of the
    locked joints and the readings to report (``warnings``)."""

    xml: str
    source: str
    joints: tuple
    locked: Dict[str, float] = field(default_factory=dict)
    warnings: List[str] = field(default_factory=list)

    @classmethod
    def load(
        cls,
        xml_or_path: str,
        joints: Optional[Sequence[str]] = None,
        locked: Optional[Mapping[str, float]] = None,
        *,
        effort_limits: Optional[Sequence[float]] = None,
        velocity_limits: Optional[Sequence[float]] = None,
    ) -> 'RobotDescription':
        """Read a URDF (path, XML string or xacro) and select its joints (:func:`select_joints`);
        ``effort_limits`` / ``velocity_limits`` override the URDF's, one per selected joint."""
        xml, source = read_description(xml_or_path)
        sel = select_joints(
            parse_xml(xml, source),
            joints,
            locked,
            effort_limits=effort_limits,
            velocity_limits=velocity_limits,
        )
        return cls(xml, source, sel.joints, dict(sel.locked), list(sel.warnings))

    def selection_kwargs(self) -> Dict:
        """What ``RobotModel(self.xml, **kwargs)`` needs to select the same joints and limits."""
        return {
            'joints': self.joint_names,
            'locked': dict(self.locked),
            'effort_limits': self.effort_limits.tolist(),
            'velocity_limits': self.velocity_limits.tolist(),
        }

    @property
    def name(self) -> str:
        """The ``<robot name>`` of the URDF ('' when it has none); parses the XML."""
        return parse_xml(self.xml, self.source).get('name', '')

    @property
    def joint_names(self) -> List[str]:
        """Names of the selected joints, in model order."""
        return [j.name for j in self.joints]

    @property
    def joint_types(self) -> List[str]:
        """URDF types of the selected joints ('revolute', 'continuous', 'prismatic')."""
        return [j.type for j in self.joints]

    def _array(self, field: str):
        import numpy as np

        return np.array([getattr(j, field) for j in self.joints])

    @property
    def lower(self):
        """Lower position limits ``(n,)``; -inf where the URDF gives none."""
        return self._array('lower').astype(float)

    @property
    def upper(self):
        """Upper position limits ``(n,)``; +inf where the URDF gives none."""
        return self._array('upper').astype(float)

    @property
    def velocity_limits(self):
        """Velocity limits ``(n,)``; +inf where neither the URDF nor an override gives one."""
        return self._array('velocity').astype(float)

    @property
    def effort_limits(self):
        """Effort limits ``(n,)``; +inf where neither the URDF nor an override gives one."""
        return self._array('effort').astype(float)

    @property
    def position_given(self):
        """Per joint ``(n,)``: whether the URDF gives a position range (``lower < upper``)."""
        return self._array('position_given').astype(bool)

    @property
    def planning_velocity_limits(self):
        """Velocity limits to plan with: the URDF's where given, DEFAULT_VELOCITY elsewhere."""
        import numpy as np

        default = np.array([DEFAULT_VELOCITY[t] for t in self.joint_types])
        return np.where(self.velocity_given, self.velocity_limits, default)

    @property
    def velocity_given(self):
        """Per joint ``(n,)``: whether the velocity limit is a real one (URDF or override), not
        missing or a placeholder."""
        return self._array('velocity_given').astype(bool)

    def home(self):
        """The middle of each joint's limits (:func:`middle_of_limits`): where the demo and the
        sim start and reset the arm."""
        return middle_of_limits(self.lower, self.upper)

    @property
    def inertia_invariant_joints(self) -> List[int]:
        """Model indices of the joints the mass matrix does not depend on
        (:func:`inertia_invariant_joints`); parses the XML."""
        names = inertia_invariant_joints(parse_xml(self.xml, self.source), self.joint_names)
        return [self.joint_names.index(nm) for nm in names]

    @property
    def effort_given(self):
        """Per joint ``(n,)``: whether the effort limit comes from the URDF or an override."""
        return self._array('effort_given').astype(bool)
