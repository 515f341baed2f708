"""The suite's nodes started by ``launch`` from a bringup launch file, for a program that drives
them (the demo): the program's own work runs in a thread while the LaunchService runs in the main
thread, as it must; nodes can be stopped one at a time, and their exits are known.

Node output goes to ``log_dir`` (``launch``'s per-process log files), not to the terminal.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Callable, Dict, List, Optional, Set

import launch
from launch import LaunchDescription, LaunchService
from launch.actions import IncludeLaunchDescription, RegisterEventHandler
from launch.event_handlers import OnProcessExit, OnProcessStart
from launch.events.process import ShutdownProcess
from launch.launch_description_sources import PythonLaunchDescriptionSource


def executable_of(process_name: str) -> str:
    """``'data_logger'`` of launch's process name ``'data_logger-4'``."""
    return process_name.rsplit('-', 1)[0]


class LaunchedSuite:
    """A launch file's processes under one LaunchService.

    ``arguments`` are the launch arguments (``name -> value``). :meth:`run` returns the work's
    return value; the launch is shut down (SIGINT to every node, then SIGTERM) when the work
    ends, and the work sees nodes that exited early in :attr:`exits`. A SIGTERM to this process
    ends the launch and stops the nodes (:meth:`stop_leftovers`); :attr:`terminated` says so.
    """

    def __init__(self, launch_file: str, arguments: Dict[str, str], log_dir: str):
        os.makedirs(log_dir, exist_ok=True)
        launch.logging.launch_config.log_dir = log_dir
        self.log_dir = log_dir
        self._lock = threading.Lock()
        self.started: Set[str] = set()
        self.exits: Dict[str, int] = {}
        self._pids: Dict[str, int] = {}
        #: SIGTERM arrived: launch ended and the nodes were stopped
        self.terminated = False
        self._service = LaunchService(noninteractive=True)
        self._service.include_launch_description(
            LaunchDescription(
                [
                    RegisterEventHandler(OnProcessStart(on_start=self._on_start)),
                    RegisterEventHandler(OnProcessExit(on_exit=self._on_exit)),
                    IncludeLaunchDescription(
                        PythonLaunchDescriptionSource(launch_file),
                        launch_arguments=list(arguments.items()),
                    ),
                ]
            )
        )

    def _on_start(self, event, _context) -> None:
        with self._lock:
            self.started.add(executable_of(event.process_name))
            self._pids[executable_of(event.process_name)] = event.pid

    def _on_exit(self, event, _context) -> None:
        with self._lock:
            self.exits[executable_of(event.process_name)] = event.returncode

    def exit_code(self, executable: str) -> Optional[int]:
        """The return code of ``executable``'s process once it exited, else None."""
        with self._lock:
            return self.exits.get(executable)

    def log_files(self, executable: str) -> str:
        """Where ``executable``'s output goes (a glob pattern, for messages)."""
        return os.path.join(self.log_dir, f'{executable}-*.log')

    def stop(self, executable: str, timeout: float = 20.0) -> Optional[int]:
        """SIGINT to one node's process (as Ctrl-C); its return code, None if it did not exit
        within ``timeout`` s (launch then escalates to SIGTERM)."""
        self._shut_down(lambda name: name == executable)
        if not self._wait_exited([executable], timeout):
            return None
        return self.exit_code(executable)

    def stop_all(self, timeout: float = 20.0) -> Set[str]:
        """SIGINT to every running node; the nodes stopped (all started ones, once exited)."""
        self._shut_down(lambda name: True)
        with self._lock:
            started = set(self.started)
        self._wait_exited(started, timeout)
        return started

    def _shut_down(self, which: Callable[[str], bool]) -> None:
        self._service.emit_event(
            ShutdownProcess(
                process_matcher=lambda action: (
                    bool(action.process_details)
                    and which(executable_of(action.process_details['name']))
                )
            )
        )

    def _wait_exited(self, executables, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if all(e in self.exits for e in executables):
                    return True
            time.sleep(0.05)
        return False

    def run(self, work: Callable[[], int]) -> int:
        """Launch, run ``work()`` beside it, shut the launch down when it returns; ``work``'s
        return value, or 1 if it raised or the launch failed."""
        result = {'code': 1}
        launch_done = threading.Event()

        def worker() -> None:
            try:
                result['code'] = work()
            finally:
                # shutdown() does nothing before the service's loop runs: ask until it ends
                while not launch_done.is_set():
                    self._service.shutdown()
                    launch_done.wait(0.2)

        thread = threading.Thread(target=worker, name='launched-work', daemon=True)
        thread.start()
        # launch hears signals through the wakeup fd, which Python writes only for a signal
        # with a Python handler: without one, SIGTERM (a CI timeout, kill) ended this process
        # at once. With it, launch ends its run; the nodes, which launch leaves running on
        # SIGTERM, are stopped here.
        previous = signal.signal(signal.SIGTERM, self._on_sigterm)
        try:
            launch_code = self._service.run(shutdown_when_idle=False)
        finally:
            launch_done.set()
            signal.signal(signal.SIGTERM, previous)
            self.stop_leftovers()
        thread.join()
        return result['code'] if launch_code == 0 else max(result['code'], 1)

    def _on_sigterm(self, _signum, _frame) -> None:
        """SIGTERM's Python handler while launch runs; launch acts on it (its wakeup fd)."""
        self.terminated = True

    def stop_leftovers(self, timeout: float = 10.0) -> List[str]:
        """SIGINT, then after ``timeout`` s SIGKILL, to every started node that is still
        running after the launch ended, however it ended (launch's own SIGTERM handling leaves
        the nodes running, and a node outliving its launch publishes into the next run in the
        same ROS domain); their exits are recorded, so the work sees them. The names of the
        nodes stopped."""
        with self._lock:
            left = {n: pid for n, pid in self._pids.items() if n not in self.exits}
        left = {n: pid for n, pid in left.items() if _signal(pid, signal.SIGINT)}
        stopped = sorted(left)
        deadline = time.monotonic() + timeout
        while True:
            for name, pid in list(left.items()):
                code = _exit_code(pid)
                if code is not None:
                    with self._lock:
                        self.exits[name] = code
                    del left[name]
            if not left or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        for name, pid in left.items():
            _signal(pid, signal.SIGKILL)
            with self._lock:
                self.exits[name] = -signal.SIGKILL
        return stopped


def _signal(pid: int, sig: int) -> bool:
    """Send ``sig`` to ``pid``; False when no such process (it exited)."""
    try:
        os.kill(pid, sig)
        return True
    except ProcessLookupError:
        return False


def _exit_code(pid: int) -> Optional[int]:
    """The exit code of ``pid`` once it exited (negative: the signal that ended it; 0 for a
    process not ours to reap), reaping it when it is a child of this process; None while it
    runs."""
    try:
        done, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:  # not (or no longer) our child: ask the kernel
        return None if _signal(pid, 0) else 0
    if done == 0:
        return None
    return os.waitstatus_to_exitcode(status)
