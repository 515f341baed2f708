"""Parameter declarations with descriptors and validation, shared by every node of the suite."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence

from rcl_interfaces.msg import (
    FloatingPointRange,
    IntegerRange,
    ParameterDescriptor,
    SetParametersResult,
)
from rclpy.node import Node
from rclpy.parameter import Parameter

Validator = Callable[[Any], Optional[str]]  # returns an error message, or None when valid


@dataclass(frozen=True)
class ParamSpec:
    """One declared parameter as written in the code: the source of docs/parameters.md."""

    name: str
    default: Any
    description: str
    constraints: str = ''  # range or choices, as ``ros2 param describe`` shows them
    read_only: bool = False


def declared_parameters(node: Node) -> List[ParamSpec]:
    """The parameters ``node`` declared through :func:`declare` / :func:`record`, in order."""
    return list(getattr(node, '_delan_param_specs', []))


def record(node: Node, spec: ParamSpec) -> None:
    """Note a declared parameter for :func:`declared_parameters`."""
    if not hasattr(node, '_delan_param_specs'):
        node._delan_param_specs = []
    node._delan_param_specs.append(spec)


def declare(
    node: Node,
    name: str,
    default: Any,
    description: str,
    *,
    min_value: Optional[float] = None,
    max_value: Optional[float] = None,
    choices: Optional[Sequence[str]] = None,
    read_only: bool = False,
    validator: Optional[Validator] = None,
    registry: Optional[Dict[str, Validator]] = None,
) -> Any:
    """Declare ``name`` with a descriptor; register its validator in ``registry``.

    Ranges go into the descriptor (visible in ``ros2 param describe``) *and* are checked by the
    validator, so an out-of-range override at start-up fails loudly instead of being clipped.
    """
    desc = ParameterDescriptor(description=description, read_only=read_only)
    if choices:
        desc.additional_constraints = 'one of: ' + ', '.join(choices)
    if isinstance(default, bool):
        pass
    elif isinstance(default, int) and (min_value is not None or max_value is not None):
        desc.integer_range = [
            IntegerRange(
                from_value=int(min_value if min_value is not None else -(2**31)),
                to_value=int(max_value if max_value is not None else 2**31 - 1),
                step=0,
            )
        ]
    elif isinstance(default, float) and (min_value is not None or max_value is not None):
        desc.floating_point_range = [
            FloatingPointRange(
                from_value=float(min_value if min_value is not None else -1e300),
                to_value=float(max_value if max_value is not None else 1e300),
                step=0.0,
            )
        ]

    def check(value: Any) -> Optional[str]:
        if choices is not None and value not in choices:
            return f'{name}={value!r} is not one of {list(choices)}'
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if min_value is not None and value < min_value:
                return f'{name}={value} is below its minimum {min_value}'
            if max_value is not None and value > max_value:
                return f'{name}={value} is above its maximum {max_value}'
        if validator is not None:
            return validator(value)
        return None

    value = node.declare_parameter(name, default, desc).value
    record(
        node,
        ParamSpec(
            name, default, description, _constraints(min_value, max_value, choices), read_only
        ),
    )
    error = check(value)
    if error:
        raise ValueError(f'invalid parameter: {error}')
    if registry is not None:
        registry[name] = check
    return value


def _constraints(
    min_value: Optional[float], max_value: Optional[float], choices: Optional[Sequence[str]]
) -> str:
    if choices:
        return 'one of: ' + ', '.join(choices)
    if min_value is None and max_value is None:
        return ''

    def num(v: Optional[float]) -> str:
        return '' if v is None else str(v) if isinstance(v, int) else f'{v:g}'

    return f'[{num(min_value)}, {num(max_value)}]'


def validating_callback(
    registry: Dict[str, Validator],
    on_accept: Optional[Callable[[Sequence[Parameter]], None]] = None,
):
    """A set-parameters callback that rejects any change its validators refuse (atomically)."""

    def callback(params: Sequence[Parameter]) -> SetParametersResult:
        for p in params:
            check = registry.get(p.name)
            if check is None:
                continue
            error = check(p.value)
            if error:
                return SetParametersResult(successful=False, reason=error)
        if on_accept is not None:
            on_accept(params)
        return SetParametersResult(successful=True)

    return callback
