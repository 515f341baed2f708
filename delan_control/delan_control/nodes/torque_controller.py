"""Torque controller node: joint_states + reference in, ros2_control effort commands out.

One command per received joint state (the ros2_control loop drives the rate). The dynamics model
(``pd`` | ``pinocchio`` | ``identified`` | ``delan``) and the law are parameters, switchable at
runtime with ``ros2 param set``; a switch cross-fades the torque (bumpless). Safety: URDF effort
limits, a watchdog that sends zero torque once when joint states go stale (when they return, the
command rejoins the reference smoothly from where the arm is, or holds the arm if the reference is
beyond ``resume_tolerance``), and a fall-back to PD when the model returns non-finite torque.

Commands go out in the joint order of the controller that applies them (a Float64MultiArray
names no joints): ``command_joints``, or else the ``joints`` parameter of the node
``effort_controller_name``, read once at start-up without blocking; no commands until it is
known, the model's order (with a warning) when it cannot be read in time, and none at all
(diagnostics ERROR) when those joints are not the model's (see :mod:`delan_control.command_order`).

What a cycle computed goes out on ``~/controller_state`` (delan_msgs/ControllerState: reference,
feedback, error, the model's torque and the command), at most ``state_publish_rate`` times a
second: when one is due the loop only hands its arrays over, a worker thread of normal priority
builds and publishes the message. Health on ``/diagnostics`` at 1 Hz.
"""

from __future__ import annotations

import math
import sys
import threading
import time
from typing import Dict, List, NamedTuple, Optional, Tuple

import numpy as np
from rclpy._rclpy_pybind11 import RCLError
from rclpy.node import Node
from rclpy.parameter import parameter_value_to_python
from rclpy.parameter_client import AsyncParameterClient
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray
from trajectory_msgs.msg import JointTrajectory

from delan_common.decimation import Decimator
from delan_common.joint_state import JointStateError, JointStateMapper, StampGate
from delan_common.model_kinds import CONTROLLER_KINDS, LEARNED_KINDS
from delan_common.param_table import ParamContext
from delan_common.ros.cdr import CommandBytes, JointStateReader
from delan_common.ros.diagnostics import ERROR, OK, WARN, DiagnosticsReporter, hardware_id
from delan_common.ros.params import declare_table, validating_callback
from delan_common.ros.qos import LATCHED, create_publisher, create_subscription
from delan_common.ros.realtime import python_thread_ids, set_realtime_priority
from delan_common.ros.rejections import RejectionCounter
from delan_common.ros.robot_param import declare_robot
from delan_common.ros.spin import run_node, steady_timer
from delan_common.ros.stamps import seconds, set_seconds
from delan_common.ros.state_taker import JointStateTaker, Taken, decode_joint_state
from delan_common.urdf_joints import RobotDescription, UrdfError
from delan_control.command_order import (
    CommandOrder,
    CommandOrderError,
    OrderDecision,
    ReceiverOrderQuery,
)
from delan_control.continuity import JumpDetector
from delan_control.control_laws import (
    ENERGY_LAW,
    URDF_FEEDBACK_LAWS,
    BumplessBlend,
    EnergyLaw,
    Gains,
    arm_gains,
    clamp_torque,
    control_terms,
)
from delan_control.energy_control import EnergySwingUp, actuated_mask
from delan_control.evaluation import joint_errors
from delan_control.loop_stats import LoopStats, histogram_text
from delan_control.model_loader import LatestLoader, ModelLoadError, load_dynamics_model
from delan_control.params.torque_controller import TABLE, energy_config
from delan_control.reference_tracking import ReferenceTracker, Resumed
from delan_control.rt_params import GAIN_NAMES
from delan_control.trajectories import PiecewiseQuintic
from delan_msgs.msg import ControllerState, ModelUpdate


def _preload_model_libraries() -> Optional[str]:
    """Import what every model kind needs (Pinocchio, torch, the DeLaN C kernel) at start-up
    (~2 s, RSS ~300 MB instead of ~80 MB). Loaded on first use instead, a runtime switch to
    pinocchio / delan (or the first learner update) blocks the control callback for ~0.15 s /
    ~1.6 s -- past the watchdog, with the arm uncommanded; preloaded, a load takes ~10 ms.

    Returns why the learned kinds cannot be loaded (``delan_learning`` or torch not installed:
    a pd / pinocchio / identified controller does not need them), else ``None``."""
    import delan_common.robot_model  # noqa: F401  (Pinocchio)
    import delan_control.sysid  # noqa: F401

    try:
        import delan_learning.checkpoint  # noqa: F401  (torch)
        import delan_learning.fastpath  # noqa: F401
        from delan_learning.c_kernel import c_kernel
    except ImportError as err:
        return str(err)
    c_kernel()
    return None


# A control callback waiting for the GIL while another thread (model loading, diagnostics) runs
# Python code gets it after at most the switch interval: 5 ms by default, 5 control cycles.
GIL_SWITCH_INTERVAL_S = 2e-4


# joint states the loop's subscription keeps; each wake-up takes them all, answers the newest
STATE_QUEUE_DEPTH = 10

#: gains for an arm whose URDF gives no inertias to derive them from
FALLBACK_GAINS = {'ct_kp': 400.0, 'ct_kd': 40.0, 'kp': 60.0, 'kd': 6.0}
# how often the receiving controller's joints are looked for until known [s]
ORDER_POLL_S = 0.1


class CycleState(NamedTuple):
    """What one control cycle computed (model order), handed over by the loop for
    ``~/controller_state``: its arrays are the cycle's own (made anew every cycle, never written
    again; the model's torque is copied, a model may return a buffer it reuses), so the message
    is built from them off the loop."""

    stamp: float  # source stamp of the joint state [s]
    q_ref: np.ndarray
    qd_ref: np.ndarray
    qdd_ref: np.ndarray
    q: np.ndarray
    qd: np.ndarray
    effort: Optional[np.ndarray]
    feedforward: Optional[np.ndarray]  # None: no model in the torque
    command: np.ndarray
    model: str
    model_version: int
    law: str
    fallback: str
    holding: bool


class TorqueControllerNode(Node):
    """Joint torques from a dynamics model and a control law, with the safety of a real arm."""

    def __init__(self, **kwargs):
        # before the node appears on the graph: a signal during the ~2 s of imports then ends
        # the start-up cleanly (run_node) instead of hitting a half-built node
        learned_unavailable = _preload_model_libraries()
        # process-wide: a process hosting a controller wants its callbacks served promptly
        sys.setswitchinterval(min(sys.getswitchinterval(), GIL_SWITCH_INTERVAL_S))
        super().__init__('torque_controller', **kwargs)
        if learned_unavailable:
            self.get_logger().warning(
                f'learned models (delan, delan_residual) unavailable: {learned_unavailable}; '
                'pd, pinocchio and identified work without delan_learning and torch'
            )
        reg: Dict = {}
        self.robot = declare_robot(self, reg)
        # continuous joints: their position error is wrapped (control_laws.position_error)
        cont = np.array([t == 'continuous' for t in self.robot.joint_types])
        self._continuous = cont if cont.any() else None
        n = len(self.robot.joint_names)
        self.joint_names = list(self.robot.joint_names)

        v = declare_table(self, TABLE, reg, ParamContext(n))
        # resolved in this node's namespace: a check the ROS-free table cannot make
        error = self._check_node_name(v.effort_controller_name)
        if error:
            raise ValueError(f'invalid parameter: {error}')
        self.control_rate = v.control_rate
        self.gains = Gains(**self._gains({k: v[k] for k in GAIN_NAMES}, n))
        self.law, self.model_kind = v.law, v.model
        self.actuated = self._actuated(v.actuated_joints)
        self.delan_checkpoint, self.identified_params = v.delan_checkpoint, v.identified_params
        self.watchdog_timeout, self.blend_time = v.watchdog_timeout, v.switch_blend_time
        self.effort_scale, self.realtime_priority = v.effort_limit_scale, v.realtime_priority
        self._state_rate = Decimator(v.state_publish_rate)
        self._command_order_from(
            v.command_joints, v.effort_controller_name, v.effort_controller_timeout
        )
        self._feedback_model = None  # RobotModel for the URDF_FEEDBACK_LAWS, lazily
        self.urdf_limits = self._effort_limits()
        self.limits = self._clamp_limits(self.effort_scale)
        # what law energy needs besides the model; None (and why) when it cannot be used
        self._energy_law: Optional[EnergyLaw] = None
        self._energy_unavailable = ''
        try:
            self._energy_law = EnergyLaw(
                self.actuated, self._upright(v.upright_position), self.limits, energy_config(v)
            )
        except ValueError as err:
            self._energy_unavailable = str(err)
        self.mapper = JointStateMapper(self.joint_names)
        self.stamps = StampGate()
        self.rejected = RejectionCounter(self.get_logger(), 'joint state')
        self.rejected_refs = RejectionCounter(self.get_logger(), 'reference')
        self.fallbacks = 0
        self.watchdog_trips = 0
        self.commands_sent = 0
        self.loop_stats = LoopStats()
        self._reader = JointStateReader()
        self._lock = threading.RLock()
        self._model = None  # active DynamicsModel (None = PD)
        self._model_version = 0  # its learner version (ControllerState.model_version)
        self._old_model = None  # model being faded out
        # law energy: the swing-up law built on the active / faded-out model (None otherwise)
        self._energy: Optional[EnergySwingUp] = None
        self._old_energy: Optional[EnergySwingUp] = None
        self._blend = BumplessBlend(self.blend_time)
        self._latest_update: Optional[ModelUpdate] = None
        self.tracker = ReferenceTracker(
            self.robot.velocity_limits, v.resume_tolerance, v.resume_time, tracked=self.actuated
        )
        self._last_state_time: Optional[float] = None
        self._stale = True
        # a position the arm cannot have moved to (a sim reset, a re-homed driver) is handled
        # as a restart of the joint states (control thread only)
        self._jumps = JumpDetector(self.robot.velocity_limits)
        self._pending = None
        self._incoming: Dict = {}  # the parameters of the change being validated
        try:
            self._set_model(self.model_kind, initial=True)
        except ModelLoadError:
            raise
        except ValueError as err:  # law energy on a model it cannot be built on
            raise ValueError(f'invalid parameter: {err}') from None
        # learner versions are loaded (and law energy built on them) off the executor thread
        # (see _on_model_update)
        self._update_loader = LatestLoader(
            self._load_update,
            self._update_loaded,
            self._update_failed,
            name='model_update_loader',
        )
        reg['model'] = self._check_model
        law_choices = reg['law']  # the table's check (one of LAWS) comes first
        reg['law'] = lambda law: law_choices(law) or self._check_law(law)
        reg['delan_checkpoint'] = self._check_file('delan_checkpoint', LEARNED_KINDS)
        reg['identified_params'] = self._check_file('identified_params', ('identified',))
        validate = validating_callback(reg)

        def on_set(params):
            # a model loaded by the validators of a change that is then refused (e.g. an atomic
            # set with another invalid value) must not be switched to by the next change
            self._pending = None
            # an atomic set of model + delan_checkpoint / identified_params is validated with
            # the new file, not the old one
            self._incoming = {p.name: p.value for p in params}
            try:
                return validate(params)
            finally:
                self._incoming = {}

        self.add_on_set_parameters_callback(on_set)
        self.add_post_set_parameters_callback(self._apply_params)

        self.cmd_pub = create_publisher(self, Float64MultiArray, 'effort_controller/commands', 10)
        # commands go out as pre-serialised bytes, joint states come in as bytes (read with
        # numpy): ~90 us less per cycle than message objects
        self._command_bytes = CommandBytes.create(n)
        self.state_pub = create_publisher(self, ControllerState, '~/controller_state', 10)
        self._state_worker = LatestLoader(
            self._publish_state, lambda *_: None, self._state_failed, name='controller_state'
        )
        self._diagnostics = DiagnosticsReporter(
            self, self._diagnostics_report, hardware_id(self, self.robot.name)
        )
        self._start_control_loop()
        create_subscription(
            self, JointTrajectory, 'reference_trajectory', self._on_reference, LATCHED
        )
        create_subscription(
            self, ModelUpdate, 'learner/model_update', self._on_model_update, LATCHED
        )
        # Staleness is wall time (time.monotonic), so the checks run on the steady clock: with
        # use_sim_time a ROS-time timer stops with /clock -- exactly when the sim is gone.
        self._watchdog_timer = steady_timer(self, self.watchdog_timeout / 2.0, self._watchdog)
        passive = [j for j, a in zip(self.joint_names, self.actuated) if not a]
        self.get_logger().info(
            f'controlling {self.joint_names} with model={self.model_kind} law={self.law}'
            + (f'; passive (never commanded): {passive}' if passive else '')
        )
        # last: the middleware's and the loop's threads exist now; the model loader and the
        # state publisher stay at normal priority
        set_realtime_priority(
            self.realtime_priority,
            self.get_logger(),
            exclude=python_thread_ids(self._update_loader.thread, self._state_worker.thread),
        )

    # ---------------------------------------------------------------- command order
    def _command_order_from(self, explicit: List[str], receiver: str, timeout: float) -> None:
        """``command_joints`` when given (joints other than the model's fail the start-up), else
        the receiving controller's order, asked for in the background (_poll_command_order)."""
        self.effort_controller_name = receiver
        self._order_query: Optional[ReceiverOrderQuery] = None
        self._order_future = None
        # read by the control thread: no commands while None (not known yet, or refused)
        self._command_order: Optional[CommandOrder] = None
        if explicit:
            try:
                self._command_order = CommandOrder(self.joint_names, explicit)
            except CommandOrderError as err:
                raise ValueError(f'invalid parameter: command_joints: {err}') from None
            self._order_source = 'command_joints'
            return
        self._order_source = 'pending'
        self._order_query = ReceiverOrderQuery(
            self.joint_names, self._receiver_name(), timeout, time.monotonic(), self._main_chain()
        )
        self._order_client = AsyncParameterClient(self, self.effort_controller_name)
        self._order_timer = steady_timer(self, ORDER_POLL_S, self._poll_command_order)

    def _check_node_name(self, name: str) -> Optional[str]:
        if not name or name.startswith('~'):
            return f'effort_controller_name={name!r} must name the receiving controller node'
        try:
            self.resolve_service_name(f'{name}/get_parameters')
        except (RCLError, ValueError) as err:
            return f'effort_controller_name={name!r} is not a node name: {err}'
        return None

    def _receiver_name(self) -> str:
        """``effort_controller_name`` resolved as the parameter client resolves it."""
        service = self.resolve_service_name(f'{self.effort_controller_name}/get_parameters')
        return service[: -len('/get_parameters')]

    def _main_chain(self) -> Optional[List[str]]:
        """What an empty ``joints`` selects in the suite's nodes (the sim): the URDF's main
        chain, in model order (None when the URDF has none)."""
        try:
            return RobotDescription.load(self.robot.xml).joint_names
        except UrdfError:
            return None

    def _poll_command_order(self) -> None:
        """Executor thread, until decided: ask the receiver for its joints once its parameter
        services are there, take its answer, or the model order past the deadline."""
        query, now = self._order_query, time.monotonic()
        decision = None
        future = self._order_future
        if future is not None and future.done():
            self._order_future = None
            decision = query.answer(*self._answered_joints(future))
        if decision is None and query.request_due(now, self._order_client.services_are_ready()):
            query.sent(now)
            self._order_future = self._order_client.get_parameters(['joints'])
        decision = decision or query.expire(now)
        if decision is not None:
            self._adopt_order(decision)

    @staticmethod
    def _answered_joints(future):
        """(joint names or None, what the receiver has instead) from a GetParameters reply."""
        try:
            values = future.result().values
            value = parameter_value_to_python(values[0]) if values else None
        except Exception as err:  # noqa: BLE001 -- a failed call is no answer
            return None, f' (the request failed: {err!r})'
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return value, ''
        return None, '' if value is None else f' (its joints is {value!r})'

    def _adopt_order(self, decision: OrderDecision) -> None:
        self._command_order = decision.order
        self._order_source = decision.source
        self._order_timer.cancel()
        log = {
            'info': self.get_logger().info,
            'warning': self.get_logger().warning,
            'error': self.get_logger().error,
        }[decision.level]
        log(decision.message)

    # ---------------------------------------------------------------- models
    def _load(self, kind: str, checkpoint: Optional[str] = None):
        latest = self._latest_update.checkpoint_path if self._latest_update else ''
        return load_dynamics_model(
            kind,
            self.robot,
            checkpoint=checkpoint
            or self._incoming.get('delan_checkpoint', self.delan_checkpoint)
            or latest,
            identified_params=self._incoming.get('identified_params', self.identified_params),
        )

    def _set_model(
        self,
        kind: str,
        initial: bool = False,
        checkpoint: Optional[str] = None,
        model=False,
        energy=False,
        blend: bool = True,
    ) -> None:
        """Make ``kind`` active; ``model`` is an already loaded instance (False = load now),
        ``energy`` law energy built on it (False = build now if the law is energy); no
        cross-fade at start-up or without ``blend`` (a law switch: the old torque is another
        law's)."""
        if model is False:
            try:
                model = self._load(kind, checkpoint)
            except ModelLoadError:
                if not (initial and kind in LEARNED_KINDS):
                    raise
                self.get_logger().warning(
                    f'model={kind}: no usable checkpoint yet; PD until the learner publishes one'
                )
                model = None
        if energy is False:
            energy = self._energy_for(model, kind, self.law)
        with self._lock:
            if initial or not blend:
                self._blend.stop()
            else:
                self._old_model, self._old_energy = self._model, self._energy
                self._blend.duration = self.blend_time
                self._blend.start()  # at the next state's stamp
            self._model, self._energy = model, energy
            self._model_version = getattr(model, 'model_version', 0)
            self.model_kind = kind

    def _energy_for(self, model, kind: str, law: str) -> Optional[EnergySwingUp]:
        """Law energy built on ``model`` (kind ``kind``) when ``law`` is energy, else None;
        None too for a learned kind with no version yet (PD until one comes). ``ValueError``
        with the reason when it cannot be built. Off the control cycle: ~ms (linearisation,
        Riccati), on the model instance the control thread will hold, not the one it holds."""
        if law != ENERGY_LAW:
            return None
        if self._energy_law is None:
            raise ValueError(self._energy_unavailable)
        if model is None and kind in LEARNED_KINDS:
            return None
        return self._energy_law.build(model, kind)

    def _prepare(self, kind: str, law: str) -> Optional[str]:
        """A fresh instance of model ``kind`` and, for law energy, the law on it, kept for the
        switch (``_pending``); else why not."""
        try:
            model = self._load(kind)
            self._pending = (kind, model, self._energy_for(model, kind, law))
        except ValueError as err:  # ModelLoadError too
            return str(err)
        return None

    def _check_model(self, kind: str) -> Optional[str]:
        """Validator of ``model``: the switch is refused unless the model loads (and, under law
        energy, unless the law can be built on it)."""
        if kind not in CONTROLLER_KINDS:
            return f'model={kind!r} is not one of {list(CONTROLLER_KINDS)}'
        error = self._prepare(kind, self._incoming.get('law', self.law))
        return None if error is None else f'model={kind} cannot be used: {error}'

    def _check_law(self, law: str) -> Optional[str]:
        """Validator of ``law``: a switch to energy builds the law on a fresh instance of the
        model (the model's validator does when the model changes too), refused when it cannot
        be built."""
        if law != ENERGY_LAW or self.law == ENERGY_LAW or 'model' in self._incoming:
            return None
        error = self._prepare(self.model_kind, law)
        return None if error is None else f'law={law} cannot be used: {error}'

    def _check_file(self, name: str, kinds: Tuple[str, ...]):
        def check(path: str) -> Optional[str]:
            kind = self._incoming.get('model', self.model_kind)
            if kind not in kinds or not path:
                return None
            try:
                model = load_dynamics_model(
                    kind,
                    self.robot,
                    checkpoint=path if kind in LEARNED_KINDS else '',
                    identified_params=path if kind == 'identified' else '',
                )
                energy = self._energy_for(model, kind, self._incoming.get('law', self.law))
            except ValueError as err:  # ModelLoadError too
                return f'{name}={path!r} cannot be used: {err}'
            self._pending = (kind, model, energy)
            return None

        return check

    def _effort_limits(self) -> np.ndarray:
        """The URDF's effort limits; where it gives none (effort="0"), a conservative one
        derived from the inertia, so every command is clamped."""
        r = self.robot
        if np.all(r.effort_given):
            return r.effort_limits.copy()
        from delan_common.robot_model import RobotModel

        limits = RobotModel(r.xml, **r.selection_kwargs()).operating_effort_limit()
        missing = ~r.effort_given & self.actuated  # a passive joint has no motor to limit
        if missing.any():
            self.get_logger().warning(
                f'no effort limit in the URDF for {np.array(r.joint_names)[missing].tolist()}: '
                f'clamping to {np.round(limits[missing], 3).tolist()} (from the inertia; set '
                'effort_limits to choose)'
            )
        return limits

    def _clamp_limits(self, scale: float) -> np.ndarray:
        """What commands are clamped to: ``scale`` times the effort limits, 0 on the passive
        joints, so no law (and no fall-back) ever commands them."""
        return self.urdf_limits * scale * self.actuated

    def _actuated(self, names: List[str]) -> np.ndarray:
        """``(n,)`` bool of the ``actuated_joints`` parameter ([] = every joint)."""
        if not names:
            return np.ones(len(self.joint_names), dtype=bool)
        try:
            return actuated_mask(list(names), self.joint_names)
        except ValueError as err:
            raise ValueError(f'invalid parameter: actuated_joints: {err}') from None

    def _upright(self, values: List[float]) -> np.ndarray:
        """``upright_position`` as ``(n,)`` (one value for every joint); NaN when not set."""
        return np.broadcast_to(np.asarray(values, dtype=np.float64), (len(self.joint_names),))

    def _apply_params(self, params) -> None:
        law = None
        for p in params:
            if p.name in ('ct_kp', 'ct_kd', 'kp', 'kd'):
                # [nan]: back to the gain derived from the URDF
                setattr(
                    self.gains,
                    p.name,
                    self._gains({p.name: list(p.value)}, len(self.joint_names))[p.name],
                )
            elif p.name == 'law':
                law = p.value
            elif p.name == 'switch_blend_time':
                self.blend_time = p.value
            elif p.name == 'watchdog_timeout':
                self.watchdog_timeout = p.value
                self.destroy_timer(self._watchdog_timer)
                self._watchdog_timer = steady_timer(self, p.value / 2.0, self._watchdog)
            elif p.name == 'effort_limit_scale':
                self.limits = self._clamp_limits(p.value)
            elif p.name == 'state_publish_rate':
                self._state_rate.rate_hz = p.value
            elif p.name in ('delan_checkpoint', 'identified_params'):
                setattr(self, p.name, p.value)
            elif p.name in ('resume_tolerance', 'resume_time'):
                setattr(self.tracker, p.name, p.value)
        pending, self._pending = self._pending, None
        previous = self.model_kind
        with self._lock:  # the control thread takes law, model and its law energy together
            if law is not None and law != self.law:
                self.law = law
                self._energy = self._old_energy = None  # built for law energy only
                if pending is not None:  # a model (with law energy built on it) for the law
                    self._set_model(pending[0], model=pending[1], energy=pending[2], blend=False)
                    pending = None
                self.get_logger().info(f'law {law}')
            if pending is not None:
                self._set_model(pending[0], model=pending[1], energy=pending[2])
                self.get_logger().info(
                    f'switched model {previous} -> {pending[0]} (bumpless, '
                    f'{self.blend_time:.2f} s blend)'
                )

    def _on_model_update(self, msg: ModelUpdate) -> None:
        if list(msg.joint_names) != self.joint_names:
            self.get_logger().error(
                f'model update for joints {list(msg.joint_names)} ignored '
                f'(controller has {self.joint_names})'
            )
            return
        self._latest_update = msg
        if self._follows_learner():
            # loaded in the background (a load would delay the control callbacks by 3-10 ms);
            # the running model stays in force until the new one is ready
            self._update_loader.submit((msg, self.model_kind, self.law))

    def _follows_learner(self) -> bool:
        return self.model_kind in LEARNED_KINDS and not self.delan_checkpoint

    def _load_update(self, request: Tuple[ModelUpdate, str, str]):
        """Loader thread: ``(model, law energy on it or None)`` of a learner version."""
        msg, kind, law = request
        model = load_dynamics_model(kind, self.robot, checkpoint=msg.checkpoint_path)
        return model, self._energy_for(model, kind, law)

    def _update_loaded(self, request: Tuple[ModelUpdate, str, str], loaded) -> None:
        """Loader thread: switch to a learner version unless the user switched away meanwhile
        (model or law; or a newer version was already adopted through a parameter change)."""
        msg, kind, law = request
        with self._lock:
            if (
                not self._follows_learner()
                or self._latest_update is not msg
                or self.model_kind != kind
                or self.law != law
            ):
                return
            self._set_model(kind, model=loaded[0], energy=loaded[1])
        name = 'DeLaN' if kind == 'delan' else 'DeLaN residual'
        self.get_logger().info(f'{name} model v{msg.model_version} from {msg.checkpoint_path}')

    def _update_failed(self, request: Tuple[ModelUpdate, str, str], err: Exception) -> None:
        self.get_logger().error(
            f'model update v{request[0].model_version} unusable as {request[1]} '
            f'(law {request[2]}): {err}'
        )

    # ---------------------------------------------------------------- reference
    def _on_reference(self, msg: JointTrajectory) -> None:
        try:
            names = list(msg.joint_names)
            missing = [j for j in self.joint_names if j not in names]
            if missing:
                raise ValueError(f'reference lacks joints {missing}')
            idx = np.array([names.index(j) for j in self.joint_names])
            if not msg.points:
                raise ValueError('reference has no points')
            t0 = seconds(msg.header.stamp)
            if t0 == 0.0:
                t0 = self.get_clock().now().nanoseconds * 1e-9
            t = np.array([t0 + seconds(p.time_from_start) for p in msg.points])

            def arr(field):
                rows = [getattr(p, field) for p in msg.points]
                if all(len(r) == 0 for r in rows):
                    return None
                if any(len(r) != len(names) for r in rows):
                    raise ValueError(f'{field} of some points has the wrong length')
                return np.asarray(rows, float)[:, idx]

            q = arr('positions')
            if q is None:
                raise ValueError('reference points have no positions')
            ref = PiecewiseQuintic(t, q, arr('velocities'), arr('accelerations'))
        except ValueError as err:
            self.rejected_refs.reject('bad_reference', str(err))
            return
        self.tracker.set_reference(ref)

    # ---------------------------------------------------------------- control
    def _start_control_loop(self) -> None:
        """Joint states are taken by a thread of their own, not by the executor: as the real-time
        loop of ros2_control, it is never queued behind parameter services, model updates or
        diagnostics, and it reads each sample's source timestamp to time itself."""
        self._taker = JointStateTaker(self, self._on_states, STATE_QUEUE_DEPTH, 'control_loop')

    def _on_states(self, batch: List[Taken]) -> None:
        """Everything queued, answering only the newest: a loop that fell behind (a stall, a
        loaded machine) catches up at once instead of commanding from a backlog of old states
        (as ros2_control, which reads the latest state)."""
        self.loop_stats.received([info['source_timestamp'] for _, info in batch])
        self._on_joint_state_bytes(*batch[-1])

    def _on_joint_state_bytes(self, data: bytes, info) -> None:
        """One serialised JointState + its message info (the source timestamp times the loop)."""
        decoded = decode_joint_state(self._reader, data, self.rejected)
        if decoded is not None and self._control(*decoded):
            self.loop_stats.command(info['source_timestamp'], time.time_ns())

    def _on_joint_state(self, msg: JointState) -> None:
        """A JointState message (in-process callers, tests)."""
        self._control(msg, seconds(msg.header.stamp))

    def _publish_command(self, tau: np.ndarray, order: CommandOrder) -> None:
        """``tau`` (model order) in the receiver's order. Control loop thread only (the
        pre-serialised buffer is its own)."""
        tau = order.to_command(tau)
        if self._command_bytes is not None:
            self.cmd_pub.publish(self._command_bytes.pack(tau))
        else:
            self.cmd_pub.publish(Float64MultiArray(data=np.asarray(tau, float).tolist()))

    def _control(self, msg, t: float) -> bool:
        """One cycle: map, gate, command; False when the state was rejected (no command)."""
        t = t or self.get_clock().now().nanoseconds * 1e-9
        try:
            js = self.mapper.map(msg)
            # the reference is evaluated at the stamp: one far ahead (or behind) must not
            # command the end (or start) of the trajectory
            self.stamps.check(t)
        except JointStateError as err:
            self.rejected.reject(err.reason, err.detail)
            return False
        order = self._command_order
        if order is None:
            return False
        now = time.monotonic()
        with self._lock:  # against the watchdog (executor thread)
            self._last_state_time = now
            resumed, self._stale = self._stale, False
        if resumed:
            self._jumps.reset()
        jump = self._jumps.check(t, js.position)
        if resumed or jump is not None:
            self._log_resume(
                self.tracker.resume(t, js.position, js.velocity),
                'the stall' if resumed else 'a jump of the arm',
                t,
            )
            self.get_logger().info(
                'joint states fresh: commanding'
                if resumed
                else f'the arm jumped {jump:.3f} between two joint states (a '
                'reset, a re-homed driver): taken as a restart'
            )
        with self._lock:
            model, old = self._model, self._old_model
            energy, old_energy, law = self._energy, self._old_energy, self.law
            w = self._blend.weight(t)
        if law == ENERGY_LAW:  # no reference: the upright, where the law works towards
            q_ref, qd_ref, qdd_ref = self._energy_law.reference()
            holding = False
        else:
            q_ref, qd_ref, qdd_ref, holding = self.tracker.target(t, js.position, js.velocity)
        tau, ff, failed = self._torque(model, energy, law, js, q_ref, qd_ref, qdd_ref)
        if w is not None:
            tau_old, ff_old, _ = self._torque(old, old_energy, law, js, q_ref, qd_ref, qdd_ref)
            tau = w * tau + (1.0 - w) * tau_old
        command = clamp_torque(tau, self.limits)
        self._publish_command(command, order)
        self.commands_sent += 1
        if self._state_rate.due(now):
            if w is not None:
                ff = _blend(w, ff, ff_old)
            self._state_worker.submit(
                CycleState(
                    t,
                    q_ref,
                    qd_ref,
                    qdd_ref,
                    js.position,
                    js.velocity,
                    js.effort,
                    None if ff is None else ff.copy(),
                    command,
                    self.model_kind,
                    self._model_version,
                    law,
                    self._fallback(model, failed),
                    holding,
                )
            )
        return True

    def _fallback(self, model, failed: bool) -> str:
        """What stands in for the selected model this cycle (ControllerState.fallback)."""
        if failed:
            return ControllerState.FALLBACK_PD_MODEL_FAILED
        if model is None and self.model_kind != 'pd':
            return ControllerState.FALLBACK_PD_NO_MODEL
        return ControllerState.FALLBACK_NONE

    def _publish_state(self, s: CycleState) -> None:
        """State worker thread: ``~/controller_state`` of one cycle."""
        msg = ControllerState(
            joint_names=self.joint_names,
            model=s.model,
            model_version=s.model_version,
            law=s.law,
            fallback=s.fallback,
            holding=s.holding,
        )
        set_seconds(msg.header.stamp, s.stamp)
        ref, fb, err = msg.reference, msg.feedback, msg.error
        ref.positions, ref.velocities, ref.accelerations = (
            s.q_ref.tolist(),
            s.qd_ref.tolist(),
            s.qdd_ref.tolist(),
        )
        fb.positions, fb.velocities = s.q.tolist(), s.qd.tolist()
        if s.effort is not None:
            fb.effort = s.effort.tolist()
        err.positions = joint_errors(s.q_ref, s.q, self.robot.joint_types).tolist()
        err.velocities = (s.qd_ref - s.qd).tolist()
        msg.feedforward = [0.0] * len(s.q) if s.feedforward is None else s.feedforward.tolist()
        msg.command = s.command.tolist()
        self.state_pub.publish(msg)

    def _state_failed(self, state: CycleState, err: Exception) -> None:
        if self.context.ok():
            self.get_logger().error(
                f'publishing the controller state failed: {err!r}', throttle_duration_sec=10.0
            )

    def _log_resume(self, resumed: Resumed, cause: str, t: float) -> None:
        if resumed.action == 'rejoining':
            self.get_logger().info(
                f'rejoining the reference ({cause} left it {resumed.error:.3f} farther from the '
                f'arm) over {resumed.until - t:.2f} s'
            )
        elif resumed.action == 'dropped':
            self.get_logger().warning(
                f'reference dropped: {resumed.error:.3f} farther from the arm after {cause} '
                f'(resume_tolerance {self.tracker.resume_tolerance}); holding the current '
                'position until a new reference arrives'
            )

    def _gains(self, given: Dict[str, List[float]], n: int) -> Dict[str, np.ndarray]:
        """The gains given, and the others derived from the URDF at the middle of the joint
        ranges for ``control_rate`` (``control_laws.arm_gains``): one set of numbers is too
        stiff for one arm's wrist (unstable at the control rate) and too soft for another's
        shoulder; the fixed fallback when the URDF has no inertias."""
        missing = [k for k, v in given.items() if len(v) == 1 and math.isnan(v[0])]
        derived = dict(FALLBACK_GAINS)
        if missing:
            from delan_common.robot_model import RobotModel

            try:
                model = RobotModel(self.robot.xml, **self.robot.selection_kwargs())
                gains, stiff = arm_gains(model, self.robot.home(), 1.0 / self.control_rate)
                derived = {k: getattr(gains, k) for k in given}
                if not stiff:
                    self.get_logger().warning(
                        f'at {self.control_rate:g} Hz computed torque cannot be made stiffer '
                        'than gravity pulls this arm: it will track poorly'
                    )
            except ValueError as err:
                self.get_logger().warning(
                    f'gains {missing} not given and not derivable from '
                    f'the URDF ({err}): using {FALLBACK_GAINS}'
                )
            self.get_logger().info(
                'gains not given: '
                + ', '.join(
                    f'{k} {np.round(np.broadcast_to(derived[k], (n,)), 2).tolist()}'
                    for k in missing
                )
            )
        values = {
            k: np.broadcast_to(np.asarray(derived[k] if k in missing else v, float), (n,)).copy()
            for k, v in given.items()
        }
        return values

    def _urdf_feedback(self):
        """The URDF's model for the feedback of the URDF_FEEDBACK_LAWS (built once, in the
        control thread that uses it; None for the other laws or when the URDF has no inertias,
        which those laws then report as a model failure)."""
        if self.law not in URDF_FEEDBACK_LAWS:
            return None
        if self._feedback_model is None:
            from delan_common.robot_model import RobotModel

            try:
                self._feedback_model = RobotModel(self.robot.xml, **self.robot.selection_kwargs())
            except ValueError as err:
                self._feedback_model = False
                self.get_logger().error(f'no URDF model for the feedback: {err}')
        return self._feedback_model or None

    def _torque(
        self, model, energy, law, js, q_ref, qd_ref, qdd_ref
    ) -> Tuple[np.ndarray, Optional[np.ndarray], bool]:
        """``(torque, the model's share, whether the model failed and PD stands in)``; the PD
        on the passive joints is clamped to 0 with every other command."""
        try:
            tau, ff = control_terms(
                model,
                law,
                self.gains,
                js.position,
                js.velocity,
                q_ref,
                qd_ref,
                qdd_ref,
                self._urdf_feedback(),
                self._continuous,
                energy,
            )
            ok = bool(np.all(np.isfinite(tau)))
        except (ValueError, ArithmeticError, RuntimeError) as err:
            ok, tau = False, None
            self.get_logger().error(
                f'model {self.model_kind} failed: {err}', throttle_duration_sec=2.0
            )
        if ok:
            return tau, ff, False
        self.fallbacks += 1
        self.get_logger().error(
            f'model {self.model_kind} returned non-finite torque: PD '
            f'fallback ({self.fallbacks} so far)',
            throttle_duration_sec=2.0,
        )
        tau, _ = control_terms(
            None,
            law,
            self.gains,
            js.position,
            js.velocity,
            q_ref,
            qd_ref,
            qdd_ref,
            continuous=self._continuous,
        )
        return tau, None, True

    def _watchdog(self) -> None:
        with self._lock:
            if self._stale or self._last_state_time is None:
                return
            if time.monotonic() - self._last_state_time <= self.watchdog_timeout:
                return
            self._stale = True
            self.watchdog_trips += 1
            # a ForwardCommandController keeps applying the last command: replace it by zero,
            # the same in every joint order (without an order no command went out: no trip)
            self.cmd_pub.publish(Float64MultiArray(data=[0.0] * len(self.joint_names)))
            self.get_logger().error(
                f'joint states stale for > {self.watchdog_timeout:.3f} s: '
                'zero torque sent, commanding stopped'
            )

    def _diagnostics_report(self):
        """(level, message, values) of the 1 Hz status on /diagnostics."""
        order = self._command_order
        level, msg = self._order_diagnostic()
        if order is not None and self._stale:
            level, msg = WARN, 'joint states stale: not commanding'
        return (
            level,
            msg,
            {
                'model': self.model_kind,
                'model_version': self._model_version,
                'law': self.law,
                'commands_sent': self.commands_sent,
                'fallbacks': self.fallbacks,
                'watchdog_trips': self.watchdog_trips,
                'references_received': self.tracker.received,
                'references_dropped': self.tracker.dropped,
                'references_rejoined': self.tracker.rejoined,
                'rejected_joint_states': self.rejected.total,
                'rejected_references': self.rejected_refs.total,
                'command_order': self._order_source,
                'command_joints': ' '.join(order.joints) if order is not None else '',
                'state_publish_rate': self._state_rate.rate_hz,
                'passive_joints': ' '.join(
                    j for j, a in zip(self.joint_names, self.actuated) if not a
                ),
                **dict(self._energy_diagnostics()),
                **dict(self._loop_diagnostics()),
            },
        )

    def _energy_diagnostics(self):
        """Law energy's state: its mode (swing / balance), the passive energy E_p it last
        pumped on and its target E* [J, the model's], its switches; nothing under other laws."""
        e = self._energy
        if e is None or self.law != ENERGY_LAW:
            return ()
        return (
            ('energy_mode', e.mode),
            ('energy_passive_J', f'{e.last_energy:.5f}'),
            ('energy_target_J', f'{e.e_target:.5f}'),
            ('energy_catches', e.catches),
            ('energy_releases', e.releases),
        )

    def _order_diagnostic(self):
        """(level, message) of the command order: ERROR when refused, WARN while waiting for it
        and once fallen back to the model order, else OK."""
        query = self._order_query
        if query is None:
            return OK, 'ok'
        decision = query.decision
        if decision is None:
            return WARN, f'waiting for the joint order of {query.receiver}'
        level = {'info': OK, 'warning': WARN, 'error': ERROR}[decision.level]
        return level, 'ok' if level == OK else decision.message

    def _loop_diagnostics(self):
        """Timing of the loop over the last period [us], its missed cycles and the cumulative
        latency histogram (``loop_stats``: a window's percentiles from two snapshots)."""
        s = self.loop_stats.snapshot()  # the loop thread goes on writing meanwhile
        w = s['window']
        return (
            ('loop_latency_p50_us', f'{w["p50_us"]:.0f}'),
            ('loop_latency_p99_us', f'{w["p99_us"]:.0f}'),
            ('loop_latency_max_us', f'{w["max_us"]:.0f}'),
            ('loop_latency_max_all_us', f'{s["max_us"]:.0f}'),
            ('joint_states_received', s['states']),
            ('missed_cycles', s['missed']),
            ('clock_skew_samples', s['clock_skew']),
            ('loop_errors', self._taker.errors),
            ('latency_histogram_10us', histogram_text(s['hist'])),
        )

    def close(self) -> None:
        """Stop the control loop and the loader (run_node calls it; idempotent)."""
        taker = getattr(self, '_taker', None)
        if taker is not None:
            taker.close()
        for worker in (
            getattr(self, '_update_loader', None),
            getattr(self, '_state_worker', None),
        ):
            if worker is not None:
                worker.close()

    def destroy_node(self):
        self.close()
        return super().destroy_node()


def _blend(w: float, new: Optional[np.ndarray], old: Optional[np.ndarray]) -> Optional[np.ndarray]:
    """``w new + (1 - w) old`` of two model torques, None standing for no model (zero)."""
    if new is None and old is None:
        return None
    return w * (0.0 if new is None else new) + (1.0 - w) * (0.0 if old is None else old)


def main(args=None) -> int:
    """Entry point of the ``torque_controller`` node."""
    return run_node(TorqueControllerNode, args)


if __name__ == '__main__':
    raise SystemExit(main())
