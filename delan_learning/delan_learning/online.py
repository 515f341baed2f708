"""Streaming pieces of the online learner, free of ROS: a delayed Savitzky-Golay differentiator,
a fixed-size replay buffer and the split of the stream into training and validation data
(:class:`SplitBuffers`).

Accelerations are never measured on a real arm. The differentiator fits a low-order polynomial
to the last ``window`` samples (by their real timestamps, so jitter is handled) and reports q,
qd, qdd of the
*centre* sample: it is causal (uses only the past) with a delay of ``window // 2`` samples, and,
unlike a one-sided derivative, has no lag error. That delay is harmless for learning.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional, Protocol, Tuple

import numpy as np

from delan_learning.data import constant_torque
from delan_learning.torque_kernel import interval_weights


class Log(Protocol):
    """Where the learner's pieces report (an rclpy logger, a ``logging.Logger``)."""

    def info(self, message: str) -> Any:
        """Report an informational message."""

    def warning(self, message: str) -> Any:
        """Report a warning."""

    def error(self, message: str) -> Any:
        """Report an error."""


def held_out(t: float, every: int) -> bool:
    """Whether the one-second chunk of stamp ``t`` [s] is validation data: a fixed 1 in ``every``
    of the chunks, spread by a multiplicative (golden-ratio) hash of the chunk number.

    Not ``int(t) % every``: a repeated motion (a cyclic task, a periodic excitation) whose period
    is a multiple of ``every`` seconds would then hold out the same phases of the motion forever,
    never trained on; the validation error measured extrapolation to them, varied from run to
    run with the phase, and could keep the publishing gate shut for good."""
    chunk = math.floor(t)
    return ((chunk * 2654435761) & 0xFFFFFFFF) < (1 << 32) // every


def diverged(loss: float, reference: float, factor: float, floor: float) -> bool:
    """Whether a validation ``loss`` counts as divergence against ``reference`` (a better
    model's loss on the same data): ``factor`` times worse *and* above ``floor``. Below the
    floor the model explains the torque to within ``sqrt(floor)`` of its spread, and ratios of
    such losses are noise: an arm at rest, whose torques hardly vary, gives losses of 1e-8 to
    1e-5 that jump by 50x from one round to the next without anything going wrong."""
    return loss > factor * reference and loss > floor


@dataclass(frozen=True)
class Sample:
    """One joint state taken for learning: time, positions, velocities, the estimated
    acceleration and the effort."""

    t: float
    q: np.ndarray
    qd: np.ndarray
    qdd: np.ndarray
    tau: np.ndarray
    #: the nominal model's torque for this motion (residual learning), else None
    tau_prior: Optional[np.ndarray] = None
    #: ``W = H_nominal^-1 (n, n)`` (``RobotModel.acceleration_metric``): the loss weighs
    #: torque errors by the acceleration they cause; None = per-joint torque spread
    metric: Optional[np.ndarray] = None
    #: the measured effort of this joint state as it came (``tau`` may be averaged with the
    #: acceleration estimate's kernel: right for the inverse loss, not for a rollout); None =
    #: ``tau`` is the measured effort
    effort: Optional[np.ndarray] = None
    #: position of the joint state in the stream (:class:`DelayedDifferentiator`): consecutive
    #: numbers are consecutive joint states, with no gap, restart or rejected message between
    #: them; -1 = unknown (the sample follows the one added before it)
    seq: int = -1


def fit_targets(data: Mapping[str, np.ndarray]) -> Mapping[str, np.ndarray]:
    """The torques a model is fitted to: the measured ones, less the nominal model's where the
    data hold them (``tau_prior``: a residual model learns what the nominal one misses)."""
    if 'tau_prior' not in data:
        return data
    out = dict(data)
    out['tau'] = np.asarray(data['tau']) - np.asarray(data['tau_prior'])
    return out


def evaluate_total(trainer: Any, data: Mapping[str, np.ndarray]) -> Dict[str, Any]:
    """``trainer.evaluate`` on :func:`fit_targets`, with the nMSE per joint relative to the
    spread of the *measured* torque either way, so a residual model and a whole one are judged
    (and gated) alike. The loss is already relative to the trainer's normaliser, which the
    learner takes from the measured torques. Torque metrics whatever the training loss: with
    the forward loss too, the loss is the inverse (torque) loss, and ``data`` need not be
    consecutive samples."""
    ev = trainer.evaluate(fit_targets(data), rollouts=False)
    if 'tau_prior' in data:
        var = np.var(np.asarray(data['tau'], dtype=np.float64), axis=0)
        var = np.where(constant_torque(np.sqrt(var)), var.max(initial=0.0), var)
        ev['nmse'] = (np.asarray(ev['mse']) / np.maximum(var, 1e-12)).tolist()
    return ev


#: what qdd is differentiated from: the measured velocities (once), or the positions (twice)
ACCELERATION_SOURCES = ('velocity', 'position')
#: stamps relative to a window's centre that differ by no more than this [s] from the last
#: window's get its filter again (float seconds of a wall-clock stamp resolve ~0.2 us)
STAMP_TOLERANCE_S = 1e-6


class DelayedDifferentiator:
    """Feeds (t, q, qd, tau); emits smoothed samples with estimated qdd, ``window // 2`` late.

    qdd is the derivative at the centre sample of a least-squares cubic (``order``) through the
    window: of the velocities (``source='velocity'``, default, as the offline path
    ``data.complete_derivatives`` does), or the second derivative of the positions
    (``'position'``, for drives whose velocity is worse than a difference of their encoder).
    Differentiated twice over a 60 ms window, 0.1 mrad of encoder noise is rad/s^2 of qdd noise,
    as much as the base joints of a 7-DoF arm are accelerated. A cubic keeps qdd unbiased when
    stamps jitter. With ``match_torque`` (default) the torque of the sample is
    the window's torques averaged with the kernel of that estimate
    (:mod:`delan_learning.torque_kernel`), not the centre sample's raw torque.

    qd is re-estimated from q as well when ``smooth_velocity`` (encoders' q is usually far cleaner
    than the drive's velocity). A time gap above ``max_gap`` or a non-increasing stamp restarts the
    window, so samples are never differentiated across a gap.

    Each sample carries the measured effort of its joint state (``Sample.effort``) and its
    position in the stream (``Sample.seq``): pushes are numbered in order, and a restart, a
    :meth:`reset` or a :meth:`skip` (the caller rejected a message) skips a number, so samples
    with consecutive numbers are consecutive states of the arm (what the forward loss's rollout
    windows need, :meth:`ReplayBuffer.windows`).
    """

    @staticmethod
    def samples_for(window_s: float, dt: float, order: int = 3) -> int:
        """Odd sample count covering ``window_s`` at sample period ``dt`` (at least order + 2)."""
        n = int(round(window_s / dt))
        n += 1 - n % 2
        smallest = order + 2 if (order + 2) % 2 else order + 3
        return max(n, smallest)

    def __init__(
        self,
        window: int = 11,
        max_gap: float = 0.1,
        smooth_velocity: bool = False,
        order: int = 3,
        match_torque: bool = True,
        source: str = 'velocity',
    ):
        if window < order + 1 or window % 2 == 0:
            raise ValueError(f'window must be odd and > order (got {window})')
        if source not in ACCELERATION_SOURCES:
            raise ValueError(f'source must be one of {ACCELERATION_SOURCES}, got {source!r}')
        self.source = source
        self.window = window
        self.order = order
        self.max_gap = max_gap
        self.smooth_velocity = smooth_velocity
        self.match_torque = match_torque
        # rings in arrival order, allocated at the first sample (its joint count); the fit does
        # not depend on row order, so nothing is shifted or stacked per sample (this runs at the
        # joint-state rate, 1 kHz on an arm)
        self._t = np.zeros(window)
        self._rows: Optional[np.ndarray] = None  # (window, 3, n): q, qd, tau
        self._next = 0
        self._count = 0
        self._last_t = -math.inf
        self._V = np.ones((window, order + 1))  # Vandermonde matrix, column 0 stays 1
        # ring indices oldest-first, for each position of the write index
        self._order = [(np.arange(window) + k) % window for k in range(window)]
        self.restarts = 0
        self._deriv = 1 if source == 'velocity' else 2
        # (stamps relative to the centre, P, qdd coefficients, torque weights or None without
        # match_torque) of the last fit
        self._filter: Optional[Tuple[np.ndarray, np.ndarray, np.ndarray, Optional[np.ndarray]]] = (
            None
        )
        self._seq = np.zeros(window, dtype=np.int64)  # stream position of each ring row
        self._pos = 0  # of the next push

    def reset(self) -> None:
        """Start the window afresh: the next push does not follow the last one (a skipped stream
        number)."""
        self._count = 0
        self._next = 0
        self._pos += 1

    def skip(self) -> None:
        """A message of the stream was rejected (not pushed): the next push does not follow
        the last one (the samples already in the window keep their numbers)."""
        self._pos += 1

    def push(self, t: float, q: np.ndarray, qd: np.ndarray, tau: np.ndarray) -> Optional[Sample]:
        """Add one joint state; the sample ``window // 2`` pushes old with its estimated ``qdd``,
        or None until the window is full (after the start, a gap or a reset)."""
        if self._count and not (0.0 < t - self._last_t <= self.max_gap):
            self.reset()
            self.restarts += 1
        if self._rows is None or self._rows.shape[2] != len(q):
            self._rows = np.zeros((self.window, 3, len(q)))
        i = self._next
        self._t[i] = t
        self._seq[i] = self._pos
        self._pos += 1
        row = self._rows[i]
        row[0], row[1], row[2] = q, qd, tau
        self._next = (i + 1) % self.window
        self._count = min(self._count + 1, self.window)
        self._last_t = t
        if self._count < self.window:
            return None
        # oldest first; the centre sample is window // 2 older than the newest
        order = self._order[self._next]
        ts = self._t[order]
        rows = self._rows[order]
        c = self.window // 2
        tc = ts[c]
        scale = max(ts[-1] - ts[0], 1e-12)
        # least-squares polynomial in scaled time, evaluated at the centre sample (x = 0):
        # normal equations (x in [-1/2, 1/2], order 3: well conditioned). The filter depends
        # only on the stamps relative to the centre: on evenly stamped states (a driver's or a
        # sim's fixed rate) it is the last window's, reused
        rel = ts - tc
        cached = self._filter
        if cached is not None and np.max(np.abs(rel - cached[0])) <= STAMP_TOLERANCE_S:
            P, coef, weights = cached[1:]
        else:
            V = self._V
            np.divide(rel, scale, out=V[:, 1])
            for k in range(2, self.order + 1):
                np.multiply(V[:, k - 1], V[:, 1], out=V[:, k])
            P = np.linalg.solve(V.T @ V, V.T)  # coefficients = P @ x
            if self._deriv == 1:
                coef = P[1] / scale  # qdd = coef @ qd
            else:
                coef = P[2] * (2.0 / scale**2)  # qdd = coef @ q
            weights = interval_weights(ts, coef, tc, self._deriv) if self.match_torque else None
            self._filter = (rel, P, coef, weights)
        deriv = self._deriv
        qdd = coef @ rows[:, 2 - deriv, :]
        effort = rows[c, 2].copy()
        tau_c = effort if weights is None else weights @ rows[:, 2, :]
        seq = int(self._seq[order[c]])
        if self.smooth_velocity:
            coef = P[:2] @ rows[:, 0, :]
            return Sample(tc, coef[0], coef[1] / scale, qdd, tau_c, effort=effort, seq=seq)
        return Sample(tc, rows[c, 0].copy(), rows[c, 1].copy(), qdd, tau_c, effort=effort, seq=seq)


class ReplayBuffer:
    """Fixed-capacity ring of (q, qd, qdd, tau) rows and their stamps, preallocated so memory is
    bounded by ``capacity * (4 * n + 1) * 8`` bytes whatever the stream rate; the oldest rows are
    overwritten. ``prior=True`` adds a ``tau_prior`` column (the nominal model's torque of each
    sample, for residual learning): ``(5 * n + 1) * 8`` bytes per row; ``metric=True`` each
    sample's ``W`` (``Sample.metric``, float32): ``4 * n * n`` bytes more; ``windows=True`` the
    measured effort and the stream position of each sample (``Sample.effort``, ``Sample.seq``)
    for :meth:`windows`: ``(n + 1) * 8`` bytes more."""

    FIELDS = ('q', 'qd', 'qdd', 'tau')

    def __init__(
        self,
        capacity: int,
        n_joints: int,
        prior: bool = False,
        metric: bool = False,
        windows: bool = False,
    ):
        if capacity < 1:
            raise ValueError('capacity must be positive')
        self.capacity = int(capacity)
        self.n = int(n_joints)
        fields = self.FIELDS + (('tau_prior',) if prior else ()) + (('effort',) if windows else ())
        self._data = {f: np.zeros((self.capacity, self.n)) for f in fields}
        if metric:
            self._data['metric'] = np.zeros((self.capacity, self.n, self.n), dtype=np.float32)
        self._t = np.zeros(self.capacity)
        self._seq: Optional[np.ndarray] = (
            np.zeros(self.capacity, dtype=np.int64) if windows else None
        )
        self._last_seq = -1
        self._next = 0
        self.size = 0
        self.total_added = 0

    @property
    def nbytes(self) -> int:
        """Bytes the preallocated arrays take (the bound on the buffer's memory)."""
        extra = 0 if self._seq is None else self._seq.nbytes
        return sum(a.nbytes for a in self._data.values()) + self._t.nbytes + extra

    def add(self, s: Sample) -> None:
        """Write a sample over the oldest row once full; ValueError when the buffer keeps a column
        (``tau_prior``, ``metric``) the sample lacks."""
        i = self._next
        self._data['q'][i] = s.q
        self._data['qd'][i] = s.qd
        self._data['qdd'][i] = s.qdd
        self._data['tau'][i] = s.tau
        if 'tau_prior' in self._data:
            if s.tau_prior is None:
                raise ValueError('this buffer holds residual data: the sample needs tau_prior')
            self._data['tau_prior'][i] = s.tau_prior
        if 'metric' in self._data:
            if s.metric is None:
                raise ValueError('this buffer weighs by acceleration: the sample needs metric')
            self._data['metric'][i] = s.metric
        if self._seq is not None:
            self._data['effort'][i] = s.tau if s.effort is None else s.effort
            self._last_seq = self._last_seq + 1 if s.seq < 0 else s.seq
            self._seq[i] = self._last_seq
        self._t[i] = s.t
        self._next = (i + 1) % self.capacity
        self.size = min(self.size + 1, self.capacity)
        self.total_added += 1

    @property
    def newest_t(self) -> float:
        """Stamp of the row added last (-inf when empty)."""
        return float(self._t[(self._next - 1) % self.capacity]) if self.size else -math.inf

    def clear(self) -> None:
        """Forget the rows (the arrays stay allocated; ``total_added`` keeps counting)."""
        self._next = 0
        self.size = 0

    def sample(self, batch: int, rng: np.random.Generator) -> Dict[str, np.ndarray]:
        """Rows drawn uniformly with replacement, ``batch`` of them (all ``size`` when ``batch`` <=
        0), as copies of every column."""
        idx = rng.integers(0, self.size, size=min(batch, self.size) if batch > 0 else self.size)
        return {f: a[idx].copy() for f, a in self._data.items()}

    def all(self) -> Dict[str, np.ndarray]:
        """Copies of every column of the rows held, in ring (not stream) order."""
        return {f: a[: self.size].copy() for f, a in self._data.items()}

    def since(self, t0: float, limit: int = 0) -> Dict[str, np.ndarray]:
        """Rows stamped after ``t0`` [s] (the newest ``limit`` of them when ``limit`` > 0)."""
        idx = np.flatnonzero(self._t[: self.size] > t0)
        if 0 < limit < len(idx):
            # ring order: rows at and after _next are older than those before it
            age = (idx - self._next) % self.capacity
            idx = idx[np.argsort(age)[-limit:]]
        return {f: a[idx].copy() for f, a in self._data.items()}

    def _stream_order(self) -> np.ndarray:
        """Row indices oldest first."""
        start = self._next if self.size == self.capacity else 0
        return (start + np.arange(self.size)) % self.capacity

    def windows(
        self,
        rng: np.random.Generator,
        limit: int = 0,
        min_run: int = 2,
        spans: int = 32,
    ) -> Dict[str, np.ndarray]:
        """Rows in stream order for the forward loss: every column, the stamps ``t`` and
        ``traj``, one id per run of consecutive samples (``Sample.seq``: no gap, estimator
        restart, rejected message, held-out chunk or ring wrap inside a run); runs of fewer than
        ``min_run`` rows (``horizon + 1``: no window fits) are left out.
        :func:`delan_learning.rollout.window_index` cuts the windows from ``t`` and ``traj``
        (and skips any step the stamps say is a gap).

        ``limit`` > 0 and more rows than that: ``spans`` stretches of ``limit / spans`` rows at
        random places, each a run of its own, so a round's windows come from all over the
        buffer (as :meth:`sample` draws its rows) without copying all of it."""
        if self._seq is None:
            raise ValueError('this buffer keeps no stream positions: make it with windows=True')
        order = self._stream_order()
        first = np.zeros(len(order), dtype=bool)  # rows that start a stretch
        if 0 < limit < len(order):
            span = max(int(min_run), -(-int(limit) // max(1, int(spans))))
            offset = int(rng.integers(0, span))
            slots = (len(order) - offset) // span
            if slots > 0:
                chosen = np.sort(rng.choice(slots, size=min(spans, slots), replace=False))
                rows = offset + span * chosen[:, None] + np.arange(span)
                order = order[rows.reshape(-1)]
                first = np.zeros(len(order), dtype=bool)
                first[::span] = True
        seq = self._seq[order]
        new_run = first
        new_run[1:] |= np.diff(seq) != 1
        if len(new_run):
            new_run[0] = True
        traj = np.cumsum(new_run) - 1
        keep = np.bincount(traj)[traj] >= min_run if len(traj) else np.zeros(0, dtype=bool)
        order, traj = order[keep], traj[keep]
        out = {f: a[order].copy() for f, a in self._data.items()}
        out['t'] = self._t[order].copy()
        out['traj'] = traj
        return out


#: validation samples a round is judged on (at most; a random subset of a larger buffer)
VALIDATION_SAMPLES = 20000


class SplitBuffers:
    """The learner's training and validation buffers, split by :func:`held_out` one-second
    chunks, under one lock: the intake thread adds, the training thread takes a round's data,
    the executor counts. Also the publication policy's ``DataWindow``.

    ``capacity`` rows of training data, ``capacity // validation_every`` (at least 100) of
    validation data; ``prior``, ``metric`` and ``windows`` as for :class:`ReplayBuffer` (the
    validation buffer keeps no stream positions: it is never cut into windows)."""

    def __init__(
        self,
        capacity: int,
        validation_every: int,
        n_joints: int,
        prior: bool = False,
        metric: bool = False,
        windows: bool = False,
    ):
        self.lock = threading.Lock()
        self.validation_every = validation_every
        self.train = ReplayBuffer(capacity, n_joints, prior=prior, metric=metric, windows=windows)
        self.val = ReplayBuffer(
            max(100, capacity // validation_every), n_joints, prior=prior, metric=metric
        )

    def add(self, sample: Sample) -> None:
        """Add a sample to the validation or the training buffer, by its :func:`held_out` chunk."""
        with self.lock:
            if held_out(sample.t, self.validation_every):
                self.val.add(sample)
            else:
                self.train.add(sample)

    def sizes(self) -> Tuple[int, int]:
        """(training, validation) rows held."""
        with self.lock:
            return self.train.size, self.val.size

    @property
    def size(self) -> int:
        """Rows held, training and validation together."""
        return sum(self.sizes())

    def clear(self) -> None:
        """Forget the rows of both buffers."""
        with self.lock:
            self.train.clear()
            self.val.clear()

    def training_data(
        self, rng: np.random.Generator, n: int, min_run: int = 0
    ) -> Dict[str, np.ndarray]:
        """``n`` random training rows; with ``min_run`` > 0 (a forward loss) stretches of
        consecutive rows instead, about ``n`` in all, in runs of at least ``min_run``
        (:meth:`ReplayBuffer.windows`)."""
        with self.lock:
            return self._training_data(rng, n, min_run)

    def _training_data(
        self, rng: np.random.Generator, n: int, min_run: int
    ) -> Dict[str, np.ndarray]:
        if min_run > 0:
            return self.train.windows(rng, limit=n, min_run=min_run)
        return self.train.sample(n, rng)

    def round_data(
        self, rng: np.random.Generator, n: int, min_run: int = 0
    ) -> Tuple[Dict[str, np.ndarray], Dict[str, np.ndarray]]:
        """A round's (training, validation) data, taken together: :meth:`training_data`, and
        the validation rows (a random :data:`VALIDATION_SAMPLES` of more)."""
        with self.lock:
            data = self._training_data(rng, n, min_run)
            val = (
                self.val.all()
                if self.val.size <= VALIDATION_SAMPLES
                else self.val.sample(VALIDATION_SAMPLES, rng)
            )
        return data, val

    def newest_t(self) -> float:
        """Stamp of the newest row in either buffer (-inf when empty)."""
        with self.lock:
            return max(self.train.newest_t, self.val.newest_t)

    def validation_since(self, t: float) -> Dict[str, np.ndarray]:
        """Validation rows stamped after ``t`` [s], the newest :data:`VALIDATION_SAMPLES` at most
        (the publication policy judges a version on them)."""
        with self.lock:
            return self.val.since(t, limit=VALIDATION_SAMPLES)
