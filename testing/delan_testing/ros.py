"""Helpers for tests that run real nodes over real DDS (used by every package's tests)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from typing import Callable, Iterator, Optional, Sequence

import rclpy
from rclpy._rclpy_pybind11 import InvalidHandle, RCLError
from rclpy.context import Context
from rclpy.executors import Executor, ExternalShutdownException, MultiThreadedExecutor
from rclpy.node import Node
from sensor_msgs.msg import JointState

from delan_testing.processes import node_process  # noqa: F401 (re-exported)


@contextmanager
def ros_context() -> Iterator[Context]:
    """An isolated rclpy context (init/shutdown) for one test."""
    ctx = Context()
    rclpy.init(context=ctx)
    try:
        yield ctx
    finally:
        rclpy.try_shutdown(context=ctx)


def spin_until(
    executor, predicate: Callable[[], bool], timeout_s: float, step_s: float = 0.01
) -> bool:
    """Spin ``executor`` until ``predicate()`` holds or ``timeout_s`` passes; return the
    predicate."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        executor.spin_once(timeout_sec=step_s)
    return predicate()


def spin_in_thread(executor: Executor) -> threading.Thread:
    """Spin ``executor`` in a daemon thread until its context shuts down. A test that leaves its
    ``ros_context`` while the thread is inside ``spin`` ends it quietly: the executor then raises
    on the context or on entities being destroyed, which is the shutdown, not a failure."""

    def spin() -> None:
        try:
            executor.spin()
        except (ExternalShutdownException, InvalidHandle, RCLError):
            if executor.context.ok() and not executor._is_shutdown:
                raise

    thread = threading.Thread(target=spin, daemon=True)
    thread.start()
    return thread


@contextmanager
def streaming_joint_states(
    pub, names: Sequence[str], position: Sequence[float], period: float = 0.004, t0: float = 100.0
) -> Iterator[None]:
    """Publishes a still arm's joint states on ``pub`` every ``period`` seconds of wall time
    (stamps from ``t0`` on, one ``period`` apart) while the block runs."""
    stop = threading.Event()

    def stream() -> None:
        t = t0
        while not stop.is_set():
            t += period
            msg = JointState(
                name=list(names), position=list(position), velocity=[0.0] * len(names)
            )
            msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(
                int(round(t * 1e9)), 1_000_000_000
            )
            pub.publish(msg)
            time.sleep(period)

    streamer = threading.Thread(target=stream, daemon=True)
    streamer.start()
    try:
        yield
    finally:
        stop.set()
        streamer.join(timeout=5.0)


def make_executor(ctx: Context, nodes: Sequence[Node], threads: int = 2) -> MultiThreadedExecutor:
    ex = MultiThreadedExecutor(num_threads=threads, context=ctx)
    for n in nodes:
        ex.add_node(n)
    return ex


def python_process(code: str, env: Optional[dict] = None, **popen_kwargs) -> subprocess.Popen:
    """Run a snippet of Python in a child interpreter (same venv, same ROS domain)."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    full_env.setdefault('PYTHONUNBUFFERED', '1')
    return subprocess.Popen([sys.executable, '-c', code], env=full_env, **popen_kwargs)


def stop_process(proc: subprocess.Popen, timeout: float = 20.0) -> Optional[int]:
    """End a node process started by a test: SIGCONT (it may have been stopped), SIGTERM, and
    SIGKILL if it has not exited within ``timeout``; returns its exit code."""
    if proc.poll() is None:
        try:
            os.kill(proc.pid, signal.SIGCONT)
            proc.terminate()
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        except ProcessLookupError:
            proc.wait()
    return proc.returncode


MALFORMED_KINDS = 11


def malformed_joint_state(i: int, names: Sequence[str], stamp=None) -> JointState:
    """The ``i``-th of :data:`MALFORMED_KINDS` kinds of bad joint state (cycling) for ``names``
    (two or more joints): each kind is refused by a learner or controller for another reason --
    NaN / Inf values, a missing or an unknown joint, lengths that do not match the names, no
    effort, efforts far beyond the limits, duplicated names, an empty message."""
    n = len(names)
    m = JointState(name=list(names), position=[0.1] * n, velocity=[0.0] * n, effort=[1.0] * n)
    if stamp is not None:
        m.header.stamp = stamp
    kind = i % MALFORMED_KINDS
    if kind == 0:
        m.position[0] = float('nan')
    elif kind == 1:
        m.effort[-1] = float('inf')
    elif kind == 2:
        m.velocity[0] = float('-inf')
    elif kind == 3:  # a joint missing
        m.name, m.position, m.velocity, m.effort = (
            x[:-1] for x in (m.name, m.position, m.velocity, m.effort)
        )
    elif kind == 4:  # an unknown joint instead of one
        m.name[-1] = 'no_such_joint'
    elif kind == 5:  # lengths do not match the names
        m.position = list(m.position) + [0.3]
    elif kind == 6:  # nothing to learn from
        m.effort = []
    elif kind == 7:  # beyond range_factor x the effort limit
        m.effort[0] = 1e6
    elif kind == 8:  # finite, absurdly far out of range
        m.effort = [1e300 * (-1) ** k for k in range(n)]
    elif kind == 9:  # duplicated names
        m.name[-1] = m.name[0]
    else:
        m.name, m.position, m.velocity, m.effort = [], [], [], []
    return m
