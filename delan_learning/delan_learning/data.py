"""Training data: ``.npz`` files, validation, velocity/acceleration estimation, splits.

The common currency is a dict of numpy arrays, as stored in an ``.npz`` file or produced by a
rosbag reader:

========== ========== ================================================================
key        shape      meaning
========== ========== ================================================================
q          (N, n)     joint positions [rad | m]                          (required)
qd         (N, n)     joint velocities; estimated from q and t if missing
qdd        (N, n)     joint accelerations; estimated from qd (or q) and t if missing
tau        (N, n)     joint torques / forces [N m | N]       (required for training)
traj       (N,)       int trajectory id per sample; samples of one id are in time order
t          (N,)       time [s]; needed only to estimate qd / qdd
joint_names (n,)      str; default ``joint0 ... joint{n-1}``
joint_types (n,)      str ``revolute | continuous | prismatic``; default all revolute
========== ========== ================================================================

Derivative estimation (:func:`complete_derivatives`) is a Savitzky-Golay differentiator
(least-squares local polynomial, ``scipy.signal.savgol_filter``) run separately on each
trajectory, so nothing is smoothed across a trajectory boundary. Its window spans
``window_s`` seconds (default 0.05 s: 5 samples at 100 Hz, 51 at 1 kHz), rounded to an odd
number of samples and at least ``polyorder + 2``; the polynomial is cubic. A cubic over 50 ms
follows motion up to a few Hz with negligible lag while averaging sample noise; at the window's
ends the polynomial fit of the edge window is differentiated (``mode='interp'``), so edges are
unbiased but noisier. Time stamps need not be exactly uniform: each trajectory is resampled
linearly onto a uniform grid at its median rate, differentiated there and interpolated back
(for uniform stamps this is the identity). ``qd`` is differentiated from ``q``; ``qdd`` from the
given ``qd`` when there is one (one derivative instead of two), otherwise from ``q``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from delan_learning.torque_kernel import matched_torque_uniform

#: a joint whose torque spread is at most this fraction of the largest has a constant torque
CONSTANT_TORQUE_RTOL = 1e-6


def constant_torque(spread: np.ndarray) -> np.ndarray:
    """``(n,)`` bool: the joints whose torque spread (std, ``(n,)``) is ~0 next to the others'.

    A passive joint (a Furuta pendulum's, a cart-pole's pole) records 0 throughout: dividing
    its errors by its own (floored) spread would weigh its equation ~1000x over the others', and
    its nMSE would be an error over nothing. Such joints are scaled by the largest spread
    instead (:meth:`~delan_learning.training.TorqueNormalizer.from_torques`,
    :meth:`~delan_learning.training.Trainer.evaluate`), so every joint's equation counts
    alike. All False when no joint's torque varies."""
    spread = np.asarray(spread, dtype=np.float64)
    top = float(spread.max()) if spread.size else 0.0
    return (spread <= CONSTANT_TORQUE_RTOL * top) & (top > 0)


#: Joint types accepted in data; the same as ``features.JOINT_TYPES``, repeated here so that
#: loading and checking data never imports torch (fast CLI errors, light bag tools).
JOINT_TYPES = ('revolute', 'continuous', 'prismatic')
MOTION_KEYS = ('q', 'qd', 'qdd', 'tau')


class DataError(ValueError):
    """Input data that cannot be used; the message says which array and why."""


# -- validation -----------------------------------------------------------------------------------
def _as_matrix(name: str, x, n_rows: Optional[int] = None) -> np.ndarray:
    try:
        a = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise DataError(f'{name} is not numeric: {err}') from None
    if a.ndim == 1:
        a = a[:, None]
    if a.ndim != 2:
        raise DataError(f'{name} must be (N, n), got shape {a.shape}')
    if n_rows is not None and a.shape[0] != n_rows:
        raise DataError(f'{name} has {a.shape[0]} rows but q has {n_rows}')
    bad = ~np.isfinite(a)
    if bad.any():
        r, c = np.argwhere(bad)[0]
        raise DataError(
            f'{name} has {int(bad.sum())} non-finite value(s) (NaN/inf), first at '
            f'sample {int(r)}, joint {int(c)}'
        )
    return a


def validate_arrays(
    arrays: Mapping[str, Any], required: Sequence[str] = ('q',)
) -> Dict[str, np.ndarray]:
    """Checked copies of the known keys (float64 motion arrays, int64 ``traj``, str names/types).

    Raises :class:`DataError` for a missing required key, inconsistent shapes, non-finite values,
    unknown joint types, or a ``t`` that does not increase within a trajectory.
    """
    for key in required:
        if key not in arrays or arrays[key] is None:
            raise DataError(f'missing array {key!r} (have: {sorted(k for k in arrays)})')
    if 'q' not in arrays:
        raise DataError("missing array 'q'")
    out: Dict[str, np.ndarray] = {}
    q = _as_matrix('q', arrays['q'])
    N, n = q.shape
    if N == 0:
        raise DataError('q has no samples')
    out['q'] = q
    for key in ('qd', 'qdd', 'tau'):
        if arrays.get(key) is not None:
            a = _as_matrix(key, arrays[key], N)
            if a.shape[1] != n:
                raise DataError(f'{key} has {a.shape[1]} joints but q has {n}')
            out[key] = a
    if arrays.get('traj') is not None:
        traj = np.asarray(arrays['traj'])
        if traj.shape != (N,):
            raise DataError(f'traj must have shape ({N},), got {traj.shape}')
        if not np.issubdtype(traj.dtype, np.integer):
            if not (
                np.issubdtype(traj.dtype, np.floating)
                and np.all(np.isfinite(traj))
                and np.all(traj == np.round(traj))
            ):
                raise DataError('traj must hold integer trajectory ids')
        out['traj'] = traj.astype(np.int64)
    if arrays.get('t') is not None:
        t = np.asarray(arrays['t'], dtype=np.float64).reshape(-1)
        if t.shape != (N,):
            raise DataError(f't must have shape ({N},), got {np.shape(arrays["t"])}')
        if not np.all(np.isfinite(t)):
            raise DataError('t has non-finite values')
        out['t'] = t
    names = arrays.get('joint_names')
    names = (
        [f'joint{i}' for i in range(n)]
        if names is None
        else [str(s) for s in np.asarray(names).ravel()]
    )
    if len(names) != n:
        raise DataError(f'joint_names has {len(names)} names but the arrays have {n} joints')
    if len(set(names)) != n:
        raise DataError(f'duplicated joint names: {names}')
    out['joint_names'] = np.asarray(names)
    types = arrays.get('joint_types')
    types = ['revolute'] * n if types is None else [str(s) for s in np.asarray(types).ravel()]
    if len(types) != n:
        raise DataError(f'joint_types has {len(types)} entries but the arrays have {n} joints')
    for name, typ in zip(names, types):
        if typ not in JOINT_TYPES:
            raise DataError(f'joint {name!r} has type {typ!r}; expected one of {JOINT_TYPES}')
    out['joint_types'] = np.asarray(types)
    return out


def trajectory_ids(arrays: Mapping[str, np.ndarray]) -> np.ndarray:
    """``(N,)`` int ids: ``traj`` when given, else a new id wherever ``t`` steps backwards."""
    N = len(arrays['q'])
    if arrays.get('traj') is not None:
        return np.asarray(arrays['traj'], dtype=np.int64)
    if arrays.get('t') is not None:
        t = np.asarray(arrays['t'], dtype=np.float64)
        return np.concatenate([[0], np.cumsum(np.diff(t) <= 0)]).astype(np.int64)
    return np.zeros(N, dtype=np.int64)


def split_at_gaps(
    t: np.ndarray, traj: Optional[np.ndarray] = None, gap_factor: float = 5.0
) -> np.ndarray:
    """``(N,)`` trajectory ids, consecutive from 0: a new one wherever ``t`` steps back or jumps
    by more than ``gap_factor`` x the median step, or ``traj`` (when given) changes. Messages
    lost in transport leave such gaps; differentiated across one, the velocities give an
    acceleration that never happened."""
    t = np.asarray(t, dtype=np.float64).reshape(-1)
    if t.size < 2:
        return np.zeros(t.size, dtype=np.int64)
    dt = np.diff(t)
    forward = dt[dt > 0]
    limit = gap_factor * float(np.median(forward)) if forward.size else np.inf
    new = (dt <= 0) | (dt > limit)
    if traj is not None:
        new |= np.diff(np.asarray(traj).reshape(-1)) != 0
    return np.concatenate([[0], np.cumsum(new)]).astype(np.int64)


def trajectory_slices(traj: np.ndarray) -> List[np.ndarray]:
    """Sample indices of each trajectory id (in first-appearance order, each in data order)."""
    _, first = np.unique(traj, return_index=True)
    return [np.flatnonzero(traj == traj[i]) for i in np.sort(first)]


# -- differentiation ------------------------------------------------------------------------------
def savgol_window(dt: float, window_s: float = 0.05, polyorder: int = 3) -> int:
    """Odd window length [samples] spanning about ``window_s`` at sample period ``dt``."""
    w = int(round(window_s / dt))
    w = max(w, polyorder + 2)
    return w + 1 if w % 2 == 0 else w


def _uniform(x: np.ndarray, t: np.ndarray):
    """``(grid, x on the grid, dt, uniform)``: ``x`` resampled to the median step if jittered."""
    dts = np.diff(t)
    if np.any(dts <= 0):
        raise DataError('t must increase strictly within each trajectory')
    dt = float(np.median(dts))
    uniform = np.allclose(dts, dt, rtol=1e-6, atol=0.0)
    grid = t if uniform else t[0] + dt * np.arange(int(np.floor((t[-1] - t[0]) / dt)) + 1)
    xg = x if uniform else np.stack([np.interp(grid, t, x[:, j]) for j in range(x.shape[1])], 1)
    return grid, xg, dt, uniform


def _savgol_size(M: int, dt: float, window_s: float, polyorder: int, deriv: int, T: int) -> tuple:
    window = savgol_window(dt, window_s, polyorder)
    order = polyorder
    if window > M:  # short trajectory: shrink the window, then the order
        window = M if M % 2 else M - 1
        order = min(polyorder, window - 1)
    if window < deriv + 1 or window < 2:
        raise DataError(f'a trajectory of {T} samples is too short for derivative {deriv}')
    return window, order


def savgol_derivative(
    x: np.ndarray, t: np.ndarray, deriv: int, window_s: float = 0.05, polyorder: int = 3
) -> np.ndarray:
    """``d^deriv x / dt^deriv`` of ONE trajectory ``x (T, n)`` at times ``t (T,)``."""
    from scipy.signal import savgol_filter

    T = len(t)
    if T < 2:
        raise DataError('a trajectory needs at least 2 samples to estimate derivatives')
    grid, xg, dt, uniform = _uniform(x, t)
    window, order = _savgol_size(len(grid), dt, window_s, polyorder, deriv, T)
    d = savgol_filter(xg, window, order, deriv=deriv, delta=dt, axis=0, mode='interp')
    if uniform:
        return d
    return np.stack([np.interp(t, grid, d[:, j]) for j in range(x.shape[1])], 1)


def savgol_matched_torque(
    tau: np.ndarray, t: np.ndarray, deriv: int, window_s: float = 0.05, polyorder: int = 3
) -> np.ndarray:
    """The torque of ONE trajectory that matches ``savgol_derivative(x, t, deriv, ...)`` used
    as the acceleration (``deriv`` 2 from positions, 1 from velocities): ``tau`` averaged with
    that filter's kernel (:mod:`delan_learning.torque_kernel`)."""
    from scipy.signal import savgol_coeffs

    T = len(t)
    if T < 2:
        return np.asarray(tau, dtype=np.float64).copy()
    grid, taug, dt, uniform = _uniform(np.asarray(tau, dtype=np.float64), t)
    window, order = _savgol_size(len(grid), dt, window_s, polyorder, deriv, T)
    if order < deriv:
        return np.asarray(tau, dtype=np.float64).copy()
    coef = savgol_coeffs(window, order, deriv=deriv, delta=dt, use='dot')
    m = matched_torque_uniform(taug, dt, coef, deriv)
    if uniform:
        return m
    return np.stack([np.interp(t, grid, m[:, j]) for j in range(m.shape[1])], 1)


def complete_derivatives(
    arrays: Mapping[str, Any],
    window_s: float = 0.05,
    polyorder: int = 3,
    match_torque: bool = True,
) -> Dict[str, np.ndarray]:
    """A copy of ``arrays`` with ``qd`` and ``qdd`` filled in where missing.

    When ``qdd`` is estimated and ``match_torque``, ``tau`` comes back averaged with the kernel
    of that estimate (:func:`savgol_matched_torque`), so that the pair is what the dynamics
    relate; given ``qdd`` leaves ``tau`` as it is.

    Estimation is per trajectory (``traj``, else a new trajectory wherever ``t`` steps back) with
    the Savitzky-Golay differentiator of the module docstring; ``t`` is required then. Given
    ``qd``/``qdd`` are kept. The known keys come back validated (motion arrays float64 ``(N, n)``,
    ``traj`` int64), other keys unchanged but ``tau`` (see below); no key is added but
    ``qd``/``qdd``. Raises
    :class:`DataError` on bad input.
    """
    checked = validate_arrays(arrays)
    out: Dict[str, np.ndarray] = dict(arrays)
    out.update({k: v for k, v in checked.items() if k in arrays and arrays[k] is not None})
    missing = [k for k in ('qd', 'qdd') if k not in checked]
    if not missing:
        return out
    if 't' not in checked:
        raise DataError(
            f'{" and ".join(missing)} missing and no time stamps t to estimate '
            f'{"them" if len(missing) > 1 else "it"} from q'
        )
    traj = trajectory_ids(checked)
    q, t = checked['q'], checked['t']
    qd = checked.get('qd')
    new = {k: np.empty_like(q) for k in missing}
    tau = checked.get('tau')
    if 'qdd' in new and match_torque and tau is not None:
        new['tau'] = tau.copy()
    for idx in trajectory_slices(traj):
        tt = t[idx]
        if 'qd' in new:
            new['qd'][idx] = savgol_derivative(q[idx], tt, 1, window_s, polyorder)
        if 'qdd' in new:
            src, deriv = (qd, 1) if qd is not None else (q, 2)
            new['qdd'][idx] = savgol_derivative(src[idx], tt, deriv, window_s, polyorder)
            if 'tau' in new:
                assert tau is not None  # 'tau' is in new only when given
                new['tau'][idx] = savgol_matched_torque(tau[idx], tt, deriv, window_s, polyorder)
    out.update(new)
    return out


# -- data set -------------------------------------------------------------------------------------
@dataclass
class Dataset:
    """Validated motion data; all arrays share the sample axis ``N``; joints ``n``."""

    q: np.ndarray  # (N, n)
    qd: np.ndarray  # (N, n)
    qdd: np.ndarray  # (N, n)
    tau: np.ndarray  # (N, n)
    traj: np.ndarray  # (N,) int64
    joint_names: List[str]
    joint_types: List[str]
    t: Optional[np.ndarray] = None  # (N,)
    source: str = field(default='', compare=False)
    #: per-sample ``W = H^-1`` of a nominal model ``(N, n, n)``, for an acceleration-weighted
    #: loss (``TrainConfig.loss_metric``); None: not computed
    metric: Optional[np.ndarray] = field(default=None, compare=False)

    @classmethod
    def from_arrays(
        cls,
        arrays: Mapping[str, object],
        require_tau: bool = True,
        source: str = '',
        **derivative_options,
    ) -> 'Dataset':
        """From the dict described in the module docstring; estimates missing qd/qdd."""
        required = ('q', 'tau') if require_tau else ('q',)
        validate_arrays(arrays, required)
        a = validate_arrays(complete_derivatives(arrays, **derivative_options))
        tau = a.get('tau')
        if tau is None:
            tau = np.full_like(a['q'], np.nan)
        return cls(
            q=a['q'],
            qd=a['qd'],
            qdd=a['qdd'],
            tau=tau,
            traj=trajectory_ids(a),
            joint_names=[str(s) for s in a['joint_names']],
            joint_types=[str(s) for s in a['joint_types']],
            t=a.get('t'),
            source=source,
        )

    def __len__(self) -> int:
        return len(self.q)

    @property
    def n_dof(self) -> int:
        """Number of joints."""
        return self.q.shape[1]

    @property
    def trajectory_ids(self) -> np.ndarray:
        """Distinct ids in first-appearance order."""
        _, first = np.unique(self.traj, return_index=True)
        return self.traj[np.sort(first)]

    def subset(self, index: np.ndarray) -> 'Dataset':
        """The samples at ``index`` (int indices or bool mask), in that order."""
        return Dataset(
            self.q[index],
            self.qd[index],
            self.qdd[index],
            self.tau[index],
            self.traj[index],
            list(self.joint_names),
            list(self.joint_types),
            None if self.t is None else self.t[index],
            self.source,
            None if self.metric is None else self.metric[index],
        )

    def arrays(self) -> Dict[str, np.ndarray]:
        """Back to the dict form (what :func:`save_npz` writes)."""
        out = {
            'q': self.q,
            'qd': self.qd,
            'qdd': self.qdd,
            'tau': self.tau,
            'traj': self.traj,
            'joint_names': np.asarray(self.joint_names),
            'joint_types': np.asarray(self.joint_types),
        }
        if self.t is not None:
            out['t'] = self.t
        return out


def load_npz(path: str, require_tau: bool = True, **derivative_options) -> Dataset:
    """A :class:`Dataset` from an ``.npz`` file; :class:`DataError` if unreadable or invalid."""
    if not os.path.isfile(path):
        raise DataError(f'no such data file: {path}')
    try:
        with np.load(path, allow_pickle=False) as f:
            arrays = {k: f[k] for k in f.files}
    except Exception as err:  # zipfile.BadZipFile, ValueError (pickled object arrays), OSError
        raise DataError(f'cannot read {path} as .npz: {err}') from None
    return Dataset.from_arrays(
        arrays, require_tau=require_tau, source=str(path), **derivative_options
    )


def save_npz(path: str, data) -> None:
    """Write a :class:`Dataset` or array dict as ``.npz`` (names/types as unicode arrays)."""
    arrays = data.arrays() if isinstance(data, Dataset) else dict(data)
    # Any: numpy's stub would let a ``**`` key fill its ``allow_pickle: bool``; these are arrays
    kept: Dict[str, Any] = {k: np.asarray(v) for k, v in arrays.items() if v is not None}
    np.savez(path, **kept)


def split_by_trajectory(
    data: Dataset, val_fraction: float = 0.2, seed: int = 0
) -> Tuple[Dataset, Optional[Dataset]]:
    """``(train, val)`` with whole trajectories held out, chosen at random by ``seed``.

    At least one trajectory is held out when ``val_fraction > 0`` (and at least one kept). With
    a single trajectory the last ``val_fraction`` of it (in time) is held out instead, so the
    validation samples still do not interleave with training ones. ``val_fraction == 0`` gives
    ``(data, None)``.
    """
    if not 0.0 <= val_fraction < 1.0:
        raise ValueError(f'val_fraction must be in [0, 1), got {val_fraction}')
    if val_fraction == 0.0:
        return data, None
    ids = data.trajectory_ids
    if len(ids) == 1:
        cut = int(round(len(data) * (1.0 - val_fraction)))
        cut = min(max(cut, 1), len(data) - 1)
        return data.subset(np.arange(cut)), data.subset(np.arange(cut, len(data)))
    rng = np.random.default_rng(seed)
    n_val = min(max(int(round(val_fraction * len(ids))), 1), len(ids) - 1)
    val_ids = rng.permutation(ids)[:n_val]
    mask = np.isin(data.traj, val_ids)
    return data.subset(np.flatnonzero(~mask)), data.subset(np.flatnonzero(mask))
