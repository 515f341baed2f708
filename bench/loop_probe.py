"""Control-loop latency from DDS source timestamps: a probe node and the analysis.

The probe subscribes (raw, best effort, deep queue) to ``joint_states`` and
``effort_controller/commands`` and keeps only each sample's *source* timestamp, stamped by the
writer when it published. Latency and missed cycles then follow from the two publishers' clocks
alone: the probe's own speed does not enter, it only has to keep up on average (a queue of 10 s).

Shared by ``bench_control_loop.py`` (one window per model) and ``bench_soak.py`` (back-to-back
one-minute windows for ten minutes).
"""

from __future__ import annotations

import threading
import time
from array import array
from typing import Dict, List, Tuple

import numpy as np


class Probe:
    """Source timestamps of joint states and commands; the diagnostics of the controller and
    the data logger; the learner's status and model updates; a parameter client for the
    controller."""

    def __init__(self, stamps: bool = True):
        """``stamps``: also subscribe to the 1 kHz joint states and commands (the external
        measurement; it costs this process ~half a core)."""
        import rclpy
        from diagnostic_msgs.msg import DiagnosticArray
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.parameter_client import AsyncParameterClient
        from rclpy.qos import QoSProfile, ReliabilityPolicy
        from sensor_msgs.msg import JointState
        from std_msgs.msg import Float64MultiArray

        from delan_common.ros.qos import LATCHED
        from delan_msgs.msg import ModelStatus, ModelUpdate

        self.node = rclpy.create_node('bench_probe')
        self._lock = threading.Lock()
        self.states = array('q')  # source stamps [ns, system clock] of the joint states
        self.commands = array('q')  # ... and of the commands (since the last discard)
        self.diag: Dict[str, str] = {}  # torque_controller's diagnostics
        self.diag_log: List[Tuple[int, Dict[str, str]]] = []  # (sequence, values), recent
        self.diag_seq = 0
        self.logger_diag: Dict[str, str] = {}  # data_logger's
        self.status = None
        self.updates = 0
        self.last_update = None
        self.last_checkpoint = ''
        self.state_count = 0
        self.command_count = 0
        # best effort: a probe that falls behind must never hold up the sim's or the
        # controller's (reliable) writers; with a deep queue on loopback nothing is lost unless
        # the probe lags by 10 s (a gap in the states would show as a rate below the sim's)
        qos = QoSProfile(depth=10000, reliability=ReliabilityPolicy.BEST_EFFORT)
        # raw: no deserialisation, the probe only needs the stamps of the samples
        if stamps:
            self.node.create_subscription(
                JointState, 'joint_states', self._on_state, qos, raw=True
            )
            self.node.create_subscription(
                Float64MultiArray, 'effort_controller/commands', self._on_command, qos, raw=True
            )
        self.node.create_subscription(DiagnosticArray, '/diagnostics', self._on_diag, 10)
        self.node.create_subscription(ModelStatus, 'learner/status', self._on_status, 10)
        self.node.create_subscription(
            ModelUpdate, 'learner/model_update', self._on_update, LATCHED
        )
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
        self.command_count += 1
        with self._lock:
            self.commands.append(info['source_timestamp'])

    def _on_diag(self, msg) -> None:
        for st in msg.status:
            values = {kv.key: kv.value for kv in st.values}
            if 'torque_controller' in st.name:
                with self._lock:
                    self.diag = values
                    self.diag_seq += 1
                    self.diag_log.append((self.diag_seq, values))
                    del self.diag_log[:-600]
            elif 'data_logger' in st.name:
                self.logger_diag = values

    def _on_status(self, msg) -> None:
        self.status = msg

    def _on_update(self, msg) -> None:
        self.updates += 1
        self.last_update = msg
        self.last_checkpoint = msg.checkpoint_path

    def set_model(self, model: str) -> None:
        """``ros2 param set /torque_controller model <model>``; refused is an error."""
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

    # -------------------------------------------------------------------------- stamps
    def stamps(self) -> Tuple[np.ndarray, np.ndarray]:
        with self._lock:
            return (np.array(self.states, dtype=np.int64), np.array(self.commands, dtype=np.int64))

    def discard_before(self, t_ns: int) -> None:
        """Forget stamps older than ``t_ns`` (a soak keeps only what its next window needs)."""
        with self._lock:
            for name in ('states', 'commands'):
                old = getattr(self, name)
                k = int(np.searchsorted(np.frombuffer(old, dtype=np.int64), t_ns)) if old else 0
                setattr(self, name, old[k:])

    def wait_past(self, t1: int, timeout: float = 60.0) -> bool:
        """Until the probe has caught up past ``t1`` (ns): a state 50 ms later and a command
        after ``t1`` received, so a window ending at ``t1`` is complete."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if (
                    len(self.states)
                    and self.states[-1] > t1 + 50_000_000
                    and len(self.commands)
                    and self.commands[-1] > t1
                ):
                    return True
            time.sleep(0.05)
        return False

    def record(self, seconds: float) -> Tuple[np.ndarray, np.ndarray, int, int]:
        """Stamps of a window of ``seconds`` (selected by source stamp, so a probe that lags
        behind the 2 kHz of messages does not cut the window short or unevenly)."""
        with self._lock:
            self.states, self.commands = array('q'), array('q')
        t0 = time.time_ns()
        time.sleep(seconds)
        t1 = time.time_ns()
        self.wait_past(t1)
        states, commands = self.stamps()
        return states, commands, t0, t1

    def next_diag(self, timeout: float = 10.0) -> int:
        """Sequence number of the controller's next diagnostics message (waits for it)."""
        seq = self.diag_seq
        deadline = time.monotonic() + timeout
        while self.diag_seq <= seq:
            if time.monotonic() > deadline:
                raise RuntimeError('no diagnostics from torque_controller')
            time.sleep(0.01)
        return self.diag_seq

    def loop_window(self, first: int, last: int) -> Dict:
        """The controller's own timing (``delan_control.loop_stats``) between its diagnostics
        messages ``first`` and ``last``: the cumulative latency histogram subtracted, the maxima
        of the periods in between, missed cycles and states counted by the loop."""
        from delan_control.loop_stats import parse_histogram, percentile_us

        with self._lock:
            log = {seq: v for seq, v in self.diag_log if first <= seq <= last}
        a, b = log[first], log[last]
        if 'latency_histogram_10us' not in b:
            raise RuntimeError('torque_controller publishes no loop timing (an older build?)')
        hist = parse_histogram(b['latency_histogram_10us']) - parse_histogram(
            a['latency_histogram_10us']
        )

        def diff(key):
            return int(b[key]) - int(a[key])

        states, missed = diff('joint_states_received'), diff('missed_cycles')
        periods = [v for seq, v in log.items() if seq > first]
        return {
            'states': states,
            'commands': diff('commands_sent'),
            'extra': 0,
            'rate_hz': states / max(len(periods), 1),
            'p50': percentile_us(hist, 50),
            'p99': percentile_us(hist, 99),
            'max': max(float(v['loop_latency_max_us']) for v in periods),
            'missed': missed,
            'missed_pct': 100.0 * missed / max(states, 1),
        }

    def close(self) -> None:
        self.ex.shutdown(timeout_sec=5.0)
        self.node.destroy_node()


def analyse(states: np.ndarray, commands: np.ndarray, t0: int, t1: int) -> Dict:
    """Match each command to the state published just before it; count missed cycles, over
    the states published in ``[t0, t1)`` (ns).

    latency = command published - state published (transport sim -> controller, the callback,
    the publish); missed cycle = a state followed by the next state with no command in between;
    ``extra`` = further commands after the first one answering a state (late answers).
    """
    states = np.sort(states)
    commands = np.sort(commands)
    i0, i1 = np.searchsorted(states, [t0, t1])
    states = states[i0 : min(i1, len(states) - 1) + 1]  # + the next one, closing the last cycle
    nan = float('nan')
    if len(states) < 2:
        return {
            'states': len(states),
            'rate_hz': 0.0,
            'commands': 0,
            'extra': 0,
            'p50': nan,
            'p99': nan,
            'max': nan,
            'missed': 0,
            'missed_pct': nan,
        }
    commands = commands[(commands > states[0]) & (commands < states[-1])]
    # index of the state preceding each command
    k = np.searchsorted(states, commands, side='right') - 1
    first = np.ones(len(k), dtype=bool)
    first[1:] = k[1:] != k[:-1]  # the first command after each state answers it
    answered = np.zeros(len(states), dtype=bool)
    answered[k[first]] = True
    latency_us = (commands[first] - states[k[first]]) * 1e-3
    n = len(states) - 1  # the last state only closes the window
    missed = int(np.count_nonzero(~answered[:n]))
    span = (states[-1] - states[0]) * 1e-9
    return {
        'states': len(states),
        'rate_hz': (len(states) - 1) / span if span > 0 else 0.0,
        'commands': len(commands),
        'extra': int(np.count_nonzero(~first)),
        'p50': float(np.percentile(latency_us, 50)) if len(latency_us) else nan,
        'p99': float(np.percentile(latency_us, 99)) if len(latency_us) else nan,
        'max': float(latency_us.max()) if len(latency_us) else nan,
        'missed': missed,
        'missed_pct': 100.0 * missed / max(n, 1),
    }


def target_met(row: Dict) -> bool:
    """The benchmark's bound for model=delan at 1 kHz: p99 below one period, no missed cycle."""
    return bool(row['p99'] < 1000.0 and row['missed'] == 0)


TARGET = 'p99 < 1 ms, no missed cycle'
