#!/usr/bin/env python3
"""Control-loop latency at 1 kHz over DDS, with the online learner training in parallel.

Set-up: real processes from the installed console scripts -- ``sim`` (the mismatched arm of
launch/config/sim_params.yaml: 0.6 kg payload, friction x2; joint states at ``--rate`` Hz,
*not* lockstep, real time), ``torque_controller``, ``reference`` (excitation, repeating) and
``learner`` (training continually on the same joint states, publishing a model version every
5 s) -- plus a probe node in this process.

For each model (pd, pinocchio, identified, delan; switched at runtime with a parameter set, as
``ros2 param set`` does) the probe records the *source* timestamps (DDS, stamped by the writer
when the sample was published) of every joint state and every effort command for
``--duration`` seconds. Events are put in time order and each command is matched to the state
published just before it (arrival order):

* latency = command published - state published: transport sim -> controller, the callback
  and the publish; the probe's own speed does not enter (it only reads the stamps).
* missed cycle = a state followed by the next state with no command in between (the
  controller answered late or not at all); ``extra`` commands are the late answers.

``identified`` uses parameters identified (``sysid``) from simulated excitation data of the
same mismatched arm, made at start-up; ``delan`` takes the learner's latest model version and
every new one it publishes during the run (``delan_checkpoint`` empty) -- the product set-up.
RSS of every process is read from /proc at the start of the first and the end of the last run.

Usage: ``python bench/bench_control_loop.py [--duration 60] [--models pd,delan] [--rate 1000]``
(``--duration 20`` for a quick run). Prints a table; exit code 1 only if a node dies.
"""
from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from array import array
from typing import Dict, List, Optional

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
URDF = os.path.join(ROOT, 'urdf', 'two_link_arm.urdf')
MODELS = ('pd', 'pinocchio', 'identified', 'delan')
PAYLOAD, FRICTION = 0.6, 2.0


def log(msg: str) -> None:
    print(f'[bench {time.strftime("%H:%M:%S")}] {msg}', file=sys.stderr, flush=True)


def rss_mb(pid: int) -> float:
    try:
        with open(f'/proc/{pid}/status') as f:
            for line in f:
                if line.startswith('VmRSS:'):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return float('nan')


def cpu_s(pid: int) -> float:
    """User + system CPU time of a process [s] (all its threads)."""
    try:
        with open(f'/proc/{pid}/stat') as f:
            fields = f.read().rsplit(')', 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf('SC_CLK_TCK')
    except (OSError, IndexError, ValueError):
        return float('nan')


def identified_params(path: str) -> None:
    """Identify the mismatched arm from simulated excitation data (a few seconds)."""
    from delan_control.datagen import generate_dataset
    from delan_control.robot_model import Mismatch
    from delan_control.sysid import identify_dataset
    data = generate_dataset(URDF, trajectories=3, duration=8.0, rate=500.0, seed=5,
                            mismatch=Mismatch(payload_mass=PAYLOAD, viscous_scale=FRICTION,
                                              coulomb_scale=FRICTION))
    model, _ = identify_dataset(URDF, data)
    model.save(path)


class Probe:
    """Source timestamps of joint states and commands; the controller's diagnostics; the
    learner's status and model updates; a parameter client for the controller."""

    def __init__(self):
        import rclpy
        from delan_msgs.msg import ModelStatus, ModelUpdate
        from diagnostic_msgs.msg import DiagnosticArray
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.parameter_client import AsyncParameterClient
        from rclpy.qos import QoSProfile, ReliabilityPolicy
        from sensor_msgs.msg import JointState
        from std_msgs.msg import Float64MultiArray

        from delan_learning.ros.qos import LATCHED
        self.node = rclpy.create_node('bench_probe')
        self._lock = threading.Lock()
        self.states = array('q')       # source stamps [ns, system clock] of all joint states
        self.commands = array('q')     # ... and of all commands
        self.diag: Dict[str, str] = {}
        self.status = None
        self.updates = 0
        self.last_checkpoint = ''
        self.state_count = 0
        # best effort: a probe that falls behind must never hold up the sim's or the
        # controller's (reliable) writers; with a deep queue on loopback nothing is lost unless
        # the probe lags by 10 s (a gap in the states would show as a rate below --rate)
        qos = QoSProfile(depth=10000, reliability=ReliabilityPolicy.BEST_EFFORT)
        # raw: no deserialisation, the probe only needs the stamps of the samples
        self.node.create_subscription(JointState, 'joint_states', self._on_state, qos, raw=True)
        self.node.create_subscription(Float64MultiArray, 'effort_controller/commands',
                                      self._on_command, qos, raw=True)
        self.node.create_subscription(DiagnosticArray, 'diagnostics', self._on_diag, 10)
        self.node.create_subscription(ModelStatus, 'learner/status', self._on_status, 10)
        self.node.create_subscription(ModelUpdate, 'learner/model_update', self._on_update,
                                      LATCHED)
        self.params = AsyncParameterClient(self.node, 'torque_controller')
        self.ex = SingleThreadedExecutor()
        self.ex.add_node(self.node)
        self.thread = threading.Thread(target=self.ex.spin, daemon=True)
        self.thread.start()

    def _on_state(self, _msg, info) -> None:
        self.state_count += 1
        with self._lock:
            self.states.append(info['source_timestamp'])

    def _on_command(self, _msg, info) -> None:
        with self._lock:
            self.commands.append(info['source_timestamp'])

    def _on_diag(self, msg) -> None:
        for st in msg.status:
            if 'torque_controller' in st.name:
                self.diag = {kv.key: kv.value for kv in st.values}

    def _on_status(self, msg) -> None:
        self.status = msg

    def _on_update(self, msg) -> None:
        self.updates += 1
        self.last_checkpoint = msg.checkpoint_path

    def set_model(self, model: str) -> None:
        from rclpy.parameter import Parameter
        if not self.params.wait_for_services(timeout_sec=60.0):
            raise RuntimeError('torque_controller parameter services not available')
        future = self.params.set_parameters([Parameter('model', value=model)])
        deadline = time.monotonic() + 60.0
        while not future.done():
            if time.monotonic() > deadline:
                raise RuntimeError(f'setting model={model} timed out')
            time.sleep(0.01)
        res = future.result().results[0]
        if not res.successful:
            raise RuntimeError(f'model={model} refused: {res.reason}')

    def stamps(self):
        with self._lock:
            return (np.array(self.states, dtype=np.int64),
                    np.array(self.commands, dtype=np.int64))

    def record(self, seconds: float):
        """Stamps of a window of ``seconds`` (selected by source stamp, so a probe that lags
        behind the 2 kHz of messages does not cut the window short or unevenly)."""
        with self._lock:
            self.states, self.commands = array('q'), array('q')
        t0 = time.time_ns()
        time.sleep(seconds)
        t1 = time.time_ns()
        deadline = time.monotonic() + 60.0
        while time.monotonic() < deadline:   # until the probe has caught up past the window
            with self._lock:
                done = (len(self.states) and self.states[-1] > t1 + 50_000_000
                        and len(self.commands) and self.commands[-1] > t1)
            if done:
                break
            time.sleep(0.05)
        states, commands = self.stamps()
        return states, commands, t0, t1

    def close(self) -> None:
        self.ex.shutdown(timeout_sec=5.0)
        self.node.destroy_node()


def analyse(states: np.ndarray, commands: np.ndarray, t0: int, t1: int) -> Dict:
    """Match each command to the state published just before it; count missed cycles, over
    the states published in ``[t0, t1)`` (ns)."""
    states = np.sort(states)
    commands = np.sort(commands)
    i0, i1 = np.searchsorted(states, [t0, t1])
    states = states[i0:min(i1, len(states) - 1) + 1]    # + the next one, closing the last cycle
    commands = commands[(commands > states[0]) & (commands < states[-1])]
    # index of the state preceding each command
    k = np.searchsorted(states, commands, side='right') - 1
    first = np.ones(len(k), dtype=bool)
    first[1:] = k[1:] != k[:-1]          # the first command after each state answers it
    answered = np.zeros(len(states), dtype=bool)
    answered[k[first]] = True
    latency_us = (commands[first] - states[k[first]]) * 1e-3
    n = len(states) - 1                  # the last state only closes the window
    missed = int(np.count_nonzero(~answered[:n]))
    span = (states[-1] - states[0]) * 1e-9
    return {'states': len(states), 'rate_hz': (len(states) - 1) / span if span > 0 else 0.0,
            'commands': len(commands), 'extra': int(np.count_nonzero(~first)),
            'p50': float(np.percentile(latency_us, 50)) if len(latency_us) else float('nan'),
            'p99': float(np.percentile(latency_us, 99)) if len(latency_us) else float('nan'),
            'max': float(latency_us.max()) if len(latency_us) else float('nan'),
            'missed': missed, 'missed_pct': 100.0 * missed / max(n, 1)}


def callback_cost(models: List[str], ident: str, checkpoint: str, n: int = 3000) -> Dict:
    """CPU time of the controller's joint-state callback alone [us per call]: in this process,
    called directly (no executor, no DDS receive), following an excitation reference."""
    import rclpy
    from rclpy.parameter import Parameter
    from sensor_msgs.msg import JointState

    from delan_control.nodes.reference import to_msg
    from delan_control.nodes.torque_controller import TorqueControllerNode
    from delan_control.trajectories import make_reference
    from delan_learning.urdf_joints import RobotDescription
    rclpy.logging.set_logger_level('torque_controller', rclpy.logging.LoggingSeverity.WARN)
    robot = RobotDescription.load(URDF)
    t, q, qd, qdd = make_reference('excitation', robot.lower, robot.upper,
                                   robot.velocity_limits, None, duration=30.0)
    t0 = 1_000_000_000_000
    ref = to_msg(robot.joint_names, t0, t, q, qd, qdd)
    out = {}
    ctx = rclpy.Context()
    rclpy.init(context=ctx)
    try:
        for model in models:
            if model == 'delan' and not checkpoint:
                continue
            node = TorqueControllerNode(context=ctx, parameter_overrides=[
                Parameter('urdf_path', value=URDF), Parameter('model', value=model),
                Parameter('identified_params', value=ident if model == 'identified' else ''),
                Parameter('delan_checkpoint', value=checkpoint if model == 'delan' else ''),
                Parameter('watchdog_timeout', value=10.0)])
            try:
                node._on_reference(ref)
                msgs = []
                for k in range(n):
                    i = (k * 7) % len(t)
                    m = JointState(name=robot.joint_names, position=q[i].tolist(),
                                   velocity=qd[i].tolist(), effort=[0.0] * len(q[i]))
                    m.header.stamp.sec, m.header.stamp.nanosec = divmod(
                        t0 + int(2e9) + k * 1_000_000, 1_000_000_000)
                    msgs.append(m)
                for m in msgs[:200]:
                    node._on_joint_state(m)
                c0 = time.thread_time()
                for m in msgs[200:]:
                    node._on_joint_state(m)
                out[model] = (time.thread_time() - c0) / (n - 200) * 1e6
            finally:
                node.destroy_node()
    finally:
        rclpy.try_shutdown(context=ctx)
    return out


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--duration', type=float, default=60.0, help='seconds measured per model')
    ap.add_argument('--models', default=','.join(MODELS), help='comma-separated subset')
    ap.add_argument('--rate', type=float, default=1000.0, help='joint_states rate [Hz]')
    ap.add_argument('--settle', type=float, default=3.0, help='seconds after a switch')
    ap.add_argument('--no-learner', action='store_true', help='without the learner')
    ap.add_argument('--keep', action='store_true', help='keep the temporary folder (logs)')
    args = ap.parse_args(argv)
    models = [m.strip() for m in args.models.split(',') if m.strip()]
    bad = [m for m in models if m not in MODELS]
    if bad:
        ap.error(f'unknown models {bad}; choose from {MODELS}')
    # a private DDS domain on loopback, like the test suite: other runs are not heard
    if 'ROS_DOMAIN_ID' not in os.environ:
        os.environ['ROS_DOMAIN_ID'] = str(random.SystemRandom().randint(101, 200))
    os.environ.setdefault('ROS_AUTOMATIC_DISCOVERY_RANGE', 'LOCALHOST')

    import rclpy

    from delan_learning.ros.processes import node_process
    tmp = tempfile.mkdtemp(prefix='bench_control_loop_')
    ident = os.path.join(tmp, 'identified.json')
    if 'identified' in models:
        t0 = time.monotonic()
        identified_params(ident)
        log(f'identified parameters in {time.monotonic() - t0:.1f} s -> {ident}')
    procs: Dict[str, subprocess.Popen] = {}
    logs = []

    def start(pkg, exe, params):
        ros_args = ['-p', f'urdf_path:={URDF}']
        for k, v in params.items():
            ros_args += ['-p', f'{k}:={v}']
        f = open(os.path.join(tmp, f'{exe}.log'), 'w')
        logs.append(f)
        procs[exe] = node_process(pkg, exe, ros_args, stdout=f, stderr=subprocess.STDOUT,
                                  cwd=tmp)

    rclpy.init()
    probe = None
    rows, rss = [], {}
    code = 0
    try:
        start('delan_control', 'sim', {'publish_rate': args.rate, 'lockstep': 'false',
                                       'real_time_factor': 1.0, 'payload_mass': PAYLOAD,
                                       'friction_scale': FRICTION, 'command_timeout': 0.1})
        start('delan_control', 'torque_controller', {
            'model': 'pd', 'watchdog_timeout': 0.1, 'switch_blend_time': 0.2,
            **({'identified_params': ident} if 'identified' in models else {})})
        start('delan_control', 'reference', {'trajectory': 'excitation', 'duration': 30.0,
                                             'repeat': 'true'})
        if not args.no_learner:
            start('delan_learning', 'learner', {
                'checkpoint_dir': os.path.join(tmp, 'ckpt'), 'resume': 'false',
                'torch_threads': 1, 'publish_period': 5.0, 'min_samples': 2000})
        probe = Probe()

        def wait(what, predicate, timeout):
            deadline = time.monotonic() + timeout
            while not predicate():
                for name, p in procs.items():
                    if p.poll() is not None:
                        raise RuntimeError(f'{name} exited with {p.returncode}; log in {tmp}')
                if time.monotonic() > deadline:
                    raise RuntimeError(f'timed out waiting for {what}')
                time.sleep(0.05)
        wait('joint states', lambda: probe.state_count > 100, 60.0)
        wait('the controller', lambda: bool(probe.diag), 60.0)
        if not args.no_learner:
            wait('the learner', lambda: probe.status is not None, 90.0)
        log(f'nodes up (ROS_DOMAIN_ID {os.environ["ROS_DOMAIN_ID"]}, logs in {tmp})')
        for i, model in enumerate(models):
            if model == 'delan':
                if args.no_learner:
                    raise RuntimeError('model=delan needs the learner (drop --no-learner)')
                wait('a learned model', lambda: probe.updates > 0, 300.0)
            probe.set_model(model)
            time.sleep(args.settle)
            if i == 0:
                rss = {name: [rss_mb(p.pid), float('nan')] for name, p in procs.items()}
                rss['bench (probe)'] = [rss_mb(os.getpid()), float('nan')]
            diag0, st0, up0 = dict(probe.diag), probe.status, probe.updates
            row: Dict = {}
            log(f'measuring model={model} for {args.duration:.0f} s')
            pids = {name: p.pid for name, p in procs.items()}
            pids['bench'] = os.getpid()
            cpu0 = {name: cpu_s(pid) for name, pid in pids.items()}
            w0 = time.monotonic()
            states, commands, t0, t1 = probe.record(args.duration)
            wall = time.monotonic() - w0
            row['cpu'] = {name: 100.0 * (cpu_s(pid) - cpu0[name]) / wall
                          for name, pid in pids.items()}
            time.sleep(1.1)          # one more diagnostics period
            if len(states) < 2:
                raise RuntimeError(f'no joint states recorded with model={model}')
            row.update(analyse(states, commands, t0, t1))
            row['model'] = model
            # CPU time of the controller per command it sent (callback + executor + DDS)
            row['ctl_us'] = row['cpu']['torque_controller'] * 1e4 * wall / max(
                row['commands'] * wall / ((t1 - t0) * 1e-9), 1)
            d1 = probe.diag
            row['trips'] = int(d1.get('watchdog_trips', 0)) - int(diag0.get('watchdog_trips', 0))
            row['fallbacks'] = int(d1.get('fallbacks', 0)) - int(diag0.get('fallbacks', 0))
            row['updates'] = probe.updates - up0
            st1 = probe.status
            if st0 is not None and st1 is not None:
                row['learner_steps'] = int(st1.training_steps - st0.training_steps)
                row['learner_hz'] = (st1.samples_seen - st0.samples_seen) / (
                    (st1.header.stamp.sec + 1e-9 * st1.header.stamp.nanosec)
                    - (st0.header.stamp.sec + 1e-9 * st0.header.stamp.nanosec))
            rows.append(row)
            log(f'{model}: p50 {row["p50"]:.0f} us, p99 {row["p99"]:.0f} us, max '
                f'{row["max"]:.0f} us, missed {row["missed"]} of {row["states"]}')
        for name, p in procs.items():
            if name in rss:
                rss[name][1] = rss_mb(p.pid)
        rss['bench (probe)'][1] = rss_mb(os.getpid())
    except RuntimeError as err:
        log(f'FAILED: {err}')
        code = 1
    finally:
        for name, p in procs.items():
            if p.poll() is None:
                p.send_signal(signal.SIGINT)
        for name, p in procs.items():
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for f in logs:
            f.close()
        if probe is not None:
            probe.close()
        rclpy.try_shutdown()

    load = os.getloadavg()
    print(f'\nControl loop: joint_states at {args.rate:g} Hz (sim, real time, not lockstep) -> '
          f'torque_controller -> effort commands; learner '
          f'{"training in parallel" if not args.no_learner else "off"}; {args.duration:g} s per '
          f'model; {os.cpu_count()} CPUs, load average {load[0]:.2f} / {load[1]:.2f}')
    print('latency = command source stamp - source stamp of the state before it; missed = '
          'states with no command before the next state. While cycles are missed the controller '
          'answers from a backlog, so a command is matched to a newer state than the one it '
          'answers: latencies are then lower bounds.\n')
    hdr = (f'{"model":>10s} {"states":>7s} {"Hz":>7s} {"p50 us":>7s} {"p99 us":>8s} '
           f'{"max us":>8s} {"missed":>7s} {"missed%":>7s} {"extra":>6s} {"trips":>5s} '
           f'{"fallbk":>6s} {"updates":>7s} {"learner steps":>13s} {"learner Hz":>10s}')
    print(hdr)
    print('-' * len(hdr))
    for r in rows:
        print(f'{r["model"]:>10s} {r["states"]:7d} {r["rate_hz"]:7.1f} {r["p50"]:7.0f} '
              f'{r["p99"]:8.0f} {r["max"]:8.0f} {r["missed"]:7d} {r["missed_pct"]:7.2f} '
              f'{r["extra"]:6d} {r["trips"]:5d} {r["fallbacks"]:6d} {r["updates"]:7d} '
              f'{r.get("learner_steps", 0):13d} {r.get("learner_hz", float("nan")):10.0f}')
    if rows:
        names = list(rows[0]['cpu'])
        print(f'\nCPU use during each run [% of one core]; controller CPU per command [us]')
        print(f'{"model":>10s} ' + ' '.join(f'{n[:17]:>17s}' for n in names)
              + f' {"ctl us/cmd":>10s}')
        for r in rows:
            print(f'{r["model"]:>10s} ' + ' '.join(f'{r["cpu"][n]:17.0f}' for n in names)
                  + f' {r["ctl_us"]:10.0f}')
    if rss:
        print(f'\n{"process":>18s} {"RSS start MB":>12s} {"RSS end MB":>10s}')
        for name, (a, b) in rss.items():
            print(f'{name:>18s} {a:12.1f} {b:10.1f}')
    if probe is not None and not code:
        cost = callback_cost(models, ident, probe.last_checkpoint)
        print('\ncontroller joint-state callback alone (called in-process: no executor, no DDS; '
              'the machine is quieter now) [us CPU per call]')
        print('  ' + ', '.join(f'{m} {c:.0f}' for m, c in cost.items()))
    target = [r for r in rows if r['model'] == 'delan']
    if target:
        r = target[0]
        ok = r['p99'] < 1000.0 and r['missed'] == 0
        print(f'\ntarget (delan: p99 < 1 ms, no missed cycle): '
              f'{"met" if ok else "NOT met"} (p99 {r["p99"]:.0f} us, {r["missed"]} missed)')
    if args.keep or code:
        print(f'logs: {tmp}')
    else:
        import shutil
        shutil.rmtree(tmp, ignore_errors=True)
    return code


if __name__ == '__main__':
    raise SystemExit(main())
