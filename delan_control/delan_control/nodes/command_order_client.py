"""The joint order the torque controller's commands go out in, and where it comes from: the
``command_joints`` parameter, else the ``joints`` parameter of the receiving controller, asked
for over its parameter services without blocking (the decisions are
:class:`~delan_control.command_order.ReceiverOrderQuery`'s)."""

from __future__ import annotations

import time
from typing import List, Optional, Sequence, Tuple

from rclpy._rclpy_pybind11 import RCLError
from rclpy.node import Node
from rclpy.parameter import parameter_value_to_python
from rclpy.parameter_client import AsyncParameterClient

from delan_common.ros.spin import steady_timer
from delan_common.urdf_joints import RobotDescription, UrdfError
from delan_control.command_order import (
    CommandOrder,
    CommandOrderError,
    OrderDecision,
    ReceiverOrderQuery,
)

# how often the receiving controller's joints are looked for until known [s]
ORDER_POLL_S = 0.1


def node_name_error(node: Node, name: str) -> Optional[str]:
    """Why ``effort_controller_name`` ``name`` names no node (resolved in ``node``'s
    namespace), else None."""
    if not name or name.startswith('~'):
        return f'effort_controller_name={name!r} must name the receiving controller node'
    try:
        node.resolve_service_name(f'{name}/get_parameters')
    except (RCLError, ValueError) as err:
        return f'effort_controller_name={name!r} is not a node name: {err}'
    return None


class CommandOrderClient:
    """``order``: the order of the commands (read by the control thread; None: no commands,
    the order is not known yet or was refused), ``source``: where it comes from.

    ``explicit`` (``command_joints``) when given: joints other than those of ``robot`` raise
    ``ValueError``. Else the ``joints`` of the node ``receiver``, polled on the executor until
    answered, the model order past ``timeout`` [s]; an empty answer is the URDF's main chain
    (what the suite's sim takes it for)."""

    def __init__(
        self,
        node: Node,
        robot: RobotDescription,
        explicit: Sequence[str],
        receiver: str,
        timeout: float,
    ):
        self._node = node
        joint_names = list(robot.joint_names)
        self.query: Optional[ReceiverOrderQuery] = None
        self.order: Optional[CommandOrder] = None
        self._future = None
        if explicit:
            try:
                self.order = CommandOrder(joint_names, list(explicit))
            except CommandOrderError as err:
                raise ValueError(f'invalid parameter: command_joints: {err}') from None
            self.source = 'command_joints'
            return
        self.source = 'pending'
        # resolved as the parameter client resolves it
        service = node.resolve_service_name(f'{receiver}/get_parameters')
        self.query = ReceiverOrderQuery(
            joint_names,
            service[: -len('/get_parameters')],
            timeout,
            time.monotonic(),
            _main_chain(robot.xml),
        )
        self._client = AsyncParameterClient(node, receiver)
        self._timer = steady_timer(node, ORDER_POLL_S, self._poll)

    def status(self) -> Tuple[str, str]:
        """``(level, message)`` for diagnostics (level: info, warning or error)."""
        return ('info', 'ok') if self.query is None else self.query.status()

    def _poll(self) -> None:
        """Executor thread, until decided: ask the receiver for its joints once its parameter
        services are there, take its answer, or the model order past the deadline."""
        query, now = self.query, time.monotonic()
        decision = None
        future = self._future
        if future is not None and future.done():
            self._future = None
            decision = query.answer(*_answered_joints(future))
        if decision is None and query.request_due(now, self._client.services_are_ready()):
            query.sent(now)
            self._future = self._client.get_parameters(['joints'])
        decision = decision or query.expire(now)
        if decision is not None:
            self._adopt(decision)

    def _adopt(self, decision: OrderDecision) -> None:
        self.order = decision.order
        self.source = decision.source
        self._timer.cancel()
        log = self._node.get_logger()
        {'info': log.info, 'warning': log.warning, 'error': log.error}[decision.level](
            decision.message
        )


def _main_chain(robot_xml: str) -> Optional[List[str]]:
    """What an empty ``joints`` selects in the suite's nodes (the sim): the URDF's main chain,
    in model order (None when the URDF has none)."""
    try:
        return RobotDescription.load(robot_xml).joint_names
    except UrdfError:
        return None


def _answered_joints(future) -> Tuple[Optional[List[str]], str]:
    """(joint names or None, what the receiver has instead) from a GetParameters reply."""
    try:
        values = future.result().values
        value = parameter_value_to_python(values[0]) if values else None
    except Exception as err:  # noqa: BLE001 -- a failed call is no answer
        return None, f' (the request failed: {err!r})'
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return value, ''
    return None, '' if value is None else f' (its joints is {value!r})'
