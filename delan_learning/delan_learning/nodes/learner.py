"""Online DeLaN learner: joint states in, a continually trained model out.

An intake thread (``ros/state_taker.py``, batches every 20 ms) only validates joint states,
estimates accelerations and appends to fixed-size replay buffers
(:class:`~delan_learning.learner_intake.SampleIntake`); a worker thread trains in rounds
(:class:`~delan_learning.online_trainer.OnlineTrainer`), so a slow training step never delays
the intake. After each round the model is checked on held-out data and
:class:`~delan_learning.publication.PublicationPolicy` decides: roll back, keep training, hold
the publication after the data changed, or publish. A published version is written atomically
as a new checkpoint (:class:`~delan_learning.version_store.VersionStore`) and announced on the
latched ``~/model_update`` topic, where controllers pick it up without restart.

``~/dynamics_estimate`` carries what the published version predicts for the incoming samples
next to the measured torque, at most ``estimate_publish_rate`` samples per second of their
stamps, computed only while someone subscribes (:mod:`delan_learning.learner_estimates`: the
terms a kind does not have are empty, its energies NaN). Health on ``/diagnostics`` at 1 Hz.

``model`` may be any trainable kind (:data:`~delan_common.model_kinds.ONLINE_KINDS`): the
variants are learned, validated and published as DeLaN is, for comparison; only delan's versions
get the compiled controller's weights beside them (:mod:`delan_learning.version_store`), and a
controller follows delan and delan_residual only.

This node only translates: parameters, messages, services and timers to and from those classes.
"""

from __future__ import annotations

import os
from typing import Dict, List

from rclpy.node import Node
from rclpy.parameter import Parameter
from sensor_msgs.msg import JointState
from std_srvs.srv import Trigger

from delan_common.model_kinds import FORWARD_KINDS, LEARNED_KINDS
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
from delan_learning.checkpoint import CheckpointError
from delan_learning.learner_estimates import SnapshotEstimator
from delan_learning.learner_intake import SampleIntake
from delan_learning.learner_status import Health, status_fields
from delan_learning.online import SplitBuffers
from delan_learning.online_lr import OnlineLearningRate
from delan_learning.online_trainer import STATES, Announcement, OnlineTrainer, TrainingParams
from delan_learning.params.learner import TABLE
from delan_learning.publication import PublicationParams, PublicationPolicy
from delan_learning.version_store import VERSION_RE, VersionStore
from delan_msgs.msg import DynamicsEstimate, ModelStatus, ModelUpdate
from delan_msgs.srv import LoadModel, SaveModel

__all__ = ['VERSION_RE', 'LearnerNode', 'main']

#: a state's name -> ModelStatus.state
STATE_CODES = {name: getattr(ModelStatus, 'STATE_' + name.upper()) for name in STATES}
#: diagnostic level of a state (OK for the others)
LEVELS = {'diverged': WARN, 'error': ERROR}
#: parameters of the learning rate -> OnlineLearningRate's fields
LR_FIELDS = {
    'learning_rate': 'start',
    'learning_rate_final': 'final',
    'learning_rate_halflife': 'halflife_steps',
}
# joint states queued for the intake thread (1 s at 1 kHz), taken every INTAKE_PERIOD_S
STATE_QUEUE_DEPTH = 1000
INTAKE_PERIOD_S = 0.02


class LearnerNode(Node):
    """Learns the dynamics online from joint states and publishes model versions."""

    # the state of the parts, as the node's users (tests, benchmarks) read it
    policy = property(lambda self: self.learning.policy)
    trainer = property(lambda self: self.learning.trainer)
    training_steps = property(lambda self: self.learning.training_steps)
    val_nmse = property(lambda self: self.learning.val_nmse)
    message = property(lambda self: self.learning.message)
    version = property(lambda self: self.learning.lineage.version)
    model_id = property(lambda self: self.learning.lineage.model_id)
    checkpoint_path = property(lambda self: self.learning.lineage.checkpoint_path)
    train_once = property(lambda self: self.learning.train_once)
    _train_round = property(lambda self: self.learning.train_round)
    loss = property(lambda self: self.learning.params.loss)
    min_samples = property(lambda self: self.learning.params.min_samples)
    steps_per_round = property(lambda self: self.learning.params.steps_per_round)
    batch_size = property(lambda self: self.learning.params.batch_size)
    train_buf = property(lambda self: self.buffers.train)
    val_buf = property(lambda self: self.buffers.val)
    capacity = property(lambda self: self.buffers.train.capacity)
    validation_every = property(lambda self: self.buffers.validation_every)
    _lock = property(lambda self: self.buffers.lock)
    samples_seen = property(lambda self: self.intake.samples_seen)
    diff = property(lambda self: self.intake.diff)
    _latest_sample = property(lambda self: self.intake.latest_sample)

    def __init__(self, **kwargs):
        super().__init__('learner', **kwargs)
        log = self.get_logger()
        reg: Dict = {}
        self.robot = declare_robot(self, reg)
        v = declare_table(self, TABLE, reg)
        params = TrainingParams.from_values(v)
        estimate_rate = v.estimate_publish_rate
        if v.estimate_rate >= 0.0:
            log.warning(
                f'estimate_rate is deprecated: set estimate_publish_rate '
                f'instead (taking {v.estimate_rate:g} Hz for it)'
            )
            estimate_rate = float(v.estimate_rate)
            self.set_parameters([Parameter('estimate_publish_rate', value=estimate_rate)])
        self.add_on_set_parameters_callback(validating_callback(reg))
        self.add_post_set_parameters_callback(self._on_params)
        invariant = self.robot.inertia_invariant_joints
        if params.inertia_invariance and params.model in LEARNED_KINDS and invariant:
            names = ', '.join(self.robot.joint_names[i] for i in invariant)
            log.info(
                f'mass matrix learned independent of {names}: below no other learned joint, '
                'it moves its subtree rigidly (inertia_invariance)'
            )

        # the URDF's model, for a residual's prior or the loss metric (intake thread only:
        # Pinocchio data are not thread-safe)
        prior = params.model == 'delan_residual'
        metric = params.loss_metric != 'torque'
        nominal = RobotModel.from_description(self.robot) if prior or metric else None
        self.buffers = SplitBuffers(
            v.buffer_capacity,
            v.validation_every,
            len(self.robot.joint_names),
            prior=prior,
            metric=metric,
            # a kind the forward loss can train keeps what its windows need
            windows=params.model in FORWARD_KINDS,
        )
        self.rejected = RejectionCounter(log, 'joint state')
        self.intake = SampleIntake(
            self.robot,
            self.buffers,
            self.rejected,
            log,
            lambda: self.get_clock().now().nanoseconds * 1e-9,
            window_s=v.diff_window_s,
            max_gap=v.max_gap,
            acceleration_source=v.acceleration_source,
            range_factor=v.range_factor,
            end_stop_margin=v.end_stop_margin,
            estimate_rate=estimate_rate,
            nominal=nominal,
            prior=prior,
            metric=metric,
        )
        self.store = VersionStore(
            v.checkpoint_dir, v.keep_versions, self.robot.joint_names, params.model, log
        )
        self.learning = OnlineTrainer(
            params,
            self.robot,
            self.buffers,
            self.store,
            self.intake,
            OnlineLearningRate(v.learning_rate, v.learning_rate_final, v.learning_rate_halflife),
            PublicationPolicy(PublicationParams.from_values(v)),
            log,
            self._announce,
            lambda: self.get_clock().now().to_msg(),
        )
        self._estimator = SnapshotEstimator(self.robot.joint_names, nominal if prior else None)
        self._health = Health()

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
        if v.resume:
            self.learning.resume()
        self.learning.start()

    def _on_params(self, params) -> None:
        for prm in params:
            if prm.name in LR_FIELDS:
                setattr(self.learning.lr_schedule, LR_FIELDS[prm.name], prm.value)
            elif prm.name == 'estimate_publish_rate':
                self.intake.estimate_rate.rate_hz = prm.value
            else:
                targets = (self.policy.params, self.learning.params, self.intake, self.store)
                for target in targets:
                    if hasattr(target, prm.name):
                        setattr(target, prm.name, prm.value)
                        break

    # ------------------------------------------------------------------ data in
    def _on_states(self, batch: List[Taken]) -> None:
        for data, _ in batch:
            decoded = decode_joint_state(self._reader, data, self.rejected)
            if decoded is not None:
                self.intake.take(*decoded)
            else:
                self.intake.break_stream()
        self._publish_estimates()

    def _on_joint_state(self, msg: JointState) -> None:
        """A JointState message (in-process callers, tests)."""
        self.intake.take(msg, seconds(msg.header.stamp))
        self._publish_estimates()

    # ------------------------------------------------------------------ services
    def _srv_save(self, req, resp):
        lineage = self.learning.lineage
        if lineage.snapshot is None:
            resp.success, resp.message = False, 'no model yet'
            return resp
        try:
            path = self.store.copy(lineage.checkpoint_path, req.path)
        except (OSError, CheckpointError) as err:
            resp.success, resp.message = False, f'save failed: {err}'
            return resp
        resp.success, resp.message = True, f'saved {lineage.checkpoint_path} as {path}'
        resp.path = path
        return resp

    def _srv_load(self, req, resp):
        """Checked here (the answer says whether it loads), adopted by the worker between two
        training rounds."""
        path = os.path.abspath(os.path.expanduser(req.path))
        try:
            loaded = self.store.read(path)
        except (CheckpointError, FileNotFoundError, OSError) as err:
            resp.success, resp.message = False, str(err)
            return resp
        self.learning.request_load(path, loaded)
        resp.model_id = loaded[1]['model_id']
        resp.success, resp.message = True, f'loaded {req.path}'
        return resp

    def _srv_reset(self, req, resp):
        self.learning.request_reset()
        resp.success, resp.message = True, 'reset requested: buffers and model cleared'
        return resp

    # ------------------------------------------------------------------ out
    def _announce(self, a: Announcement) -> None:
        msg = ModelUpdate(
            model_id=a.model_id,
            model_version=a.version,
            checkpoint_path=a.checkpoint_path,
            joint_names=self.robot.joint_names,
            validation_nmse=a.validation_nmse,
        )
        msg.header.stamp = a.stamp if a.stamp is not None else self.get_clock().now().to_msg()
        self.update_pub.publish(msg)

    def _publish_status(self) -> None:
        fields = status_fields(self.learning, self.intake.samples_seen, self.rejected.total)
        msg = ModelStatus(
            joint_names=self.robot.joint_names, state=STATE_CODES[self.learning.state], **fields
        )
        msg.header.stamp = self.get_clock().now().to_msg()
        stamp = self.learning.lineage.stamp
        if stamp is not None:
            msg.last_update_stamp = stamp
        self.status_pub.publish(msg)

    def _publish_estimates(self) -> None:
        """Intake thread: ``~/dynamics_estimate`` of the samples picked since the last call,
        by the published version; nothing is computed while no one subscribes (the intake
        thread shares the GIL with training)."""
        due = self.intake.take_estimates_due()
        lineage = self.learning.lineage
        if not due or lineage.snapshot is None or not self.estimate_pub.get_subscription_count():
            return
        est = self._estimator(lineage.snapshot, due)
        for k, s in enumerate(due):
            msg = DynamicsEstimate(
                model_id=lineage.model_id,
                model_version=lineage.version,
                joint_names=self.robot.joint_names,
                position=s.q.tolist(),
                velocity=s.qd.tolist(),
                acceleration=s.qdd.tolist(),
                measured_torque=s.tau.tolist(),
                **est.fields(k),
            )
            set_seconds(msg.header.stamp, s.t)
            self.estimate_pub.publish(msg)

    def _diagnostics_report(self):
        """(level, message, values) of the 1 Hz status on /diagnostics."""
        state, text, values = self._health.report(
            self.learning,
            self.intake.samples_seen,
            self.rejected.total,
            self.intake.estimate_rate.rate_hz,
        )
        return LEVELS.get(state, OK), text, values

    def close(self) -> None:
        """Stop taking joint states and training (idempotent; also after a failed start)."""
        taker = getattr(self, '_taker', None)
        if taker is not None:
            taker.close()
        learning = getattr(self, 'learning', None)
        if learning is not None:
            learning.close()


def main(args=None) -> int:
    """Entry point of the ``learner`` node."""
    return run_node(LearnerNode, args)


if __name__ == '__main__':
    raise SystemExit(main())
