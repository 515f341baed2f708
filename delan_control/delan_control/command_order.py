"""Torque commands in the joint order of the controller that receives them.

A ``std_msgs/Float64MultiArray`` command carries no joint names: ros2_control's
``forward_command_controller`` applies value k to joint k of its ``joints`` parameter, whatever
order the model (depth first) or ``joint_states`` (any order) has. A torque vector sent in the
model's order drives the wrong motors when that list is ordered differently, and a list naming
other joints cannot be commanded at all. :class:`CommandOrder` (from
:mod:`delan_common.command_order`, which the bag reader shares) reorders;
:class:`ReceiverOrderQuery` decides, once, which order the receiving controller wants.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence, Tuple

from delan_common.command_order import CommandOrder, CommandOrderError, order_mismatch

__all__ = [
    'REQUEST_RETRY_S',
    'CommandOrder',
    'CommandOrderError',
    'OrderDecision',
    'ReceiverOrderQuery',
    'order_mismatch',
]

#: seconds without an answer after which the receiver's joints are asked for again: a request
#: sent just as its services appeared can be lost while the middleware matches the reply path
REQUEST_RETRY_S = 1.0


@dataclass(frozen=True)
class OrderDecision:
    """The order commands go out in from now on (None: refuse to command), where it comes from,
    and what to log about it (``level``: info, warning or error)."""

    order: Optional[CommandOrder]
    source: str
    level: str
    message: str


class ReceiverOrderQuery:
    """The command order asked of the receiving controller (its ``joints`` parameter), decided
    once: its joints when it answers before ``timeout_s``, the model's order with a warning when
    it does not, no order at all (refuse to command) when its joints are not the model's.

    ``default_joints`` stands for an empty ``joints`` answer: the suite's own nodes (the sim)
    read ``[]`` as the URDF's main chain, in model order. None: an empty answer is no answer.
    Times are seconds of one monotonic clock."""

    def __init__(
        self,
        model_joints: Sequence[str],
        receiver: str,
        timeout_s: float,
        start: float,
        default_joints: Optional[Sequence[str]] = None,
    ):
        self.model_joints = list(model_joints)
        self.receiver = receiver
        self.deadline = start + timeout_s
        self.timeout_s = timeout_s
        self.default_joints = None if default_joints is None else list(default_joints)
        self.decision: Optional[OrderDecision] = None
        self._sent: Optional[float] = None

    def request_due(self, now: float, services_ready: bool) -> bool:
        """Whether to send a request now: undecided, the receiver's services are there, and no
        request is out or the last one went unanswered for :data:`REQUEST_RETRY_S`."""
        return (
            self.decision is None
            and services_ready
            and (self._sent is None or now - self._sent >= REQUEST_RETRY_S)
        )

    def sent(self, now: float) -> None:
        """Record that a request went out at ``now`` [s], so :meth:`request_due` waits before
        asking again."""
        self._sent = now

    def answer(self, joints: Optional[Sequence[str]], what: str = '') -> Optional[OrderDecision]:
        """The receiver's ``joints`` (None: it has no list of joint names; ``what`` says what it
        has instead); the decision, or None when it was taken already."""
        if self.decision is not None:
            return None
        if joints is not None and not joints and self.default_joints is not None:
            joints, what = self.default_joints, ' (its empty joints: the main chain)'
        if not joints:
            return self._decide(
                self._fallback(f'{self.receiver} has no joints parameter naming joints{what}')
            )
        try:
            order = CommandOrder(self.model_joints, joints)
        except CommandOrderError as err:
            return self._decide(
                OrderDecision(
                    None,
                    f'refused: {self.receiver}',
                    'error',
                    f'refusing to command: {self.receiver} takes commands for {err}',
                )
            )
        note = 'the model order' if order.is_model_order else 'reordered from the model order'
        return self._decide(
            OrderDecision(
                order,
                self.receiver,
                'info',
                f'commanding in the joint order of {self.receiver}{what}: {list(order.joints)} '
                f'({note})',
            )
        )

    def expire(self, now: float) -> Optional[OrderDecision]:
        """The fall-back decision once ``now`` is past the deadline with none taken."""
        if self.decision is not None or now < self.deadline:
            return None
        why = (
            'its parameter services never appeared' if self._sent is None else 'it did not answer'
        )
        return self._decide(
            self._fallback(f'no joints from {self.receiver} within {self.timeout_s:g} s ({why})')
        )

    def status(self) -> Tuple[str, str]:
        """``(level, message)`` for diagnostics (level: info, warning or error): waiting while
        undecided, else the decision's level and, unless info, its message."""
        if self.decision is None:
            return 'warning', f'waiting for the joint order of {self.receiver}'
        level = self.decision.level
        return level, 'ok' if level == 'info' else self.decision.message

    def _fallback(self, why: str) -> OrderDecision:
        return OrderDecision(
            CommandOrder(self.model_joints, self.model_joints),
            'model order (fallback)',
            'warning',
            f'{why}: commanding in the model joint order {self.model_joints}, which '
            'drives the wrong motors if the receiving controller orders its joints otherwise; '
            'set command_joints or effort_controller_name',
        )

    def _decide(self, decision: OrderDecision) -> OrderDecision:
        self.decision = decision
        return decision
