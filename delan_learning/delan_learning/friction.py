"""The learnable joint friction of DeLaN and its variants: the laws, their parameterisation and
the one Python formula that torch (training) and numpy (the fast path) both evaluate.

Per joint, with ``t = tanh(qd / eps)`` (``eps = COULOMB_SMOOTHING``)::

    'coulomb_viscous' (default):  tau_f = b qd + fc t
    'stribeck':                   tau_f = b qd + fc(t) (1 + s exp(-(qd / vs)^2)) t
                                  fc(t) = ((fc+ + fc-) + (fc+ - fc-) t) / 2

``fc(t)`` blends the Coulomb level moving in the positive direction, ``fc+``, and in the
negative one, ``fc-`` (asymmetric Coulomb friction), by the same tanh; ``s`` is the break-away
excess as a share of that level (the static friction is ``fs = (1 + s) fc``, so the Stribeck
bump is ``(fs - fc) exp(-(qd / vs)^2)``), decaying over the Stribeck velocity ``vs``. It is the
law of the simulated plant's :mod:`delan_common.joint_effects` (``fc+- = fc (1 +- a)``,
``s = r - 1``), so that plant is representable, and smooth everywhere, so gradients and the
forward model stay well-behaved. Every coefficient is non-negative and ``|fc(t)|`` lies between
``fc-`` and ``fc+`` for ``|t| <= 1``, so ``qd tau_f >= 0`` (dissipative) for every weight.

Parameterisation: one raw tensor ``(F, n)`` per model, ``F`` rows by law (:data:`COEFFICIENTS`),
each row through a softplus (positive by construction) times a unit: ``tau_scale`` (each joint's
torque spread) for the torque levels ``b, fc, fc+, fc-``, 1 for the ratio ``s``, ``eps`` for
``vs`` (plus a floor far below ``eps``, where the tanh ramp hides the bump anyway, so
``qd / vs`` is always finite). The law is known from ``F``, so any model holding such a raw
tensor evaluates with these functions.
"""

from __future__ import annotations

import math
from typing import Dict, Tuple, TypeVar

import numpy as np
import torch
import torch.nn.functional as F

from delan_common.dynamics import COULOMB_SMOOTHING
from delan_learning.train_config import DEFAULT_FRICTION_MODEL, FRICTION_MODELS

__all__ = [
    'COEFFICIENTS',
    'DEFAULT_FRICTION_MODEL',
    'FRICTION_IDS',
    'FRICTION_MODELS',
    'START',
    'START_VELOCITIES',
    'STRIBECK_VELOCITY_FLOOR',
    'check_friction_model',
    'coefficients',
    'fit_stribeck',
    'friction_model_of',
    'friction_torque',
    'initial_raw',
    'raw_of',
    'softplus_inverse',
]
#: each law's coefficient rows, in order
COEFFICIENTS: Dict[str, Tuple[str, ...]] = {
    'coulomb_viscous': ('viscous', 'coulomb'),
    'stribeck': ('viscous', 'coulomb_pos', 'coulomb_neg', 'stribeck_ratio', 'stribeck_velocity'),
}
#: the law's number in the exported weights file and the C kernel (0: no friction)
FRICTION_IDS = {'coulomb_viscous': 1, 'stribeck': 2}
#: the law of each row count
_BY_ROWS = {len(rows): name for name, rows in COEFFICIENTS.items()}
#: start of the coefficients before any data: torque levels at 2 % of the joint's torque
#: spread, a break-away a quarter above the Coulomb level, a Stribeck velocity of three tanh
#: ramps; the data's first use (``init_scales``) restarts the Stribeck law at :func:`fit_stribeck`
START = {'level': 0.02, 'stribeck_ratio': 0.25, 'stribeck_velocity': 3.0 * COULOMB_SMOOTHING}
#: the smallest Stribeck velocity [rad/s or m/s]
STRIBECK_VELOCITY_FLOOR = 1e-3 * COULOMB_SMOOTHING
#: the Stribeck velocities the least-squares start (:func:`fit_stribeck`) tries
START_VELOCITIES = COULOMB_SMOOTHING * np.array([0.5, 1.0, 2.0, 4.0, 8.0])

Array = TypeVar('Array', np.ndarray, torch.Tensor)


def check_friction_model(name: str) -> str:
    """``name`` if it is a law of :data:`FRICTION_MODELS`, else ValueError."""
    if name not in FRICTION_MODELS:
        raise ValueError(f'friction_model {name!r} not in {FRICTION_MODELS}')
    return name


def friction_model_of(rows: int) -> str:
    """The law whose coefficients have ``rows`` rows."""
    try:
        return _BY_ROWS[rows]
    except KeyError:
        raise ValueError(f'no friction law has {rows} coefficient rows') from None


def softplus_inverse(y: float) -> float:
    """``x`` with ``softplus(x) = y > 0``."""
    return y + math.log(-math.expm1(-y))


def initial_raw(friction_model: str, n: int) -> torch.Tensor:
    """Raw parameters ``(F, n)`` of the start values :data:`START`."""
    level = softplus_inverse(START['level'])
    if check_friction_model(friction_model) == 'coulomb_viscous':
        return torch.full((2, n), level)
    ratio = softplus_inverse(START['stribeck_ratio'])
    vs = softplus_inverse(
        (START['stribeck_velocity'] - STRIBECK_VELOCITY_FLOOR) / COULOMB_SMOOTHING
    )
    return torch.tensor([[level] * n] * 3 + [[ratio] * n, [vs] * n])


def raw_of(coef: np.ndarray, tau_scale: np.ndarray) -> torch.Tensor:
    """Raw parameters ``(F, n)`` whose :func:`coefficients` are ``coef (F, n)`` (each kept a
    little above its floor, where the softplus has an inverse)."""
    coef, tau_scale = np.asarray(coef, dtype=np.float64), np.asarray(tau_scale, np.float64)
    units = np.ones_like(coef)
    units[:3] = tau_scale
    floor = np.zeros_like(coef)
    if friction_model_of(coef.shape[0]) == 'stribeck':
        units[3], units[4], floor[4] = 1.0, COULOMB_SMOOTHING, STRIBECK_VELOCITY_FLOOR
    value = np.maximum((coef - floor) / units, 1e-6)
    return torch.as_tensor(np.vectorize(softplus_inverse)(value))


def coefficients(raw: torch.Tensor, tau_scale: torch.Tensor) -> torch.Tensor:
    """Physical coefficients ``(F, n)`` (rows :data:`COEFFICIENTS`) of raw ``(F, n)`` and the
    joints' torque spreads ``tau_scale (n,)``."""
    positive = F.softplus(raw)
    if friction_model_of(raw.shape[0]) == 'coulomb_viscous':
        return positive * tau_scale
    return torch.cat(
        (
            positive[:3] * tau_scale,
            positive[3:4],
            positive[4:5] * COULOMB_SMOOTHING + STRIBECK_VELOCITY_FLOOR,
        )
    )


def fit_stribeck(
    q: np.ndarray, qd: np.ndarray, qdd: np.ndarray, tau: np.ndarray, tau_scale: np.ndarray
) -> np.ndarray:
    """Start of the Stribeck law's coefficients ``(5, n)`` from data ``(N, n)`` by least
    squares, joint by joint: ``tau_j`` on the rigid-body stand-ins of
    :func:`~delan_learning.models.joint_inertia_estimates` (every ``qdd``, ``sin q``, ``cos q``,
    a constant) and the law's terms, which are linear in ``b, fc+, fc-`` and the bump levels
    ``s fc+-`` once ``vs`` is fixed; the ``vs`` of :data:`START_VELOCITIES` that fits best wins.
    Levels are kept within ``[1e-3, 10]`` of the joint's ``tau_scale`` and ``s`` within
    ``[1e-3, 5]``.

    Why: from a small uniform start, the bump's ratio and width grow while the Coulomb levels
    are still far too low (Adam moves every raw parameter at about the same pace) and the
    training settles on a broad bump over a large viscous term, which fits the velocities seen
    but not twice as fast ones; from here it stays near the law of the data.
    """
    q, qd, qdd, tau = (np.asarray(x, dtype=np.float64) for x in (q, qd, qdd, tau))
    tau_scale = np.asarray(tau_scale, dtype=np.float64)
    shared = np.concatenate([qdd, np.sin(q), np.cos(q), np.ones((len(tau), 1))], axis=1)
    out = np.empty((5, tau.shape[1]))
    for j in range(tau.shape[1]):
        v = qd[:, j]
        t = np.tanh(v * (1.0 / COULOMB_SMOOTHING))
        levels = np.stack([v, t * (1.0 + t) / 2, t * (1.0 - t) / 2], axis=1)
        best = (np.inf, np.zeros(5), START_VELOCITIES[0])
        for vs in START_VELOCITIES:
            bump = levels[:, 1:] * np.exp(-((v / vs) ** 2))[:, None]
            A = np.concatenate([shared, levels, bump], axis=1)
            try:
                coef, *_ = np.linalg.lstsq(A, tau[:, j], rcond=None)
            except np.linalg.LinAlgError:
                continue
            residual = float(np.sum((A @ coef - tau[:, j]) ** 2))
            if np.isfinite(residual) and residual < best[0]:
                best = (residual, coef[-5:], vs)
        _, (b, pos, neg, bump_pos, bump_neg), vs = best
        lo, hi = 1e-3 * tau_scale[j], 10.0 * tau_scale[j]
        pos, neg = np.clip(pos, lo, hi), np.clip(neg, lo, hi)
        ratio = np.clip((bump_pos + bump_neg) / (pos + neg), 1e-3, 5.0)
        out[:, j] = (np.clip(b, lo, hi), pos, neg, ratio, vs)
    return out


def friction_torque(coef: Array, qd: Array) -> Array:
    """``tau_f (..., n)`` at velocities ``qd (..., n)`` for coefficients ``coef (F, n)`` (module
    docstring; torch tensors or numpy arrays alike, the law from ``F``). The C kernel
    (``delan_kernel.c``, ``friction_torque``) is the same arithmetic."""
    xp = torch if isinstance(qd, torch.Tensor) else np
    t = xp.tanh(qd * (1.0 / COULOMB_SMOOTHING))
    if coef.shape[0] == 2:
        return coef[0] * qd + coef[1] * t
    viscous, pos, neg, ratio, velocity = coef
    x = qd / velocity
    level = 0.5 * ((pos + neg) + (pos - neg) * t)
    return viscous * qd + level * (1.0 + ratio * xp.exp(-(x * x))) * t
