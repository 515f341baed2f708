"""Actuated joints of a URDF (names, types, limits) from the XML alone, without Pinocchio.

The learner needs only joint names and types to build a DeLaN model; reading them here keeps
``delan_learning`` free of the analytic-model stack. The order is the kinematic tree's depth-first
order with sibling joints sorted by name -- the order urdfdom and therefore Pinocchio use -- so
checkpoints of the learner and models of the controller agree on the joint order.
"""
from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from typing import Dict, List

ACTUATED_TYPES = ('revolute', 'continuous', 'prismatic')


class UrdfError(ValueError):
    """A URDF that cannot be used, with the reason."""


@dataclass(frozen=True)
class UrdfJoint:
    name: str
    type: str
    lower: float
    upper: float
    velocity: float
    effort: float
    damping: float
    friction: float


def _parse(xml_or_path: str) -> ET.Element:
    text = xml_or_path
    source = 'robot_description'
    if not xml_or_path.lstrip().startswith('<'):
        source = xml_or_path
        if not os.path.isfile(xml_or_path):
            raise UrdfError(f'URDF file not found: {xml_or_path}')
        with open(xml_or_path, encoding='utf-8') as f:
            text = f.read()
    try:
        root = ET.fromstring(text)
    except ET.ParseError as err:
        raise UrdfError(f'URDF {source} does not parse: {err}') from None
    if root.tag != 'robot':
        raise UrdfError(f'URDF {source}: root element is <{root.tag}>, expected <robot>')
    return root


def actuated_joints(xml_or_path: str) -> List[UrdfJoint]:
    """Actuated joints of a URDF file path or XML string, in Pinocchio's order."""
    root = _parse(xml_or_path)
    children: Dict[str, List[ET.Element]] = {}
    child_links = set()
    for j in root.findall('joint'):
        parent = j.find('parent')
        child = j.find('child')
        if parent is None or child is None:
            raise UrdfError(f'joint {j.get("name")!r} lacks <parent> or <child>')
        children.setdefault(parent.get('link'), []).append(j)
        child_links.add(child.get('link'))
    roots = [l.get('name') for l in root.findall('link') if l.get('name') not in child_links]
    if len(roots) != 1:
        raise UrdfError(f'URDF must have exactly one root link, found {roots}')
    out: List[UrdfJoint] = []
    stack = [roots[0]]
    visited = set()
    order: List[ET.Element] = []

    def visit(link: str) -> None:
        if link in visited:
            raise UrdfError(f'URDF has a kinematic loop at link {link!r}')
        visited.add(link)
        for j in sorted(children.get(link, []), key=lambda e: e.get('name')):
            order.append(j)
            visit(j.find('child').get('link'))
    visit(stack[0])
    for j in order:
        jtype = j.get('type')
        if jtype not in ACTUATED_TYPES:
            continue
        lim = j.find('limit')
        dyn = j.find('dynamics')

        def f(el, key, default):
            return float(el.get(key, default)) if el is not None else default
        inf = float('inf')
        if jtype == 'continuous':
            lower, upper = -inf, inf
        else:
            lower, upper = f(lim, 'lower', -inf), f(lim, 'upper', inf)
        out.append(UrdfJoint(name=j.get('name'), type=jtype, lower=lower, upper=upper,
                             velocity=f(lim, 'velocity', inf), effort=f(lim, 'effort', inf),
                             damping=f(dyn, 'damping', 0.0), friction=f(dyn, 'friction', 0.0)))
    if not out:
        raise UrdfError('URDF has no actuated (revolute/continuous/prismatic) joints')
    return out


@dataclass(frozen=True)
class RobotDescription:
    """A URDF's XML with its actuated joints as arrays in model order."""

    xml: str
    source: str
    joints: tuple

    @classmethod
    def load(cls, xml_or_path: str) -> 'RobotDescription':
        joints = tuple(actuated_joints(xml_or_path))
        if xml_or_path.lstrip().startswith('<'):
            return cls(xml_or_path, 'robot_description', joints)
        with open(xml_or_path, encoding='utf-8') as f:
            return cls(f.read(), xml_or_path, joints)

    @property
    def joint_names(self) -> List[str]:
        return [j.name for j in self.joints]

    @property
    def joint_types(self) -> List[str]:
        return [j.type for j in self.joints]

    def _array(self, field: str):
        import numpy as np
        return np.array([getattr(j, field) for j in self.joints], dtype=np.float64)

    @property
    def lower(self):
        return self._array('lower')

    @property
    def upper(self):
        return self._array('upper')

    @property
    def velocity_limits(self):
        return self._array('velocity')

    @property
    def effort_limits(self):
        return self._array('effort')
