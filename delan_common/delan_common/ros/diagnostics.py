"""Every node's health on ``/diagnostics`` the same way: one ``DiagnosticStatus`` per period,
built from a dict of values, named by the node and with a ``hardware_id`` (the robot), so
``rqt_robot_monitor`` / a diagnostic_aggregator / Foxglove group them by robot."""

from __future__ import annotations

from typing import Callable, Mapping, Optional, Tuple

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.node import Node

from delan_common.ros.qos import publisher_events
from delan_common.ros.spin import steady_timer

#: absolute: a diagnostic_aggregator listens there, whatever the namespace of the node
DIAGNOSTICS_TOPIC = '/diagnostics'

OK, WARN, ERROR = DiagnosticStatus.OK, DiagnosticStatus.WARN, DiagnosticStatus.ERROR

#: (level, message, values) of one report
Report = Tuple[bytes, str, Mapping[str, object]]


def diagnostic_status(
    name: str, hardware_id: str, level: bytes, message: str, values: Mapping[str, object]
) -> DiagnosticStatus:
    """A status whose values are ``str(v)`` of ``values`` (in their order)."""
    return DiagnosticStatus(
        level=level,
        name=name,
        message=message,
        hardware_id=hardware_id,
        values=[KeyValue(key=str(k), value=str(v)) for k, v in values.items()],
    )


def hardware_id(node: Node, robot_name: str = '') -> str:
    """The robot's name from its URDF, prefixed by the node's namespace when there is one (two
    arms of one model in ``/arm1`` and ``/arm2`` are two pieces of hardware); the node's fully
    qualified name when the robot is not known."""
    if not robot_name:
        return node.get_fully_qualified_name()
    ns = node.get_namespace().strip('/')
    return f'{ns}/{robot_name}' if ns else robot_name


class DiagnosticsReporter:
    """Publishes ``report()`` on :data:`DIAGNOSTICS_TOPIC` every ``period_s`` of the steady
    clock (it goes on when ``/clock`` stops: that is when a report matters). A report that
    raises is logged (throttled) and skipped: a report must never stop the node."""

    def __init__(
        self,
        node: Node,
        report: Callable[[], Report],
        hardware_id: str,
        name: Optional[str] = None,
        period_s: float = 1.0,
    ):
        self._node, self._report = node, report
        self.hardware_id = hardware_id
        self.name = name or node.get_fully_qualified_name()
        self._pub = node.create_publisher(
            DiagnosticArray,
            DIAGNOSTICS_TOPIC,
            10,
            event_callbacks=publisher_events(node, DIAGNOSTICS_TOPIC),
        )
        self.timer = steady_timer(node, period_s, self.publish)

    def publish(self) -> None:
        """Publish one report now; an exception is logged (throttled) and swallowed, as a report
        must never stop the node."""
        try:
            level, message, values = self._report()
            msg = DiagnosticArray(
                status=[diagnostic_status(self.name, self.hardware_id, level, message, values)]
            )
            msg.header.stamp = self._node.get_clock().now().to_msg()
            self._pub.publish(msg)
        except Exception as err:  # noqa: BLE001 -- a report must never stop the node
            self._node.get_logger().error(
                f'diagnostics failed: {err!r}', throttle_duration_sec=10.0
            )
