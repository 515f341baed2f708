"""QoS profiles shared by publishers and subscribers of the suite, so both ends always match, and
the one way every node reports a peer whose QoS does not match (instead of a silent topic)."""

from __future__ import annotations

from typing import Callable, List

from rclpy.event_handler import EventHandler, PublisherEventCallbacks, SubscriptionEventCallbacks
from rclpy.node import Node
from rclpy.qos import (
    DurabilityPolicy,
    HistoryPolicy,
    QoSProfile,
    ReliabilityPolicy,
    qos_policy_name_from_kind,
)

#: Latched: the last message is kept for late joiners (model versions, the reference in force).
LATCHED = QoSProfile(
    depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL
)

#: Joint-state subscriptions: a BEST_EFFORT, VOLATILE reader matches every writer -- reliable
#: ones (joint_state_broadcaster, the sim) and best-effort ones (drivers publishing with the
#: sensor-data profile) alike; a RELIABLE reader hears nothing from the latter. It gets no
#: resends, which a stream whose newest sample is what counts does not need (the data logger,
#: which records every sample, stays reliable by default). Keep-last: the depth is the
#: subscriber's (:func:`joint_states_qos`).
JOINT_STATES = QoSProfile(
    history=HistoryPolicy.KEEP_LAST,
    depth=10,
    reliability=ReliabilityPolicy.BEST_EFFORT,
    durability=DurabilityPolicy.VOLATILE,
)


def joint_states_qos(depth: int) -> QoSProfile:
    """:data:`JOINT_STATES` with a history of ``depth`` messages."""
    return QoSProfile(
        history=JOINT_STATES.history,
        depth=depth,
        reliability=JOINT_STATES.reliability,
        durability=JOINT_STATES.durability,
    )


def _incompatible_qos_warning(
    node: Node, topic: str, role: str, hint: str
) -> Callable[[object], None]:
    resolved = node.resolve_topic_name(topic)
    if role == 'subscription':
        what = (
            "a publisher on {topic} offers QoS incompatible with this node's subscription "
            '(policy {policy}): its messages are not received'
        )
    else:
        what = (
            "a subscription on {topic} requests QoS this node's publisher does not offer "
            '(policy {policy}): it receives nothing'
        )

    def warn(info) -> None:
        policy = qos_policy_name_from_kind(info.last_policy_kind)
        node.get_logger().warning(what.format(topic=resolved, policy=policy) + hint)

    return warn


def subscription_events(
    node: Node, topic: str, hint: str = '', **callbacks
) -> SubscriptionEventCallbacks:
    """Event callbacks for ``node.create_subscription(..., topic, ...)``: an incompatible
    publisher is logged as a warning naming the topic and the policy (``hint`` appended);
    ``callbacks``: further events (``message_lost=...``)."""
    return SubscriptionEventCallbacks(
        incompatible_qos=_incompatible_qos_warning(node, topic, 'subscription', hint), **callbacks
    )


def publisher_events(node: Node, topic: str, hint: str = '') -> PublisherEventCallbacks:
    """Event callbacks for ``node.create_publisher(..., topic, ...)``: an incompatible
    subscription is logged as a warning naming the topic and the policy."""
    return PublisherEventCallbacks(
        incompatible_qos=_incompatible_qos_warning(node, topic, 'publisher', hint)
    )


def create_publisher(node: Node, msg_type, topic: str, qos, hint: str = ''):
    """``node.create_publisher`` with :func:`publisher_events`."""
    return node.create_publisher(
        msg_type, topic, qos, event_callbacks=publisher_events(node, topic, hint)
    )


def create_subscription(node: Node, msg_type, topic: str, callback, qos, hint: str = '', **kwargs):
    """``node.create_subscription`` with :func:`subscription_events` (``kwargs``: ``raw``...)."""
    return node.create_subscription(
        msg_type,
        topic,
        callback,
        qos,
        event_callbacks=subscription_events(node, topic, hint),
        **kwargs,
    )


def watch_subscription(node: Node, handle, topic: str, hint: str = '') -> List[EventHandler]:
    """The events of :func:`subscription_events` for a subscription made without
    ``create_subscription`` (``handle``: an ``_rclpy.Subscription`` taken by a thread of its
    own), served by the node's executor. Returns them for :func:`unwatch`."""
    events = subscription_events(node, topic, hint).create_event_handlers(
        node.default_callback_group, handle, topic
    )
    for event in events:
        node.add_waitable(event)
    return events


def unwatch(node: Node, events: List[EventHandler]) -> None:
    """Take the events of :func:`watch_subscription` off the node and destroy them (before
    the subscription itself is destroyed)."""
    for event in events:
        try:
            node.remove_waitable(event)
        except ValueError:
            pass  # already removed
        event.destroy()
