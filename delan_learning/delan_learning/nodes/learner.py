"""Online DeLaN learner: joint states in, a continually trained model out.

An intake thread (``ros/state_taker.py``, batches every 20 ms) only validates joint states,
estimates accelerations (delayed Savitzky-Golay) and appends to a fixed-size replay buffer; a
worker thread trains in rounds, so a slow training step never delays the intake. With ``loss``
forward or both, a round trains on rollout windows of consecutive samples
(:meth:`~delan_learning.online.ReplayBuffer.windows`: never across a gap, an estimator restart, a
rejected message or a held-out chunk) under the measured efforts. After each round the model is
checked on a held-out buffer (one in ``validation_every`` one-second chunks of data; torque errors
whatever the loss), and :class:`~delan_learning.publication.PublicationPolicy` decides: roll back
after a divergence, keep training, hold the publication after the data changed, or publish. A
published version is written atomically as a new checkpoint and announced on the latched
``~/model_update`` topic, where controllers pick it up without restart.

``~/dynamics_estimate`` carries what the published version predicts for the incoming samples
next to the measured torque, at most ``estimate_publish_rate`` samples per second of their
stamps, evaluated in one batch per intake batch by the numpy model (not torch). Health on
``/diagnostics`` at 1 Hz.
"""

from __future__ import annotations

import copy
import glob
import math
import os
import re
import threading
import time
import traceback
import uuid
from dataclasses import replace
from typing import Dict, List, Optional

import numpy as np
import torch
from rclpy.node import Node
from rclpy.parameter import Parameter
from sensor_msgs.msg import JointState
from std_srvs.srv import Trigger

from delan_common.decimation import Decimator
from delan_common.joint_state import JointStateError, JointStateMapper, MappedJointState, StampGate
from delan_common.model_kinds import FORWARD_KINDS
from delan_common.residual_dynamics import NominalPlusResidual
from delan_common.robot_model import RobotModel
from delan_common.ros.cdr import JointStateReader
from delan_common.ros.diagnostics import ERROR, OK, WARN, DiagnosticsReporter, hardware_id
from delan_common.ros.params import declare_table, validating_callback
from delan_common.ros.qos import LATCHED, create_publisher
from delan_common.ros.rejections import RejectionCounter
from delan_common.ros.robot_param import declare_robot
from delan_common.ros.spin import run_node, steady_timer
from delan_common.ros.stamps import seconds, set_seconds
from delan_common.ros.state_taker import JointStateTaker, Taken, decode_joint_state
from delan_common.urdf_joints import at_position_limit
from delan_learning.c_export import export_delan, weights_path
from delan_learning.checkpoint import CheckpointError, load_model, save_model
from delan_learning.models import build_model
from delan_learning.numpy_delan import NumpyDelan
from delan_learning.online import (
    DelayedDifferentiator,
    ReplayBuffer,
    Sample,
    evaluate_total,
    fit_targets,
    held_out,
)
from delan_learning.online_lr import OnlineLearningRate
from delan_learning.params.learner import TABLE
from delan_learning.publication import (
    PublicationParams,
    PublicationPolicy,
    TrainerWeights,
    Verdict,
)
from delan_learning.training import TorqueNormalizer, TrainConfig, Trainer
from delan_msgs.msg import DynamicsEstimate, ModelStatus, ModelUpdate
from delan_msgs.srv import LoadModel, SaveModel

VERSION_RE = re.compile(r'model_v(\d+)\.pt$')
#: ModelStatus.state -> its name (diagnostics)
STATE_NAMES = {
    getattr(ModelStatus, k): k[len('STATE_') :].lower()
    for k in dir(ModelStatus)
    if k.startswith('STATE_')
}


def lower_thread_priority(niceness: int, logger=None) -> None:
    """Raise the calling thread's nice value by ``niceness`` (Linux: per thread; unprivileged).
    Training is throughput work: a 1 kHz control loop on the same cores must win every
    contended time slice, or its commands come late. (Not SCHED_IDLE: a thread that holds the
    GIL and is then kept off the CPU would stall the intake thread and the executor for as
    long as the machine is busy.)"""
    if niceness <= 0 or not hasattr(os, 'setpriority'):
        return
    tid = threading.get_native_id()
    try:
        os.setpriority(
            os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + niceness)
        )
    except OSError as err:
        if logger is not None:
            logger.warning(f'could not lower the training thread priority: {err}')


# joint states queued for the intake thread (1 s at 1 kHz), taken every INTAKE_PERIOD_S
STATE_QUEUE_DEPTH = 1000
INTAKE_PERIOD_S = 0.02
# validation samples a round is judged on (at most; a random subset of a larger buffer)
VALIDATION_SAMPLES = 20000


class LearnerNode(Node):
    """Learns the dynamics online from joint states and publishes model versions."""

    def __init__(self, **kwargs):
        super().__init__('learner', **kwargs)
        reg: Dict = {}
        self.robot = declare_robot(self, reg)
        names = self.robot.joint_names
        v = declare_table(self, TABLE, reg)
        self.model_kind = v.model
        self.loss_metric = (
            v.loss_metric
            if v.loss_metric != 'auto'
            else ('both' if self.model_kind == 'delan_residual' else 'torque')
        )
        # the training loss and its rollouts (runtime: applied at the next round)
        self.loss, self.horizon = v.loss, v.horizon
        self.integrator, self.torque_timing = v.integrator, v.torque_timing
        self.capacity, self.min_samples = v.buffer_capacity, v.min_samples
        self.validation_every, self.steps_per_round = v.validation_every, v.steps_per_round
        self.batch_size = v.batch_size
        self.lr_schedule = OnlineLearningRate(
            v.learning_rate, v.learning_rate_final, v.learning_rate_halflife
        )
        self.lr = self.lr_schedule.start  # the rate of the last round
        self.width, self.depth, self.friction, self.seed = v.width, v.depth, v.friction, v.seed
        self.friction_model = v.friction_model
        self.training_enabled = v.training_enabled
        self.checkpoint_dir = os.path.abspath(os.path.expanduser(v.checkpoint_dir))
        self.keep_versions, self.resume = v.keep_versions, v.resume
        estimate_rate = v.estimate_publish_rate
        if v.estimate_rate >= 0.0:
            self.get_logger().warning(
                f'estimate_rate is deprecated: set estimate_publish_rate '
                f'instead (taking {v.estimate_rate:g} Hz for it)'
            )
            estimate_rate = float(v.estimate_rate)
            self.set_parameters([Parameter('estimate_publish_rate', value=estimate_rate)])
        self.window_s, self.acceleration_source = v.diff_window_s, v.acceleration_source
        self.range_factor, self.end_stop_margin = v.range_factor, v.end_stop_margin
        self.torch_threads, self.niceness = v.torch_threads, v.training_niceness
        self.add_on_set_parameters_callback(validating_callback(reg))
        self.add_post_set_parameters_callback(self._on_params)

        n = len(names)
        self.mapper = JointStateMapper(names)
        self.rejected = RejectionCounter(self.get_logger(), 'joint state')
        self.stamps = StampGate(strict=True)
        self.max_gap = v.max_gap
        self.diff: Optional[DelayedDifferentiator] = None  # sized from the observed rate
        self._first_stamps: List[float] = []
        # the URDF's model, for a residual's prior or the loss metric (intake thread only:
        # Pinocchio data are not thread-safe)
        prior = self.model_kind == 'delan_residual'
        metric = self.loss_metric != 'torque'
        self.nominal = RobotModel.from_description(self.robot) if prior or metric else None
        # a kind the forward loss can train keeps what its windows need (effort, stream order)
        windows = self.model_kind in FORWARD_KINDS
        self.train_buf = ReplayBuffer(
            self.capacity, n, prior=prior, metric=metric, windows=windows
        )
        self.val_buf = ReplayBuffer(
            max(100, self.capacity // self.validation_every), n, prior=prior, metric=metric
        )
        self.samples_seen = 0
        self._effort_lim = self.robot.effort_limits * self.range_factor
        self._vel_lim = self.robot.velocity_limits * self.range_factor
        self._lock = threading.Lock()  # buffers
        self._model_lock = threading.Lock()  # published model snapshot + lineage
        self._latest_sample = None
        # training state (worker thread)
        self.model_id = uuid.uuid4().hex[:12]
        # without resume too: numbering from 1 in a folder of an earlier run's versions would
        # have _prune (which keeps the highest numbers) delete each new version it announces
        self.version = self._newest_version_on_disk()
        self.trainer: Optional[Trainer] = None
        self.training_steps = 0
        self.train_loss = math.nan
        self.val_nmse: List[float] = []
        self.policy = PublicationPolicy(
            PublicationParams(
                publish_period=v.publish_period,
                publish_max_nmse=v.publish_max_nmse,
                divergence_factor=v.divergence_factor,
                divergence_floor=v.divergence_floor,
                shift_factor=v.shift_factor,
                publish_hold_s=v.publish_hold_s,
            )
        )
        self.state = ModelStatus.STATE_IDLE
        self.message = 'waiting for joint states'
        self.checkpoint_path = ''
        self.last_update_stamp = None
        self.last_round_s = 0.0
        self._snapshot = None  # float64 copy of the last published model for estimates
        self._estimate_rate = Decimator(estimate_rate)
        self._estimates_due: List[Sample] = []  # intake thread only
        self._estimator = (None, None)  # (snapshot, its numpy model)
        self._diag_steps = (time.monotonic(), 0)  # (when, training_steps) at the last report
        self._stop = threading.Event()
        # ~/reset and ~/load_model requests, carried out by the worker between two training
        # rounds in the order they were made: ('reset',) or ('load', path, (model, metadata))
        self._requests: List[tuple] = []
        os.makedirs(self.checkpoint_dir, exist_ok=True)
        self._remove_partial_checkpoints()

        self.status_pub = create_publisher(self, ModelStatus, '~/status', 10)
        self.update_pub = create_publisher(self, ModelUpdate, '~/model_update', LATCHED)
        self.estimate_pub = create_publisher(self, DynamicsEstimate, '~/dynamics_estimate', 10)
        # taken by a thread of their own, as bytes, in batches (ros/state_taker.py)
        self._reader = JointStateReader()
        self._taker = JointStateTaker(
            self, self._on_states, STATE_QUEUE_DEPTH, 'joint_states', period_s=INTAKE_PERIOD_S
        )
        self.create_service(SaveModel, '~/save_model', self._srv_save)
        self.create_service(LoadModel, '~/load_model', self._srv_load)
        self.create_service(Trigger, '~/reset', self._srv_reset)
        steady_timer(self, 1.0 / v.status_rate, self._publish_status)
        self._diagnostics = DiagnosticsReporter(
            self, self._diagnostics_report, hardware_id(self, self.robot.name)
        )

        if self.resume:
            self._resume()
        self._worker = threading.Thread(target=self._train_loop, name='delan-trainer', daemon=True)
        self._worker.start()

    # ------------------------------------------------------------------ parameters
    def _on_params(self, params) -> None:
        for prm in params:
            if prm.name == 'range_factor':
                self._effort_lim = self.robot.effort_limits * prm.value
                self._vel_lim = self.robot.velocity_limits * prm.value
            elif prm.name == 'learning_rate':
                self.lr_schedule.start = prm.value
            elif prm.name == 'learning_rate_final':
                self.lr_schedule.final = prm.value
            elif prm.name == 'learning_rate_halflife':
                self.lr_schedule.halflife_steps = prm.value
            elif prm.name == 'estimate_publish_rate':
                self._estimate_rate.rate_hz = prm.value
            elif hasattr(self.policy.params, prm.name):
                setattr(self.policy.params, prm.name, prm.value)
            elif hasattr(self, prm.name):
                setattr(self, prm.name, prm.value)

    # ------------------------------------------------------------------ data in
    def _on_states(self, batch: List[Taken]) -> None:
        for data, _ in batch:
            decoded = decode_joint_state(self._reader, data, self.rejected)
            if decoded is not None:
                self._take(*decoded)
            else:
                self._break_stream()
        self._publish_estimates()

    def _on_joint_state(self, msg: JointState) -> None:
        """A JointState message (in-process callers, tests)."""
        self._take(msg, seconds(msg.header.stamp))
        self._publish_estimates()

    def _break_stream(self) -> None:
        """A message was rejected: the samples after it do not continue those before it (no
        rollout window of the forward loss spans it)."""
        if self.diff is not None:
            self.diff.skip()

    def _reject(self, reason: str, detail: str) -> None:
        self.rejected.reject(reason, detail)
        self._break_stream()

    def _take(self, msg, t: float) -> None:
        """``msg``: a JointState or a :class:`~delan_common.ros.cdr.RawJointState`."""
        try:
            js = self.mapper.map(msg)
        except JointStateError as err:
            self._reject(err.reason, err.detail)
            return
        if js.effort is None:
            self._reject('no_effort', 'joint state carries no effort: nothing to learn')
            return
        if np.any(np.abs(js.effort) > self._effort_lim) or np.any(
            np.abs(js.velocity) > self._vel_lim
        ):
            self._reject(
                'out_of_range', f'torque or velocity beyond {self.range_factor} x the URDF limits'
            )
            return
        if self.end_stop_margin > 0.0 and np.any(
            at_position_limit(
                js.position, self.robot.lower, self.robot.upper, self.end_stop_margin
            )
        ):
            self.rejected.reject(
                'at_end_stop',
                'a joint within end_stop_margin of its position limit (the estimator restarts)',
            )
            if self.diff is not None:
                self.diff.reset()  # a break of the stream too
            return
        if t == 0.0:
            t = self.get_clock().now().nanoseconds * 1e-9
        try:
            self.stamps.check(t)  # backwards / far ahead: rejected (the estimator restarts)
        except JointStateError as err:
            self._reject(err.reason, err.detail)
            return
        try:
            self._ingest(t, js)
        finally:
            # counted once the sample is in the buffers: the count is a barrier for readers
            self.samples_seen += 1

    def _ingest(self, t: float, js: MappedJointState) -> None:
        if self.diff is None:
            self._first_stamps.append(t)
            if len(self._first_stamps) < 21:
                return
            dt = float(np.median(np.diff(self._first_stamps)))
            if not dt > 0:
                self._first_stamps.clear()
                return
            window = DelayedDifferentiator.samples_for(self.window_s, dt)
            self.diff = DelayedDifferentiator(
                window=window, max_gap=self.max_gap, source=self.acceleration_source
            )
            self.get_logger().info(
                f'joint states at {1.0 / dt:.0f} Hz: acceleration from the '
                f'{self.acceleration_source}, window {window} samples'
            )
        sample = self.diff.push(t, js.position, js.velocity, js.effort)
        if sample is None:
            return
        if self.model_kind == 'delan_residual':
            sample = replace(
                sample, tau_prior=self.nominal.inverse(sample.q, sample.qd, sample.qdd)
            )
        if self.loss_metric != 'torque':
            sample = replace(sample, metric=self.nominal.acceleration_metric(sample.q))
        self._latest_sample = sample
        if self._estimate_rate.due(sample.t):
            self._estimates_due.append(sample)
        with self._lock:
            if held_out(sample.t, self.validation_every):
                self.val_buf.add(sample)
            else:
                self.train_buf.add(sample)

    # ------------------------------------------------------------------ training
    def _new_trainer(self, model=None, normalizer=None) -> Trainer:
        torch.manual_seed(self.seed)
        if model is None:
            model = build_model(
                self.model_kind,
                self.robot.joint_types,
                width=self.width,
                depth=self.depth,
                friction=self.friction,
                friction_model=self.friction_model,
            )
        cfg = TrainConfig(
            batch_size=self.batch_size,
            lr=self.lr_schedule.at(self.training_steps),
            seed=self.seed,
            loss_metric=self.loss_metric,
            **self._loss_config(),
        )
        return Trainer(model, cfg, normalizer, device='cpu', dtype=torch.float32)

    def _loss_config(self) -> Dict:
        """The TrainConfig fields of the loss parameters, as they are now."""
        return dict(
            loss=self.loss,
            horizon=self.horizon,
            integrator=self.integrator,
            torque_timing=self.torque_timing,
        )

    def _round_data(self, rng: np.random.Generator) -> Dict[str, np.ndarray]:
        """A round's training data (lock held): random samples for the inverse loss; for a
        forward loss stretches of consecutive samples with their stamps, run ids and measured
        efforts, about as many windows as the round's steps draw."""
        n = self.steps_per_round * self.batch_size
        if self.trainer is not None and self.trainer.uses_windows:
            return self.train_buf.windows(rng, limit=n, min_run=self.trainer.config.horizon + 1)
        return self.train_buf.sample(n, rng)

    def _train_loop(self) -> None:
        torch.set_num_threads(self.torch_threads)
        lower_thread_priority(self.niceness, self.get_logger())
        rng = np.random.default_rng(self.seed)
        while not self._stop.is_set():
            with self._lock:
                requests, self._requests = self._requests, []
            for request in requests:
                if request[0] == 'reset':
                    self._do_reset()
                else:
                    self._adopt(*request[1:])
                    self.get_logger().info(f'adopted model {self.model_id} from {request[1]}')
            with self._lock:
                n_train, n_val = self.train_buf.size, self.val_buf.size
            if not self.training_enabled:
                self.state, self.message = ModelStatus.STATE_PAUSED, 'training paused'
                self._stop.wait(0.2)
                continue
            if n_train < self.min_samples or n_val < max(10, self.min_samples // 10):
                if n_train:
                    self.state = ModelStatus.STATE_COLLECTING
                    self.message = f'collecting: {n_train}/{self.min_samples} samples'
                self._stop.wait(0.2)
                continue
            try:
                self._train_round(rng)
            except Exception as err:
                # a dead worker would leave a learner that takes data and never trains, with a
                # status that says it is collecting: say so on the status and /diagnostics and
                # try again from scratch (the intake goes on)
                self.state = ModelStatus.STATE_ERROR
                self.message = f'training failed: {type(err).__name__}: {err}'
                self.get_logger().error(self.message + '\n' + traceback.format_exc())
                self.trainer = None
                self._stop.wait(5.0)

    def train_once(self, rng: np.random.Generator, now: float) -> None:
        """One training round (optimiser steps, validation, publication when due) on the
        buffers as they are, with ``now`` [s] as the publication clock: what the training
        thread does, for a caller that drives the learner itself (``training_enabled`` false,
        data in through :meth:`_on_joint_state`), e.g. ``bench/bench_learner_replay.py``,
        which replays a bag at a chosen optimiser rate, reproducibly."""
        self._train_round(rng, now)

    def _train_round(self, rng: np.random.Generator, now: Optional[float] = None) -> None:
        t0 = time.perf_counter()
        loss_config = self._loss_config()
        if self.trainer is not None and any(
            getattr(self.trainer.config, k) != v for k, v in loss_config.items()
        ):
            # a loss parameter changed: the same weights and normaliser, trained on from here
            # with the new loss (fresh optimiser state and state scales). The policy forgets
            # its losses: weights trained with the new loss are compared among themselves (on
            # noisy data the torque validation favours the inverse loss's weights, and no
            # version trained with the new loss would ever replace them)
            self.trainer = self._new_trainer(self.trainer.model, self.trainer.normalizer)
            self.policy.restart(copy.deepcopy(self.trainer.model.state_dict()))
            self.get_logger().info(
                'training loss now ' + ', '.join(f'{k} {v}' for k, v in loss_config.items())
            )
        with self._lock:
            data = self._round_data(rng)
            val = (
                self.val_buf.all()
                if self.val_buf.size <= VALIDATION_SAMPLES
                else self.val_buf.sample(VALIDATION_SAMPLES, rng)
            )
        if self.trainer is None:
            self.trainer = self._new_trainer(
                normalizer=TorqueNormalizer.from_torques(data['tau'], data.get('metric'))
            )
            if self.trainer.uses_windows:  # the first round's data were samples, not windows
                with self._lock:
                    data = self._round_data(rng)
        self.lr = self.lr_schedule.at(self.training_steps)
        for g in self.trainer.optimizer.param_groups:
            g['lr'] = self.lr
        loss = self.trainer.train_steps(
            fit_targets(data),
            self.steps_per_round,
            batch_size=self.batch_size,
            stop=self._stop.is_set,
        )
        if self._stop.is_set():
            return
        self.training_steps += self.steps_per_round
        ev = evaluate_total(self.trainer, val)
        self.last_round_s = time.perf_counter() - t0
        self.train_loss = loss
        with self._model_lock:
            published = (
                None if self._snapshot is None else (self.version, self._snapshot.state_dict())
            )
        now = time.monotonic() if now is None else now
        verdict = self.policy.judge(
            loss, ev, val, TrainerWeights(self.trainer), published, now, _Buffers(self)
        )
        for level, text in verdict.notes:  # one call site per severity (rclpy's rule)
            if level == 'warning':
                self.get_logger().warning(text)
            else:
                self.get_logger().info(text)
        if verdict.restart_lr:
            self.lr_schedule.restart(self.training_steps)  # learn the change fast
        if verdict.action == 'rolled_back':
            self._roll_back(verdict)
            return
        self.state, self.message = ModelStatus.STATE_TRAINING, verdict.message
        self.val_nmse = [float(x) for x in ev['nmse']]
        if verdict.action == 'publish':
            self._publish_version(now)

    def _roll_back(self, verdict: Verdict) -> None:
        self.state, self.message = ModelStatus.STATE_DIVERGED, verdict.message
        self.get_logger().error(self.message)
        model = self.trainer.model
        if verdict.restore is not None:
            model.load_state_dict(verdict.restore)
            self.trainer = self._new_trainer(model, self.trainer.normalizer)
        else:
            self.trainer = None  # nothing good yet: start afresh

    def _publish_version(self, now: float) -> None:
        model = copy.deepcopy(self.trainer.model)
        model.load_state_dict(self.policy.good_state)
        model = model.double().eval()
        # the status announces a version only once its file is complete (a kill mid-save must
        # not leave a status that names a version no file holds)
        version = self.version + 1
        path = os.path.join(self.checkpoint_dir, f'model_v{version:05d}.pt')
        save_model(model, path, self._metadata(version))
        if self.model_kind == 'delan':
            self._export_weights(path, version)
        stamp = self.get_clock().now().to_msg()
        with self._model_lock:
            self.version = version
            self._snapshot = model
            self.checkpoint_path = path
            self.last_update_stamp = stamp
        self._prune()
        self.policy.published(now)
        msg = ModelUpdate(
            model_id=self.model_id,
            model_version=version,
            checkpoint_path=path,
            joint_names=self.robot.joint_names,
            validation_nmse=self.policy.good_nmse,
        )
        msg.header.stamp = stamp
        self.update_pub.publish(msg)
        self.get_logger().info(
            f'model v{version}: validation nMSE {np.round(self.val_nmse, 5).tolist()} -> {path}'
        )

    def _metadata(self, version: int) -> Dict:
        return {
            'joint_names': self.robot.joint_names,
            'joint_types': self.robot.joint_types,
            'torque_normalisation': self.trainer.normalizer.to_dict(),
            'model_id': self.model_id,
            'model_version': version,
            'online': {
                'samples_seen': self.samples_seen,
                'steps': self.training_steps,
                'validation_nmse': self.val_nmse,
                'loss': {
                    k: getattr(self.trainer.config, k)
                    for k in ('loss', 'horizon', 'integrator', 'torque_timing')
                    if k == 'loss' or self.trainer.uses_windows
                },
            },
        }

    def _export_weights(self, path: str, version: int) -> None:
        """The compiled controller's weights file beside the checkpoint (``.cw``), from the
        weights as the checkpoint holds them, so both controllers command the same torque."""
        try:
            export_delan(load_model(path)[0], weights_path(path), self.robot.joint_names, version)
        except (OSError, ValueError, CheckpointError) as err:
            self.get_logger().warning(f'v{version}: no weights for the compiled controller: {err}')

    def _prune(self) -> None:
        files = sorted(self._version_files())
        for _, path in files[: -self.keep_versions]:
            for f in (path, weights_path(path)):
                try:
                    os.remove(f)
                except OSError:
                    pass

    def _remove_partial_checkpoints(self) -> None:
        """Temp files of a save cut short (kill -9, power loss) are never loaded (hidden, not
        matched by VERSION_RE) but would pile up."""
        for path in glob.glob(os.path.join(self.checkpoint_dir, '.model_v*.pt.*.tmp')):
            try:
                os.unlink(path)
                self.get_logger().warning(f'removed a partial checkpoint: {path}')
            except OSError:
                pass

    def _newest_version_on_disk(self) -> int:
        """The highest version number of the checkpoint folder (0 when it has none)."""
        return max([v for v, _ in self._version_files()], default=0)

    def _version_files(self):
        for path in glob.glob(os.path.join(self.checkpoint_dir, 'model_v*.pt')):
            m = VERSION_RE.search(path)
            if m:
                yield int(m.group(1)), path

    # ------------------------------------------------------------------ resume / load / reset
    def _read_checkpoint(self, path: str):
        """(model, metadata) of a checkpoint to continue from; CheckpointError otherwise."""
        model, meta = load_model(path, expected_joint_names=self.robot.joint_names)
        if getattr(model, 'kind', 'delan') != self.model_kind:
            raise CheckpointError(
                f'{path} holds a {model.kind!r} model, the learner learns {self.model_kind}'
            )
        meta = dict(meta)
        meta['model_id'] = str(meta.get('model_id') or uuid.uuid4().hex[:12])
        return model, meta

    def _adopt(self, path: str, loaded=None) -> str:
        """Make a checkpoint the current model (worker thread, or before it starts); returns
        its model id. ``loaded``: its already read ``(model, metadata)``."""
        model, meta = loaded or self._read_checkpoint(path)
        norm = meta.get('torque_normalisation')
        self.trainer = self._new_trainer(
            copy.deepcopy(model).float(), TorqueNormalizer.from_dict(norm) if norm else None
        )
        self.policy.restart(copy.deepcopy(self.trainer.model.state_dict()))
        with self._model_lock:
            self._snapshot = model.double().eval()
            self.checkpoint_path = path
            self.model_id = meta['model_id']
            self.version = max(self._newest_version_on_disk(), int(meta.get('model_version') or 0))
        return self.model_id

    def _resume(self) -> None:
        for version, path in sorted(self._version_files(), reverse=True):
            try:
                self._adopt(path)
            except CheckpointError as err:
                self.get_logger().warning(f'resume: skipping {path}: {err}')
                continue
            self.get_logger().info(f'resumed model {self.model_id} v{version} from {path}')
            msg = ModelUpdate(
                model_id=self.model_id,
                model_version=version,
                checkpoint_path=path,
                joint_names=self.robot.joint_names,
            )
            msg.header.stamp = self.get_clock().now().to_msg()
            self.update_pub.publish(msg)
            return

    def _do_reset(self) -> None:
        with self._lock:
            self.train_buf.clear()
            self.val_buf.clear()
        self.diff, self._first_stamps = None, []
        self.trainer = None
        self.policy.restart(None)
        self.training_steps, self.train_loss, self.val_nmse = 0, math.nan, []
        with self._model_lock:
            self._snapshot, self.checkpoint_path = None, ''
            # a new lineage, but version numbers (file names) go on from the newest on disk
            self.model_id = uuid.uuid4().hex[:12]
            self.version = self._newest_version_on_disk()
        self.state, self.message = ModelStatus.STATE_IDLE, 'reset'

    def _srv_save(self, req, resp):
        with self._model_lock:
            model, src = self._snapshot, self.checkpoint_path
        if model is None:
            resp.success, resp.message = False, 'no model yet'
            return resp
        path = (
            os.path.abspath(os.path.expanduser(req.path))
            if req.path
            else os.path.join(self.checkpoint_dir, 'saved_model.pt')
        )
        try:
            model_copy, meta = load_model(src, expected_joint_names=self.robot.joint_names)
            save_model(model_copy, path, meta)
        except (OSError, CheckpointError) as err:
            resp.success, resp.message = False, f'save failed: {err}'
            return resp
        resp.success, resp.message, resp.path = True, f'saved {src} as {path}', path
        return resp

    def _srv_load(self, req, resp):
        """Checked here (the answer says whether it loads), adopted by the worker between two
        training rounds: replacing the trainer under a running round mixed two lineages."""
        path = os.path.abspath(os.path.expanduser(req.path))
        try:
            loaded = self._read_checkpoint(path)
        except (CheckpointError, FileNotFoundError, OSError) as err:
            resp.success, resp.message = False, str(err)
            return resp
        with self._lock:
            self._requests.append(('load', path, loaded))
        resp.model_id = loaded[1]['model_id']
        resp.success, resp.message = True, f'loaded {req.path}'
        return resp

    def _srv_reset(self, req, resp):
        with self._lock:
            self._requests.append(('reset',))
        resp.success, resp.message = True, 'reset requested: buffers and model cleared'
        return resp

    # ------------------------------------------------------------------ status out
    def _publish_status(self) -> None:
        msg = ModelStatus()
        msg.header.stamp = self.get_clock().now().to_msg()
        with self._model_lock:
            msg.model_id, msg.model_version = self.model_id, self.version
            msg.checkpoint_path = self.checkpoint_path
            if self.last_update_stamp is not None:
                msg.last_update_stamp = self.last_update_stamp
        msg.joint_names = self.robot.joint_names
        msg.state, msg.message = self.state, self.message
        msg.samples_seen = self.samples_seen
        with self._lock:
            msg.samples_in_buffer = self.train_buf.size + self.val_buf.size
        msg.samples_rejected = self.rejected.total
        msg.training_steps = self.training_steps
        msg.rollbacks = self.policy.rollbacks
        msg.train_loss = float(self.train_loss)
        msg.validation_nmse = list(self.val_nmse)
        msg.last_update_duration = float(self.last_round_s)
        self.status_pub.publish(msg)

    def _publish_estimates(self) -> None:
        """Intake thread: ``~/dynamics_estimate`` of the samples picked since the last call,
        by the published version, in one batch of the numpy model: ~0.3 ms for one sample of
        a 7-DoF arm (torch, a call per term: ~0.8 ms), so 50 Hz takes ~1.5 % of a core (and
        of the GIL) from the optimiser."""
        due, self._estimates_due = self._estimates_due, []
        with self._model_lock:
            snapshot, mid, ver = self._snapshot, self.model_id, self.version
        if not due or snapshot is None:
            return
        model = self._estimator[1] if self._estimator[0] is snapshot else None
        if model is None:
            # batches only: the compiled one-state kernel is not needed (nor built)
            model = NumpyDelan(snapshot, self.robot.joint_names, use_c=False)
            if self.model_kind == 'delan_residual':
                model = NominalPlusResidual(self.nominal, model)
            self._estimator = (snapshot, model)
        q, qd, qdd = (np.array([getattr(s, k) for s in due]) for k in ('q', 'qd', 'qdd'))
        H = np.asarray(model.mass_matrix(q))
        c, g = np.asarray(model.coriolis(q, qd)), np.asarray(model.gravity(q))
        f = np.asarray(model.friction(qd))
        T, V = (np.asarray(x).reshape(-1) for x in model.energy(q, qd))
        predicted = np.einsum('bij,bj->bi', H, qdd) + c + g + f
        for k, s in enumerate(due):
            msg = DynamicsEstimate(
                model_id=mid, model_version=ver, joint_names=self.robot.joint_names
            )
            set_seconds(msg.header.stamp, s.t)
            msg.position, msg.velocity, msg.acceleration = (
                s.q.tolist(),
                s.qd.tolist(),
                s.qdd.tolist(),
            )
            msg.mass_matrix = H[k].reshape(-1).tolist()
            msg.coriolis_torque, msg.gravity_torque = c[k].tolist(), g[k].tolist()
            msg.friction_torque = f[k].tolist()
            msg.predicted_torque = predicted[k].tolist()
            msg.measured_torque = s.tau.tolist()
            msg.kinetic_energy, msg.potential_energy = float(T[k]), float(V[k])
            self.estimate_pub.publish(msg)

    def _diagnostics_report(self):
        """(level, message, values) of the 1 Hz status on /diagnostics."""
        now, steps = time.monotonic(), self.training_steps
        then, before = self._diag_steps
        self._diag_steps = (now, steps)
        with self._lock:
            buffered = self.train_buf.size + self.val_buf.size
        level = {ModelStatus.STATE_DIVERGED: WARN, ModelStatus.STATE_ERROR: ERROR}.get(
            self.state, OK
        )
        nmse = self.val_nmse
        return (
            level,
            f'{STATE_NAMES.get(self.state, self.state)}: {self.message}',
            {
                'state': STATE_NAMES.get(self.state, self.state),
                'model_id': self.model_id,
                'model_version': self.version,
                'steps_per_s': f'{max(0, steps - before) / max(now - then, 1e-9):.1f}',
                'training_steps': steps,
                'learning_rate': f'{self.lr:.3g}',
                'samples_seen': self.samples_seen,
                'samples_in_buffer': buffered,
                'samples_rejected': self.rejected.total,
                'validation_nmse': ' '.join(f'{x:.4g}' for x in nmse),
                'validation_nmse_max': f'{max(nmse):.4g}' if nmse else '',
                'rollbacks': self.policy.rollbacks,
                'checkpoint': self.checkpoint_path,
                'estimate_publish_rate': self._estimate_rate.rate_hz,
            },
        )

    def close(self) -> None:
        """Stop taking joint states and training (idempotent; also after a failed start)."""
        taker = getattr(self, '_taker', None)
        if taker is not None:
            taker.close()
        stop, worker = getattr(self, '_stop', None), getattr(self, '_worker', None)
        if stop is not None:
            stop.set()
        if worker is not None and worker.is_alive():
            worker.join(timeout=10.0)


class _Buffers:
    """The learner's replay buffers as the publication policy's :class:`DataWindow`."""

    def __init__(self, node: LearnerNode):
        self.node = node

    def newest_t(self) -> float:
        with self.node._lock:
            return max(self.node.train_buf.newest_t, self.node.val_buf.newest_t)

    def validation_since(self, t: float) -> Dict[str, np.ndarray]:
        with self.node._lock:
            return self.node.val_buf.since(t, limit=VALIDATION_SAMPLES)


def main(args=None) -> int:
    """Entry point of the ``learner`` node."""
    return run_node(LearnerNode, args)


if __name__ == '__main__':
    raise SystemExit(main())
