"""One ``main`` for every node: init, spin, clean shutdown on SIGINT/SIGTERM, clear start-up
errors.

Executor: rclpy's C++ ``EventsExecutor`` by default. It dispatches a callback in ~0.2 ms of CPU
where the Python ``SingleThreadedExecutor`` needs ~0.5 ms (it rebuilds the wait set in Python for
every wake-up) -- the difference between keeping up with 1 kHz joint states or not. The
environment variable ``DELAN_EXECUTOR=single`` (or ``multi``) selects the pure-Python executors,
e.g. to rule the experimental one out when chasing a bug.

numpy's BLAS runs single-threaded in every node (:func:`single_threaded_blas`).
"""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
import threading
import traceback
from typing import Callable, List, NoReturn, Optional, Sequence

import rclpy
from rclpy._rclpy_pybind11 import RCLError
from rclpy.clock import Clock, ClockType
from rclpy.context import Context
from rclpy.executors import (
    Executor,
    ExternalShutdownException,
    MultiThreadedExecutor,
    SingleThreadedExecutor,
)
from rclpy.node import Node
from rclpy.timer import Timer

from delan_common.ros.params import undeclared_overrides

EXECUTORS = ('events', 'single', 'multi')
# after a node's close(): destroying the node and the context takes milliseconds; past
# this a thread is stuck (in the middleware), and the process dumps every thread's stack and
# exits 1 rather than wait for launch's SIGKILL without a trace
TEARDOWN_TIMEOUT_S = 4.0
#: the executors of :func:`run_node`, held until ``os._exit`` ends the process: destroyed when
#: ``_run`` returns, an executor releases the entities it holds (QoS event handlers) after the
#: node and the context are gone, and that release was seen to hang in the middleware
_EXECUTORS: List[Executor] = []
_SHUTDOWN = (KeyboardInterrupt, ExternalShutdownException)


def make_executor(kind: Optional[str] = None, context: Optional[Context] = None) -> Executor:
    """``kind`` (default: ``$DELAN_EXECUTOR`` or ``events``) is one of :data:`EXECUTORS`; on
    ``context`` (default: rclpy's global one). The events executor cannot call subscription
    callbacks that take the message info (``(msg, info)``); nodes with those need ``single``."""
    kind = kind or os.environ.get('DELAN_EXECUTOR', '') or 'events'
    if kind == 'events':
        from rclpy.experimental import EventsExecutor

        return EventsExecutor(context=context)
    if kind == 'single':
        return SingleThreadedExecutor(context=context)
    if kind == 'multi':
        return MultiThreadedExecutor(context=context)
    raise ValueError(f'executor {kind!r} is not one of {list(EXECUTORS)} (DELAN_EXECUTOR)')


class BackgroundSpin:
    """Spins ``executor`` in a daemon thread, in short slices, until :meth:`stop`: for a process
    whose main thread runs a sequence (a demo, a tool) and waits on futures the executor
    completes. With the default executor this costs a fraction of what ``SingleThreadedExecutor``
    does, which rebuilds the wait set of every client and subscription in Python on each
    wake-up: a monitor with parameter clients for four nodes took CPU the learner beside it
    needed."""

    def __init__(self, executor: Executor, slice_s: float = 0.1):
        self.executor = executor
        self._stop = threading.Event()
        self._slice = float(slice_s)
        #: callbacks that raised (each logged with its traceback); the spinning goes on
        self.errors = 0
        self._thread = threading.Thread(target=self._run, daemon=True, name='background-spin')
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set() and self.executor.context.ok():
            try:
                self.executor.spin_once(timeout_sec=self._slice)
            except (*_SHUTDOWN, RCLError):
                if not self._stop.is_set() and self.executor.context.ok():
                    raise
                return
            except Exception:  # noqa: BLE001 -- one callback's bug must not end every wait
                # the main thread waits on futures this thread completes: a dead spin would
                # leave it waiting for its timeouts, so say what failed and go on
                self.errors += 1
                print(
                    f'[ERROR] a callback raised ({self.errors} so far):\n'
                    + traceback.format_exc(),
                    file=sys.stderr,
                    flush=True,
                )

    @property
    def running(self) -> bool:
        """Whether the spinning thread is alive."""
        return self._thread.is_alive()

    def stop(self, timeout: float = 10.0) -> None:
        """End the spinning (within one slice) and wait for the thread; then shut the executor
        down."""
        self._stop.set()
        self._thread.join(timeout=timeout)
        self.executor.shutdown()


def steady_timer(node: Node, period_s: float, callback: Callable[[], None]) -> Timer:
    """A timer on the steady clock, for periodic housekeeping (status, diagnostics, polling,
    watchdogs) that must go on whatever ``/clock`` does. Timers on ROS time stalled for up to 30 s
    under ``use_sim_time`` with the EventsExecutor (its timers manager does not follow the
    simulation clock, ros2/rclcpp#2457); callbacks that need sim time read ``get_clock()``."""
    return node.create_timer(period_s, callback, clock=Clock(clock_type=ClockType.STEADY_TIME))


def single_threaded_blas() -> Optional[str]:
    """Make numpy's BLAS (OpenBLAS in the PyPI wheels) compute on the calling thread only, for
    this whole process; None, or why not.

    A node's numpy algebra is on small matrices (a 7 x 7 mass matrix per sample), where a BLAS
    thread pool costs more than it saves. And OpenBLAS called from two threads of one process
    while its pool is active (the learner's intake and model estimates beside its training
    thread) returned wrong results: the learner filled its buffers with corrupted samples and
    learned far worse models, with no error anywhere. torch's threads are not affected.

    A BLAS loaded later reads its thread count from the environment when it loads (scipy
    brings an OpenBLAS of its own on its first import): ``OPENBLAS_NUM_THREADS`` is set to 1
    for those."""
    os.environ['OPENBLAS_NUM_THREADS'] = '1'
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return 'threadpoolctl is not installed (pip install threadpoolctl)'
    threadpool_limits(limits=1, user_api='blas')
    return None


def run_node(
    factory: Callable[[], Node],
    args: Optional[Sequence[str]] = None,
    executor_kind: Optional[str] = None,
) -> NoReturn:
    """Run the node until SIGINT/SIGTERM, then end the process. Exit codes: 0 after a clean
    shutdown (also one signalled while starting), 2 when the node cannot start (bad parameter,
    unusable URDF, ...), with the reason on stderr, 1 on an unexpected error (its traceback).

    The process ends with ``os._exit`` once the node is closed and destroyed and the context is
    shut down: Python's finalisation would run while daemon threads may still be inside C++ (a
    learner's trainer in torch's autograd when a signal interrupted its constructor, a model
    loader), and torch aborts the process then (``terminate called without an active
    exception``, exit -6). Nothing is left to finalise by then; stdout and stderr are flushed."""
    try:
        code = _run(factory, args, executor_kind)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # reported; the process then ends with 1
        traceback.print_exc()
        code = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def _run(
    factory: Callable[[], Node], args: Optional[Sequence[str]], executor_kind: Optional[str]
) -> int:
    blas = single_threaded_blas()
    if blas is not None:
        print(
            f'[WARN] numpy BLAS keeps its threads: {blas}; numpy called from several threads '
            'can then compute wrong results',
            file=sys.stderr,
        )
    rclpy.init(args=args)
    node = None
    try:
        try:
            node = factory()
            executor = make_executor(executor_kind)
            _EXECUTORS.append(executor)
            executor.add_node(node)
            for warning in undeclared_overrides(node):
                node.get_logger().warning(warning)
        except _SHUTDOWN:
            return 0
        except (ValueError, FileNotFoundError, RuntimeError) as exc:
            if not rclpy.ok():  # a signal arrived while the node was being built
                return 0
            print(f'[FATAL] could not start: {exc}', file=sys.stderr)
            return 2
        # From here a signal only asks the loop to end: raised as KeyboardInterrupt inside a
        # callback, the EventsExecutor logged it as a FATAL callback exception on every Ctrl-C.
        stop = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        try:
            # in short slices: Python runs signal handlers only between them -- the C++
            # EventsExecutor's spin() would never return to Python
            while rclpy.ok() and not stop.is_set():
                executor.spin_once(timeout_sec=0.1)
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
        try:
            close = getattr(node, 'close', None)
            if close is not None:
                close()
        finally:
            # armed until the process ends: a hang in the teardown leaves the stacks
            faulthandler.dump_traceback_later(TEARDOWN_TIMEOUT_S, exit=True)
            _teardown(node)


def _teardown(node: Optional[Node]) -> None:
    """The node, then the context. The executor is left to the end of the process
    (``os._exit``, see :func:`run_node` and :data:`_EXECUTORS`)."""
    if node is not None:
        node.destroy_node()
    # also when a signal already shut the context down: this uninstalls rclpy's signal handlers
    rclpy.try_shutdown()
