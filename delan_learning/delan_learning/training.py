"""Fitting a model's inverse dynamics to torque data, offline (``fit``) or online (``step``).

:class:`Trainer` owns the optimiser (AdamW) and its state, so an online learner can keep calling
``train_steps(arrays, n)`` as data arrive while the offline path calls ``fit(train, val)``, which
adds rounds of whole epochs with validation metrics, a learning-rate schedule, early stopping
with restore-best and a time budget. The default schedule trains until the validation loss stops
improving ('plateau': the rate drops at each plateau, training ends at the last drop), so the
number of optimiser steps follows the data instead of a number of epochs the user has to guess.
The loss is the mean squared torque error with each joint divided by its torque standard
deviation (:class:`TorqueNormalizer`), so a weak wrist counts as much as a strong shoulder.

``TrainConfig.loss='forward'`` trains through the forward dynamics instead: minibatches are
windows of ``horizon + 1`` consecutive samples (:func:`delan_learning.rollout.window_index`), the
model is rolled out from each window's first state under the recorded torques, and the loss is
the squared error of the predicted positions and velocities, each joint divided by the spread of
what the dynamics change over a window (:func:`delan_learning.rollout.horizon_scales`). No
acceleration estimate enters, so the noise that differentiating measured velocities adds (and
the bias it gives the inverse loss) is gone. ``'both'`` adds the two losses. Data given as a dict
may carry ``effort``, the measured torque as it came, beside ``tau`` (the online learner's
``tau`` is averaged with its acceleration estimate's kernel, right for the inverse loss only):
rollouts are then driven by ``effort``.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import asdict
from typing import Any, Callable, Dict, List, Mapping, NamedTuple, Optional, Tuple, Union

import numpy as np
import torch

from delan_learning import rollout as ro
from delan_learning.data import Dataset, constant_torque, split_by_trajectory
from delan_learning.models import DynamicsModule, build_model
from delan_learning.train_config import LOSS_METRICS, LOSSES, TrainConfig


class TorqueNormalizer:
    """Per-joint torque mean and standard deviation ``(n,)``; the loss divides errors by std.

    ``accel_scale``: for data with a per-sample metric ``W`` (an acceleration-weighted loss,
    see :meth:`Trainer.inverse_loss`), the mean of ``|W (tau - mean)|^2 / n``: the loss divides
    weighted errors by it, so both losses are nMSE-like."""

    def __init__(self, mean: np.ndarray, std: np.ndarray, accel_scale: Optional[float] = None):
        self.mean = np.asarray(mean, dtype=np.float64).reshape(-1)
        self.std = np.asarray(std, dtype=np.float64).reshape(-1)
        if self.mean.shape != self.std.shape or np.any(self.std <= 0):
            raise ValueError('TorqueNormalizer needs equal-length mean/std with std > 0')
        if accel_scale is not None and not accel_scale > 0:
            raise ValueError('TorqueNormalizer needs accel_scale > 0')
        self.accel_scale = None if accel_scale is None else float(accel_scale)

    @classmethod
    def from_torques(
        cls, tau: np.ndarray, metric: Optional[np.ndarray] = None
    ) -> 'TorqueNormalizer':
        """From torques ``(N, n)`` and, for the acceleration loss, their metrics ``(N, n, n)``.
        A joint of constant torque (:func:`constant_torque`: a passive one) gets the largest
        spread; the others are floored at 1e-3 of it."""
        tau = np.asarray(tau, dtype=np.float64)
        std = tau.std(axis=0)
        std = np.where(constant_torque(std), std.max(initial=0.0), std)
        mean = tau.mean(axis=0)
        accel = None
        if metric is not None:
            a = np.einsum('bij,bj->bi', np.asarray(metric, dtype=np.float64), tau - mean)
            accel = max(float(np.mean(a * a)), 1e-12)
        return cls(mean, np.maximum(std, max(1e-6, 1e-3 * float(std.max()))), accel)

    def to_dict(self) -> Dict[str, Any]:
        """JSON-ready ``mean``, ``std`` (and ``accel_scale`` when set), as a checkpoint stores
        it."""
        d: Dict[str, Any] = {'mean': self.mean.tolist(), 'std': self.std.tolist()}
        if self.accel_scale is not None:
            d['accel_scale'] = self.accel_scale
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> 'TorqueNormalizer':
        """The normaliser :meth:`to_dict` wrote."""
        return cls(np.asarray(d['mean']), np.asarray(d['std']), d.get('accel_scale'))


_ALLOCATOR_TUNED = False


def tune_allocator() -> bool:
    """Stop glibc from returning each freed tensor buffer to the OS (process-wide, idempotent).

    By default glibc serves blocks over 128 KiB with ``mmap`` and unmaps them on free, so each
    of the ~100 (B, 2W) float32 intermediates of a training step pays page faults and zeroing
    again; raising the mmap and trim thresholds lets the heap reuse them (about 25 % faster
    steps at batch 512 on a 2-core CPU). Costs only a higher resident set size. No-op, returning
    False, where the C library is not glibc.
    """
    global _ALLOCATOR_TUNED
    if _ALLOCATOR_TUNED:
        return True
    try:
        import ctypes

        libc = ctypes.CDLL('libc.so.6')
        M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
        ok = (
            libc.mallopt(M_MMAP_THRESHOLD, 32 * 1024 * 1024) == 1
            and libc.mallopt(M_TRIM_THRESHOLD, 512 * 1024 * 1024) == 1
        )
    except (OSError, AttributeError):
        ok = False
    _ALLOCATOR_TUNED = ok
    return ok


def _adamw(model: torch.nn.Module, config: TrainConfig) -> torch.optim.AdamW:
    """AdamW, fused into one kernel per step where this torch build supports it."""
    params = [p for p in model.parameters() if p.requires_grad]
    try:
        return torch.optim.AdamW(
            params, lr=config.lr, weight_decay=config.weight_decay, fused=True
        )
    except (RuntimeError, TypeError, ValueError):
        return torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay)


class Batch(NamedTuple):
    """Tensors ``(B, n)`` on the trainer's device and dtype; ``metric (B, n, n)`` when the loss
    weighs torque errors by the acceleration they cause (data key ``metric``)."""

    q: torch.Tensor
    qd: torch.Tensor
    qdd: torch.Tensor
    tau: torch.Tensor
    metric: Optional[torch.Tensor] = None


class Windows(NamedTuple):
    """Consecutive samples for the forward loss: ``q, qd, qdd, tau (B, H+1, n)``, step lengths
    ``dt (B, H)`` [s]; ``effort (B, H+1, n)``: the torque the rollouts apply, when it is not
    ``tau`` (the measured torque beside a kernel-averaged one)."""

    q: torch.Tensor
    qd: torch.Tensor
    qdd: torch.Tensor
    tau: torch.Tensor
    dt: torch.Tensor
    effort: Optional[torch.Tensor] = None

    @property
    def rollout_tau(self) -> torch.Tensor:
        """The torques the rollouts apply ``(B, H+1, n)``."""
        return self.tau if self.effort is None else self.effort

    def first(self) -> Batch:
        """The windows' first samples ``(B, n)`` (the inverse term of ``loss='both'``)."""
        return Batch(self.q[:, 0], self.qd[:, 0], self.qdd[:, 0], self.tau[:, 0])


ArrayData = Union[Dataset, Mapping[str, Any], Batch]


class _Pool:
    """What minibatches are drawn from: the samples (inverse loss) or the windows over them
    (forward / both); ``take(idx)`` gives the minibatch of units ``idx``."""

    def __init__(
        self,
        samples: Batch,
        index: Optional[torch.Tensor] = None,
        dt: Optional[torch.Tensor] = None,
        effort: Optional[torch.Tensor] = None,
    ):
        self.samples = samples
        self.n = samples.q.shape[1]
        self.effort = effort  # (N, n) rollout torques, when not samples.tau
        parts = tuple(samples[:4]) + (() if effort is None else (effort,))
        self.packed = torch.cat(parts, dim=1)
        self.index, self.dt = index, dt

    def __len__(self) -> int:
        return len(self.samples.q) if self.index is None else len(self.index)

    @property
    def rollout_tau(self) -> torch.Tensor:
        return self.samples.tau if self.effort is None else self.effort

    def take(self, idx: torch.Tensor) -> Union[Batch, Windows]:
        if self.index is None:
            metric = None if self.samples.metric is None else self.samples.metric[idx]
            q, qd, qdd, tau = self.packed[idx].split(self.n, dim=1)[:4]
            return Batch(q, qd, qdd, tau, metric=metric)
        assert self.dt is not None  # windows come with their step lengths
        q, qd, qdd, tau, *effort = self.packed[self.index[idx]].split(self.n, dim=-1)
        return Windows(q, qd, qdd, tau, self.dt[idx], effort[0] if effort else None)


class Trainer:
    """Holds a model, its AdamW optimiser and the torque normalisation.

    ``normalizer`` defaults to the statistics of the first data the trainer sees, and a fresh
    model's fixed scales (``model.init_scales``) are set from that data too; pass both explicitly
    for an online learner that should not depend on its first batch.
    """

    def __init__(
        self,
        model: DynamicsModule,
        config: Optional[TrainConfig] = None,
        normalizer: Optional[TorqueNormalizer] = None,
        device: Union[str, torch.device, None] = None,
        dtype: torch.dtype = torch.float32,
    ):
        self.config = config or TrainConfig()
        _check_loss_config(self.config, model)
        if self.config.tune_allocator:
            tune_allocator()
        self.device = torch.device(device) if device is not None else model.device
        self.dtype = dtype
        self.model = model.to(device=self.device, dtype=dtype)
        self.normalizer = normalizer
        self.optimizer = _adamw(self.model, self.config)
        self.generator = torch.Generator(device='cpu').manual_seed(self.config.seed)
        self.steps = 0
        #: what ended the last ``fit``: plateau, epochs, max_steps, time_budget, patience, callback
        self.stop_reason: Optional[str] = None
        self._inv_std: Optional[torch.Tensor] = None
        if normalizer is not None:
            self._set_normalizer(normalizer)
        #: forward loss: per-joint (position, velocity) scales ``(n,)`` from the first windows
        #: seen (:func:`~delan_learning.rollout.horizon_scales`), or set by the caller
        self.state_scales: Optional[Tuple[np.ndarray, np.ndarray]] = None
        self._wrap = ro.continuous_mask(self.model.joint_types, self.device)

    # -- data -----------------------------------------------------------------------------------
    def to_batch(self, data: ArrayData) -> Batch:
        """Tensors on the trainer's device/dtype from a Dataset, a dict of arrays or a Batch."""
        items: Tuple[Any, ...]
        if isinstance(data, Batch):
            items = tuple(data)
        elif isinstance(data, Dataset):
            metric = data.metric if self.config.loss_metric != 'torque' else None
            items = (data.q, data.qd, data.qdd, data.tau, metric)
        else:
            metric = data.get('metric') if self.config.loss_metric != 'torque' else None
            items = tuple(data[k] for k in ('q', 'qd', 'qdd', 'tau')) + (metric,)
        # Batch's fields, with the metric (the fifth) None where the data have none
        tensors: List[Any] = [
            None
            if x is None
            else torch.as_tensor(np.asarray(x) if not torch.is_tensor(x) else x).to(
                device=self.device, dtype=self.dtype
            )
            for x in items
        ]
        return Batch(*tensors)

    @property
    def uses_windows(self) -> bool:
        """Whether the loss needs consecutive samples (``loss`` 'forward' or 'both')."""
        return self.config.loss != 'inverse'

    def _pool(self, data: ArrayData) -> _Pool:
        """The samples of ``data``, cut into windows when the loss needs them (then ``data``
        needs time stamps ``t``; trajectory ids ``traj`` default to one trajectory; a dict's
        ``effort``, when there, is the torque the rollouts apply)."""
        full = self.to_batch(data)
        self._ensure_initialised(full)
        if not self.uses_windows:
            return _Pool(full)
        effort = None
        t: Optional[np.ndarray]
        traj: Optional[np.ndarray]
        if isinstance(data, Dataset):
            t, traj = data.t, data.traj
        elif isinstance(data, Mapping):
            t, traj = data.get('t'), data.get('traj')
            if data.get('effort') is not None:
                effort = torch.as_tensor(np.asarray(data['effort'])).to(
                    device=self.device, dtype=self.dtype
                )
        else:
            t = traj = None
        if t is None:
            raise ValueError(
                f"loss {self.config.loss!r} needs time stamps 't' with the data "
                '(a Dataset or dict with t, and traj for several trajectories)'
            )
        t = np.asarray(t, dtype=np.float64).reshape(-1)
        traj = np.zeros(len(t), dtype=np.int64) if traj is None else np.asarray(traj)
        index, dt = ro.window_index(traj, t, self.config.horizon, self.config.gap_factor)
        if len(index) == 0:
            raise ValueError(
                f'no window of {self.config.horizon + 1} consecutive samples '
                'without a gap in the data'
            )
        if self.state_scales is None:
            qn, qdn = full.q.cpu().double().numpy(), full.qd.cpu().double().numpy()
            self.set_state_scales(*ro.horizon_scales(qn[index], qdn[index], dt))
        return _Pool(
            full,
            torch.as_tensor(index, device=self.device),
            torch.as_tensor(dt, device=self.device, dtype=self.dtype),
            effort,
        )

    def set_state_scales(self, q_scale: np.ndarray, qd_scale: np.ndarray) -> None:
        """Per-joint ``(n,)`` scales the forward loss divides position/velocity errors by."""
        self.state_scales = (
            np.asarray(q_scale, dtype=np.float64),
            np.asarray(qd_scale, dtype=np.float64),
        )
        self._inv_q, self._inv_qd = (
            torch.as_tensor(1.0 / s, device=self.device, dtype=self.dtype)
            for s in self.state_scales
        )

    def _set_normalizer(self, normalizer: TorqueNormalizer) -> None:
        self.normalizer = normalizer
        self._inv_std = torch.as_tensor(1.0 / normalizer.std, device=self.device, dtype=self.dtype)

    def _initialised_normalizer(self) -> Tuple[TorqueNormalizer, torch.Tensor]:
        """The normaliser and its ``1 / std (n,)``, which every loss and metric needs: set from
        the constructor or the first data (:meth:`_ensure_initialised`)."""
        if self.normalizer is None or self._inv_std is None:
            raise RuntimeError('the trainer has no TorqueNormalizer before it has seen data')
        return self.normalizer, self._inv_std

    def _ensure_initialised(self, batch: Batch) -> None:
        normalizer = self.normalizer
        if normalizer is None:
            metric = None if batch.metric is None else batch.metric.detach().cpu().numpy()
            normalizer = TorqueNormalizer.from_torques(batch.tau.detach().cpu().numpy(), metric)
            self._set_normalizer(normalizer)
        if self.config.loss_metric != 'torque':
            if batch.metric is None:
                raise ValueError(
                    f'loss_metric {self.config.loss_metric!r} needs a metric per '
                    "sample in the data ('metric': RobotModel.acceleration_metric)"
                )
            if normalizer.accel_scale is None:
                raise ValueError(
                    f'loss_metric {self.config.loss_metric!r} needs a '
                    'TorqueNormalizer with accel_scale '
                    '(TorqueNormalizer.from_torques(tau, metric))'
                )
        if not bool(self.model.scales_initialised):
            self.model.init_scales(batch.q, batch.qd, batch.qdd, batch.tau)
            if self.uses_windows:
                _floor_inertia_scales(self.model)

    # -- optimisation ---------------------------------------------------------------------------
    def loss(self, batch: Union[Batch, Windows]) -> torch.Tensor:
        """The configured loss of a minibatch: samples for 'inverse', windows otherwise."""
        if isinstance(batch, Batch):
            return self.inverse_loss(batch)
        forward = self.forward_loss(batch)
        if self.config.loss == 'forward':
            return forward
        return self.inverse_loss(batch.first()) + self.config.forward_weight * forward

    def inverse_loss(self, batch: Batch) -> torch.Tensor:
        """Mean over samples and joints of the normalised squared torque error
        (``loss_metric`` 'torque'), of ``|W e|^2 / accel_scale`` with the batch's metric ``W``
        (``W = H^-1`` of a nominal model: ``W e`` is the acceleration the error ``e`` causes,
        over its typical size; 'acceleration'), or their sum ('both')."""
        return self._torque_loss(
            self.model(batch.q, batch.qd, batch.qdd) - batch.tau, batch.metric
        )

    def _torque_loss(self, err: torch.Tensor, metric: Optional[torch.Tensor]) -> torch.Tensor:
        kind = self.config.loss_metric
        normalizer, inv_std = self._initialised_normalizer()
        loss: Union[float, torch.Tensor] = 0.0
        if kind != 'acceleration':
            e = err * inv_std
            loss = (e * e).mean()
        if kind != 'torque':
            # _ensure_initialised refused data without metrics and a normaliser without scale
            assert metric is not None and normalizer.accel_scale is not None
            a = torch.einsum('bij,bj->bi', metric, err)
            loss = loss + (a * a).mean() / normalizer.accel_scale
        assert isinstance(loss, torch.Tensor)  # loss_metric is one of LOSS_METRICS
        return loss

    def forward_loss(self, w: Windows) -> torch.Tensor:
        """Rollout of each window's first state under its torques; normalised squared error of
        the predicted positions and velocities, mean over windows, steps and joints."""
        cfg = self.config
        q_hat, qd_hat = ro.rollout(
            self.model,
            w.q[:, 0],
            w.qd[:, 0],
            ro.step_torques(w.rollout_tau, cfg.torque_timing),
            w.dt,
            cfg.integrator,
        )
        return self._state_loss(
            ro.position_error(q_hat, w.q[:, 1:], self._wrap), qd_hat - w.qd[:, 1:]
        )

    def _state_loss(self, eq: torch.Tensor, ev: torch.Tensor) -> torch.Tensor:
        """``(mean (eq/s_q)^2 + mean (ev/s_qd)^2) / 2`` of errors ``(B, H, n)``."""
        eq, ev = eq * self._inv_q, ev * self._inv_qd
        return 0.5 * ((eq * eq).mean() + (ev * ev).mean())

    def step(self, batch: Union[ArrayData, Windows], lr: Optional[float] = None) -> float:
        """One optimiser step on ``batch`` (any size); returns the loss before the step."""
        b: Union[Batch, Windows]
        if isinstance(batch, Windows):
            b = batch
            self._ensure_initialised(b.first())
            if self.state_scales is None:
                raise ValueError(
                    'the forward loss needs state scales: draw windows through '
                    'train_steps/fit, or call set_state_scales first'
                )
        else:
            b = (
                batch
                if isinstance(batch, Batch)
                and batch.q.device == self.device
                and batch.q.dtype == self.dtype
                else self.to_batch(batch)
            )
            self._ensure_initialised(b)
        if lr is not None:
            for group in self.optimizer.param_groups:
                group['lr'] = lr
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.loss(b)
        loss.backward()
        if self.config.grad_clip:
            torch.nn.utils.clip_grad_norm_(
                self.model.parameters(), self.config.grad_clip, foreach=True
            )
        self.optimizer.step()
        self.steps += 1
        return float(loss.detach())

    def _minibatches(self, n_samples: int, batch_size: int):
        perm = torch.randperm(n_samples, generator=self.generator)
        for start in range(0, n_samples, batch_size):
            yield perm[start : start + batch_size].to(self.device)

    def train_steps(
        self,
        data: ArrayData,
        n_steps: int,
        batch_size: Optional[int] = None,
        lr: Optional[float] = None,
        stop: Optional[Callable[[], bool]] = None,
    ) -> float:
        """``n_steps`` optimiser steps on random minibatches of ``data``; mean loss.

        What an online learner calls repeatedly with its growing (or windowed) buffer; the
        optimiser state carries over between calls. ``stop()`` is asked before every step and
        ends the call early when true (a node shutting down must not wait for a whole round,
        which takes seconds on a loaded machine). With the forward loss a minibatch holds
        ``batch_size`` windows, and ``data`` must be consecutive samples with ``t`` (and
        ``traj``); see :meth:`_pool`.
        """
        pool = self._pool(data)
        bs = min(batch_size or self.config.batch_size, len(pool))
        losses = []
        it = iter(())
        for _ in range(n_steps):
            if stop is not None and stop():
                break
            idx = next(it, None)
            if idx is None or len(idx) < bs:
                it = self._minibatches(len(pool), bs)
                idx = next(it)
            losses.append(self.step(pool.take(idx), lr=lr))
        return float(np.mean(losses)) if losses else float('nan')

    @torch.no_grad()
    def evaluate(
        self,
        data: Union[ArrayData, _Pool],
        chunk: int = 2048,
        rollouts: Optional[bool] = None,
    ) -> Dict[str, Any]:
        """Loss, per-joint torque MSE and normalised MSE (MSE / Var(tau) of ``data``; the
        largest Var(tau) for a joint of constant torque, :func:`constant_torque`).

        With the forward loss also ``inverse_loss``, ``forward_loss`` and ``rollout`` (RMS
        position / velocity error per joint at the horizon, over all windows of ``data``), and
        ``loss`` is the configured objective -- unless ``rollouts`` is False: then the torque
        metrics only, ``loss`` the inverse loss, whatever the training loss (the online
        learner's validation, on samples that are not consecutive).

        ``chunk``: samples per forward pass. Small chunks are as fast and keep the peak small:
        with 16384 the online learner's allocator held ~110 MB of freed memory from its
        validation passes (plateau 379 MB RSS vs 290 MB, bench/bench_learner_memory.py)."""
        b = data.samples if isinstance(data, _Pool) else self.to_batch(data)
        self._ensure_initialised(b)
        self.model.eval()
        preds = [
            self.model(b.q[i : i + chunk], b.qd[i : i + chunk], b.qdd[i : i + chunk])
            for i in range(0, len(b.q), chunk)
        ]
        err = (torch.cat(preds) - b.tau).double()
        mse = (err * err).mean(0).cpu().numpy()
        var = b.tau.double().var(0, unbiased=False).cpu().numpy()
        var = np.where(constant_torque(np.sqrt(var)), var.max(initial=0.0), var)
        normalizer, _ = self._initialised_normalizer()
        loss = (
            float(np.mean(mse / normalizer.std**2))
            if self.config.loss_metric == 'torque'
            else float(self._torque_loss(err, None if b.metric is None else b.metric.double()))
        )
        out = {'loss': loss, 'mse': mse.tolist(), 'nmse': (mse / np.maximum(var, 1e-12)).tolist()}
        if self.uses_windows and rollouts is not False:
            out.update(
                self._evaluate_rollouts(
                    data if isinstance(data, _Pool) else self._pool(data), loss
                )
            )
        return out

    def _evaluate_rollouts(self, pool: _Pool, inverse_loss: float) -> Dict[str, Any]:
        cfg = self.config
        s = pool.samples
        index, dt = pool.index, pool.dt
        assert index is not None and dt is not None  # a pool of windows (uses_windows)
        eq, ev = ro.rollout_errors(
            self.model,
            s.q,
            s.qd,
            pool.rollout_tau,
            index,
            dt,
            cfg.integrator,
            cfg.torque_timing,
        )
        forward = float(self._state_loss(eq.double(), ev.double()))
        names = self.model.joint_names or [f'joint{i}' for i in range(s.q.shape[1])]
        return {
            'inverse_loss': inverse_loss,
            'forward_loss': forward,
            'loss': forward
            if cfg.loss == 'forward'
            else inverse_loss + cfg.forward_weight * forward,
            'rollout': ro.horizon_metrics(eq, ev, names, dt.cpu().numpy()),
        }

    # -- offline --------------------------------------------------------------------------------
    def _lr_at(self, progress: float) -> float:
        cfg = self.config
        if cfg.lr_schedule == 'constant':
            return cfg.lr
        lo = cfg.lr * cfg.final_lr_fraction
        return lo + 0.5 * (cfg.lr - lo) * (1.0 + math.cos(math.pi * min(progress, 1.0)))

    def fit(
        self,
        train: ArrayData,
        val: Optional[ArrayData] = None,
        epochs: Optional[int] = None,
        callback: Optional[Callable[[Dict[str, Any]], Optional[bool]]] = None,
    ) -> List[Dict[str, Any]]:
        """Train in rounds until the schedule, ``epochs``, ``max_steps`` or the budget end it.

        Returns one metrics dict per round: ``round, epoch`` (passes over ``train`` so far),
        ``steps, train_loss, val_loss, val_nmse (per joint), lr, elapsed_s, samples_per_s,
        best``. ``callback(metrics)`` is called after every round and may return True to stop.
        Early stopping and the plateau watch ``val_loss`` (``train_loss`` without ``val``); the
        best weights are restored at the end. ``self.stop_reason`` says what ended it.
        """
        cfg = self.config
        if cfg.lr_schedule not in ('plateau', 'cosine', 'constant'):
            raise ValueError(f'unknown lr_schedule {cfg.lr_schedule!r}')
        epochs = cfg.epochs if epochs is None else int(epochs)
        pool = self._pool(train)
        vb: Union[Batch, _Pool, None] = None
        if val is not None:
            vb = self.to_batch(val)
            if len(vb.q) == 0:
                vb = None
            elif self.uses_windows:
                vb = self._pool(val)
        N = len(pool)
        bs = min(cfg.batch_size, N)
        steps_per_epoch = math.ceil(N / bs)
        epochs_per_round = max(1, math.ceil(cfg.round_steps / steps_per_epoch))
        max_steps = max(1, int(cfg.max_steps))
        if epochs is not None:
            max_steps = min(max_steps, max(1, epochs * steps_per_epoch))
        history: List[Dict[str, Any]] = []
        best, best_state, since_best, since_gain = math.inf, None, 0, 0
        start = time.perf_counter()
        budget = cfg.time_budget
        lr = cfg.lr
        lr_floor = cfg.lr * cfg.final_lr_fraction
        step0, epoch = 0, 0
        self.stop_reason = 'max_steps'
        while True:
            t_round, losses, seen, out_of_time = time.perf_counter(), [], 0, False
            for _ in range(epochs_per_round):
                batches = 0
                for idx in self._minibatches(N, bs):
                    elapsed = time.perf_counter() - start
                    if budget is not None and elapsed >= budget:
                        out_of_time = True
                        break
                    if cfg.lr_schedule == 'cosine':
                        progress = step0 / max_steps
                        if budget is not None:
                            progress = max(progress, elapsed / budget)
                        lr = self._lr_at(progress)
                    losses.append(self.step(pool.take(idx), lr=lr))
                    seen += len(idx)
                    step0 += 1
                    batches += 1
                    if step0 >= max_steps:
                        break
                epoch += batches == steps_per_epoch
                if out_of_time or step0 >= max_steps:
                    break
            if not losses:
                self.stop_reason = 'time_budget'
                break
            train_loss = float(np.mean(losses))
            metrics: Dict[str, Any] = {
                'round': len(history) + 1,
                'epoch': epoch,
                'steps': self.steps,
                'train_loss': train_loss,
                'val_loss': None,
                'val_nmse': None,
                'lr': lr,
                'samples_per_s': seen / max(time.perf_counter() - t_round, 1e-9),
            }
            watched = train_loss
            if vb is not None:
                ev = self.evaluate(vb)
                metrics['val_loss'], metrics['val_nmse'] = ev['loss'], ev['nmse']
                watched = ev['loss']
            metrics['best'] = watched < best
            gained = watched < best * (1.0 - cfg.plateau_threshold)
            if watched < best:
                best, since_best = watched, 0
                best_state = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
            else:
                since_best += 1
            since_gain = 0 if gained else since_gain + 1
            metrics['elapsed_s'] = time.perf_counter() - start
            history.append(metrics)
            if not cfg.quiet:
                _progress(metrics, max_steps)
            stop = callback(metrics) if callback is not None else False
            if cfg.lr_schedule == 'plateau' and since_gain >= cfg.plateau_patience:
                lr, since_gain = lr * cfg.plateau_factor, 0
                if lr < lr_floor * (1.0 - 1e-9):
                    self.stop_reason = 'plateau'
                    break
            if stop:
                self.stop_reason = 'callback'
                break
            if out_of_time:
                self.stop_reason = 'time_budget'
                break
            if step0 >= max_steps:
                self.stop_reason = (
                    'epochs'
                    if epochs is not None and max_steps == epochs * steps_per_epoch
                    else 'max_steps'
                )
                break
            if cfg.patience and since_best >= cfg.patience:
                self.stop_reason = 'patience'
                break
        if not cfg.quiet:
            sys.stderr.write('\n')
        if best_state is not None:
            self.model.load_state_dict(best_state)
        self.model.eval()
        return history


#: forward loss: a fresh model's per-joint inertia scales are at least this share of the largest
FORWARD_INERTIA_FLOOR = 0.01


@torch.no_grad()
def _floor_inertia_scales(model: DynamicsModule) -> None:
    """Raise a fresh model's tiny per-joint inertia scales (``h_rel``) for the forward loss.

    The data-based estimate can come out near zero for a joint (a mis-specified regression:
    the conftest arm's elbow gets 5e-5 of the shoulder); the inverse loss shrugs that off, but a
    rollout divides by that inertia and explodes (losses of 1e11, then a failed Cholesky). Too
    large an inertia only makes the first rollouts sluggish, which training corrects."""
    h_rel = getattr(model, 'h_rel', None)
    if h_rel is not None and h_rel.numel():
        h_rel.clamp_(min=FORWARD_INERTIA_FLOOR * float(h_rel.max()))


def _check_loss_config(config: TrainConfig, model: DynamicsModule) -> None:
    """ValueError for a loss this model cannot be trained with or bad forward-loss settings."""
    if config.loss not in LOSSES:
        raise ValueError(f'unknown loss {config.loss!r}; expected one of {LOSSES}')
    if config.loss_metric not in LOSS_METRICS:
        raise ValueError(
            f'unknown loss_metric {config.loss_metric!r}; expected one of {LOSS_METRICS}'
        )
    if config.loss == 'inverse':
        return
    if config.loss_metric != 'torque':
        raise ValueError(
            f'loss_metric {config.loss_metric!r} weighs the inverse loss, not '
            f'loss {config.loss!r} (a rollout measures the motion itself)'
        )
    if not getattr(model, 'differentiable_forward', False):
        raise ValueError(
            f'loss {config.loss!r} trains through the forward dynamics, which the '
            f'{model.kind!r} model does not have in a differentiable form (it is '
            f'an inverse model only); use --model delan or --loss inverse'
        )
    if config.horizon < 1:
        raise ValueError(f'horizon must be >= 1, got {config.horizon}')
    if config.integrator not in ro.INTEGRATORS:
        raise ValueError(f'integrator must be one of {ro.INTEGRATORS}')
    if config.torque_timing not in ro.TORQUE_TIMINGS:
        raise ValueError(f'torque_timing must be one of {ro.TORQUE_TIMINGS}')
    if not config.gap_factor > 1.0:
        raise ValueError(f'gap_factor must be > 1, got {config.gap_factor}')


def _progress(m: Dict[str, Any], max_steps: int) -> None:
    width = 24
    done = int(width * m['steps'] / max(max_steps, 1))
    val = '' if m['val_loss'] is None else f' val {m["val_loss"]:.3e}'
    line = (
        f'\r[{"#" * done}{"." * (width - done)}] step {m["steps"]} epoch {m["epoch"]} '
        f'loss {m["train_loss"]:.3e}{val} lr {m["lr"]:.1e} '
        f'{m["samples_per_s"]:.0f} samples/s {m["elapsed_s"]:.0f}s'
    )
    end = '' if sys.stderr.isatty() else '\n'
    sys.stderr.write(line + end)
    sys.stderr.flush()


class TrainResult(NamedTuple):
    """What training returns: the model, its history, the torque normaliser and metadata."""

    model: DynamicsModule
    history: List[Dict[str, Any]]
    normalizer: TorqueNormalizer
    metadata: Dict[str, Any]


def train_model(
    data: Dataset,
    kind: str = 'delan',
    config: Optional[TrainConfig] = None,
    model_config: Optional[Dict[str, Any]] = None,
    callback: Optional[Callable[[Dict[str, Any]], Optional[bool]]] = None,
    device: Union[str, torch.device] = 'cpu',
) -> TrainResult:
    """Seed, split by trajectory, build, fit; the model comes back in float64 eval mode.

    ``metadata`` is ready for :func:`delan_learning.checkpoint.save_model` (joint names/types,
    hyperparameters, torque normalisation, final validation metrics).
    """
    config = config or TrainConfig()
    torch.manual_seed(config.seed)
    train, val = split_by_trajectory(data, config.val_fraction, config.seed)
    model = build_model(kind, data.joint_types, **(model_config or {}))
    normalizer = TorqueNormalizer.from_torques(
        train.tau, train.metric if config.loss_metric != 'torque' else None
    )
    trainer = Trainer(model, config, normalizer, device=device)
    history = trainer.fit(train, val, callback=callback)
    model = trainer.model.double().eval()
    model.joint_names = list(data.joint_names)
    scorer = Trainer(model, config, normalizer, dtype=torch.float64)
    if trainer.state_scales is not None:
        scorer.set_state_scales(*trainer.state_scales)
    final = scorer.evaluate(val if val is not None else train)
    metadata = {
        'joint_names': list(data.joint_names),
        'joint_types': list(data.joint_types),
        'torque_normalisation': normalizer.to_dict(),
        'training': {
            'config': asdict(config),
            'epochs_run': history[-1]['epoch'] if history else 0,
            'rounds': len(history),
            'stop_reason': trainer.stop_reason,
            'steps': trainer.steps,
            'n_train': len(train),
            'n_val': 0 if val is None else len(val),
            'val_trajectories': [] if val is None else [int(i) for i in val.trajectory_ids],
            'final_metrics': final,
            'data': data.source,
        },
    }
    return TrainResult(model, history, normalizer, metadata)
