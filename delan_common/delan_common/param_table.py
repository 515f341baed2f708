"""A node's parameters as one declarative table: name, default, range or choices, read-only,
description and a check for what a range cannot say. ``delan_common.ros.params.declare_table``
declares a table with its descriptors and validates start-up values and runtime changes by it;
docs/parameters.md is generated from what it declared. ROS-free, so a table can be read and
tested without a node.

A description may say ``{n}`` for the number of joints (known once the robot is loaded).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Tuple

__all__ = [
    'ROBOT_DESCRIPTION_HELP',
    'URDF_PATH_HELP',
    'Check',
    'Param',
    'ParamContext',
    'Values',
    'all_of',
    'at_most',
    'finite',
    'non_empty',
    'per_joint',
    'per_joint_in',
    'robot_table',
    'vector',
]


@dataclass(frozen=True)
class ParamContext:
    """What a check may look at besides the value: the number of joints, the node's current
    parameter values (for checks across parameters) and the name of the parameter checked."""

    n_joints: int = 0
    values: Mapping[str, Any] = field(default_factory=dict)
    name: str = ''


#: an extra check of a value: an error message, or None when valid
Check = Callable[[Any, ParamContext], Optional[str]]


def _num(v: Optional[float]) -> str:
    return '' if v is None else str(v) if isinstance(v, int) else f'{v:g}'


@dataclass(frozen=True)
class Param:
    """One parameter of a node's table.

    ``items``: the element type of an array whose default is ``[]`` (rclpy cannot type an
    empty default, so it is declared dynamically typed and its type is checked here).
    """

    name: str
    default: Any
    description: str
    min: Optional[float] = None
    max: Optional[float] = None
    choices: Tuple[str, ...] = ()
    read_only: bool = False
    check: Optional[Check] = None
    items: Optional[type] = None

    @property
    def type_name(self) -> str:
        """The parameter type as ``ros2 param describe`` names it."""
        if self.items is not None:
            return _scalar_type(self.items) + ' array'
        if isinstance(self.default, (list, tuple)):
            element = self.default[0] if self.default else ''
            return _scalar_type(type(element)) + ' array'
        return _scalar_type(type(self.default))

    def constraints(self) -> str:
        """Range, choices or element type, as shown by ``ros2 param describe`` and the docs."""
        if self.items is not None:
            return f'array of {self.items.__name__}; [] = none'
        if self.choices:
            return 'one of: ' + ', '.join(self.choices)
        if self.min is None and self.max is None:
            return ''
        return f'[{_num(self.min)}, {_num(self.max)}]'

    def describe(self, ctx: ParamContext) -> str:
        """The description, ``{n}`` replaced by the number of joints."""
        return self.description.replace('{n}', str(ctx.n_joints))

    def validate(self, value: Any, ctx: ParamContext) -> Optional[str]:
        """Why ``value`` is refused (element type, choices, range, then :attr:`check`), or
        None when it is valid."""
        name = self.name
        if self.items is not None and not _array_of(value, self.items):
            return f'{name}={value!r} is not an array of {self.items.__name__}'
        if self.choices and value not in self.choices:
            return f'{name}={value!r} is not one of {list(self.choices)}'
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if self.min is not None and value < self.min:
                return f'{name}={value} is below its minimum {self.min}'
            if self.max is not None and value > self.max:
                return f'{name}={value} is above its maximum {self.max}'
        if self.check is not None:
            return self.check(value, replace(ctx, name=name))
        return None


def _scalar_type(kind: type) -> str:
    return {bool: 'bool', int: 'integer', float: 'double', str: 'string'}.get(kind, kind.__name__)


def _array_of(value: Any, kind: type) -> bool:
    return isinstance(value, (list, tuple)) and all(
        isinstance(v, kind) or (kind is float and isinstance(v, int) and not isinstance(v, bool))
        for v in value
    )


class Values(Dict[str, Any]):
    """Declared values by name, also readable as attributes (``values.speed``)."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


# ---------------------------------------------------------------------------- checks
def all_of(*checks: Check) -> Check:
    """The first error of ``checks``, in order."""

    def check(value: Any, ctx: ParamContext) -> Optional[str]:
        for c in checks:
            error = c(value, ctx)
            if error:
                return error
        return None

    return check


def finite(value: Any, ctx: ParamContext) -> Optional[str]:
    """A finite number (a range lets NaN through)."""
    return None if math.isfinite(value) else f'{ctx.name} must be finite, got {value}'


def non_empty(value: Any, ctx: ParamContext) -> Optional[str]:
    """A non-empty string."""
    return None if value else f'{ctx.name} must not be empty'


def at_most(other: str) -> Check:
    """No more than the value of the parameter ``other`` (declared before this one)."""

    def check(value: Any, ctx: ParamContext) -> Optional[str]:
        limit = ctx.values[other]
        return None if value <= limit else f'{ctx.name}={value} exceeds {other}={limit}'

    return check


def _derive(vals: Sequence[float]) -> bool:
    """``[nan]``: the parameter's "derive it" default."""
    return len(vals) == 1 and math.isnan(vals[0])


def _count_error(vals: Sequence[float], ctx: ParamContext) -> Optional[str]:
    n = ctx.n_joints
    if len(vals) not in (1, n):
        return f'{ctx.name} needs 1 or {n} values, got {len(vals)}'
    return None


def per_joint_in(lo: float, hi: float) -> Check:
    """One value (every joint) or one per joint, finite and in ``[lo, hi]``; ``[nan]`` =
    derive it."""

    def check(value: Any, ctx: ParamContext) -> Optional[str]:
        vals = list(value)
        if _derive(vals):
            return None
        error = _count_error(vals, ctx)
        if error:
            return error
        if not all(math.isfinite(x) and lo <= x <= hi for x in vals):
            return f'{ctx.name} values must be finite and in [{lo}, {hi}]'
        return None

    return check


def _signs_error(
    vals: Sequence[float], ctx: ParamContext, positive: bool, nonnegative: bool
) -> Optional[str]:
    if not all(math.isfinite(v) for v in vals):
        return f'{ctx.name} must be finite, got {vals}'
    if positive and any(v <= 0 for v in vals):
        return f'{ctx.name} must be > 0, got {vals}'
    if nonnegative and any(v < 0 for v in vals):
        return f'{ctx.name} must be >= 0, got {vals}'
    return None


def per_joint(
    *, positive: bool = False, nonnegative: bool = False, nan_default: bool = False
) -> Check:
    """One value (every joint) or one per joint, finite (and > 0 or >= 0 when asked);
    ``nan_default``: ``[nan]`` = derive it."""

    def check(value: Any, ctx: ParamContext) -> Optional[str]:
        vals = list(value)
        if nan_default and _derive(vals):
            return None
        return _count_error(vals, ctx) or _signs_error(vals, ctx, positive, nonnegative)

    return check


def vector(length: int) -> Check:
    """Exactly ``length`` finite values."""

    def check(value: Any, ctx: ParamContext) -> Optional[str]:
        vals = list(value)
        if len(vals) != length:
            return f'{ctx.name} needs {length} values, got {len(vals)}'
        return _signs_error(vals, ctx, False, False)

    return check


# ---------------------------------------------------------------------------- the robot
URDF_PATH_HELP = 'URDF file of the robot (ignored when robot_description is set)'
ROBOT_DESCRIPTION_HELP = 'URDF XML of the robot'


def robot_table(
    default_path: str = '',
    path_help: str = URDF_PATH_HELP,
    description_help: str = ROBOT_DESCRIPTION_HELP,
) -> Tuple[Param, ...]:
    """The robot parameters every node declares first (``delan_common.ros.robot_param``):
    where the URDF comes from and which of its joints to use; all read-only."""
    return (
        Param('urdf_path', default_path, path_help, read_only=True),
        Param('robot_description', '', description_help, read_only=True),
        Param(
            'joints',
            [],
            'Joints to learn and control (any order; model '
            'order is depth first); [] = the main chain (urdf_joints)',
            read_only=True,
            items=str,
        ),
        Param(
            'locked_joint_positions',
            [],
            'Positions of other movable joints as name=value '
            '(rad or m); [] = 0 clamped into the limits, mimic joints following',
            read_only=True,
            items=str,
        ),
        Param(
            'effort_limits',
            [],
            'Effort limit per selected joint (model order; 0 = from the URDF); [] = from the URDF',
            read_only=True,
            items=float,
        ),
        Param(
            'velocity_limits',
            [],
            'Velocity limit per selected joint (model order; 0 = from the URDF); '
            '[] = from the URDF',
            read_only=True,
            items=float,
        ),
        Param(
            'robot_description_timeout',
            10.0,
            'Wait this long for the latched '
            'robot_description topic when neither urdf_path nor robot_description is '
            'set [s]',
            min=0.0,
            max=3600.0,
            read_only=True,
        ),
    )
