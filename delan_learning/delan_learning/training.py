"""Fitting a model's inverse dynamics to torque data, offline (``fit``) or online (``step``).

:class:`Trainer` owns the optimiser (AdamW) and its state, so an online learner can keep calling
``train_steps(arrays, n)`` as data arrive while the offline path calls ``fit(train, val)``, which
adds rounds of whole epochs with validation metrics, a learning-rate schedule, early stopping
with restore-best and a time budget. The default schedule trains until the validation loss stops
improving ('plateau': the rate drops at each plateau, training ends at the last drop), so the
number of optimiser steps follows the data instead of a number of epochs the user has to guess.
The loss is the mean squared torque error with each joint divided by its torque standard
deviation (:class:`TorqueNormalizer`), so a weak wrist counts as much as a strong shoulder.
"""
from __future__ import annotations

import math
import sys
import time
from dataclasses import asdict
from typing import Any, Callable, Dict, List, Mapping, NamedTuple, Optional, Union

import numpy as np
import torch

from delan_learning.data import Dataset, split_by_trajectory
from delan_learning.train_config import TrainConfig
from delan_learning.models import DynamicsModule, build_model


class TorqueNormalizer:
    """Per-joint torque mean and standard deviation ``(n,)``; the loss divides errors by std."""

    def __init__(self, mean: np.ndarray, std: np.ndarray):
        self.mean = np.asarray(mean, dtype=np.float64).reshape(-1)
        self.std = np.asarray(std, dtype=np.float64).reshape(-1)
        if self.mean.shape != self.std.shape or np.any(self.std <= 0):
            raise ValueError('TorqueNormalizer needs equal-length mean/std with std > 0')

    @classmethod
    def from_torques(cls, tau: np.ndarray) -> 'TorqueNormalizer':
        tau = np.asarray(tau, dtype=np.float64)
        std = tau.std(axis=0)
        return cls(tau.mean(axis=0), np.maximum(std, max(1e-6, 1e-3 * float(std.max()))))

    def to_dict(self) -> Dict[str, List[float]]:
        return {'mean': self.mean.tolist(), 'std': self.std.tolist()}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> 'TorqueNormalizer':
        return cls(np.asarray(d['mean']), np.asarray(d['std']))


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
        ok = (libc.mallopt(M_MMAP_THRESHOLD, 32 * 1024 * 1024) == 1
              and libc.mallopt(M_TRIM_THRESHOLD, 512 * 1024 * 1024) == 1)
    except (OSError, AttributeError):
        ok = False
    _ALLOCATOR_TUNED = ok
    return ok


def _adamw(model: torch.nn.Module, config: TrainConfig) -> torch.optim.AdamW:
    """AdamW, fused into one kernel per step where this torch build supports it."""
    params = [p for p in model.parameters() if p.requires_grad]
    try:
        return torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay,
                                 fused=True)
    except (RuntimeError, TypeError, ValueError):
        return torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay)


class Batch(NamedTuple):
    """Tensors ``(B, n)`` on the trainer's device and dtype."""

    q: torch.Tensor
    qd: torch.Tensor
    qdd: torch.Tensor
    tau: torch.Tensor


ArrayData = Union[Dataset, Mapping[str, Any], Batch]


class Trainer:
    """Holds a model, its AdamW optimiser and the torque normalisation.

    ``normalizer`` defaults to the statistics of the first data the trainer sees, and a fresh
    model's fixed scales (``model.init_scales``) are set from that data too; pass both explicitly
    for an online learner that should not depend on its first batch.
    """

    def __init__(self, model: DynamicsModule, config: Optional[TrainConfig] = None,
                 normalizer: Optional[TorqueNormalizer] = None,
                 device: Union[str, torch.device, None] = None,
                 dtype: torch.dtype = torch.float32):
        self.config = config or TrainConfig()
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

    # -- data -----------------------------------------------------------------------------------
    def to_batch(self, data: ArrayData) -> Batch:
        """Tensors on the trainer's device/dtype from a Dataset, a dict of arrays or a Batch."""
        if isinstance(data, Batch):
            items = data
        elif isinstance(data, Dataset):
            items = (data.q, data.qd, data.qdd, data.tau)
        else:
            items = tuple(data[k] for k in ('q', 'qd', 'qdd', 'tau'))
        return Batch(*(torch.as_tensor(np.asarray(x) if not torch.is_tensor(x) else x)
                       .to(device=self.device, dtype=self.dtype) for x in items))

    def _set_normalizer(self, normalizer: TorqueNormalizer) -> None:
        self.normalizer = normalizer
        self._inv_std = torch.as_tensor(1.0 / normalizer.std, device=self.device,
                                        dtype=self.dtype)

    def _ensure_initialised(self, batch: Batch) -> None:
        if self.normalizer is None:
            self._set_normalizer(TorqueNormalizer.from_torques(batch.tau.detach().cpu().numpy()))
        if not bool(self.model.scales_initialised):
            self.model.init_scales(*batch)

    # -- optimisation ---------------------------------------------------------------------------
    def loss(self, batch: Batch) -> torch.Tensor:
        """Mean over samples and joints of the normalised squared torque error."""
        err = (self.model(batch.q, batch.qd, batch.qdd) - batch.tau) * self._inv_std
        return (err * err).mean()

    def step(self, batch: ArrayData, lr: Optional[float] = None) -> float:
        """One optimiser step on ``batch`` (any size); returns the loss before the step."""
        b = batch if isinstance(batch, Batch) and batch.q.device == self.device \
            and batch.q.dtype == self.dtype else self.to_batch(batch)
        self._ensure_initialised(b)
        if lr is not None:
            for group in self.optimizer.param_groups:
                group['lr'] = lr
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.loss(b)
        loss.backward()
        if self.config.grad_clip:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.config.grad_clip,
                                           foreach=True)
        self.optimizer.step()
        self.steps += 1
        return float(loss.detach())

    def _minibatches(self, n_samples: int, batch_size: int):
        perm = torch.randperm(n_samples, generator=self.generator)
        for start in range(0, n_samples, batch_size):
            yield perm[start:start + batch_size].to(self.device)

    def train_steps(self, data: ArrayData, n_steps: int, batch_size: Optional[int] = None,
                    lr: Optional[float] = None,
                    stop: Optional[Callable[[], bool]] = None) -> float:
        """``n_steps`` optimiser steps on random minibatches of ``data``; mean loss.

        What an online learner calls repeatedly with its growing (or windowed) buffer; the
        optimiser state carries over between calls. ``stop()`` is asked before every step and
        ends the call early when true (a node shutting down must not wait for a whole round,
        which takes seconds on a loaded machine).
        """
        full = self.to_batch(data)
        self._ensure_initialised(full)
        bs = min(batch_size or self.config.batch_size, len(full.q))
        packed, n = torch.cat(tuple(full), dim=1), full.q.shape[1]
        losses = []
        it = iter(())
        for _ in range(n_steps):
            if stop is not None and stop():
                break
            idx = next(it, None)
            if idx is None or len(idx) < bs:
                it = self._minibatches(len(full.q), bs)
                idx = next(it)
            losses.append(self.step(Batch(*packed[idx].split(n, dim=1)), lr=lr))
        return float(np.mean(losses)) if losses else float('nan')

    @torch.no_grad()
    def evaluate(self, data: ArrayData, chunk: int = 2048) -> Dict[str, Any]:
        """Loss, per-joint torque MSE and normalised MSE (MSE / Var(tau) of ``data``).

        ``chunk``: samples per forward pass. Small chunks are as fast and keep the peak small:
        with 16384 the online learner's allocator held ~110 MB of freed memory from its
        validation passes (plateau 379 MB RSS vs 290 MB, bench/bench_learner_memory.py)."""
        b = self.to_batch(data)
        self._ensure_initialised(b)
        self.model.eval()
        preds = [self.model(b.q[i:i + chunk], b.qd[i:i + chunk], b.qdd[i:i + chunk])
                 for i in range(0, len(b.q), chunk)]
        err = (torch.cat(preds) - b.tau).double()
        mse = (err * err).mean(0).cpu().numpy()
        var = b.tau.double().var(0, unbiased=False).cpu().numpy()
        loss = float(np.mean(mse / self.normalizer.std ** 2))
        return {'loss': loss, 'mse': mse.tolist(),
                'nmse': (mse / np.maximum(var, 1e-12)).tolist()}

    # -- offline --------------------------------------------------------------------------------
    def _lr_at(self, progress: float) -> float:
        cfg = self.config
        if cfg.lr_schedule == 'constant':
            return cfg.lr
        lo = cfg.lr * cfg.final_lr_fraction
        return lo + 0.5 * (cfg.lr - lo) * (1.0 + math.cos(math.pi * min(progress, 1.0)))

    def fit(self, train: ArrayData, val: Optional[ArrayData] = None,
            epochs: Optional[int] = None,
            callback: Optional[Callable[[Dict[str, Any]], Optional[bool]]] = None
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
        full = self.to_batch(train)
        self._ensure_initialised(full)
        vb = self.to_batch(val) if val is not None else None
        if vb is not None and len(vb.q) == 0:
            vb = None
        N, n = full.q.shape
        bs = min(cfg.batch_size, N)
        packed = torch.cat(tuple(full), dim=1)
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
                    losses.append(self.step(Batch(*packed[idx].split(n, dim=1)), lr=lr))
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
            metrics: Dict[str, Any] = {'round': len(history) + 1, 'epoch': epoch,
                                       'steps': self.steps, 'train_loss': train_loss,
                                       'val_loss': None, 'val_nmse': None, 'lr': lr,
                                       'samples_per_s': seen / max(time.perf_counter() - t_round,
                                                                   1e-9)}
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
                self.stop_reason = 'epochs' if epochs is not None and \
                    max_steps == epochs * steps_per_epoch else 'max_steps'
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


def _progress(m: Dict[str, Any], max_steps: int) -> None:
    width = 24
    done = int(width * m['steps'] / max(max_steps, 1))
    val = '' if m['val_loss'] is None else f' val {m["val_loss"]:.3e}'
    line = (f'\r[{"#" * done}{"." * (width - done)}] step {m["steps"]} epoch {m["epoch"]} '
            f'loss {m["train_loss"]:.3e}{val} lr {m["lr"]:.1e} '
            f'{m["samples_per_s"]:.0f} samples/s {m["elapsed_s"]:.0f}s')
    end = '' if sys.stderr.isatty() else '\n'
    sys.stderr.write(line + end)
    sys.stderr.flush()


class TrainResult(NamedTuple):
    model: DynamicsModule
    history: List[Dict[str, Any]]
    normalizer: TorqueNormalizer
    metadata: Dict[str, Any]


def train_model(data: Dataset, kind: str = 'delan', config: Optional[TrainConfig] = None,
                model_config: Optional[Dict[str, Any]] = None,
                callback: Optional[Callable[[Dict[str, Any]], Optional[bool]]] = None,
                device: Union[str, torch.device] = 'cpu') -> TrainResult:
    """Seed, split by trajectory, build, fit; the model comes back in float64 eval mode.

    ``metadata`` is ready for :func:`delan_learning.checkpoint.save_model` (joint names/types,
    hyperparameters, torque normalisation, final validation metrics).
    """
    config = config or TrainConfig()
    torch.manual_seed(config.seed)
    train, val = split_by_trajectory(data, config.val_fraction, config.seed)
    model = build_model(kind, data.joint_types, **(model_config or {}))
    trainer = Trainer(model, config, TorqueNormalizer.from_torques(train.tau), device=device)
    history = trainer.fit(train, val, callback=callback)
    model = trainer.model.double().eval()
    model.joint_names = list(data.joint_names)
    final = Trainer(model, config, trainer.normalizer, dtype=torch.float64).evaluate(
        val if val is not None else train)
    metadata = {'joint_names': list(data.joint_names), 'joint_types': list(data.joint_types),
                'torque_normalisation': trainer.normalizer.to_dict(),
                'training': {'config': asdict(config),
                             'epochs_run': history[-1]['epoch'] if history else 0,
                             'rounds': len(history), 'stop_reason': trainer.stop_reason,
                             'steps': trainer.steps, 'n_train': len(train),
                             'n_val': 0 if val is None else len(val),
                             'val_trajectories': [] if val is None else
                             [int(i) for i in val.trajectory_ids],
                             'final_metrics': final, 'data': data.source}}
    return TrainResult(model, history, trainer.normalizer, metadata)
