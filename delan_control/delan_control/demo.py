"""The main job (``make demo``): learn a mismatched arm's dynamics online, then compare
controllers.

Real nodes over real DDS, launched from delan_bringup's ``sim.launch.py`` (a LaunchService in
this process, :mod:`delan_control.launched`) with the parameter file the launch files use
(``config/sim_params.yaml``) plus this run's start posture and gains (``params.yaml`` in the
output folder): ``sim`` (the "true" arm: nominal URDF plus payload and extra friction,
publishing ``/clock``), ``reference``, ``torque_controller``, ``data_logger`` and ``learner``.
This process adds a monitor node that records topics and drives the phases through parameter
services, exactly as ``ros2 param set`` would:

1. excitation: PD control on Fourier excitation trajectories; the logger records a rosbag2 and
   the learner trains online;
2. identification: the logger is stopped (SIGINT), its bag is read back and the classical
   least-squares identification runs on it; the learner is paused, so the DeLaN model under test
   has seen the excitation data only;
3. evaluation: the same unseen figure-eight at 1x and 2x speed is tracked with each controller
   (``pd``, ``pinocchio`` nominal, ``identified``, and the learned one: ``delan``, or
   ``delan_residual`` with ``--learner-model delan_residual``), switched at runtime;
4. report: ``report.md``, ``results.json`` and PNG plots in the output folder.

Exit status: 0 on success, 1 when a phase fails (a node dies, no model is learned, ...).
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Optional, Tuple

import numpy as np
import rclpy
import yaml
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.client import Client
from rclpy.node import Node
from rclpy.parameter import Parameter, parameter_value_to_python
from rclpy.parameter_client import AsyncParameterClient
from rclpy.signals import SignalHandlerOptions
from rclpy.subscription import Subscription
from rclpy.task import Future
from std_msgs.msg import Float64MultiArray
from std_srvs.srv import Trigger
from trajectory_msgs.msg import JointTrajectory

from delan_common.joint_state import JointStateError, JointStateMapper
from delan_common.model_kinds import LEARNED_KINDS
from delan_common.robot_model import (
    PAYLOAD_EFFORT_SHARE,
    PAYLOAD_PULL_SHARE,
    PRESETS,
    REALISTIC,
    Mismatch,
    RobotModel,
    bringup_path,
    find_urdf,
)
from delan_common.ros.cdr import JointStateReader
from delan_common.ros.qos import LATCHED
from delan_common.ros.rejections import RejectionCounter
from delan_common.ros.spin import BackgroundSpin, make_executor
from delan_common.ros.stamps import seconds
from delan_common.ros.state_taker import JointStateTaker, decode_joint_state
from delan_common.urdf_joints import RobotDescription, UrdfError
from delan_control.control_laws import LAWS, Gains, robot_gains
from delan_control.evaluation import (
    MAX_END_STOP_SHARE,
    DivergenceCheck,
    broken_joints,
    delan_verdict,
    end_stop_share,
    joint_errors,
    learning_target,
)
from delan_control.launched import LaunchedSuite
from delan_control.replay import SPEEDS, EvaluationSetup, replay_tracking, true_model
from delan_control.training_stop import TrainingStop
from delan_control.trajectories import PiecewiseQuintic, effort_share, largest_fitting
from delan_learning.params.learner import loss_error
from delan_learning.train_config import FRICTION_MODELS, LOSSES
from delan_msgs.msg import ModelStatus, ModelUpdate

#: the largest share of an effort limit that holding the start posture may take: the
#: evaluation's figure eight, centred there, is sized to at most 0.8 (fit_figure_eight)
HOME_EFFORT_SHARE = 0.8
#: the largest share of an effort limit the simulated arm may need on the evaluation's figure
#: eight: what its motors can give (its friction mismatch is lowered to fit, Demo.friction_scale)
TRUE_EFFORT_SHARE = 1.0
#: the controllers compared; the learned one (delan or delan_residual) is added per run
CONTROLLERS = ('pd', 'pinocchio', 'identified')


class DemoError(RuntimeError):
    """A phase of the demo failed; the message says which and why."""


def _g3(values: Iterable[float]) -> str:
    """Values to three significant digits: a light wrist's gains are not rounded to 0."""
    return ', '.join(f'{float(v):.3g}' for v in values)


def log(msg: str) -> None:
    """One time-stamped progress line on stdout."""
    print(f'[demo {time.strftime("%H:%M:%S")}] {msg}', flush=True)


@dataclass
class Segment:
    """One evaluation run: controller x speed, with the data recorded during it."""

    controller: str
    speed: float
    t: np.ndarray
    q: np.ndarray
    qd: np.ndarray
    tau: np.ndarray
    q_ref: np.ndarray
    rms: np.ndarray  # per joint [rad]
    max_abs: np.ndarray
    diverged: Optional[str] = None  # why the run was stopped, None when it ran to the end
    #: commands the sim did not get within its lockstep_timeout during the run (a loaded
    #: machine: the arm moved on a stale command), None when the sim did not report
    lockstep_misses: Optional[int] = None


#: how long a parameter set waits for its reply before it reads the values back instead [s]
REPLY_WAIT_S = 5.0


def set_parameters(
    client: AsyncParameterClient,
    values: Dict[str, Any],
    timeout: float,
    reply_wait: float = REPLY_WAIT_S,
) -> List[Tuple[bool, str]]:
    """Set ``values`` through ``client``; ``(successful, reason)`` per value, DemoError when no
    answer comes within ``timeout`` s.

    A reply can be lost while DDS is still matching its path back (seen a few seconds after the
    nodes started on a loaded 2-core machine: the node applied the values, the reply never
    came). So after ``reply_wait`` s without one the values are read back, and the request is
    sent again only when they are not all set: setting the same values twice would restart what
    the change starts (a reference's trajectory). The request's own path was matched
    (``wait_for_services``), so values the node already had count as this request's."""
    deadline = time.monotonic() + timeout
    what = f'setting {values}'
    params = [Parameter(k, value=v) for k, v in values.items()]
    future = client.set_parameters(params)
    if not _wait_done(future, min(reply_wait, timeout)):
        read = _answer(
            client.get_parameters(list(values)),
            max(deadline - time.monotonic(), 0.1),
            f'{what} (no reply: reading them back)',
        )
        now = [parameter_value_to_python(v) for v in read.values]
        if now == list(values.values()):
            log(f'warning: {what}: no reply, but the values are set')
            return [(True, '')] * len(values)
        future = client.set_parameters(params)
    answer = _answer(future, max(deadline - time.monotonic(), 0.1), what)
    return [(r.successful, r.reason) for r in answer.results]


def _wait_done(future: Future, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not future.done():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def _answer(future: Future, timeout: float, what: str) -> Any:
    """The answer to a service call, waited for here while the executor spins in its own thread
    (the demo's phases are sequential); ``what`` names the call in the errors."""
    if not _wait_done(future, timeout):
        raise DemoError(f'{what} timed out')
    result = future.result()
    if result is None:  # cancelled
        raise DemoError(f'{what}: no answer')
    return result


#: what a run of the demo writes under ``--out`` besides its report files; its bags are read
#: back as a whole (identification, the bag summary), so an earlier run's must not be there
RUN_FOLDERS = ('bags', 'checkpoints', 'logs')


class _NoAliasDumper(yaml.SafeDumper):
    """Writes a value shared by two nodes' sections twice: rcl refuses YAML aliases."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def clear_previous_run(out: str) -> List[str]:
    """Remove the :data:`RUN_FOLDERS` and the report (:data:`demo_report.REPORT_FILES`, the
    plots) an earlier demo left in ``out``; the names removed. Only in a demo's output folder
    (its ``params.yaml`` there): DemoError for a folder that holds bags of something else,
    which are not the demo's to delete. A report left behind would stand for a run that
    failed before writing its own."""
    from delan_control.demo_report import REPORT_FILES

    left = [n for n in RUN_FOLDERS if os.path.isdir(os.path.join(out, n))]
    left = [n for n in left if os.listdir(os.path.join(out, n))]
    demo_folder = os.path.isfile(os.path.join(out, 'params.yaml'))
    if left and not demo_folder:
        raise DemoError(
            f'{out} holds {", ".join(left)} that no earlier demo wrote (no params.yaml): '
            'choose another --out'
        )
    for name in left:
        shutil.rmtree(os.path.join(out, name))
    if demo_folder:
        report = [n for n in REPORT_FILES if os.path.isfile(os.path.join(out, n))]
        report += sorted(n for n in os.listdir(out) if n.endswith('.png'))
        for name in report:
            os.remove(os.path.join(out, name))
        left += report
    return left


class Monitor(Node):
    """Records what the demo needs and talks to the other nodes' parameter services."""

    def __init__(self, joint_names: List[str], **node_options: Any):
        # on its own clock: it reads sim time from the joint states' stamps, and a /clock
        # subscription would wake its executor at the clock rate for nothing
        super().__init__('demo_monitor', **node_options)
        self.joint_names = joint_names
        self._lock = threading.Lock()
        self._t: List[float] = []
        self._rows: List[np.ndarray] = []
        self.reference: Optional[Tuple[float, PiecewiseQuintic, int]] = None
        self._ref_count = 0
        self.commands = 0
        self.status: List[Tuple[float, ModelStatus]] = []
        self.updates: List[ModelUpdate] = []
        self.update_times: List[Tuple[float, float]] = []  # (sim, monotonic) at arrival
        self.t0_wall = time.monotonic()
        # joint states as bytes in 20 ms batches, off the executor (ros/state_taker.py): a
        # JointState callback at the control rate would cost the learner beside it a core's
        # third
        self._mapper = JointStateMapper(joint_names)
        self._reader = JointStateReader()
        self.rejected = RejectionCounter(self.get_logger(), 'joint state')
        self.rejected_references = RejectionCounter(self.get_logger(), 'reference trajectory')
        self._taker = JointStateTaker(
            self, self._on_states, 1000, 'demo-joint-states', period_s=0.02
        )
        self.create_subscription(JointTrajectory, 'reference_trajectory', self._on_ref, LATCHED)
        self.create_subscription(ModelStatus, 'learner/status', self._on_status, 10)
        # only counted, until the controller is known to command (stop_counting_commands):
        # each message is a pass of the executor, at the control rate
        self._commands_sub: Optional[Subscription] = self.create_subscription(
            Float64MultiArray, 'effort_controller/commands', self._on_command, 10, raw=True
        )
        self.create_subscription(ModelUpdate, 'learner/model_update', self._on_update, LATCHED)
        #: (time.monotonic() at arrival, the sim's lockstep_timeouts so far) from /diagnostics
        self.lockstep: Tuple[float, int] = (-math.inf, -1)
        self.create_subscription(DiagnosticArray, '/diagnostics', self._on_diagnostics, 10)
        self.params = {
            name: AsyncParameterClient(self, name)
            for name in ('torque_controller', 'reference', 'learner', 'sim')
        }
        self.sim_reset: Client = self.create_client(Trigger, 'sim/reset')

    def _on_states(self, batch) -> None:
        t, rows = [], []
        for data, _ in batch:
            decoded = decode_joint_state(self._reader, data, self.rejected)
            if decoded is None:
                continue
            try:
                js = self._mapper.map(decoded[0])
            except JointStateError as err:
                self.rejected.reject(err.reason, err.detail)
                continue
            effort = js.effort if js.effort is not None else np.full(len(js.position), np.nan)
            t.append(decoded[1])
            rows.append(np.concatenate([js.position, js.velocity, effort]))
        with self._lock:
            self._t.extend(t)
            self._rows.extend(rows)

    def _on_ref(self, msg: JointTrajectory) -> None:
        names = list(msg.joint_names)
        missing = [j for j in self.joint_names if j not in names]
        if missing or not msg.points:
            # another arm's reference on the same topic (a second demo in the same ROS
            # domain), or an empty one: not this demo's
            self.rejected_references.reject(
                'missing_joints' if missing else 'no_points',
                f'lacks joints {missing}' if missing else 'has no points',
            )
            return
        idx = [names.index(j) for j in self.joint_names]
        t0 = seconds(msg.header.stamp)
        t = np.array([t0 + seconds(p.time_from_start) for p in msg.points])
        pick = lambda f: np.asarray([getattr(p, f) for p in msg.points])[:, idx]  # noqa: E731
        try:
            ref = PiecewiseQuintic(t, pick('positions'), pick('velocities'), pick('accelerations'))
        except (ValueError, IndexError) as err:
            self.rejected_references.reject('malformed', str(err))
            return
        with self._lock:
            self._ref_count += 1
            self.reference = (t0, ref, self._ref_count)

    def _on_command(self, msg: bytes) -> None:
        self.commands += 1

    def stop_counting_commands(self) -> None:
        """Drop the command subscription once the controller is known to command: counting each
        message costs a pass of the executor at the control rate."""
        if self._commands_sub is not None:
            self.destroy_subscription(self._commands_sub)
            self._commands_sub = None

    def _on_status(self, msg: ModelStatus) -> None:
        self.status.append((time.monotonic() - self.t0_wall, msg))

    def _on_diagnostics(self, msg: DiagnosticArray) -> None:
        for status in msg.status:
            for kv in status.values:
                if kv.key == 'lockstep_timeouts' and kv.value.isdigit():
                    self.lockstep = (time.monotonic(), int(kv.value))

    def _on_update(self, msg: ModelUpdate) -> None:
        self.update_times.append((self.sim_time(), time.monotonic()))
        self.updates.append(msg)

    # -- queries from the orchestrating thread
    def sim_time(self) -> float:
        """Stamp [s] of the newest joint state received (sim time); -1 before the first."""
        with self._lock:
            return self._t[-1] if self._t else -1.0

    def samples(self) -> int:
        """Number of joint states recorded so far."""
        with self._lock:
            return len(self._t)

    def data_between(self, t_start: float, t_end: float):
        """Recorded joint states stamped in ``[t_start, t_end]``: ``t (N,)`` and position, velocity
        and effort ``(N, n)`` each (effort NaN where a message had none)."""
        with self._lock:
            t = np.asarray(self._t)
            rows = np.asarray(self._rows)
        sel = (t >= t_start) & (t <= t_end)
        n = len(self.joint_names)
        return t[sel], rows[sel, :n], rows[sel, n : 2 * n], rows[sel, 2 * n :]

    def reference_count(self) -> int:
        """Number of reference trajectories received so far (each new one is counted)."""
        with self._lock:
            return self._ref_count

    def close(self) -> None:
        """Stop the joint-state taker (its thread), before the node is destroyed."""
        self._taker.close()

    def reset_sim(self, timeout: float = 30.0, reply_wait: float = REPLY_WAIT_S) -> None:
        """Put the simulated arm back to its initial state (``sim/reset``). A reply not in
        within ``reply_wait`` s is taken as lost (as :func:`set_parameters` does) and the reset
        asked for again: the second reset puts the arm where the first did."""
        deadline = time.monotonic() + timeout
        if not self.sim_reset.wait_for_service(timeout_sec=timeout):
            raise DemoError("the sim's reset service is not available")
        future = self.sim_reset.call_async(Trigger.Request())
        while not _wait_done(future, min(reply_wait, max(deadline - time.monotonic(), 0.0))):
            if time.monotonic() >= deadline:
                raise DemoError('resetting the sim timed out')
            log('warning: no reply to the sim reset; asking again')
            future = self.sim_reset.call_async(Trigger.Request())
        result = _answer(future, 0.1, 'resetting the sim')
        if not result.success:
            raise DemoError(f'the sim refused to reset: {result.message}')

    def set_params(self, node: str, values: Dict, timeout: float = 30.0) -> None:
        """Set parameters of ``node`` through its parameter services, as ``ros2 param set`` would;
        DemoError when the services are missing or a value is refused."""
        client = self.params[node]
        if not client.wait_for_services(timeout_sec=timeout):
            raise DemoError(f'parameter services of {node} not available')
        try:
            results = set_parameters(client, values, timeout)
        except DemoError as err:
            raise DemoError(f'{err} on {node}') from None
        for name, (ok, reason) in zip(values, results):
            if not ok:
                raise DemoError(f'{node} refused {name}={values[name]!r}: {reason}')


class Demo:
    """The demo's phases (launch, excitation, identification, evaluation, report) on one robot."""

    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.out = os.path.abspath(args.out)
        self.urdf = os.path.abspath(args.robot)
        self.joints = [j for j in (args.joints or '').replace(',', ' ').split() if j]
        #: limit overrides (--effort-limits, --velocity-limits), for every node and the demo
        self.limits = {
            f'{kind}_limits': list(getattr(args, f'{kind}_limits', None) or [])
            for kind in ('effort', 'velocity')
        }
        self.robot = RobotDescription.load(
            self.urdf,
            joints=self.joints or None,
            effort_limits=self.limits['effort_limits'] or None,
            velocity_limits=self.limits['velocity_limits'] or None,
        )
        self.model = RobotModel(self.urdf, **self.robot.selection_kwargs())
        self.params_file = os.path.abspath(args.params)
        with open(self.params_file) as f:
            self.params_yaml = yaml.safe_load(f)
        self.stopped: set = set()  # nodes stopped on purpose
        self.logs_dir = os.path.join(self.out, 'logs')
        self.bag_dir = os.path.join(self.out, 'bags')
        self.ckpt_dir = os.path.join(self.out, 'checkpoints')
        self.timing: Dict[str, float] = {}
        self.results: Dict = {}
        self.reported = False  # this run's report.md and results.json are written

    def node_params(self, node: str) -> Dict:
        """``node``'s ``ros__parameters`` section of the parameter file (empty when absent)."""
        return dict(self.params_yaml.get(f'/**/{node}', {}).get('ros__parameters', {}))

    # ------------------------------------------------------------------ processes
    def write_params(self, gains: Gains) -> str:
        """The demo's parameter file: the ``--params`` file with what this run sets per node
        (start posture, gains from the URDF, output folders, the joints); returns its path."""
        sim = {'initial_position': self.home().tolist(), 'hold_until_commanded': True}
        if self.args.mismatch_preset:
            sim['mismatch_preset'] = self.args.mismatch_preset
        sim.update(self.payload(float(np.min(gains.ct_kp))))
        sim.update(self.friction_scale(sim))
        overrides = {
            'sim': sim,
            'torque_controller': {
                'kp': gains.kp.tolist(),
                'kd': gains.kd.tolist(),
                'ct_kp': gains.ct_kp.tolist(),
                'ct_kd': gains.ct_kd.tolist(),
                'law': self.args.law,
            },
            # training at the priority of the other nodes: the sim runs in lockstep with the
            # controller (slower when the CPU is short), so yielding to them (the learner's
            # training_niceness on a real arm) would only starve training on a small machine
            'learner': {
                'resume': False,
                'torch_threads': 1,
                'training_niceness': 0,
                'friction_model': self.args.learner_friction,
                'loss': self.args.learner_loss,
                'horizon': self.args.learner_horizon,
            },
            # held until the controller and the learner are up (phase_start)
            'reference': {'trajectory': 'hold', 'duration': self.args.segment, 'repeat': True},
            'data_logger': {},
        }
        doc = dict(self.params_yaml)
        for node, values in overrides.items():
            if node != 'data_logger':
                if self.joints:
                    values['joints'] = list(self.joints)
                values.update({k: v for k, v in self.limits.items() if v})
            section = dict(doc.get(f'/**/{node}', {}).get('ros__parameters', {}))
            section.update(values)
            doc[f'/**/{node}'] = {'ros__parameters': section}
        path = os.path.join(self.out, 'params.yaml')
        with open(path, 'w') as f:
            yaml.dump(doc, f, Dumper=_NoAliasDumper, sort_keys=False)
        # what the nodes run with is what the report and the replays read
        self.params_yaml, self.params_file = doc, path
        return path

    def payload(self, loop_stiffness: float) -> Dict[str, float]:
        """The payload of the parameter file (or of the mismatch preset), made lighter where
        this arm cannot carry it (:meth:`RobotModel.payload_capacity`: its weight would take
        more than PAYLOAD_EFFORT_SHARE of a joint's effort limit, or pull the arm away from a
        posture with more than PAYLOAD_PULL_SHARE of the computed-torque loop's stiffness
        ``loop_stiffness``): one payload for every arm would pin a weak arm against its
        limits or topple a light wrist, where no model can track."""
        mass = (
            REALISTIC['payload_mass']
            if self.args.mismatch_preset
            else float(self.node_params('sim').get('payload_mass', 0.0))
        )
        capacity = self.model.payload_capacity(loop_stiffness=loop_stiffness)
        self.results['payload_mass'] = min(mass, capacity)
        if mass <= capacity:
            return {}
        log(
            f'payload {mass:g} kg lowered to {capacity:.3g} kg: this arm cannot carry more '
            f'(at most {PAYLOAD_EFFORT_SHARE:.0%} of an effort limit, a pull of at most '
            f"{PAYLOAD_PULL_SHARE:.0%} of the loop's stiffness)"
        )
        return {'payload_mass': capacity}

    def friction_scale(self, sim: Dict[str, Any]) -> Dict[str, float]:
        """The sim's friction scale (the parameter file's), lowered -- not below 1, the URDF's
        own friction -- where the simulated arm (the URDF, the payload in ``sim``, the scaled
        friction) would need more than TRUE_EFFORT_SHARE of an effort limit on the evaluation's
        figure eight at its top speed. The reference node sizes the figure eight to the limits
        by the URDF, which knows nothing of the mismatch: where the URDF's friction already takes
        much of a motor (a light wrist), doubling it leaves an arm no model can make track. A
        ``--mismatch-preset`` keeps its own friction."""
        params = {**self.node_params('sim'), **sim}
        requested = float(params.get('friction_scale', 1.0))
        if self.args.mismatch_preset or requested <= 1.0:
            return {}
        setup = self.evaluation_setup(params)
        speed = float(setup.reference.get('max_test_speed', SPEEDS[-1]))
        ref = setup.figure_eight(speed, self.args.test_duration)
        q, qd, qdd = ref.sample(np.arange(0.0, ref.t[-1], 0.005))
        limit = self.model.operating_effort_limit()

        def need(scale: float) -> float:
            scaled = Mismatch.from_params({**params, 'friction_scale': scale})
            return effort_share(self.model.mismatched(scaled).inverse, limit, q, qd, qdd)

        if need(requested) <= TRUE_EFFORT_SHARE:
            return {}
        with_urdf_friction = need(1.0)
        if with_urdf_friction > TRUE_EFFORT_SHARE:
            # not the friction's doing: the start-posture check and the loop's floor say what is
            return {}
        scale = largest_fitting(lambda s: need(s) <= TRUE_EFFORT_SHARE, 1.0, requested, steps=12)
        log(
            f'friction {requested:g}x lowered to {scale:.2f}x: with more, the simulated arm would '
            f'need more than {TRUE_EFFORT_SHARE:.0%} of an effort limit on the figure eight at '
            f"{speed:g}x, sized to the limits by the URDF (with the URDF's friction it needs "
            f'{with_urdf_friction:.0%})'
        )
        return {'friction_scale': scale}

    def start_posture_load(self) -> np.ndarray:
        """Per joint: the share of its effort limit that holding the start posture takes on
        the simulated arm (the URDF and the payload)."""
        carried = self.model.mismatched(Mismatch(payload_mass=self.results['payload_mass']))
        return np.abs(carried.gravity(self.home())) / self.effort_limit

    def launch_arguments(self, params_file: str) -> Dict[str, str]:
        """Arguments of delan_bringup's sim.launch.py for this run."""
        return {
            'urdf': self.urdf,
            'model': self.args.excitation_controller,
            'record': 'true',
            'bag_dir': self.bag_dir,
            'checkpoint_dir': self.ckpt_dir,
            'use_sim_time': 'true',
            'params_file': params_file,
            'output': 'own_log',
            'learner_model': self.args.learner_model,
        }

    def check_alive(self) -> None:
        """DemoError when a node the demo did not stop has exited, naming its log files."""
        if self.suite.terminated:
            raise DemoError('terminated (SIGTERM): the nodes were stopped')
        for name, code in dict(self.suite.exits).items():
            if name not in self.stopped:
                raise DemoError(
                    f'node {name} exited with {code}; see {self.suite.log_files(name)}'
                )

    def stop(self, name: str, timeout: float = 20.0) -> int:
        """Stop one node as Ctrl-C would; its exit code."""
        self.stopped.add(name)
        code = self.suite.stop(name, timeout)
        if code is None:
            raise DemoError(f'{name} did not stop on SIGINT within {timeout} s')
        return code

    # ------------------------------------------------------------------ waiting
    def wait_until(self, what: str, predicate, timeout: float, progress=None) -> None:
        """Poll ``predicate()`` until true; DemoError on ``timeout`` [s] or a dead node.
        ``progress()``, when given, is logged every 5 s."""
        deadline = time.monotonic() + timeout
        last = 0.0
        while not predicate():
            self.check_alive()
            if time.monotonic() > deadline:
                raise DemoError(f'timed out after {timeout:.0f} s waiting for {what}')
            if progress and time.monotonic() - last > 5.0:
                last = time.monotonic()
                log(progress())
            time.sleep(0.05)

    def wait_sim(self, until: float, progress=None) -> None:
        """Wait until the sim time reaches ``until`` [s], with a timeout scaled to the sim time
        left (the sim runs slower than real time on a loaded CPU)."""
        self.wait_until(
            f'sim time {until:.1f} s',
            lambda: self.mon.sim_time() >= until,
            timeout=max(60.0, 4.0 * (until - self.mon.sim_time()) + 30.0),
            progress=progress,
        )

    def learner_progress(self) -> str:
        """One log line: the sim time and the learner's newest status (samples, steps, model
        version, validation nMSE)."""
        if not self.mon.status:
            return f'sim t={self.mon.sim_time():.1f} s, learner starting'
        st = self.mon.status[-1][1]
        nmse = ', '.join(f'{x:.4f}' for x in st.validation_nmse) or '-'
        return (
            f'sim t={self.mon.sim_time():5.1f} s | learner: {st.samples_seen} samples, '
            f'{st.training_steps} steps, model v{st.model_version}, val nMSE [{nmse}]'
        )

    # ------------------------------------------------------------------ phases
    def run(self) -> int:
        """Launch the suite and the monitor, run :meth:`phases`, shut everything down; the exit
        status (1 already when the start posture cannot be held)."""
        try:
            removed = clear_previous_run(self.out)
        except DemoError as err:
            log(f'FAILED: {err}')
            return 2
        if removed:
            log(f"removed the previous run's {', '.join(removed)} from {self.out}")
        for d in (self.out, self.logs_dir):
            os.makedirs(d, exist_ok=True)
        log(f'robot {self.robot.source}: joints {self.robot.joint_names}')
        gains = self.gains()
        log(
            f'gains from the URDF at the start posture: PD kp [{_g3(gains.kp)}], '
            f'kd [{_g3(gains.kd)}]; computed torque {gains.ct_kp[0]:.0f} / '
            f'{gains.ct_kd[0]:.1f}'
        )
        launch_file = bringup_path('launch', 'sim.launch.py')
        params_file = self.write_params(gains)
        held = self.start_posture_load()
        if held.max() > HOME_EFFORT_SHARE:
            j = int(np.argmax(held))
            return self.failed(
                f'holding the start posture (the middle of the limits) takes '
                f"{held[j]:.0%} of {self.robot.joint_names[j]}'s effort limit "
                f"({self.effort_limit[j]:.3g}; the URDF's gravity and the "
                f'{self.results["payload_mass"]:.3g} kg payload): references centred there '
                'cannot be tracked, whatever the model. Select the joints to learn (--joints) '
                'or give the arm stronger limits (--effort-limits)'
            )
        self.suite = LaunchedSuite(launch_file, self.launch_arguments(params_file), self.logs_dir)
        log(f'launching {launch_file} (node logs in {self.logs_dir})')
        # Ctrl-C is the launch's: it stops the nodes, and the phases then fail on their exit
        rclpy.init(signal_handler_options=SignalHandlerOptions.NO)
        self.mon = Monitor(self.robot.joint_names)
        ex = make_executor()
        ex.add_node(self.mon)
        spinner = BackgroundSpin(ex)
        try:
            return self.suite.run(self.phases)
        finally:
            spinner.stop()
            self.mon.close()
            self.mon.destroy_node()
            rclpy.try_shutdown()

    def phases(self) -> int:
        """Everything after the launch: the three phases, then the report; the exit status."""
        t_start = time.monotonic()
        try:
            self.phase_start()
            self.phase_excitation()
            self.phase_identification()
            self.phase_evaluation()
            self.stopped.update(self.suite.stop_all())
            self.loop_floor()
            self.timing['total_wall_s'] = time.monotonic() - t_start
            from delan_control.demo_report import write_report

            table = write_report(self)
            self.reported = True
            print(table, flush=True)
            if self.args.learning_curves:
                self.learning_curves()
            verdict = self.results['verdict']
            if not verdict['passed']:
                for why in verdict['failures']:
                    log(f'FAILED: {why}')
                log(f'report (with the failures): {os.path.join(self.out, "report.md")}')
                return 1
            log(f'report: {os.path.join(self.out, "report.md")}')
            return 0
        except DemoError as err:
            return self.failed(str(err))

    def failed(self, why: str) -> int:
        """Log ``why`` and write it as the failed verdict of a report (exit status 1)."""
        from delan_control.demo_report import write_failure

        log(f'FAILED: {why}')
        write_failure(self, why)
        log(f'report (with the failure): {os.path.join(self.out, "report.md")}')
        return 1

    def learning_curves(self) -> None:
        """Plain DeLaN and the residual learned again from this run's bag by the real learner,
        optimiser steps paced at this run's rate, each published version tracked on the
        evaluation loop: the curves side by side in the report (``learning_curves.png``)."""
        from delan_control.learning_curves import compare, plot, table

        log('learning curves: both learned kinds from the bag (--learning-curves)')
        curves = compare(
            self.out,
            self.args.robot,
            list(self.robot.joint_names),
            LEARNED_KINDS,
            rate=float(self.results['learner']['steps_per_s']),
            every=self.args.learning_curves_every,
            say=log,
        )
        png = os.path.join(self.out, 'learning_curves.png')
        plot(curves, f'{self.robot.name}: learned online from the same bag', png)
        silent = [c.kind for c in curves if not c.seconds]
        md = [
            '',
            '## Learning curves: plain DeLaN and the residual from the same data',
            '',
            "Both kinds learned again from this run's bag by the real learner, optimiser steps "
            "paced by the stamps at this run's rate; every published version tracked on the "
            "evaluation loop (mean RMS over nominal Pinocchio's, the bound 1/3).",
            '',
            table(curves),
            '',
            '![learning curves](learning_curves.png)',
        ]
        if silent:
            md += ['', f'**No version published by {silent}.**']
            log(f'warning: no version published by {silent} in the learning-curve replay')
        with open(os.path.join(self.out, 'report.md'), 'a') as f:
            f.write('\n'.join(md) + '\n')

    def phase_start(self) -> None:
        """Wait for the launched nodes, then start the excitation.

        The arm starts (and is reset to) the middle of its limits: 0 lies outside some arms'
        ranges (a Panda's elbow), where it would start against an end stop. It is held, and the
        excitation tracked, with the nominal model from the first state (computed torque on the
        URDF, what a user has before anything is learned): PD gains stable on every arm are too
        soft to hold a heavy one against gravity, and PD alone lets it sag a light wrist into
        its end stops, where the torque no longer explains the motion."""
        self.wait_until('joint states from the sim', lambda: self.mon.samples() > 50, 90.0)
        # the excitation starts once the arm is controlled (held where it is) and the learner
        # listens: started earlier, the reference would begin from where the uncontrolled arm
        # was and have moved on by the time the controller came up
        self.wait_until('the controller', lambda: self.mon.commands > 50, 60.0)
        self.mon.stop_counting_commands()
        self.wait_until('the learner', lambda: bool(self.mon.status), 90.0)
        # a new designed excitation (next seed) every --segment seconds, each joined to the last
        # without stopping: many paths through the workspace, not one periodic curve
        n_ref = self.mon.reference_count()
        self.mon.set_params('reference', {'trajectory': 'excitation'})
        self.wait_until('the reference', lambda: self.mon.reference_count() > n_ref, 60.0)

    def home(self) -> np.ndarray:
        """The middle of each joint's limits (0 where there are none)."""
        return self.robot.home()

    def gains(self) -> Gains:
        """Per-joint gains from the nominal model at the start posture and across the joint
        ranges (``control_laws.robot_gains``): one set of numbers would be too stiff for a wrist
        and too soft for a shoulder, a stiff derivative gain on a light link is unstable at the
        control rate (the sim's ``publish_rate``), and an arm raised anywhere in its ranges
        needs the computed-torque loop stiffer than gravity's pull there."""
        rate = float(self.node_params('sim').get('publish_rate', 500.0))
        gains, stiff_enough = robot_gains(self.model, self.robot, 1.0 / rate)
        if not stiff_enough:
            log(
                f'warning: at {rate:g} Hz the computed-torque loop cannot be made stiffer than '
                'gravity pulls this arm somewhere in its joint ranges: every model will track '
                'poorly there'
            )
        self.results['gains'] = {
            k: getattr(gains, k).tolist() for k in ('kp', 'kd', 'ct_kp', 'ct_kd')
        }
        self.results['gains']['stiff_enough'] = stiff_enough
        return gains

    def phase_excitation(self) -> None:
        """Phase 1: excite under the excitation controller while the bag is logged and the learner
        trains, until a model is learned (:meth:`learn_to_target`); then pause the learner and
        record its results."""
        t0 = self.mon.sim_time()
        wall = self.t_excitation = time.monotonic()
        log(
            f'phase 1/3: excitation with {self.args.excitation_controller} for '
            f'{self.args.excitation:.0f} s of sim time; '
            'logging a rosbag2, learning online'
        )
        self.wait_sim(t0 + self.args.excitation, progress=self.learner_progress)
        self.learn_to_target(t0, t0 + self.args.excitation + self.args.max_extra)
        self.wait_until(
            'a learned model',
            lambda: bool(self.mon.updates),
            120.0,
            progress=self.learner_progress,
        )
        self.timing['excitation_wall_s'] = time.monotonic() - wall
        self.timing['excitation_sim_s'] = self.mon.sim_time() - t0
        self.pause_learner()
        st = self.mon.status[-1][1]
        self.results['learner'] = {
            'model': self.args.learner_model,
            'loss': self.args.learner_loss,
            'samples_seen': int(st.samples_seen),
            'training_steps': int(st.training_steps),
            'model_version': int(self.mon.updates[-1].model_version),
            'checkpoint': self.mon.updates[-1].checkpoint_path,
            'validation_nmse': list(self.mon.updates[-1].validation_nmse),
            'rejected': int(st.samples_rejected),
            'steps_per_s': float(st.training_steps) / max(self.timing['excitation_wall_s'], 1e-9),
        }
        log(self.learner_progress())

    def pause_learner(self) -> None:
        """Stop training and wait until the learner says it is paused and its newest version
        has arrived here: a round in flight when the switch came may still publish one, which
        the controller hot-swaps to, so it, not the one before, is the model under test."""
        n = len(self.mon.status)
        self.mon.set_params('learner', {'training_enabled': False})

        def paused() -> bool:
            fresh = [m for _, m in self.mon.status[n:] if m.state == ModelStatus.STATE_PAUSED]
            return (
                bool(fresh)
                and bool(self.mon.updates)
                and self.mon.updates[-1].model_version == fresh[-1].model_version
            )

        self.wait_until('the learner to pause with its newest version', paused, 60.0)

    def noise_floor(self, t_start: float) -> Tuple[np.ndarray, np.ndarray]:
        """Per-joint torque nMSE and residual RMS of the true plant (the sim's own model) on the
        excitation recorded since ``t_start``: what the data allow any model to reach (noise and
        the acceleration estimate)."""
        from delan_control.demo_report import true_plant
        from delan_learning.data import complete_derivatives, split_at_gaps

        t, q, qd, tau = self.mon.data_between(t_start, self.mon.sim_time())
        # split where states were lost: differentiated across a gap, qd gives a false qdd
        d = complete_derivatives({'t': t, 'q': q, 'qd': qd, 'tau': tau, 'traj': split_at_gaps(t)})
        pred = true_plant(self).inverse(d['q'], d['qd'], d['qdd'])
        mse = np.mean((pred - d['tau']) ** 2, axis=0)
        return mse / np.maximum(np.var(d['tau'], axis=0), 1e-12), np.sqrt(mse)

    def learn_to_target(self, t0: float, deadline: float) -> None:
        """Go on exciting and learning (up to sim time ``deadline``) until the newest published
        version is at the target on every joint -- ``--target-nmse``, or ``--floor-factor``
        times the true plant's own nMSE on the same motion where the data allow no better (a
        joint whose torque is mostly noise) -- and the versions of the last ``--plateau`` sim
        seconds show no more progress (:class:`TrainingStop`). How far the learner gets in a fixed
        time depends on the CPU the other nodes leave it; what the comparison needs is a
        trained model, so the demo waits for one instead of judging whatever a slow machine
        produced."""
        floor, residual = self.noise_floor(t0)
        target = learning_target(self.args.target_nmse, self.args.floor_factor, floor)
        self.results['target_nmse'] = target.tolist()
        self.results['noise_floor_nmse'] = floor.tolist()
        self.results['noise_floor_residual_rms'] = residual.tolist()
        log(
            f'true plant nMSE on the excitation (the floor): {np.round(floor, 4).tolist()}; '
            f'target {np.round(target, 4).tolist()}'
        )
        stops = end_stop_share(
            self.mon.data_between(t0, self.mon.sim_time())[1], self.robot.lower, self.robot.upper
        )
        self.results['end_stop_share'] = dict(zip(self.robot.joint_names, stops.tolist()))
        if np.any(stops > MAX_END_STOP_SHARE):
            log(
                'FAILED: joints at their end stops during the excitation: '
                + ', '.join(
                    f'{nm} {v:.1%} of the time'
                    for nm, v in zip(self.robot.joint_names, stops)
                    if v > MAX_END_STOP_SHARE
                )
            )
        bad = broken_joints(floor, self.args.max_true_nmse, residual, self.effort_limit)
        if bad.any():
            log(
                f'FAILED: the true plant does not explain the excitation torques (nMSE up to '
                f'{np.nanmax(floor[bad]):.3g} > {self.args.max_true_nmse:g}): the arm hit its '
                'end stops or saturated; the models learn from broken data'
            )
        stop = TrainingStop(target.tolist(), patience=self.args.plateau)
        seen = 0

        def done() -> bool:
            nonlocal seen
            updates, times = list(self.mon.updates), list(self.mon.update_times)
            for u, (t_sim, t_wall) in zip(updates[seen:], times[seen:]):
                stop.observe(t_sim, int(u.model_version), list(u.validation_nmse))
                if stop.t_reached is not None and 'time_to_target_s' not in self.timing:
                    self.timing['time_to_target_s'] = t_wall - self.t_excitation
                    self.timing['sim_time_to_target_s'] = t_sim - t0
            seen = min(len(updates), len(times))
            return stop.done(self.mon.sim_time())

        if done():
            self.results['learning_plateaued'] = True
            return
        log(
            f'excitation goes on (at most {deadline - self.mon.sim_time():.0f} s of sim time) '
            f'until a model is at the target and the last {self.args.plateau:g} s of versions '
            'show no more progress'
        )
        wall_end = time.monotonic() + max(60.0, 4.0 * (deadline - self.mon.sim_time()) + 30.0)
        self.wait_until(
            'the validation target',
            lambda: done() or self.mon.sim_time() >= deadline or time.monotonic() > wall_end,
            timeout=np.inf,
            progress=self.learner_progress,
        )
        self.results['learning_plateaued'] = stop.done(self.mon.sim_time())
        if not stop.reached():
            log('warning: no model reached the validation target; evaluating the newest one')
        elif not self.results['learning_plateaued']:
            log('note: the learner was still improving when the extra excitation time ran out')

    def phase_identification(self) -> None:
        """Phase 2: stop the data logger, read its bag back and run the least-squares
        identification on it; the identified model is saved to ``identified.json``."""
        from delan_control.sysid import identify_dataset
        from delan_learning.bags import read_bag_arrays

        log('phase 2/3: stopping the logger and identifying from its bag')
        code = self.stop('data_logger')
        if code != 0:
            raise DemoError(f'data_logger exited with {code} on SIGINT')
        wall = time.monotonic()
        data = read_bag_arrays(
            self.bag_dir, joint_names=self.robot.joint_names, joint_types=self.robot.joint_types
        )
        self.results['bag'] = {
            'samples': int(len(data['q'])),
            'trajectories': int(len(np.unique(data['traj']))),
            'bytes': int(
                sum(
                    os.path.getsize(os.path.join(dp, f))
                    for dp, _, fs in os.walk(self.bag_dir)
                    for f in fs
                )
            ),
        }
        model, report = identify_dataset(self.model, data, holdout=0)  # evaluated later
        self.identified_path = os.path.join(self.out, 'identified.json')
        model.save(self.identified_path)
        self.timing['identification_s'] = time.monotonic() - wall
        self.results['identification'] = {
            k: v for k, v in report.items() if isinstance(v, (int, float, str, list))
        }
        log(
            f'bag: {self.results["bag"]["samples"]} samples in '
            f'{self.results["bag"]["trajectories"]} trajectories; identified -> '
            f'{self.identified_path}'
        )

    def phase_evaluation(self) -> None:
        """Each controller tracks the same figure eight from the same state: the sim is reset
        before every run, and a run that diverges is stopped (the excitation's controller, or
        PD, takes the arm back) and marked, so that it neither spins the arm for the rest of its
        run nor leaves it spun."""
        log('phase 3/3: tracking the unseen figure eight with each controller')
        rtf = self.args.evaluation_rtf
        if rtf is not None:
            # lockstep: each run is the same at any pace (only when, in wall time, it runs)
            self.mon.set_params('sim', {'real_time_factor': rtf})
            log(f"the sim's real_time_factor for the evaluation: {rtf:g}")
            self.results['evaluation_real_time_factor'] = rtf
        t_start = self.mon.sim_time()
        self.mon.set_params('torque_controller', {'identified_params': self.identified_path})
        self.segments: List[Segment] = []
        for speed in SPEEDS:
            for ctrl in CONTROLLERS + (self.args.learner_model,):
                seg = self.track(ctrl, speed)
                self.segments.append(seg)
                status = f'DIVERGED ({seg.diverged})' if seg.diverged else 'ok'
                log(
                    f'{ctrl:>10s} @ {speed:.0f}x: RMS error '
                    f'{np.array2string(seg.rms, precision=4)} rad; {status}'
                )
        # every joint state of the phase, for a look at what the table and plots summarise
        t, q, qd, tau = self.mon.data_between(t_start, self.mon.sim_time())
        np.savez_compressed(
            os.path.join(self.out, 'evaluation_states.npz'),
            t=t,
            q=q,
            qd=qd,
            tau=tau,
            joint_names=np.array(self.robot.joint_names),
        )

    def track(self, ctrl: str, speed: float) -> Segment:
        """One evaluation run of ``ctrl`` at ``speed`` from the sim's initial state."""
        approach = float(self.node_params('reference').get('approach_time', 2.0))
        # held between runs with the excitation's controller: PD gains stable on every arm
        # (control_laws.pd_gains) are too soft to hold a heavy one against gravity
        hold = self.args.excitation_controller
        self.mon.set_params('torque_controller', {'model': hold})
        self.mon.set_params('reference', {'trajectory': 'hold'})
        self.mon.reset_sim()
        self.wait_sim(self.mon.sim_time() + 0.1)
        self.mon.set_params('reference', {'trajectory': 'hold'})  # where the reset put it
        self.wait_sim(self.mon.sim_time() + 0.5)
        self.mon.set_params('torque_controller', {'model': ctrl})
        n_ref = self.mon.reference_count()
        self.mon.set_params(
            'reference',
            {
                'trajectory': 'figure_eight',
                'speed': speed,
                'duration': self.args.test_duration,
                'repeat': False,
            },
        )
        self.wait_until('the test reference', lambda: self.mon.reference_count() > n_ref, 30.0)
        misses_before = self.mon.lockstep[1]
        assert self.mon.reference is not None  # its count grew
        t0, ref, _ = self.mon.reference
        t_a, t_b = t0 + approach, ref.end_time
        self.wait_sim(t0)
        t_now, q_now, _, _ = self.mon.data_between(t0 - 0.05, t0 + 0.05)
        start_error = (
            float(
                np.max(np.abs(joint_errors(ref.sample(t_now)[0], q_now, self.robot.joint_types)))
            )
            if len(t_now)
            else math.nan
        )
        check = DivergenceCheck(
            self.effort_limit,
            max_error=self.args.diverge_error,
            max_saturated_s=self.args.diverge_saturation,
        )
        seen = t0
        while True:
            now = self.mon.sim_time()
            t, q, _, tau = self.mon.data_between(seen, min(now, t_b))
            if len(t):
                seen = float(t[-1]) + 1e-9
                err = joint_errors(ref.sample(t)[0], q, self.robot.joint_types)
                if check.update(t, err, tau):
                    # held where it is (not pulled back onto the figure eight), then reset
                    self.mon.set_params('reference', {'trajectory': 'hold'})
                    self.mon.set_params(
                        'torque_controller', {'model': hold if ctrl != hold else 'pd'}
                    )
                    t_b = max(float(t[-1]), t_a)
                    break
            if now >= t_b + 0.05:
                break
            self.check_alive()
            self.wait_sim(min(now + 0.2, t_b + 0.05))
        misses = self.lockstep_misses_since(misses_before)
        t, q, qd, tau = self.mon.data_between(t_a, t_b)
        if len(t) < 10 and check.reason is None:
            raise DemoError(f'no joint states recorded while tracking with {ctrl}')
        if len(t) == 0:  # diverged during the approach
            t, q, qd, tau = self.mon.data_between(t0, t_b)
        q_ref = ref.sample(t)[0]
        err = joint_errors(q_ref, q, self.robot.joint_types)
        self.results.setdefault('evaluation_runs', []).append(
            {
                'controller': ctrl,
                'speed': speed,
                'reference_start': t0,
                'approach_end': t_a,
                'end': t_b,
                'start_error': start_error,
                'diverged': check.reason,
                'lockstep_misses': misses,
            }
        )
        return Segment(
            ctrl,
            speed,
            t,
            q,
            qd,
            tau,
            q_ref,
            rms=np.sqrt(np.mean(err**2, axis=0)),
            max_abs=np.max(np.abs(err), axis=0),
            diverged=check.reason,
            lockstep_misses=misses,
        )

    def lockstep_misses_since(self, before: int) -> Optional[int]:
        """The sim's lockstep timeouts since it reported ``before``, read from a report made
        after now (1 Hz on /diagnostics; None when the sim reports none within 3 s). Counted
        from the last report before the run, so a miss while holding just before it counts."""
        asked = time.monotonic()
        deadline = asked + 3.0
        while self.mon.lockstep[0] < asked and time.monotonic() < deadline:
            time.sleep(0.05)
        arrived, count = self.mon.lockstep
        if arrived < asked or before < 0 or count < 0:
            return None
        return count - before

    @property
    def effort_limit(self) -> np.ndarray:
        """Per-joint effort limits ``(n,)`` the controllers command within
        (:meth:`RobotModel.operating_effort_limit`)."""
        return self.model.operating_effort_limit()

    def verdict(self):
        """Did DeLaN do what the demo claims? (see :func:`delan_verdict`)"""
        mean_rms = {(s.controller, s.speed): float(np.mean(s.rms)) for s in self.segments}
        diverged = {(s.controller, s.speed): s.diverged is not None for s in self.segments}
        true_nmse = {
            e['speed']: float(np.mean(e['nmse']))
            for e in self.results.get('torque_nmse', [])
            if e['model'] == 'true'
        }
        floor = {
            float(k): float(np.mean(v)) for k, v in self.results.get('loop_floor_rms', {}).items()
        }
        return delan_verdict(
            mean_rms,
            diverged,
            SPEEDS,
            self.args.max_delan_ratio,
            true_nmse,
            self.args.max_true_nmse,
            self.results.get('noise_floor_nmse'),
            floor,
            learned=self.args.learner_model,
            excitation_residual=self.results.get('noise_floor_residual_rms'),
            effort_limit=self.effort_limit,
            end_stops=self.results.get('end_stop_share'),
        )

    def evaluation_setup(self, sim: Dict[str, Any]) -> EvaluationSetup:
        """The evaluation of this run without ROS (delan_control.replay), on a sim with the
        parameters ``sim``."""
        return EvaluationSetup(
            self.robot,
            self.model,
            Mismatch.from_params(sim),
            sim,
            self.node_params('reference'),
            self.home(),
        )

    def loop_floor(self) -> None:
        """How well the sim's own model tracks in this loop, replayed without ROS
        (delan_control.replay): what the best model could show, per speed."""
        setup = self.evaluation_setup(self.node_params('sim'))
        truth = true_model(setup)
        self.results['loop_floor_rms'] = {
            str(sp): replay_tracking(
                setup, truth, sp, self.args.law, self.args.test_duration
            ).tolist()
            for sp in SPEEDS
        }


def _limit_list(text: str) -> List[float]:
    """``'30,0,12.5'`` as floats (argparse type); a clear error for anything else."""
    try:
        values = [float(v) for v in text.replace(',', ' ').split()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f'{text!r} is not a comma separated list of numbers'
        ) from None
    if not all(math.isfinite(v) and v >= 0 for v in values):
        raise argparse.ArgumentTypeError(f'{text!r}: limits are finite and >= 0 (0: the URDF)')
    return values


def build_parser() -> argparse.ArgumentParser:
    """The demo's command line."""
    ap = argparse.ArgumentParser(
        description=__doc__.split('\n\n')[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        '--robot',
        '--urdf',
        default='two_link_arm.urdf',
        help='URDF or xacro of the arm: a path, a file of delan_bringup/urdf/ or of '
        'example-robot-data (e.g. panda.urdf); default: the 2-link arm',
    )
    ap.add_argument(
        '--joints',
        default='',
        help='joints to learn and control, comma separated (default: the arm chain '
        'of the URDF; every other movable joint is locked)',
    )
    for kind, unit in (('effort', 'N m or N'), ('velocity', 'rad/s or m/s')):
        ap.add_argument(
            f'--{kind}-limits',
            type=_limit_list,
            default=[],
            help=f'{kind} limit [{unit}] per learned joint, comma separated, in model order '
            "(depth first, as the demo logs the joints; 0: the URDF's); every node and the "
            "demo's own checks use them (default: the URDF's)",
        )
    ap.add_argument('--out', default='out/demo', help='output folder for report, bag, logs')
    ap.add_argument(
        '--mismatch-preset',
        default='',
        choices=tuple(PRESETS),
        help="the sim's mismatch preset ('realistic': payload, Stribeck and "
        "asymmetric friction, joint springs; default: the parameter file's)",
    )
    ap.add_argument(
        '--params',
        default=None,
        help='node parameter file (default: config/sim_params.yaml of delan_bringup)',
    )
    ap.add_argument(
        '--learner-model',
        default='delan',
        choices=LEARNED_KINDS,
        help='what the learner learns and the demo evaluates: the whole dynamics '
        "(delan) or a residual on the URDF's model (delan_residual)",
    )
    ap.add_argument(
        '--learner-friction',
        default='coulomb_viscous',
        choices=FRICTION_MODELS,
        help="the learner's friction law: viscous + symmetric Coulomb, or stribeck "
        '(asymmetric Coulomb with a break-away bump: what the realistic preset simulates)',
    )
    ap.add_argument(
        '--learner-loss',
        default='inverse',
        choices=LOSSES,
        help="the learner's loss: inverse (torque error with estimated accelerations), "
        'forward (positions and velocities of rollouts under the measured torques, no '
        'acceleration estimate; delan only) or both',
    )
    ap.add_argument(
        '--learner-horizon',
        type=int,
        default=10,
        help='forward / both: joint states per rollout window',
    )
    ap.add_argument(
        '--excitation',
        type=float,
        default=120.0,
        help='sim seconds of excitation / online learning',
    )
    ap.add_argument(
        '--law',
        default='feedforward_urdf_pd',
        choices=LAWS,
        help="control law of every model (default: the model's inverse dynamics on "
        'the reference as feed-forward, the computed-torque feedback through the '
        "URDF's mass matrix: every controller has the same loop and a learned "
        "model's errors only bias the feed-forward)",
    )
    ap.add_argument(
        '--excitation-controller',
        default='pinocchio',
        choices=('pd', 'pinocchio'),
        help='controller model that tracks the excitation',
    )
    ap.add_argument(
        '--segment',
        type=float,
        default=10.0,
        help='sim seconds of each excitation trajectory (then the next seed)',
    )
    ap.add_argument(
        '--target-nmse',
        type=float,
        default=0.003,
        help='after the excitation time, go on until a published model has this '
        'validation nMSE on every joint ...',
    )
    ap.add_argument(
        '--floor-factor',
        type=float,
        default=3.0,
        help="... or this times the true plant's own nMSE on the excitation, "
        'whichever is larger ...',
    )
    ap.add_argument(
        '--plateau',
        type=float,
        default=90.0,
        help='... and the trend of the versions published in the last this many sim '
        'seconds promises no joint 10 %% more (0: stop at the target) ...',
    )
    ap.add_argument(
        '--max-extra', type=float, default=150.0, help='... for at most this many more sim seconds'
    )
    ap.add_argument(
        '--test-duration',
        type=float,
        default=8.0,
        help='sim seconds of each evaluation run (after a 2 s approach)',
    )
    ap.add_argument(
        '--evaluation-rtf',
        type=float,
        default=None,
        help="the sim's real_time_factor during the evaluation (default: the parameter "
        "file's); the sim runs in lockstep with the controller, so each run's states are the "
        'same at any factor: 0 runs them as fast as the controller answers',
    )
    ap.add_argument(
        '--max-delan-ratio',
        type=float,
        default=1.0 / 3.0,
        help='fail unless DeLaN tracks with at most this times the mean RMS error '
        'of nominal Pinocchio at every speed',
    )
    ap.add_argument(
        '--max-true-nmse',
        type=float,
        default=0.1,
        help='fail when the true plant predicts the evaluation torques worse than '
        'this (broken data)',
    )
    ap.add_argument(
        '--learning-curves',
        action='store_true',
        help='after the report, learn both kinds (delan, delan_residual) again from the bag '
        'and add their learning curves side by side (minutes more)',
    )
    ap.add_argument(
        '--learning-curves-every',
        type=int,
        default=2,
        help='track every k-th version on the learning curves (and the last)',
    )
    ap.add_argument(
        '--diverge-error',
        type=float,
        default=1.0,
        help='stop a run (diverged) when a joint is this far off [rad or m] ...',
    )
    ap.add_argument(
        '--diverge-saturation',
        type=float,
        default=1.0,
        help='... or a joint sits at its effort limit for this many seconds',
    )
    return ap


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point of the demo; returns 1 when its verdict fails."""
    ap = build_parser()
    args = ap.parse_args(argv)
    why = loss_error(args.learner_loss, args.learner_model, 'auto')
    if why is not None:
        ap.error(why)
    try:
        args.robot = find_urdf(args.robot)
        args.params = args.params or bringup_path('config', 'sim_params.yaml')
        demo = Demo(args)
    except (FileNotFoundError, UrdfError) as err:
        print(f'demo: {err}', file=sys.stderr)
        return 2
    return demo.run()


if __name__ == '__main__':
    raise SystemExit(main())
