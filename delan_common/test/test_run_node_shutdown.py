"""``run_node``'s shutdown: SIGINT ends the node cleanly (close, then teardown, exit 0), and a
teardown stuck in the middleware dumps every thread's stack and exits 1 instead of waiting for
launch's SIGKILL without a trace. The probe's QoS event handlers hang if they are released after
the teardown (as the middleware did when the executor was destroyed after the context): the
executor must hold them until the process ends."""

import signal
import subprocess
import sys
import time

import pytest

PROBE = """
import sys, time
import rclpy
from rclpy.event_handler import EventHandler
from rclpy.node import Node
from delan_common.ros.spin import run_node

# A QoS event handler (the subscription's) whose release after the teardown (node destroyed,
# context shut down) never returns in the middleware
teardown_done = False
_try_shutdown, _release = rclpy.try_shutdown, EventHandler.__exit__

def try_shutdown(*args, **kwargs):
    global teardown_done
    _try_shutdown(*args, **kwargs)
    teardown_done = True

def release(self, *exc):
    if teardown_done:
        time.sleep(3600)
    _release(self, *exc)

rclpy.try_shutdown, EventHandler.__exit__ = try_shutdown, release

class Probe(Node):
    def __init__(self):
        super().__init__('shutdown_probe')
        self.create_subscription(__import__('std_msgs.msg').msg.Float64, 'x', lambda m: None, 1)
        self._up = self.create_timer(0.05, self._spinning)

    def _spinning(self):        # a callback runs: the spin loop holds the signal handlers
        self._up.cancel()
        print('up', flush=True)

    def close(self):
        if sys.argv[1] == 'close_fails':
            raise RuntimeError('bag writer failed')
        print('closed', flush=True)

    def destroy_node(self):
        if sys.argv[1] == 'hang':
            time.sleep(3600)        # a middleware thread that never returns
        print('destroyed', flush=True)
        return super().destroy_node()

raise SystemExit(run_node(Probe, []))
"""


def _run_until_sigint(mode: str, probe: str = PROBE, *args: str):
    """Run ``probe`` (its ``sys.argv[1:]``: ``mode``, ``args``) until it prints 'up', then SIGINT:
    its exit code, stdout, stderr and how long it took to end."""
    proc = subprocess.Popen(
        [sys.executable, '-c', probe, mode, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout.readline().strip() == 'up'
        proc.send_signal(signal.SIGINT)
        t0 = time.monotonic()
        out, err = proc.communicate(timeout=60)
        return proc.returncode, 'up\n' + out, err, time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_sigint_closes_then_tears_down_and_exits_zero():
    rc, out, err, _ = _run_until_sigint('clean')
    assert rc == 0, err
    assert out.split() == ['up', 'closed', 'destroyed']
    assert 'Thread' not in err


def test_stuck_teardown_dumps_stacks_and_exits_nonzero():
    from delan_common.ros.spin import TEARDOWN_TIMEOUT_S

    rc, out, err, took = _run_until_sigint('hang')
    assert rc == 1, (out, err)
    assert 'closed' in out and 'destroyed' not in out
    assert 'in destroy_node' in err  # the stuck frame is named
    assert took == pytest.approx(TEARDOWN_TIMEOUT_S, abs=3.0)


def test_a_failing_close_still_tears_down_and_exits_nonzero():
    rc, out, err, _ = _run_until_sigint('close_fails')
    assert rc == 1
    assert 'RuntimeError: bag writer failed' in err
    assert out.split() == ['up', 'destroyed']


TORCH_IN_CONSTRUCTOR = """
import os, signal, threading, time
import torch
from delan_common.ros.spin import run_node

def work():
    x = torch.randn(32, 32, dtype=torch.float64, requires_grad=True)
    while True:
        (x @ x).sin().sum().backward()

def factory():      # a node whose trainer thread is up when a signal ends its constructor
    threading.Thread(target=work, daemon=True).start()
    time.sleep(0.2)
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(5)
    raise AssertionError('no KeyboardInterrupt')

raise SystemExit(run_node(factory, []))
"""


def test_a_signal_during_start_up_with_torch_busy_in_a_daemon_thread_exits_zero():
    """Python's finalisation beside a daemon thread inside torch's autograd aborts the process
    (std::terminate, exit -6); ``run_node`` ends the process without it."""
    pytest.importorskip('torch')
    for _ in range(2):
        out = subprocess.run(
            [sys.executable, '-c', TORCH_IN_CONSTRUCTOR],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 0, out.stderr
        assert 'terminate called' not in out.stderr


UNDECLARED = """
import sys
from rclpy.node import Node
from delan_common.param_table import Param
from delan_common.ros.params import declare_table
from delan_common.ros.spin import run_node

class Probe(Node):
    def __init__(self):
        super().__init__('undeclared_probe')
        declare_table(self, (Param('real_time_factor', 1.0, 'sim speed'),))
        self._up = self.create_timer(0.05, self._spinning)

    def _spinning(self):
        self._up.cancel()
        print('up', flush=True)

raise SystemExit(run_node(Probe, sys.argv[2:]))
"""


def test_a_misspelt_command_line_parameter_is_a_warning():
    """``params.undeclared_overrides`` logged by ``run_node`` (its own tests in
    test_undeclared_parameters.py)."""
    args = ('--ros-args', '-p', 'rael_time_factor:=2.0', '-p', 'real_time_factor:=3.0')
    rc, _, err, _ = _run_until_sigint('', UNDECLARED, *args)
    assert rc == 0, err
    warned = [line for line in err.splitlines() if 'is not a parameter of this node' in line]
    assert len(warned) == 1, err
    assert "'rael_time_factor'" in warned[0] and 'did you mean real_time_factor' in warned[0]
