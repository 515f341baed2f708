"""Parameter declarations with descriptors and validation, shared by every node of the suite:
a node declares its table (:mod:`delan_common.param_table`) with :func:`declare_table`."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence

from rcl_interfaces.msg import (
    FloatingPointRange,
    IntegerRange,
    ParameterDescriptor,
    SetParametersResult,
)
from rclpy.exceptions import InvalidParameterTypeException, InvalidParameterValueException
from rclpy.node import Node
from rclpy.parameter import Parameter

from delan_common.param_table import Check, Param, ParamContext, Values

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
    """The parameters ``node`` declared (:func:`declare_table`, :func:`declare`), in order."""
    return list(getattr(node, '_delan_param_specs', []))


def record(node: Node, spec: ParamSpec) -> None:
    """Note a declared parameter for :func:`declared_parameters`."""
    if not hasattr(node, '_delan_param_specs'):
        node._delan_param_specs = []
    node._delan_param_specs.append(spec)


def declare_table(
    node: Node,
    table: Iterable[Param],
    registry: Optional[Dict[str, Validator]] = None,
    ctx: Optional[ParamContext] = None,
) -> Values:
    """Declare every parameter of ``table``, in order, with its descriptor; a start-up value
    the table refuses is a ``ValueError('invalid parameter: ...')``. Each parameter's validator
    goes into ``registry`` for :func:`validating_callback`.

    ``ctx`` gives the number of joints (for ``{n}`` in descriptions and per-joint checks); the
    checks see the node's parameter values as they are when they run.
    """
    live = ParamContext(ctx.n_joints if ctx is not None else 0, _NodeValues(node))
    values = Values()
    for param in table:
        values[param.name] = _declare(node, param, registry, live)
    return values


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
    """Declare one parameter outside a table (one whose existence is decided at runtime);
    the arguments are those of :class:`~delan_common.param_table.Param`."""
    check: Optional[Check] = None
    if validator is not None:
        bound = validator

        def check(value: Any, _ctx: ParamContext) -> Optional[str]:
            return bound(value)

    param = Param(
        name, default, description, min_value, max_value, tuple(choices or ()), read_only, check
    )
    return _declare(node, param, registry, ParamContext(0, _NodeValues(node)))


def _declare(
    node: Node, param: Param, registry: Optional[Dict[str, Validator]], ctx: ParamContext
) -> Any:
    """Ranges go into the descriptor (visible in ``ros2 param describe``) *and* are checked by
    the validator, so an out-of-range override at start-up fails loudly instead of being
    clipped."""
    description = param.describe(ctx)
    try:
        declared = node.declare_parameter(
            param.name, param.default, _descriptor(param, description)
        )
    except InvalidParameterValueException:  # rclpy's own range check of the override
        raise ValueError(
            f'invalid parameter: {param.name} must be in {param.constraints()}'
        ) from None
    except InvalidParameterTypeException as err:
        raise ValueError(
            f'invalid parameter: {param.name} must be of type {param.type_name} ({err})'
        ) from None
    value = declared.value
    record(
        node,
        ParamSpec(param.name, param.default, description, param.constraints(), param.read_only),
    )
    if param.items is not None and (value is None or isinstance(value, (bytes, bytearray))):
        value = []  # how rclpy gives back an empty, dynamically typed array

    def check(v: Any) -> Optional[str]:
        return param.validate(v, ctx)

    error = check(value)
    if error:
        raise ValueError(f'invalid parameter: {error}')
    if registry is not None:
        registry[param.name] = check
    if param.items is not None:
        value = [param.items(v) for v in value]
    return value


def _descriptor(param: Param, description: str) -> ParameterDescriptor:
    desc = ParameterDescriptor(description=description, read_only=param.read_only)
    lo, hi, default = param.min, param.max, param.default
    if param.items is not None:
        desc.dynamic_typing = True
        desc.additional_constraints = param.constraints()
    elif param.choices:
        desc.additional_constraints = param.constraints()
    if isinstance(default, bool) or (lo is None and hi is None):
        pass
    elif isinstance(default, int):
        desc.integer_range = [
            IntegerRange(
                from_value=int(lo if lo is not None else -(2**31)),
                to_value=int(hi if hi is not None else 2**31 - 1),
                step=0,
            )
        ]
    elif isinstance(default, float):
        desc.floating_point_range = [
            FloatingPointRange(
                from_value=float(lo if lo is not None else -1e300),
                to_value=float(hi if hi is not None else 1e300),
                step=0.0,
            )
        ]
    return desc


def undeclared_overrides(node: Node) -> List[str]:
    """One warning per parameter given to ``node`` at start-up (``-p``, a parameters file, a
    launch file) that it does not declare, naming the closest declared ones: rclpy keeps such
    values and never uses them, so ``-p urdf:=my_arm.urdf`` for ``urdf_path`` would run the
    default robot without a word."""
    overrides: Mapping[str, Any] = getattr(node, '_parameter_overrides', {})
    declared = sorted(node.get_parameters_by_prefix(''))
    warnings = []
    for name in sorted(n for n in overrides if not node.has_parameter(n)):
        close = difflib.get_close_matches(name, declared, n=3, cutoff=0.6)
        hint = f' (did you mean {" or ".join(close)}?)' if close else ''
        warnings.append(
            f'parameter {name!r} is not a parameter of this node: its value is ignored{hint}; '
            "'ros2 param list' names them"
        )
    return warnings


class _NodeValues(Mapping[str, Any]):
    """A node's parameter values, read when asked (a check's view across parameters)."""

    def __init__(self, node: Node):
        self._node = node

    def __getitem__(self, name: str) -> Any:
        if not self._node.has_parameter(name):
            raise KeyError(name)
        return self._node.get_parameter(name).value

    def __iter__(self) -> Iterator[str]:
        return iter(self._node.get_parameters_by_prefix(''))

    def __len__(self) -> int:
        return len(self._node.get_parameters_by_prefix(''))


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
