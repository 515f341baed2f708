"""Judging a tracking run: wrapped joint errors, divergence, and the demo's verdict. ROS-free.

The demo compares controllers on the same reference; a controller that loses the arm must not
spin it for the rest of its run (nor leave it spun for the next controller), and its data must
not enter the torque-prediction table. These rules live here, apart from the orchestration, so
they are unit-tested on arrays.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Union

import numpy as np

from delan_common.urdf_joints import at_position_limit
from delan_control.control_laws import position_error


def joint_errors(q_ref: np.ndarray, q: np.ndarray, joint_types: Sequence[str]) -> np.ndarray:
    """``q_ref - q`` ``(..., n)``, wrapped to ``(-pi, pi]`` on continuous joints.

    A continuous joint's angle is only defined modulo 2 pi: 2 pi - 0.01 rad off is 0.01 rad off.
    """
    cont = np.array([t == 'continuous' for t in joint_types])
    return position_error(
        np.asarray(q_ref, dtype=np.float64),
        np.asarray(q, dtype=np.float64),
        cont if cont.any() else None,
    )


@dataclass
class DivergenceCheck:
    """Decides online whether a controller has lost the arm.

    Diverged when any joint's (wrapped) error exceeds ``max_error`` (rad or m), or when some
    joint's applied torque sits at its effort limit (within ``saturation_fraction``) for longer
    than ``max_saturated_s`` without a break.
    """

    effort_limit: np.ndarray
    max_error: float = 1.0
    max_saturated_s: float = 1.0
    saturation_fraction: float = 0.99
    reason: Optional[str] = None
    _saturated_since: Optional[np.ndarray] = field(default=None, repr=False)

    def update(self, t: np.ndarray, err: np.ndarray, tau: np.ndarray) -> Optional[str]:
        """Feed new samples (``t (T,)``, ``err``/``tau (T, n)``) in time order; returns the
        reason once diverged (and from then on), else None."""
        if self.reason is not None or len(t) == 0:
            return self.reason
        n = err.shape[1]
        if self._saturated_since is None:
            self._saturated_since = np.full(n, np.nan)
        big = np.abs(err) > self.max_error
        if big.any():
            i, j = np.argwhere(big)[0]
            self.reason = (
                f'joint {j} error {err[i, j]:+.3g} beyond {self.max_error:g} at t={t[i]:.2f} s'
            )
            return self.reason
        lim = np.asarray(self.effort_limit, dtype=np.float64)
        finite = np.isfinite(lim) & (lim > 0)
        if not finite.any():
            return None
        sat = np.zeros_like(tau, dtype=bool)
        sat[:, finite] = np.abs(tau[:, finite]) >= self.saturation_fraction * lim[finite]
        since = self._saturated_since
        for i in range(len(t)):
            start = np.isnan(since) & sat[i]
            since[start] = t[i]
            since[~sat[i]] = np.nan
            long = sat[i] & (t[i] - since > self.max_saturated_s)
            if long.any():
                j = int(np.flatnonzero(long)[0])
                self.reason = (
                    f'joint {j} at its effort limit for more than '
                    f'{self.max_saturated_s:g} s (t={t[i]:.2f} s)'
                )
                return self.reason
        return None


@dataclass(frozen=True)
class Verdict:
    """Whether the learned model did what the demo claims, and why not."""

    passed: bool
    failures: List[str]
    ratios: Dict[float, float]


#: the loop must let the sim's own model track with at most this share of the learned model's
#: bound (``max_ratio`` x nominal's error), or the bound measures the loop (its gains, its rate,
#: an arm at its effort limits) more than the model: a perfect model would use up most of it
MAX_LOOP_FLOOR = 0.5


#: a joint's torque that the true plant misses by less than this share of its effort limit is
#: noise on a barely excited joint (an upright arm's base), not end stops or saturation
MIN_BROKEN_SHARE = 0.01


#: the share of the excitation a joint may spend at an end stop: the excitation stays inside
#: the limits, so a joint found there more often was not controlled (too weak, saturated)
MAX_END_STOP_SHARE = 0.005


def end_stop_share(q: np.ndarray, lower: np.ndarray, upper: np.ndarray) -> np.ndarray:
    """Per joint (n,): the share of the samples ``q (k, n)`` at an end stop
    (:func:`~delan_common.urdf_joints.at_position_limit`)."""
    q = np.asarray(q, dtype=np.float64)
    if len(q) == 0:
        return np.zeros(q.shape[1] if q.ndim == 2 else 0)
    return at_position_limit(q, lower, upper).mean(axis=0)


def learning_target(
    target_nmse: float, floor_factor: float, floor: Union[Sequence[float], np.ndarray]
) -> np.ndarray:
    """Per joint, the validation nMSE the demo waits for: ``target_nmse``, or ``floor_factor``
    times the true plant's own nMSE ``floor`` where the data allow no better. A floor that is
    not finite (data the true plant cannot explain at all, which :func:`broken_joints`
    reports) leaves ``target_nmse``."""
    scaled = float(floor_factor) * np.asarray(floor, dtype=np.float64)
    fixed = float(target_nmse)
    return np.where(np.isfinite(scaled), np.maximum(fixed, scaled), fixed)


def broken_joints(
    nmse: Union[Sequence[float], np.ndarray],
    max_nmse: float,
    residual_rms: Union[Sequence[float], np.ndarray, None] = None,
    effort_limit: Union[Sequence[float], np.ndarray, None] = None,
) -> np.ndarray:
    """Per joint: does the true plant fail to explain the recorded torque? Its nMSE is above
    ``max_nmse`` and, where the residual and a finite effort limit are known, its residual RMS is
    above :data:`MIN_BROKEN_SHARE` of that limit. A joint that barely moves has a torque spread
    near the noise and so a large nMSE; an end-stop impact or a saturated motor leaves a
    residual of the size of the motor's torque."""
    x = np.asarray(nmse, dtype=np.float64)
    bad = ~(x <= max_nmse)
    if residual_rms is not None and effort_limit is not None:
        eff = np.asarray(effort_limit, dtype=np.float64)
        known = np.isfinite(eff) & (eff > 0)
        small = np.asarray(residual_rms, dtype=np.float64) <= MIN_BROKEN_SHARE * eff
        bad &= ~(known & small)
    return bad


def delan_verdict(
    mean_rms: Dict[tuple, float],
    diverged: Dict[tuple, bool],
    speeds: Sequence[float],
    max_ratio: float,
    true_plant_nmse: Optional[Dict[float, float]] = None,
    max_true_nmse: float = 0.1,
    excitation_floor: Optional[Sequence[float]] = None,
    loop_floor: Optional[Dict[float, float]] = None,
    learned: str = 'delan',
    excitation_residual: Optional[Sequence[float]] = None,
    effort_limit: Optional[Sequence[float]] = None,
    end_stops: Optional[Dict[str, float]] = None,
) -> Verdict:
    """The learned model (``learned``: delan or delan_residual) must not diverge and must track
    at most ``max_ratio`` x nominal Pinocchio's mean RMS error at every speed; the true plant
    must predict the measured torque (nMSE at most
    ``max_true_nmse``, on the evaluation and, per joint, on the excitation the models learned
    from: ``excitation_floor``, judged by :func:`broken_joints` with ``excitation_residual``
    and ``effort_limit`` when given), or the data themselves are broken; and the control loop must
    let the true plant's model track far better than the bound (``loop_floor``: its mean RMS
    error per speed, at most MAX_LOOP_FLOOR of ``max_ratio`` x nominal's), or no model can show
    what it knows;
    no joint may have spent more than MAX_END_STOP_SHARE of the excitation at an end stop
    (``end_stops``: joint name -> share, :func:`end_stop_share`).

    ``mean_rms`` and ``diverged`` are keyed by ``(controller, speed)``.
    """
    failures: List[str] = []
    ratios: Dict[float, float] = {}
    for sp in speeds:
        if diverged.get((learned, sp), False):
            failures.append(f'{learned} diverged at {sp:g}x')
            continue
        d, p = mean_rms.get((learned, sp)), mean_rms.get(('pinocchio', sp))
        if d is None or p is None:
            failures.append(f'no {learned}/pinocchio run at {sp:g}x')
            continue
        ratios[sp] = d / p if p > 0 else np.inf
        if diverged.get(('pinocchio', sp), False):
            continue  # nominal lost the arm: any non-diverged learned run beats it
        if not ratios[sp] <= max_ratio:
            failures.append(
                f'{learned} mean RMS {d:.4g} is {ratios[sp]:.2f} x '
                f"pinocchio's {p:.4g} at {sp:g}x (bound {max_ratio:.2f})"
            )
    for sp, v in (loop_floor or {}).items():
        p = mean_rms.get(('pinocchio', sp))
        if p is not None and not v <= MAX_LOOP_FLOOR * max_ratio * p:
            failures.append(
                f"the control loop cannot tell models apart at {sp:g}x: the sim's "
                f"own model tracks with {v:.4g} rad, {v / p:.2f} x nominal's {p:.4g}, where a "
                f'learned model may take {max_ratio:.2f} x (the gains, the rate or the effort '
                'limits, not the models)'
            )
    for sp, v in (true_plant_nmse or {}).items():
        if not v <= max_true_nmse:
            failures.append(
                f'the true plant predicts the measured torque with nMSE {v:.3g} at '
                f'{sp:g}x (> {max_true_nmse:g}): the evaluation data are broken'
            )
    floor = np.asarray(excitation_floor if excitation_floor is not None else [], float)
    bad = broken_joints(floor, max_true_nmse, excitation_residual, effort_limit)
    if bad.any():
        failures.append(
            f'the true plant predicts the excitation torques with nMSE up to '
            f'{np.nanmax(floor[bad]):.3g} (> {max_true_nmse:g}): the training data '
            f'are broken (end-stop impacts, saturated motors, a lost arm)'
        )
    stuck = {nm: v for nm, v in (end_stops or {}).items() if not v <= MAX_END_STOP_SHARE}
    if stuck:
        failures.append(
            'joints at their end stops during the excitation (share of the time): '
            + ', '.join(f'{nm} {v:.1%}' for nm, v in stuck.items())
            + ': not controlled there (too weak a loop, saturated motors); the '
            'training data hold forces no model has'
        )
    return Verdict(not failures, failures, ratios)


def simulated_tracking_rms(
    model,
    nominal,
    mismatch,
    duration: float,
    seed: int = 99,
    bandwidth: float = 60.0,
    rate: float = 500.0,
    bound: float = 1.0,
) -> float:
    """RMS joint error [rad] of computed torque on ``model`` tracking a fresh excitation
    trajectory (about the middle of the limits) on the true plant ``nominal.mismatched(
    mismatch)``, stepped without ROS; inf once an error passes ``bound`` (diverged).

    The rigid-body terms see the measured state and the friction the reference velocity (as
    datagen: a stiff tanh on the measured velocity is a high-gain loop a light wrist cannot
    take). ``model`` is any DynamicsModel with ``friction(qd)``; ``nominal`` a RobotModel.
    """
    from delan_common.excitation import random_fourier_trajectory
    from delan_control.plant import Plant

    spec = nominal.spec
    lo, hi = nominal.sample_bounds()
    ref = random_fourier_trajectory(
        spec.lower,
        spec.upper,
        spec.velocity_limit,
        seed=seed,
        velocity_fraction=0.5,
        center=0.5 * (lo + hi),
    )
    q_ref, qd_ref, qdd_ref = ref.sample(np.arange(int(duration * rate)) / rate)
    plant = Plant(nominal, mismatch, physics_rate=2 * rate)
    plant.reset(q_ref[0], qd_ref[0])
    kp, kd = bandwidth**2, 2.0 * bandwidth
    sq = 0.0
    for k in range(len(q_ref)):
        q, qd = plant.q.copy(), plant.qd.copy()
        e = q_ref[k] - q
        if not np.all(np.isfinite(e)) or np.abs(e).max() > bound:
            return float('inf')
        sq += float(e @ e)
        tau = (
            model.inverse(q, qd, qdd_ref[k] + kp * e + kd * (qd_ref[k] - qd))
            - model.friction(qd)
            + model.friction(qd_ref[k])
        )
        plant.step(np.where(np.isfinite(tau), tau, 0.0), 2)
    return float(np.sqrt(sq / q_ref.size))
