"""The online learner's training thread, free of ROS: rounds on the replay buffers, each judged
by the publication policy, and the versions it publishes.

A round takes ``steps_per_round`` optimiser steps on random samples (loss ``inverse``) or on
rollout windows of consecutive samples (``forward`` / ``both``), then checks the model on the
validation buffer; :class:`~delan_learning.publication.PublicationPolicy` decides what follows:
roll back after a divergence, keep training, hold the publication after the data changed, or
publish. A published version is written to the :class:`~delan_learning.version_store.
VersionStore` before it is announced, so no announcement names a version no file holds.
Requests (reset, load a checkpoint) are carried out between two rounds, in the order they were
made: replacing the trainer under a running round would mix two lineages.
"""

from __future__ import annotations

import copy
import math
import os
import threading
import time
import traceback
from dataclasses import dataclass, fields
from typing import Any, Callable, Dict, List, Mapping, NamedTuple, Optional, Protocol, Tuple

import numpy as np
import torch

from delan_common.urdf_joints import RobotDescription
from delan_learning.models import build_model, model_config
from delan_learning.online import Log, SplitBuffers, evaluate_total, fit_targets
from delan_learning.online_lr import OnlineLearningRate
from delan_learning.publication import PublicationPolicy, TrainerWeights, Verdict
from delan_learning.train_config import resolve_loss_metric
from delan_learning.training import TorqueNormalizer, TrainConfig, Trainer
from delan_learning.version_store import Loaded, VersionStore, new_model_id

#: the learner's states (``ModelStatus.STATE_<NAME>``)
STATES = ('idle', 'collecting', 'training', 'diverged', 'paused', 'error')
#: the TrainConfig fields of the ``loss`` parameters (a change applies at the next round)
LOSS_FIELDS = ('loss', 'horizon', 'integrator', 'torque_timing')
#: how long the thread waits while it cannot train, and after a round that failed [s]
IDLE_WAIT_S = 0.2
ERROR_WAIT_S = 5.0


def lower_thread_priority(niceness: int, logger: Any = None) -> None:
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


@dataclass
class TrainingParams:
    """The learner's parameters of the same names that shape training (those the parameter
    table allows to change are assignable at runtime: they apply from the next round)."""

    model: str = 'delan'
    loss_metric: str = 'torque'  # resolved: never 'auto'
    loss: str = 'inverse'
    horizon: int = 10
    integrator: str = 'rk4'
    torque_timing: str = 'end'
    min_samples: int = 2000
    steps_per_round: int = 100
    batch_size: int = 512
    width: int = 64
    depth: int = 2
    friction: bool = True
    friction_model: str = 'coulomb_viscous'
    inertia_invariance: bool = True
    seed: int = 0
    training_enabled: bool = True
    torch_threads: int = 1
    training_niceness: int = 0

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> 'TrainingParams':
        """From the parameter values, ``loss_metric`` auto resolved
        (:func:`~delan_learning.train_config.resolve_loss_metric`)."""
        params = cls(**{f.name: values[f.name] for f in fields(cls)})
        params.loss_metric = resolve_loss_metric(params.loss_metric, params.model, params.loss)
        return params


class Lineage(NamedTuple):
    """The published model, replaced as a whole: a reader on another thread sees one version."""

    model_id: str
    version: int  # the last version number taken (file names go on from it)
    snapshot: Any  # float64 copy of the published model (None: none yet)
    checkpoint_path: str  # its file ('' if none)
    stamp: Any  # when the last version went out, by the trainer's ``clock`` (None: never)


class Announcement(NamedTuple):
    """A version for ``~/model_update``."""

    model_id: str
    version: int
    checkpoint_path: str
    validation_nmse: List[float]  # per joint; [] when not measured (a resumed version)
    stamp: Any  # None: now


class Intake(Protocol):
    """The joint-state intake, as the trainer sees it."""

    samples_seen: int

    def restart(self) -> None:
        """Start the stream afresh after the buffers were cleared (a reset of the learner)."""


class OnlineTrainer:
    """Trains on ``buffers`` in rounds (a thread of its own between :meth:`start` and
    :meth:`close`, or :meth:`train_once` by the caller), publishing versions to ``store``.

    ``announce`` gets each version once its file is complete (also the one :meth:`resume`
    adopts); ``clock()`` stamps a version (any object: a ROS time). ``state`` (one of
    :data:`STATES`) and ``message`` describe what it does."""

    def __init__(
        self,
        params: TrainingParams,
        robot: RobotDescription,
        buffers: SplitBuffers,
        store: VersionStore,
        intake: Intake,
        lr_schedule: OnlineLearningRate,
        policy: PublicationPolicy,
        log: Log,
        announce: Callable[[Announcement], None],
        clock: Callable[[], Any],
    ):
        self.params, self.robot, self.buffers, self.store = params, robot, buffers, store
        self.intake, self.lr_schedule, self.policy, self.log = intake, lr_schedule, policy, log
        self.announce, self.clock = announce, clock
        self.lr = lr_schedule.start  # the rate of the last round
        self.trainer: Optional[Trainer] = None
        self.training_steps = 0
        self.train_loss = math.nan
        self.val_nmse: List[float] = []
        self.last_round_s = 0.0
        self.state, self.message = 'idle', 'waiting for joint states'
        self.lineage = Lineage(new_model_id(), store.newest(), None, '', None)
        self._requests: List[Tuple[str, str, Optional[Loaded]]] = []
        self._requests_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    # ------------------------------------------------------------------ thread
    def start(self) -> None:
        """Start the training thread (:meth:`run`); :meth:`close` stops it."""
        self._thread = threading.Thread(target=self.run, name='delan-trainer', daemon=True)
        self._thread.start()

    def close(self, timeout: float = 2.0) -> None:
        """Stop training (a round stops within an optimiser step) and wait for the thread, at
        most ``timeout`` [s]: the thread runs niced (``training_niceness``), and on a machine
        busy with other work it was seen to need more than 15 s to reach its next check, past
        launch's SIGKILL. The process ends anyway (``run_node``'s ``os._exit`` ends the daemon
        thread), and versions are written atomically, so nothing published is lost."""
        self._stop.set()
        if self._thread is not None and self._thread.is_alive():
            self._thread.join(timeout=timeout)

    def request_reset(self) -> None:
        """Clear the buffers and the model, start a new lineage (between two rounds)."""
        with self._requests_lock:
            self._requests.append(('reset', '', None))

    def request_load(self, path: str, loaded: Loaded) -> None:
        """Go on from the checkpoint ``path``, as read by ``VersionStore.read`` (between two
        rounds)."""
        with self._requests_lock:
            self._requests.append(('load', path, loaded))

    def ready(self, n_train: int, n_val: int) -> bool:
        """Whether buffers of ``n_train`` training and ``n_val`` validation samples are enough
        to train on."""
        return n_train >= self.params.min_samples and n_val >= max(
            10, self.params.min_samples // 10
        )

    def run(self) -> None:
        """The training thread: requests, then a round whenever there are data enough."""
        p = self.params
        torch.set_num_threads(p.torch_threads)
        lower_thread_priority(p.training_niceness, self.log)
        rng = np.random.default_rng(p.seed)
        while not self._stop.is_set():
            self._serve_requests()
            n_train, n_val = self.buffers.sizes()
            if not p.training_enabled:
                self.state, self.message = 'paused', 'training paused'
                self._stop.wait(IDLE_WAIT_S)
                continue
            if not self.ready(n_train, n_val):
                if n_train:
                    self.state = 'collecting'
                    self.message = f'collecting: {n_train}/{p.min_samples} samples'
                self._stop.wait(IDLE_WAIT_S)
                continue
            try:
                self.train_round(rng)
            except Exception as err:
                # a dead thread would leave a learner that takes data and never trains, with a
                # status that says it is collecting: say so on the status and try again from
                # scratch (the intake goes on)
                self.state = 'error'
                self.message = f'training failed: {type(err).__name__}: {err}'
                self.log.error(self.message + '\n' + traceback.format_exc())
                self.trainer = None
                self._stop.wait(ERROR_WAIT_S)

    def _serve_requests(self) -> None:
        with self._requests_lock:
            requests, self._requests = self._requests, []
        for kind, path, loaded in requests:
            if kind == 'reset':
                self._reset()
            else:
                self.adopt(path, loaded)
                self.log.info(f'adopted model {self.lineage.model_id} from {path}')

    # ------------------------------------------------------------------ rounds
    def train_once(self, rng: np.random.Generator, now: float) -> None:
        """One training round (optimiser steps, validation, publication when due) on the
        buffers as they are, with ``now`` [s] as the publication clock: what the training
        thread does, for a caller that drives the learner itself (``training_enabled`` false),
        e.g. ``bench/bench_learner_replay.py``, which replays a bag at a chosen optimiser rate,
        reproducibly."""
        self.train_round(rng, now)

    def train_round(self, rng: np.random.Generator, now: Optional[float] = None) -> None:
        """A round; ``now`` [s]: the publication clock (None: ``time.monotonic()``)."""
        t0 = time.perf_counter()
        p = self.params
        loss_config = {k: getattr(p, k) for k in LOSS_FIELDS}
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
            self.log.info(
                'training loss now ' + ', '.join(f'{k} {v}' for k, v in loss_config.items())
            )
        data, val = self.buffers.round_data(rng, p.steps_per_round * p.batch_size, self._min_run())
        if self.trainer is None:
            self.trainer = self._new_trainer(
                normalizer=TorqueNormalizer.from_torques(data['tau'], data.get('metric'))
            )
            if self.trainer.uses_windows:  # the first round's data were samples, not windows
                data = self.buffers.training_data(
                    rng, p.steps_per_round * p.batch_size, self._min_run()
                )
        self.lr = self.lr_schedule.at(self.training_steps)
        for g in self.trainer.optimizer.param_groups:
            g['lr'] = self.lr
        loss = self.trainer.train_steps(
            fit_targets(data), p.steps_per_round, batch_size=p.batch_size, stop=self._stop.is_set
        )
        if self._stop.is_set():
            return
        self.training_steps += p.steps_per_round
        ev = evaluate_total(self.trainer, val)
        self.last_round_s = time.perf_counter() - t0
        self.train_loss = loss
        lineage = self.lineage
        published = (
            None if lineage.snapshot is None else (lineage.version, lineage.snapshot.state_dict())
        )
        now = time.monotonic() if now is None else now
        verdict = self.policy.judge(
            loss, ev, val, TrainerWeights(self.trainer), published, now, self.buffers
        )
        for level, text in verdict.notes:  # one call site per severity (rclpy's rule)
            if level == 'warning':
                self.log.warning(text)
            else:
                self.log.info(text)
        if verdict.restart_lr:
            self.lr_schedule.restart(self.training_steps)  # learn the change fast
        if verdict.action == 'rolled_back':
            self._roll_back(verdict)
            return
        self.state, self.message = 'training', verdict.message
        self.val_nmse = [float(x) for x in ev['nmse']]
        if verdict.action == 'publish':
            self._publish_version(now)

    def _min_run(self) -> int:
        """The shortest run of consecutive samples a round's data may hold: ``horizon + 1``
        for a trainer of rollout windows, 0 (random samples) otherwise."""
        if self.trainer is not None and self.trainer.uses_windows:
            return self.trainer.config.horizon + 1
        return 0

    def _new_trainer(self, model: Any = None, normalizer: Any = None) -> Trainer:
        p = self.params
        torch.manual_seed(p.seed)
        if model is None:
            model = build_model(
                p.model,
                self.robot.joint_types,
                **model_config(
                    p.model,
                    p.width,
                    p.depth,
                    p.friction,
                    p.friction_model,
                    self.robot.inertia_invariant_joints if p.inertia_invariance else (),
                ),
            )
        cfg = TrainConfig(
            batch_size=p.batch_size,
            lr=self.lr_schedule.at(self.training_steps),
            seed=p.seed,
            # the metric weighs the inverse loss; a rollout (loss switched at runtime from
            # inverse, loss_metric auto) measures the motion itself
            loss_metric=p.loss_metric if p.loss == 'inverse' else 'torque',
            **{k: getattr(p, k) for k in LOSS_FIELDS},
        )
        return Trainer(model, cfg, normalizer, device='cpu', dtype=torch.float32)

    def _roll_back(self, verdict: Verdict) -> None:
        assert self.trainer is not None  # a round's trainer
        self.state, self.message = 'diverged', verdict.message
        self.log.error(self.message)
        if verdict.restore is not None:
            model = self.trainer.model
            model.load_state_dict(verdict.restore)
            self.trainer = self._new_trainer(model, self.trainer.normalizer)
        else:
            self.trainer = None  # nothing good yet: start afresh

    # ------------------------------------------------------------------ versions
    def _publish_version(self, now: float) -> None:
        assert self.trainer is not None and self.policy.good_state is not None
        model = copy.deepcopy(self.trainer.model)
        model.load_state_dict(self.policy.good_state)
        model = model.double().eval()
        version = self.lineage.version + 1
        path = self.store.write(model, version, self._metadata(version))
        stamp = self.clock()
        self.lineage = Lineage(self.lineage.model_id, version, model, path, stamp)
        self.store.prune()
        self.policy.published(now)
        self.announce(
            Announcement(self.lineage.model_id, version, path, list(self.policy.good_nmse), stamp)
        )
        self.log.info(
            f'model v{version}: validation nMSE {np.round(self.val_nmse, 5).tolist()} -> {path}'
        )

    def _metadata(self, version: int) -> Dict[str, Any]:
        """What a version's checkpoint says about its lineage and training."""
        assert self.trainer is not None and self.trainer.normalizer is not None
        config = self.trainer.config
        return {
            'joint_names': self.robot.joint_names,
            'joint_types': self.robot.joint_types,
            'torque_normalisation': self.trainer.normalizer.to_dict(),
            'model_id': self.lineage.model_id,
            'model_version': version,
            'online': {
                'samples_seen': self.intake.samples_seen,
                'steps': self.training_steps,
                'validation_nmse': self.val_nmse,
                'loss': {
                    k: getattr(config, k)
                    for k in LOSS_FIELDS
                    if k == 'loss' or self.trainer.uses_windows
                },
            },
        }

    def adopt(self, path: str, loaded: Optional[Loaded] = None) -> str:
        """Make the checkpoint ``path`` the current model (the training thread, or before it
        starts); its model id. ``loaded``: what ``VersionStore.read`` gave for it."""
        model, meta = loaded or self.store.read(path)
        norm = meta.get('torque_normalisation')
        self.trainer = self._new_trainer(
            copy.deepcopy(model).float(), TorqueNormalizer.from_dict(norm) if norm else None
        )
        self.policy.restart(copy.deepcopy(self.trainer.model.state_dict()))
        version = max(self.store.newest(), int(meta.get('model_version') or 0))
        model_id = meta['model_id']
        self.lineage = Lineage(model_id, version, model.double().eval(), path, self.lineage.stamp)
        return model_id

    def resume(self) -> bool:
        """Go on from the newest readable version of the folder and announce it (False: the
        folder holds none)."""
        found = self.store.newest_readable()
        if found is None:
            return False
        version, path, loaded = found
        model_id = self.adopt(path, loaded)
        self.log.info(f'resumed model {model_id} v{version} from {path}')
        self.announce(Announcement(model_id, version, path, [], None))
        return True

    def _reset(self) -> None:
        self.buffers.clear()
        self.intake.restart()
        self.trainer = None
        self.policy.restart(None)
        self.training_steps, self.train_loss, self.val_nmse = 0, math.nan, []
        # a new lineage, but version numbers (file names) go on from the newest on disk
        self.lineage = Lineage(new_model_id(), self.store.newest(), None, '', self.lineage.stamp)
        self.state, self.message = 'idle', 'reset'
