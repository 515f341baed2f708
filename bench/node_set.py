"""The benchmarks' set-up: the suite's nodes as real processes, the simulated arm's mismatch and
the per-process numbers read from /proc.

Shared by ``bench_control_loop.py`` and ``bench_soak.py`` so that both measure the same set-up:
the parameter file the launch files and ``make demo`` use (``config/sim_params.yaml``,
i.e. the arm with a payload and twice the friction), overridden where a benchmark needs it (1 kHz
joint states, real time instead of lockstep), and the demo's PD gains from the URDF inertia (the
controller's default gains fit the 2-link arm only: on the light wrist of the 7-DoF arm they are
unstable at 1 kHz).
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from typing import IO, Callable, Dict, List, Optional

import numpy as np
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: the test-only helpers (``delan_testing``), for the benchmarks that start nodes as the tests do
sys.path.insert(0, os.path.join(ROOT, 'testing'))
PARAMS_FILE = os.path.join(ROOT, 'delan_bringup', 'config', 'sim_params.yaml')
TWO_LINK = os.path.join(ROOT, 'delan_bringup', 'urdf', 'two_link_arm.urdf')


def log(msg: str) -> None:
    """Progress on stderr, so the tables on stdout stay clean."""
    print(f'[bench {time.strftime("%H:%M:%S")}] {msg}', file=sys.stderr, flush=True)


def private_domain() -> int:
    """A random DDS domain on loopback (unless the caller chose one), like the test suite: the
    benchmark neither hears nor disturbs other runs on the machine."""
    if 'ROS_DOMAIN_ID' not in os.environ:
        os.environ['ROS_DOMAIN_ID'] = str(random.SystemRandom().randint(101, 200))
    os.environ.setdefault('ROS_AUTOMATIC_DISCOVERY_RANGE', 'LOCALHOST')
    return int(os.environ['ROS_DOMAIN_ID'])


def provenance() -> str:
    """The commit measured, and whether the working tree differs from it (the code under test
    changes while people work: a figure without its commit cannot be compared)."""
    try:
        head = subprocess.run(
            ['git', 'log', '-1', '--oneline', '--no-decorate'],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
        dirty = subprocess.run(
            ['git', 'status', '--porcelain', '--untracked-files=no'],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return 'commit unknown'
    changed = [line[3:] for line in dirty.splitlines() if line.strip()]
    return f'commit {head[:60]}' + (
        f' + uncommitted changes in {", ".join(changed)}' if changed else ''
    )


def load_text() -> str:
    load = os.getloadavg()
    return f'{os.cpu_count()} CPUs, load average {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f}'


# ---------------------------------------------------------------------------- /proc
def proc_memory(pid: int) -> Dict[str, float]:
    """Resident memory of a process [MB]: ``rss`` = ``anon`` (heap, stacks: what a leak grows)
    + ``file`` (mapped libraries: torch alone is ~200 MB and never grows) + shmem. NaN once the
    process is gone."""
    keys = {'VmRSS:': 'rss', 'RssAnon:': 'anon', 'RssFile:': 'file'}
    out = dict.fromkeys(keys.values(), float('nan'))
    try:
        with open(f'/proc/{pid}/status') as f:
            for line in f:
                key = line.split(':', 1)[0] + ':'
                if key in keys:
                    out[keys[key]] = int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return out


def rss_mb(pid: int) -> float:
    return proc_memory(pid)['rss']


def cpu_s(pid: int) -> float:
    """User + system CPU time of a process [s] (all its threads)."""
    try:
        with open(f'/proc/{pid}/stat') as f:
            fields = f.read().rsplit(')', 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf('SC_CLK_TCK')
    except (OSError, IndexError, ValueError):
        return float('nan')


def dir_bytes(path: str) -> int:
    """Bytes of all files under ``path`` (a bag folder grows while it is written)."""
    total = 0
    for dirpath, _, files in os.walk(path):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(dirpath, name))
            except OSError:
                pass  # a file renamed or removed while we walk
    return total


# ---------------------------------------------------------------------------- the set-up
def node_params(node: str) -> Dict:
    """The ``ros__parameters`` of ``node`` in the parameter file."""
    with open(PARAMS_FILE) as f:
        data = yaml.safe_load(f)
    return dict(data.get(f'/**/{node}', {}).get('ros__parameters', {}))


def sim_mismatch():
    """The plant mismatch of the parameter file's sim as a ``Mismatch`` (for the simulated
    identification data of model=identified: the same arm the sim node simulates)."""
    from delan_common.robot_model import Mismatch

    return Mismatch.from_params(node_params('sim'))


def pd_gains(urdf: str, rate: float = 500.0) -> Dict[str, str]:
    """``kp`` / ``kd`` parameters (critically damped per joint, from the nominal inertia at mid
    range, stable at ``rate`` Hz) of ``make demo``'s PD controller, by the same function."""
    from delan_common.robot_model import RobotModel
    from delan_control.control_laws import pd_gains as gains_of

    model = RobotModel(urdf)
    lo, hi = model.sample_bounds()
    gains = gains_of(model.mass_matrix(0.5 * (lo + hi)), 1.0 / rate)
    return {
        k: '[' + ','.join(f'{v:.6g}' for v in np.asarray(g)) + ']'
        for k, g in zip(('kp', 'kd'), gains)
    }


def identified_params(urdf: str, path: str) -> None:
    """Identify the mismatched arm (classical least squares) from simulated excitation data of
    ``urdf`` -- a few seconds; what model=identified loads."""
    from delan_control.datagen import generate_dataset
    from delan_control.sysid import identify_dataset

    data = generate_dataset(
        urdf, trajectories=3, duration=8.0, rate=500.0, seed=5, mismatch=sim_mismatch()
    )
    model, _ = identify_dataset(urdf, data)
    model.save(path)


def realtime_sim(rate: float) -> Dict:
    """Overrides of the parameter file's lockstep sim: joint states at ``rate`` Hz in real time
    whether or not the controller keeps up (a late command is then a missed cycle), no /clock
    (the nodes run on the system clock)."""
    return {
        'publish_rate': rate,
        'lockstep': 'false',
        'real_time_factor': 1.0,
        'publish_clock': 'false',
    }


def finish(folder: str, keep: bool, code: int) -> int:
    """A benchmark's exit code ``code``; its folder kept and named when ``keep`` or after a
    failure, else removed."""
    if keep or code:
        print(f'logs: {folder}')
    else:
        shutil.rmtree(folder, ignore_errors=True)
    return code


class NodeSet:
    """The suite's nodes as processes from the installed console scripts, each with the
    parameter file (``params_file``; None: none), ``urdf_path`` and its own overrides; logs in
    ``folder``."""

    def __init__(self, folder: str, urdf: str, params_file: Optional[str] = PARAMS_FILE):
        self.folder = folder
        self.urdf = urdf
        self.params_file = params_file
        self.procs: Dict[str, subprocess.Popen] = {}
        self._logs: List[IO] = []

    def start(self, package: str, executable: str, params: Dict) -> subprocess.Popen:
        from delan_testing.processes import node_process

        ros_args = ['--params-file', self.params_file] if self.params_file else []
        ros_args += ['-p', f'urdf_path:={self.urdf}']
        for k, v in params.items():
            ros_args += ['-p', f'{k}:={v}']
        f = open(os.path.join(self.folder, f'{executable}.log'), 'w')
        self._logs.append(f)
        p = node_process(
            package, executable, ros_args, stdout=f, stderr=subprocess.STDOUT, cwd=self.folder
        )
        self.procs[executable] = p
        return p

    def start_learner(self, params: Optional[Dict] = None) -> subprocess.Popen:
        """The learner as the benchmarks run it: from scratch, checkpoints in the folder's
        ``ckpt``, one torch thread; ``params`` over those."""
        return self.start(
            'delan_learning',
            'learner',
            {
                'checkpoint_dir': os.path.join(self.folder, 'ckpt'),
                'resume': 'false',
                'torch_threads': 1,
                **(params or {}),
            },
        )

    def pids(self) -> Dict[str, int]:
        return {name: p.pid for name, p in self.procs.items()}

    def check_alive(self) -> None:
        for name, p in self.procs.items():
            if p.poll() is not None:
                raise RuntimeError(
                    f'{name} exited with {p.returncode}; log in {self.folder}/{name}.log'
                )

    def wait(self, what: str, predicate: Callable[[], bool], timeout: float) -> None:
        """Until ``predicate()``; a node that dies meanwhile or the timeout is an error."""
        deadline = time.monotonic() + timeout
        while not predicate():
            self.check_alive()
            if time.monotonic() > deadline:
                raise RuntimeError(f'timed out waiting for {what}')
            time.sleep(0.05)

    def stop(self, name: str, timeout: float = 20.0) -> Optional[int]:
        """SIGINT (a clean shutdown: the logger closes its bag), SIGKILL after ``timeout``."""
        p = self.procs[name]
        if p.poll() is None:
            p.send_signal(signal.SIGINT)
        try:
            return p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            log(f'{name} did not stop on SIGINT within {timeout:.0f} s: killed')
            p.kill()
            p.wait()
            return None

    def stop_all(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGINT)
        for name in self.procs:
            self.stop(name)
        for f in self._logs:
            f.close()
        self._logs.clear()
