"""``LaunchedSuite`` (the demo's launch) in a process of its own, signalled as a CI timeout or
``kill`` would: on SIGTERM the launch ends, the processes it started are stopped (launch's own
SIGTERM handling leaves them running, publishing into the next run in the same ROS domain),
the work sees it, and the process exits non-zero."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid

LAUNCH = """
import sys
from launch import LaunchDescription
from launch.actions import ExecuteProcess

def generate_launch_description():
    sleep = 'import time; time.sleep(120)  # {marker}'
    return LaunchDescription([
        ExecuteProcess(cmd=[sys.executable, '-c', sleep], name=name)
        for name in ('sleeper_a', 'sleeper_b')
    ])
"""

DRIVER = """
import sys, time
from delan_control.launched import LaunchedSuite

suite = LaunchedSuite(sys.argv[1], {}, sys.argv[2])

def work():
    while len(suite.started) < 2:
        time.sleep(0.05)
    print('started', flush=True)
    while not (suite.terminated or suite.exits):
        time.sleep(0.05)
    print('work saw terminated', suite.terminated, 'exits', sorted(suite.exits), flush=True)
    return 3

sys.exit(suite.run(work))
"""


def _running(marker: str) -> list:
    out = subprocess.run(['pgrep', '-f', marker], capture_output=True, text=True).stdout
    return out.split()


def _read_until(proc: subprocess.Popen, text: str, timeout: float) -> str:
    seen = ''
    deadline = time.monotonic() + timeout
    while text not in seen and time.monotonic() < deadline and proc.poll() is None:
        seen += proc.stdout.readline()
    return seen


def test_sigterm_stops_the_launched_processes_and_the_work_sees_it(tmp_path):
    marker = 'sleeper-' + uuid.uuid4().hex
    launch_file = tmp_path / 'sleepers.launch.py'
    launch_file.write_text(LAUNCH.replace('{marker}', marker))
    driver = tmp_path / 'driver.py'
    driver.write_text(DRIVER)
    proc = subprocess.Popen(
        [sys.executable, str(driver), str(launch_file), str(tmp_path / 'logs')],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=dict(os.environ, PYTHONUNBUFFERED='1'),
    )
    try:
        out = _read_until(proc, 'started', 60.0)
        assert 'started' in out, out
        assert len(_running(marker)) == 2
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=30.0)
        out += rest
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in _running(marker):
            os.kill(int(pid), signal.SIGKILL)
    assert proc.returncode == 3, out  # the work's code: it saw the end and returned
    assert 'work saw terminated True' in out, out
    assert _running(marker) == [], out  # none of the launched processes outlived it
    assert took < 15.0, (took, out)
