"""One ``main`` for every node: init, spin, clean shutdown on SIGINT/SIGTERM, clear start-up errors."""
from __future__ import annotations

import signal
import sys
from typing import Callable, Optional, Sequence

import rclpy
from rclpy._rclpy_pybind11 import RCLError
from rclpy.executors import ExternalShutdownException, MultiThreadedExecutor, SingleThreadedExecutor
from rclpy.node import Node

_SHUTDOWN = (KeyboardInterrupt, ExternalShutdownException)


def run_node(factory: Callable[[], Node], args: Optional[Sequence[str]] = None,
             multithreaded: bool = False) -> int:
    """Exit codes: 0 after a clean shutdown (also one signalled while starting), 2 when the node
    cannot start (bad parameter, unusable URDF, ...), with the reason on stderr."""
    rclpy.init(args=args)
    node = None
    try:
        try:
            node = factory()
            executor = MultiThreadedExecutor() if multithreaded else SingleThreadedExecutor()
            executor.add_node(node)
        except _SHUTDOWN:
            return 0
        except (ValueError, FileNotFoundError, RuntimeError) as exc:
            if not rclpy.ok():  # a signal arrived while the node was being built
                return 0
            print(f'[FATAL] could not start: {exc}', file=sys.stderr)
            return 2
        try:
            executor.spin()
        except _SHUTDOWN:
            pass
        except RCLError:
            # a signal can shut the context down while the executor builds its wait set
            if rclpy.ok():
                raise
        return 0
    finally:
        # a second signal must not interrupt the flush/close of the node
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if node is not None:
            close = getattr(node, 'close', None)
            if close is not None:
                close()
            node.destroy_node()
        if rclpy.ok():
            rclpy.try_shutdown()
