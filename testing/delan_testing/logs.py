"""A logger for tests that keeps what it was told, by level (what the ROS-free classes take as
their ``log``)."""

from __future__ import annotations

from typing import Any, List, Tuple


class Log:
    """``info``, ``warning`` and ``error`` (keyword arguments, such as rclpy's
    ``throttle_duration_sec``, ignored), each line kept as ``(level, message)`` in ``lines``."""

    def __init__(self) -> None:
        self.lines: List[Tuple[str, str]] = []

    def info(self, message: str, **kwargs: Any) -> None:
        self.lines.append(('info', message))

    def warning(self, message: str, **kwargs: Any) -> None:
        self.lines.append(('warning', message))

    def error(self, message: str, **kwargs: Any) -> None:
        self.lines.append(('error', message))

    def said(self, level: str, text: str) -> bool:
        """Whether a line at ``level`` holds ``text``."""
        return any(lv == level and text in m for lv, m in self.lines)

    def of(self, level: str) -> List[str]:
        """The messages at ``level``, in order."""
        return [m for lv, m in self.lines if lv == level]
