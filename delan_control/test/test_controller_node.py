"""torque_controller over real DDS with the sim node: tracking with the exact model, the models'
ranking under a payload/friction mismatch, bumpless runtime switches and refused switches, the
watchdog (wall time and sim time) and the PD fall-back on non-finite model output.

The nodes run in this process on one executor (spun by a background thread) and talk over DDS.
The sim runs in lockstep (publish a state, wait for the command answering it, step), so the
closed loop is the ideal sampled loop whatever the load on the machine; with
``real_time_factor = 0`` it runs as fast as the CPU allows.
"""

from __future__ import annotations

import math
import os
import subprocess
import time
from typing import Dict, List, Optional

import numpy as np
import pytest
import rclpy
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from rclpy.executors import SingleThreadedExecutor
from rclpy.parameter import Parameter, parameter_value_to_python
from rclpy.parameter_client import AsyncParameterClient
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from delan_common.robot_model import RobotModel
from delan_common.ros.qos import LATCHED
from delan_common.urdf_joints import RobotDescription
from delan_control.control_laws import Gains, clamp_torque, control_torque
from delan_control.nodes.reference import to_msg
from delan_control.nodes.sim import SimNode
from delan_control.nodes.torque_controller import TorqueControllerNode
from delan_control.plant import Plant
from delan_control.trajectories import PiecewiseQuintic, make_reference
from delan_testing.ros import ros_context, spin_in_thread, stop_process, streaming_joint_states

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), '..', '..'))
URDF = os.path.join(ROOT, 'delan_bringup', 'urdf', 'two_link_arm.urdf')
URDF7 = os.path.join(ROOT, 'delan_bringup', 'urdf', 'seven_dof_arm.urdf')
ROBOT = RobotDescription.load(URDF)
NAMES = list(ROBOT.joint_names)
Q0 = [0.3, -0.2]
# the controller's gains in these tests: computed torque 400 / 40, PD 60 / 6
GAINS = Gains(
    ct_kp=np.full(2, 400.0), ct_kd=np.full(2, 40.0), kp=np.full(2, 60.0), kd=np.full(2, 6.0)
)
APPROACH = 1.0  # [s] approach segment of each reference, not scored
FIGURE8 = 4.0  # [s] one period of the figure eight at 1x


def stamp_s(stamp) -> float:
    """As the controller reads a stamp (sec + 1e-9 nsec), so replays are bit-identical."""
    return stamp.sec + 1e-9 * stamp.nanosec


def reference_from_msg(msg: JointTrajectory) -> PiecewiseQuintic:
    """The reference exactly as TorqueControllerNode._on_reference builds it."""
    t0 = stamp_s(msg.header.stamp)
    t = np.array(
        [t0 + p.time_from_start.sec + 1e-9 * p.time_from_start.nanosec for p in msg.points]
    )
    return PiecewiseQuintic(
        t,
        np.array([p.positions for p in msg.points]),
        np.array([p.velocities for p in msg.points]),
        np.array([p.accelerations for p in msg.points]),
    )


def hold_msg(q) -> JointTrajectory:
    """A one-point reference: hold ``q`` at rest."""
    msg = JointTrajectory(joint_names=NAMES)
    msg.points = [JointTrajectoryPoint(positions=[float(x) for x in q])]
    return msg


def _params(values: Dict) -> List[Parameter]:
    return [Parameter(k, value=v) for k, v in values.items()]


class Rig:
    """Optionally a lockstep sim, always a torque_controller, and a probe node that records
    joint states, commands and the controller's diagnostics and publishes references, joint
    states and /clock. One single-threaded executor, spun by a background thread."""

    def __init__(self, sim: Optional[Dict] = None, ctl: Optional[Dict] = None):
        self._ctx_mgr = ros_context()
        self.ctx = self._ctx_mgr.__enter__()
        self.sim = None
        self.nodes = []
        self.ex = None
        try:
            if sim is not None:
                sim_params = dict(
                    urdf_path=URDF,
                    lockstep=True,
                    lockstep_timeout=5.0,
                    real_time_factor=0.0,
                    initial_position=Q0,
                )
                sim_params.update(sim)
                self.sim = SimNode(context=self.ctx, parameter_overrides=_params(sim_params))
                self.nodes.append(self.sim)
            # a generous watchdog by default: a scheduling hiccup of this shared machine must
            # not trip it while a test measures tracking (the watchdog has its own tests).
            # The command order is given (the sim's): read from the sim, it comes after the
            # sim's first state, which the lockstep sim then waits lockstep_timeout to see
            # answered (test_command_joints.py tests reading the order)
            ctl_params = dict(
                urdf_path=URDF,
                model='pinocchio',
                watchdog_timeout=5.0,
                command_joints=NAMES if self.sim is None else list(self.sim.command_order.joints),
                **{k: getattr(GAINS, k).tolist() for k in ('ct_kp', 'ct_kd', 'kp', 'kd')},
            )
            ctl_params.update(ctl or {})
            self.ctl = TorqueControllerNode(
                context=self.ctx, parameter_overrides=_params(ctl_params)
            )
            self.nodes.append(self.ctl)
            self.probe = rclpy.create_node('controller_test_probe', context=self.ctx)
            self.nodes.append(self.probe)
            self.states: List[JointState] = []
            self.commands: List[tuple] = []  # (monotonic arrival, data)
            self.diags: List[tuple] = []  # (monotonic arrival, level, message, values)
            self.probe.create_subscription(JointState, 'joint_states', self.states.append, 10000)
            self.probe.create_subscription(
                Float64MultiArray,
                'effort_controller/commands',
                lambda m: self.commands.append((time.monotonic(), list(m.data))),
                10000,
            )
            self.probe.create_subscription(DiagnosticArray, '/diagnostics', self._on_diag, 100)
            self.ref_pub = self.probe.create_publisher(
                JointTrajectory, 'reference_trajectory', LATCHED
            )
            self.params = AsyncParameterClient(self.probe, 'torque_controller')
            # one thread: the fastest lockstep loop here (no GIL hand-offs between executor
            # threads); the sim's physics runs in its own thread anyway
            self.ex = SingleThreadedExecutor(context=self.ctx)
            for n in self.nodes:
                self.ex.add_node(n)
            self._thread = spin_in_thread(self.ex)
        except BaseException:
            self.close()
            raise

    def _on_diag(self, msg: DiagnosticArray) -> None:
        for st in msg.status:
            if 'torque_controller' in st.name:
                self.diags.append(
                    (
                        time.monotonic(),
                        st.level,
                        st.message,
                        {kv.key: kv.value for kv in st.values},
                    )
                )

    def close(self) -> None:
        if self.sim is not None:
            self.sim.close()
        if self.ex is not None:
            self.ex.shutdown(timeout_sec=10.0)
        for n in self.nodes:
            n.destroy_node()
        self._ctx_mgr.__exit__(None, None, None)

    # -- parameters, over the parameter services (as `ros2 param set` does)
    def _call(self, future, timeout: float = 60.0):
        deadline = time.monotonic() + timeout
        while not future.done():
            assert time.monotonic() < deadline, 'parameter service call timed out'
            time.sleep(0.01)
        return future.result()

    def set_params(self, **values):
        assert self.params.wait_for_services(timeout_sec=30.0)
        return self._call(self.params.set_parameters(_params(values))).results

    def set_params_atomically(self, **values):
        assert self.params.wait_for_services(timeout_sec=30.0)
        return [self._call(self.params.set_parameters_atomically(_params(values))).result]

    def get_param(self, name: str):
        assert self.params.wait_for_services(timeout_sec=30.0)
        future = self.params.get_parameters([name])
        deadline = time.monotonic() + 30.0
        while not future.done():
            assert time.monotonic() < deadline
            time.sleep(0.01)
        return parameter_value_to_python(future.result().values[0])

    # -- waiting on the sim
    def wait_states(self, count: int, timeout: float = 60.0) -> None:
        """At least ``count`` joint states, and the controller on its reference itself (not
        rejoining it from where the arm was when states started or came back)."""
        deadline = time.monotonic() + timeout
        while len(self.states) < count or self.ctl.tracker.rejoining:
            assert time.monotonic() < deadline, f'{len(self.states)} joint states only'
            time.sleep(0.01)

    def sim_time(self) -> float:
        return stamp_s(self.states[-1].header.stamp) if self.states else -math.inf

    def wait_sim_time(self, t: float) -> None:
        # lockstep at >= ~0.3x real time even on a loaded machine: 10x margin on top
        deadline = time.monotonic() + max(60.0, 30.0 * (t - self.sim_time()))
        while self.sim_time() < t:
            assert time.monotonic() < deadline, (
                f'sim time {self.sim_time():.3f} never reached {t:.3f}; sim {self.sim.stats}'
            )
            time.sleep(0.02)

    # -- references
    def publish_figure_eight(self, duration: float = FIGURE8, lead: float = 0.05):
        """A figure eight from the current position; returns (reference, start of scoring)."""
        m = self.states[-1]
        t, q, qd, qdd = make_reference(
            'figure_eight',
            ROBOT.lower,
            ROBOT.upper,
            ROBOT.velocity_limits,
            np.array(m.position),
            duration=duration,
            approach_time=APPROACH,
        )
        t0_ns = int(round((stamp_s(m.header.stamp) + lead) * 1e9))
        msg = to_msg(NAMES, t0_ns, t, q, qd, qdd)
        self.ref_pub.publish(msg)
        return reference_from_msg(msg), t0_ns * 1e-9 + APPROACH

    def recorded(self, t_from: float = -math.inf, t_to: float = math.inf):
        """(t, q, qd, effort) of the recorded states with ``t_from <= t <= t_to``."""
        S = list(self.states)
        t = np.array([stamp_s(s.header.stamp) for s in S])
        sel = (t >= t_from) & (t <= t_to)
        pick = [s for s, k in zip(S, sel) if k]
        return (
            t[sel],
            np.array([s.position for s in pick]),
            np.array([s.velocity for s in pick]),
            np.array([s.effort for s in pick]),
        )

    def tracking_rms(self, ref: PiecewiseQuintic, t_from: float, t_to: float) -> np.ndarray:
        t, q, _, _ = self.recorded(t_from, t_to)
        expected = (t_to - t_from) * 500.0
        assert len(t) >= 0.95 * expected, f'{len(t)} states recorded of ~{expected:.0f}'
        err = ref.sample(t)[0] - q
        return np.sqrt(np.mean(err**2, axis=0))

    def track(self, model: str) -> np.ndarray:
        """Switch to ``model`` at runtime, track the figure eight, return the RMS error."""
        res = self.set_params(model=model)
        assert res[0].successful, res[0].reason
        ref, t_a = self.publish_figure_eight()
        self.wait_sim_time(ref.end_time + 0.01)
        return self.tracking_rms(ref, t_a, ref.end_time)


@pytest.fixture
def rig_factory():
    rigs: List[Rig] = []

    def make(**kwargs) -> Rig:
        rigs.append(Rig(**kwargs))
        return rigs[-1]

    yield make
    for rig in rigs:
        rig.close()


def _save_delan(path: str, urdf: str, fill: Optional[float] = None, kind: str = 'delan') -> str:
    """An (untrained) DeLaN checkpoint (or ``kind``) for ``urdf``'s joints; ``fill`` overwrites
    every weight."""
    import torch

    from delan_learning.checkpoint import save_model
    from delan_learning.models import build_model

    robot = RobotDescription.load(urdf)
    torch.manual_seed(0)
    model = build_model(kind, robot.joint_types, width=16, depth=1)
    if fill is not None:
        with torch.no_grad():
            for p in model.parameters():
                p.fill_(fill)
    save_model(model, path, {'joint_names': robot.joint_names})
    return path


# ------------------------------------------------------------------------------------------ 1
def test_exact_model_tracks_figure_eight_to_the_discretisation_error(rig_factory):
    """Zero mismatch, model=pinocchio, computed torque at 500 Hz.

    With the exact model the closed loop is e'' + Kd e' + Kp e = (disturbance of the sampling):
    the torque is computed at t_k and held for 2 ms while the required torque moves on. The
    figure eight needs torque rates up to some 10-40 N m/s; half a period of hold is ~1e-3 s,
    i.e. a torque error of ~0.01-0.04 N m, an acceleration error of ~0.1-0.5 rad/s^2 on the
    elbow's ~0.1 kg m^2, which the loop (Kp = 400 1/s^2) turns into ~2.5e-4..1.2e-3 rad at the
    peaks, less in RMS. Integration (RK4 at 1 kHz) adds ~1e-10. Hence: RMS < 1e-3 rad per joint.

    And since lockstep makes the ROS loop *the* ideal sampled loop, replaying the recorded run
    offline (same plant, same law, same reference) reproduces the recorded states: transport adds
    nothing but time.
    """
    rig = rig_factory(sim={}, ctl={'model': 'pinocchio'})
    rig.wait_states(20)
    ref, t_a = rig.publish_figure_eight()
    rig.wait_sim_time(ref.end_time + 0.01)
    rms = rig.tracking_rms(ref, t_a, ref.end_time)
    print(f'\nexact model, figure eight 1x: RMS {rms} rad')
    assert np.all(rms < 1e-3), rms
    # the arm really moved along the figure eight (not a trivial reference)
    t, q, qd, effort = rig.recorded(t_a, ref.end_time)
    assert np.ptp(q, axis=0).min() > 0.3

    # offline replay of the sampled loop from the first scored state
    t, q, qd, effort = rig.recorded(t_a - 0.5, ref.end_time)
    model = RobotModel(URDF)
    plant = Plant(model, physics_rate=1000.0)
    plant.reset(q[0], qd[0])
    worst = 0.0
    for k in range(len(t) - 1):
        q_ref, qd_ref, qdd_ref = (a[0] for a in ref.sample(t[k]))
        tau = clamp_torque(
            control_torque(
                model, 'computed_torque', GAINS, plant.q, plant.qd, q_ref, qd_ref, qdd_ref
            ),
            ROBOT.effort_limits,
        )
        applied = plant.step(tau, int(round((t[k + 1] - t[k]) * 1000.0)))
        worst = max(worst, np.abs(applied - effort[k + 1]).max(), np.abs(plant.q - q[k + 1]).max())
    print(f'offline replay of {len(t) - 1} control periods: max |diff| {worst:.2e}')
    assert worst < 1e-9


# ------------------------------------------------------------------------------------------ 2
@pytest.fixture(scope='module')
def mismatch_models(tmp_path_factory):
    """Identified parameters and an offline-trained DeLaN for the arm with a 0.6 kg payload and
    twice the URDF friction, from excitation data of the same mismatched plant (datagen: the
    plant under nominal computed-torque control at 500 Hz, as the sim would log it)."""
    import torch

    from delan_common.robot_model import Mismatch
    from delan_control.datagen import generate_dataset
    from delan_control.sysid import identify_dataset
    from delan_learning.checkpoint import save_model
    from delan_learning.data import Dataset
    from delan_learning.training import TrainConfig, train_model

    out = tmp_path_factory.mktemp('mismatch_models')
    t0 = time.monotonic()
    data = generate_dataset(
        URDF,
        trajectories=5,
        duration=8.0,
        rate=500.0,
        seed=3,
        mismatch=Mismatch(payload_mass=0.6, viscous_scale=2.0, coulomb_scale=2.0),
    )
    t_gen = time.monotonic() - t0
    identified, report = identify_dataset(URDF, data)
    identified.save(str(out / 'identified.json'))
    keys = ('q', 'qd', 'qdd', 'tau', 'traj', 't', 'joint_names', 'joint_types')
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        result = train_model(
            Dataset.from_arrays({k: data[k] for k in keys}),
            'delan',
            TrainConfig(epochs=10000, time_budget=6.0, patience=0, seed=0, lr_schedule='cosine'),
            {'width': 64, 'depth': 2},
        )
    finally:
        torch.set_num_threads(threads)
    save_model(result.model, str(out / 'delan.pt'), result.metadata)
    print(
        f'\ndata {t_gen:.1f} s ({len(data["q"])} samples); identified held-out nMSE '
        f'{report["nmse_test"]}; DeLaN {len(result.history)} epochs, validation nMSE '
        f'{result.metadata["training"]["final_metrics"]["nmse"]}'
    )
    return {'identified': str(out / 'identified.json'), 'delan': str(out / 'delan.pt')}


@pytest.mark.solo  # tracking error of a live loop
def test_identified_and_delan_beat_nominal_under_mismatch(rig_factory, mismatch_models):
    rig = rig_factory(
        sim={'payload_mass': 0.6, 'friction_scale': 2.0},
        ctl={
            'model': 'pinocchio',
            'identified_params': mismatch_models['identified'],
            'delan_checkpoint': mismatch_models['delan'],
        },
    )
    rig.wait_states(20)
    rms = {m: rig.track(m) for m in ('pinocchio', 'identified', 'delan')}
    print('\nfigure eight 1x, payload 0.6 kg, friction x2 -- RMS error [rad]:')
    for m, r in rms.items():
        print(f'  {m:>10s}: {np.array2string(r, precision=5)}')
    assert rig.ctl.fallbacks == 0
    nominal = rms['pinocchio']
    assert nominal.max() > 0.01  # the mismatch matters to the nominal model
    for m in ('identified', 'delan'):
        assert np.all(rms[m] < nominal), (m, rms)
        assert np.linalg.norm(rms[m]) < 0.3 * np.linalg.norm(nominal), (m, rms)


# ------------------------------------------------------------------------------------------ 3
Q_HOLD = [0.9, 0.6]  # a pose where gravity needs ~10 N m: a hard switch would jump by that


def _blend_weights(q, qd, effort, law_models):
    """For each state k and the command answering it (the effort of state k + 1, lockstep), the
    weight w of the *new* model's torque in ``c = w new + (1 - w) old`` and the residual."""
    old, new = law_models
    w, res, jump = [], [], []
    for k in range(len(q) - 1):
        a = control_torque(
            old, 'computed_torque', GAINS, q[k], qd[k], np.array(Q_HOLD), np.zeros(2), np.zeros(2)
        )
        b = control_torque(
            new, 'computed_torque', GAINS, q[k], qd[k], np.array(Q_HOLD), np.zeros(2), np.zeros(2)
        )
        c = effort[k + 1]
        d = b - a
        wk = float(np.dot(c - a, d) / np.dot(d, d))
        w.append(wk)
        res.append(float(np.abs(c - (wk * b + (1 - wk) * a)).max()))
        jump.append(float(np.linalg.norm(d)))
    return np.array(w), np.array(res), np.array(jump)


def test_runtime_switch_is_bumpless_and_unusable_switches_are_refused(rig_factory, tmp_path):
    blend = 1.0
    rig = rig_factory(
        sim={'initial_position': Q_HOLD}, ctl={'model': 'pinocchio', 'switch_blend_time': blend}
    )
    rig.ref_pub.publish(hold_msg(Q_HOLD))
    rig.wait_states(100)
    rig.wait_sim_time(rig.sim_time() + 0.2)  # the window below starts 0.1 s back
    t_before = rig.sim_time()
    # pinocchio -> pd while holding against gravity: the feed-forward (~gravity) fades out
    res = rig.set_params(model='pd')
    assert res[0].successful, res[0].reason
    # the blend is timed by the states' stamps: it spans `blend` s of the arm's (sim) time
    rig.wait_sim_time(rig.sim_time() + blend + 0.3)
    t, q, qd, effort = rig.recorded(t_before - 0.1)
    model = RobotModel(URDF)
    w, res, jump = _blend_weights(q, qd, effort, (model, None))
    assert np.all(np.abs(effort) < ROBOT.effort_limits - 1e-6)  # nothing clamped
    assert res.max() < 1e-6, res.max()  # every command is on the blend line
    assert w[0] == pytest.approx(0.0, abs=1e-9) and w[-1] == pytest.approx(1.0, abs=1e-9)
    assert np.all(np.diff(w) > -1e-9), 'blend weight went backwards'
    assert np.all((w > -1e-9) & (w < 1 + 1e-9))
    blending = (w > 1e-6) & (w < 1 - 1e-6)
    in_blend = int(np.count_nonzero(blending))
    # spread over `blend` s of the states' time (500 states/s), linear in the stamp
    assert in_blend >= 0.9 * 500 * blend, in_blend
    slope = np.polyfit(t[:-1][blending], w[blending], 1)[0]
    assert slope == pytest.approx(1.0 / blend, rel=0.02), slope
    hard = jump[np.argmax(w > 1e-6)]  # what a hard switch would have stepped
    steps = np.abs(np.diff(effort[1:], axis=0)).max(axis=1)
    print(
        f'\nswitch pinocchio -> pd: {in_blend} blended commands; a hard switch would step '
        f'{hard:.2f} N m, the largest step between commands was {steps.max():.3f} N m'
    )
    assert hard > 5.0
    assert steps.max() < 0.3 * hard

    # ---- refused switches: the parameter stays, the model stays
    def refused(result, *words):
        assert not result.successful
        assert all(w in result.reason for w in words), result.reason

    refused(rig.set_params(model='identified')[0], 'identified')
    refused(rig.set_params(model='delan')[0], 'delan')  # no checkpoint, no learner
    other = _save_delan(str(tmp_path / 'seven_dof.pt'), URDF7)
    assert rig.set_params(delan_checkpoint=other)[0].successful  # not used by model=pd
    refused(rig.set_params(model='delan')[0], 'delan', 'joints')
    refused(
        rig.set_params(identified_params=str(tmp_path / 'missing.json'), model='identified')[1],
        'not found',
    )
    # an atomic change whose other half is invalid must leave no switch behind
    refused(rig.set_params_atomically(model='pinocchio', kp=[-1.0])[0], 'kp')
    assert rig.set_params(kp=[60.0])[0].successful
    assert rig.get_param('model') == 'pd'
    # ... and the controller still runs plain PD on every state
    n = len(rig.states)
    rig.wait_states(n + 50)
    t, q, qd, effort = rig.recorded(rig.recorded()[0][n])
    w, res, _ = _blend_weights(q, qd, effort, (model, None))
    assert res.max() < 1e-6 and np.allclose(w, 1.0, atol=1e-9)
    assert rig.ctl.model_kind == 'pd'

    # ---- a usable switch while on pd: a DeLaN checkpoint of this robot
    mine = _save_delan(str(tmp_path / 'two_link.pt'), URDF)
    assert rig.set_params(delan_checkpoint=mine)[0].successful
    assert rig.set_params(model='delan')[0].successful
    # while model=delan, an unusable checkpoint is refused and the loaded one stays
    refused(rig.set_params(delan_checkpoint=other)[0], 'joints')
    assert rig.get_param('delan_checkpoint') == mine

    # ---- an atomic set is validated with its own new values, not with the old ones
    mine2 = _save_delan(str(tmp_path / 'two_link_b.pt'), URDF)
    # leaving delan while changing its checkpoint: the switch goes to pinocchio, not delan
    assert rig.set_params_atomically(model='pinocchio', delan_checkpoint=mine2)[0].successful
    assert rig.ctl.model_kind == 'pinocchio' and rig.get_param('model') == 'pinocchio'
    assert rig.set_params(delan_checkpoint=other)[0].successful  # not used by pinocchio
    # back to delan with a usable checkpoint in the same set: the old (7-DoF) file is not loaded
    assert rig.set_params_atomically(model='delan', delan_checkpoint=mine)[0].successful
    assert rig.ctl.model_kind == 'delan' and rig.get_param('delan_checkpoint') == mine

    # ---- a residual is never used as a whole model, nor a whole model as a residual
    residual = _save_delan(str(tmp_path / 'two_link_residual.pt'), URDF, kind='delan_residual')
    refused(rig.set_params(delan_checkpoint=residual)[0], "'delan_residual' model")
    refused(rig.set_params(model='delan_residual')[0], "'delan' model")
    assert rig.set_params_atomically(model='delan_residual', delan_checkpoint=residual)[
        0
    ].successful
    assert rig.ctl.model_kind == 'delan_residual'


# ------------------------------------------------------------------------------------------ 4
def _stream(
    rig: Rig, pub, clock_pub, t_sim: float, seconds: float, rate: float = 250.0, position=Q0
):
    """Publish joint states (and /clock) at ``rate`` for ``seconds`` of wall time."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t_sim += 1.0 / rate
        msg = JointState(
            name=NAMES, position=list(position), velocity=[0.1, -0.1], effort=[0.0, 0.0]
        )
        msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(
            int(round(t_sim * 1e9)), 1_000_000_000
        )
        if clock_pub is not None:
            clock_pub.publish(Clock(clock=msg.header.stamp))
        pub.publish(msg)
        time.sleep(1.0 / rate)
    return t_sim


@pytest.mark.parametrize('use_sim_time', [False, True], ids=['wall_time', 'sim_time'])
def test_watchdog_zero_once_then_silence_then_resume(rig_factory, use_sim_time):
    """States (and, with use_sim_time, /clock: the sim died) stop -> one zero command within
    the timeout, then nothing; states come back -> commanding resumes."""
    timeout = 0.25
    rig = rig_factory(ctl={'model': 'pd', 'watchdog_timeout': 3.0, 'use_sim_time': use_sim_time})
    assert rig.set_params(watchdog_timeout=timeout)[0].successful  # takes effect at runtime
    pub = rig.probe.create_publisher(JointState, 'joint_states', 100)
    clock_pub = rig.probe.create_publisher(Clock, '/clock', 100) if use_sim_time else None
    t_sim = _stream(rig, pub, clock_pub, 100.0, 1.0)
    assert rig.commands, 'no commands while joint states flow'
    # PD holding the first position against a velocity of (0.1, -0.1): -kd qd = (-0.6, 0.6)
    assert rig.commands[-1][1] == pytest.approx([-0.6, 0.6])
    trips_before = rig.ctl.watchdog_trips
    t_stop = time.monotonic()
    time.sleep(2.5)
    after = [(w, d) for w, d in rig.commands if w > t_stop - 0.1]
    zeros = [w for w, d in after if d == [0.0, 0.0]]
    assert len(zeros) == 1, f'{len(zeros)} zero commands after the states stopped'
    assert after[-1][1] == [0.0, 0.0], 'commands after the zero: commanding did not stop'
    # the answer to the last state arrived just after the controller took that state: the zero
    # must come at least the timeout later, and within the timeout plus the check period
    # (timeout / 2) plus slack for a loaded machine
    last = max(w for w, d in rig.commands if d != [0.0, 0.0])
    dt_zero = zeros[0] - last
    print(
        f'\nzero command {dt_zero * 1e3:.0f} ms after the answer to the last joint state '
        f'(watchdog_timeout {timeout * 1e3:.0f} ms; {(zeros[0] - t_stop) * 1e3:.0f} ms after '
        'the last was published)'
    )
    assert 0.9 * timeout < dt_zero < 1.5 * timeout + 1.0
    assert rig.ctl.watchdog_trips == trips_before + 1
    stale = [d for d in rig.diags if d[0] > zeros[0]]
    assert stale and stale[-1][1] == DiagnosticStatus.WARN and 'stale' in stale[-1][2]
    assert stale[-1][3]['watchdog_trips'] == str(trips_before + 1)
    # states return: commands resume
    t_resume = time.monotonic()
    _stream(rig, pub, clock_pub, t_sim, 0.5)
    resumed = [d for w, d in rig.commands if w > t_resume]
    assert len(resumed) >= 10 and resumed[-1] == pytest.approx([-0.6, 0.6])


def test_states_restart_rejoin_the_reference_smoothly_or_drop_a_far_one(rig_factory):
    """After a stale period the reference has moved on while the arm did not (or the arm was
    moved): what the stall added to the deviation is brought back in over resume_time -- the
    first command is the one before the stall (no step), then tracking goes on; beyond
    resume_tolerance (and at start-up, with no command on the reference yet: the whole
    deviation counts) the reference is dropped and the arm held where it is. PD 60 / 6, states
    with velocity (0.1, -0.1): holding commands -kd qd = (-0.6, 0.6)."""
    rig = rig_factory(
        ctl={'model': 'pd', 'watchdog_timeout': 1.0, 'resume_tolerance': 0.1, 'resume_time': 0.2}
    )
    pub = rig.probe.create_publisher(JointState, 'joint_states', 100)
    hold = [-0.6, 0.6]

    def commands(seconds: float, position=Q0) -> List[List[float]]:
        """Stream states for ``seconds`` (longer if needed for 10 answers); the commands that
        answered them (the watchdog's zero excluded)."""
        nonlocal t_sim
        t0 = time.monotonic()
        deadline = t0 + 30.0
        while True:
            t_sim = _stream(rig, pub, None, t_sim, seconds, position=position)
            cmds = [d for w, d in rig.commands if w > t0 and any(d)]
            if len(cmds) >= 10:
                return cmds
            assert time.monotonic() < deadline, f'{len(cmds)} commands only'

    def set_reference(offset) -> None:
        before = rig.ctl.tracker.received
        rig.ref_pub.publish(hold_msg(np.add(Q0, offset)))
        deadline = time.monotonic() + 30.0
        while rig.ctl.tracker.received == before:
            assert time.monotonic() < deadline, 'the reference never arrived'
            time.sleep(0.01)

    def stale() -> None:
        trips = rig.ctl.watchdog_trips
        deadline = time.monotonic() + 30.0
        while rig.ctl.watchdog_trips == trips:
            assert time.monotonic() < deadline, 'the watchdog never tripped'
            time.sleep(0.02)

    t_sim = 100.0
    # start-up with a (latched, old) reference 0.5 rad away: dropped, the arm held
    set_reference([0.5, -0.5])
    cmds = commands(0.5)
    assert cmds and all(d == pytest.approx(hold) for d in cmds), cmds[:3]
    assert rig.ctl.tracker.dropped == 1 and rig.ctl.tracker.reference is None
    # a reference published while states flow is tracked: kp * 0.05 on joint 1
    tracking = [60.0 * 0.05 - 0.6, 0.6]
    set_reference([0.05, 0.0])
    assert commands(0.3)[-1] == pytest.approx(tracking)
    # states stop and restart with the arm where it was: nothing changes (nothing to rejoin)
    stale()
    cmds = commands(0.3)
    assert all(d == pytest.approx(tracking) for d in cmds), cmds[:3]
    assert rig.ctl.tracker.rejoined == 0
    # ... with the arm moved 0.03 rad towards the reference: the first command is the one before
    # the stall, after resume_time the feedback sees the smaller error
    stale()
    cmds = commands(0.5, position=np.add(Q0, [0.03, 0.0]))
    assert cmds[0] == pytest.approx(tracking), cmds[:3]
    assert cmds[-1] == pytest.approx([60.0 * 0.02 - 0.6, 0.6])
    steps = np.abs(np.diff(np.array(cmds), axis=0)).max()
    assert steps < 0.2 * 60.0 * 0.03, steps  # a ramp, not a step
    assert rig.ctl.tracker.dropped == 1 and rig.ctl.tracker.rejoined == 1
    # a reference 0.5 rad away that arrived during the stall: dropped on the restart
    stale()
    set_reference([0.5, 0.0])
    cmds = commands(0.3, position=np.add(Q0, [0.03, 0.0]))
    assert cmds and all(d == pytest.approx(hold) for d in cmds), cmds[:3]
    assert rig.ctl.tracker.dropped == 2
    time.sleep(1.2)  # one more diagnostics period
    assert rig.diags[-1][3]['references_dropped'] == '2'
    assert rig.diags[-1][3]['references_rejoined'] == '1'


def test_a_new_reference_is_joined_without_a_step_or_dropped_when_far(rig_factory):
    """A reference that begins away from the arm (a goal sent as one point, a trajectory
    planned from another start) while states flow: its target starts at the arm (the holding
    torque -kd qd goes to 0: no position error, the arm's velocity) and ramps onto the
    reference over resume_time, instead of stepping by kp x 0.3; one beyond resume_tolerance
    from the arm is dropped and the arm held. PD 60 / 6, states with velocity (0.1, -0.1):
    holding commands -kd qd = (-0.6, 0.6)."""
    rig = rig_factory(ctl={'model': 'pd', 'resume_tolerance': 0.4, 'resume_time': 0.3})
    pub = rig.probe.create_publisher(JointState, 'joint_states', 100)
    hold = [-0.6, 0.6]
    t_sim = _stream(rig, pub, None, 100.0, 0.5)
    assert rig.commands and rig.commands[-1][1] == pytest.approx(hold)

    def send(offset) -> List[List[float]]:
        """Publish a reference at ``offset`` from the arm while states flow; the commands from
        the one before it arrived to 0.6 s after."""
        nonlocal t_sim
        received = rig.ctl.tracker.received
        t_sent = time.monotonic()
        rig.ref_pub.publish(hold_msg(np.add(Q0, offset)))
        deadline = t_sent + 30.0
        while rig.ctl.tracker.received == received:
            assert time.monotonic() < deadline, 'the reference never arrived'
            t_sim = _stream(rig, pub, None, t_sim, 0.02)
        t_sim = _stream(rig, pub, None, t_sim, 0.6)
        before = [d for w, d in rig.commands if w <= t_sent][-1:]
        return before + [d for w, d in rig.commands if w > t_sent]

    cmds = np.array(send([0.3, 0.0]))
    assert len(cmds) > 20
    assert np.abs(cmds[1] - cmds[0]).max() < 1.0, cmds[:3]  # no step (kp x 0.3 = 18)
    assert np.abs(np.diff(cmds, axis=0)).max() < 0.2 * 60.0 * 0.3, cmds  # a ramp
    assert cmds[-1] == pytest.approx([60.0 * 0.3 - 0.6, 0.6])  # then on the reference
    assert rig.ctl.tracker.dropped == 0
    # 0.6 rad from the arm (0.3 from the target): dropped, the arm held where it is
    cmds = np.array(send([0.6, 0.0]))
    assert rig.ctl.tracker.dropped == 1 and rig.ctl.tracker.reference is None
    assert cmds[-1] == pytest.approx(hold)


def test_a_jump_of_the_arm_is_taken_as_a_restart(rig_factory):
    """A sim reset (or a re-homed driver) while joint states flow: the reference, now 0.5 rad
    from the arm, is dropped and the arm held where it now is, instead of the feedback pulling
    it across the jump at once; a step the arm can make is no jump."""
    rig = rig_factory(ctl={'model': 'pd', 'resume_tolerance': 0.1, 'resume_time': 0.05})
    pub = rig.probe.create_publisher(JointState, 'joint_states', 100)
    t_sim = _stream(rig, pub, None, 100.0, 0.5)
    rig.ref_pub.publish(hold_msg(np.add(Q0, [0.05, 0.0])))
    deadline = time.monotonic() + 30.0
    while rig.ctl.tracker.reference is None:
        assert time.monotonic() < deadline, 'the reference never arrived'
        t_sim = _stream(rig, pub, None, t_sim, 0.05)
    t_sim = _stream(rig, pub, None, t_sim, 0.3, position=np.add(Q0, [0.01, 0.0]))
    assert rig.ctl.tracker.dropped == 0 and rig.ctl.tracker.reference is not None
    assert rig.commands[-1][1] == pytest.approx([60.0 * 0.04 - 0.6, 0.6])
    _stream(rig, pub, None, t_sim, 0.3, position=np.add(Q0, [0.5, 0.0]))
    assert rig.ctl.tracker.dropped == 1 and rig.ctl.tracker.reference is None
    assert rig.commands[-1][1] == pytest.approx([-0.6, 0.6])  # held where it is


def test_non_finite_model_output_falls_back_to_pd(rig_factory, tmp_path):
    nan_ckpt = _save_delan(str(tmp_path / 'nan.pt'), URDF, fill=float('nan'))
    rig = rig_factory(ctl={'model': 'delan', 'delan_checkpoint': nan_ckpt})
    pub = rig.probe.create_publisher(JointState, 'joint_states', 100)
    _stream(rig, pub, None, 100.0, 1.5)
    cmds = [d for _, d in rig.commands]
    assert len(cmds) >= 20
    # every command is the PD torque (hold position, velocity (0.1, -0.1)): finite, -kd qd
    assert all(np.allclose(d, [-0.6, 0.6]) for d in cmds), cmds[:3]
    # the diagnostics that count every command sent (1 Hz; a loaded machine may take longer,
    # and states still in flight when the stream stopped may add commands meanwhile)
    deadline = time.monotonic() + 10.0
    while int(rig.diags[-1][3]['commands_sent']) != len(rig.commands):
        assert time.monotonic() < deadline, (rig.diags[-1][3], len(rig.commands))
        time.sleep(0.1)
    cmds = [d for _, d in rig.commands]
    assert all(np.allclose(d, [-0.6, 0.6]) for d in cmds), cmds[:3]
    values = rig.diags[-1][3]
    assert values['model'] == 'delan'
    assert int(values['commands_sent']) == len(cmds)
    assert int(values['fallbacks']) >= len(cmds)


def _process_probe(ctx, name: str, on_command):
    """A node of this test, spun in a thread, that feeds a controller *process* joint states
    (``pub``) and watches its commands (``on_command``) and diagnostics (``diags``: one dict of
    values per status)."""
    node = rclpy.create_node(name, context=ctx)
    diags: List[Dict[str, str]] = []
    node.create_subscription(Float64MultiArray, 'effort_controller/commands', on_command, 1000)
    node.create_subscription(
        DiagnosticArray,
        '/diagnostics',
        lambda m: diags.extend(
            {kv.key: kv.value for kv in s.values}
            for s in m.status
            if s.name.endswith('torque_controller')
        ),
        100,
    )
    pub = node.create_publisher(JointState, 'joint_states', 100)
    ex = SingleThreadedExecutor(context=ctx)
    ex.add_node(node)
    spin_in_thread(ex)
    return node, diags, pub, ex


@pytest.mark.solo  # times the control loop
def test_first_switch_to_delan_does_not_stall_the_loop(tmp_path):
    """A fresh controller process (nothing imported yet) on pd, joint states at ~250 Hz of
    wall time; a runtime switch to delan must not hold the control callback up (loading torch
    on first use took ~1.6 s: commands stopped, the watchdog tripped, the arm went unpowered)."""
    from delan_testing.ros import node_process

    ckpt = _save_delan(str(tmp_path / 'two_link.pt'), URDF)
    log = open(tmp_path / 'controller.log', 'w')
    proc = node_process(
        'delan_control',
        'torque_controller',
        [
            '-p',
            f'urdf_path:={URDF}',
            '-p',
            'model:=pd',
            '-p',
            f'delan_checkpoint:={ckpt}',
            '-p',
            'watchdog_timeout:=1.0',
            '-p',
            f'command_joints:=[{",".join(NAMES)}]',
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        with ros_context() as ctx:
            commands = []
            node, diags, pub, ex = _process_probe(
                ctx, 'stall_probe', lambda m: commands.append(time.monotonic())
            )
            params = AsyncParameterClient(node, 'torque_controller')
            with streaming_joint_states(pub, NAMES, Q0):
                deadline = time.monotonic() + 60.0
                while len(commands) < 800:  # > 3 s of commands before the switch
                    assert proc.poll() is None and time.monotonic() < deadline
                    time.sleep(0.05)
                assert params.wait_for_services(timeout_sec=30.0)
                t_switch = time.monotonic()
                future = params.set_parameters([Parameter('model', value='delan')])
                while not future.done():
                    assert time.monotonic() < t_switch + 60.0
                    time.sleep(0.01)
                assert future.result().results[0].successful
                t_done = time.monotonic()
                time.sleep(1.5)
            c = np.array(commands)
            gap = np.diff(c[(c > t_switch - 0.5) & (c < t_done + 1.0)]).max()
            # what this (shared, maybe loaded) machine does anyway: the gaps before the switch
            before = np.diff(c[(c > t_switch - 3.0) & (c < t_switch)]).max()
            print(
                f'\nswitch pd -> delan took {(t_done - t_switch) * 1e3:.0f} ms; longest gap '
                f'between commands around it {gap * 1e3:.0f} ms ({before * 1e3:.0f} ms in the '
                '3 s before)'
            )
            assert gap < max(0.4, 2.0 * before), f'the control loop stalled {gap:.2f} s'
            assert diags and diags[-1]['model'] == 'delan'
            ex.shutdown(timeout_sec=10.0)
            node.destroy_node()
    finally:
        stop_process(proc)
        log.close()


def _fifo_allowed() -> bool:
    """Whether this machine lets a process use SCHED_FIFO (root / CAP_SYS_NICE / rtprio)."""
    probe = subprocess.run(
        ['python3', '-c', 'import os; os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))'],
        capture_output=True,
    )
    return probe.returncode == 0


@pytest.mark.solo  # times the control loop
def test_loop_times_itself_and_runs_under_realtime_priority(tmp_path):
    """A controller process with ``realtime_priority`` answers a 500 Hz stream; its diagnostics
    count every state and time every command (the histogram holds exactly the commands sent;
    a state not answered is a missed cycle, superseded by a newer one). Its threads run under
    SCHED_FIFO where the machine allows it (all but the model loader), and it says so -- or
    says why not."""
    from delan_control.loop_stats import parse_histogram, percentile_us
    from delan_testing.ros import node_process

    log_path = tmp_path / 'controller.log'
    log = open(log_path, 'w')
    proc = node_process(
        'delan_control',
        'torque_controller',
        [
            '-p',
            f'urdf_path:={URDF}',
            '-p',
            'model:=pinocchio',
            '-p',
            'realtime_priority:=10',
            '-p',
            'watchdog_timeout:=1.0',
            '-p',
            f'command_joints:=[{",".join(NAMES)}]',
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        with ros_context() as ctx:
            commands = []
            node, diags, pub, ex = _process_probe(ctx, 'loop_probe', commands.append)
            deadline = time.monotonic() + 60.0
            while not diags:  # the controller is up
                assert proc.poll() is None and time.monotonic() < deadline
                time.sleep(0.05)
            sent, t = 0, 100.0
            next_send = time.monotonic()
            while sent < 1500:  # 3 s at 500 Hz
                t += 0.002
                msg = JointState(name=NAMES, position=list(Q0), velocity=[0.0, 0.0])
                msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(
                    int(round(t * 1e9)), 1_000_000_000
                )
                pub.publish(msg)
                sent += 1
                next_send += 0.002
                time.sleep(max(0.0, next_send - time.monotonic()))
            n_diag = len(diags)
            while len(diags) < n_diag + 2:  # the counts after the last state
                assert time.monotonic() < deadline + 30.0
                time.sleep(0.05)
            d = diags[-1]
            received, answered = int(d['joint_states_received']), int(d['commands_sent'])
            hist = parse_histogram(d['latency_histogram_10us'])
            print(
                f'\n{received} states, {answered} commands, missed {d["missed_cycles"]}, '
                f'latency p50 {percentile_us(hist, 50):.0f} us p99 '
                f'{percentile_us(hist, 99):.0f} us max {d["loop_latency_max_all_us"]} us'
            )
            missed = int(d['missed_cycles'])
            # every state taken is counted, and answered unless a newer one superseded it
            # first. A loop more than STATE_QUEUE_DEPTH states behind never sees the oldest
            # (the middleware keeps the newest): how many never arrive is the machine's load
            # (CI once: 45 of 1500, behind a 48 ms stall), so only that most of them do
            assert sent // 2 <= received <= sent
            assert received - missed <= answered <= received
            assert len(commands) >= answered - 5
            assert hist.sum() == answered  # each command timed once
            assert 0.0 < percentile_us(hist, 50) <= float('inf')
            # how late it answers depends on the machine's load: that is measured by
            # bench/bench_control_loop.py, not asserted here
            assert int(d['loop_errors']) == 0
            ex.shutdown(timeout_sec=10.0)
            node.destroy_node()
        fifo = [
            tid
            for tid in os.listdir(f'/proc/{proc.pid}/task')
            if os.sched_getscheduler(int(tid)) & ~os.SCHED_RESET_ON_FORK == os.SCHED_FIFO
        ]
        n_threads = len(os.listdir(f'/proc/{proc.pid}/task'))
    finally:
        stop_process(proc)
        log.close()
    text = log_path.read_text()
    if _fifo_allowed():
        assert 'SCHED_FIFO priority 10' in text, text[-2000:]
        # the executor, the loop and the middleware's threads; not the model loader
        assert 3 <= len(fifo) < n_threads
    else:
        assert 'real-time priority not set' in text, text[-2000:]
        assert not fifo
