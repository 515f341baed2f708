"""Excitation trajectories chosen per robot for the condition of the identification regressor.

Classical identification (Swevers et al. 1997; Gautier & Khalil) picks the excitation whose
regressor ``Y(q, qd, qdd)`` stacked over the trajectory has the smallest condition number on the
identifiable (base) parameters: every parameter combination that shows in the torques is
excited about equally, none drowns in noise. The same coverage is what a learned model needs to
generalise beyond the path it saw. Here the search is simple and seeded: ``candidates`` random
Fourier series inside the limits (:func:`~delan_common.excitation.random_fourier_trajectory`),
the best by condition number wins.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Tuple

import numpy as np

from delan_common.excitation import FourierTrajectory, random_fourier_trajectory
from delan_common.robot_model import RobotModel
from delan_common.urdf_joints import RobotDescription

from .sysid import parameter_scales, regressor
from .trajectories import effort_share, joint_effort_shares


@dataclass(frozen=True)
class RegressorConditioning:
    """The identifiable columns of a robot's scaled regressor and the row weights."""

    columns: np.ndarray  # base-parameter columns (indices into the 12 n parameters)
    scales: np.ndarray  # parameter scales (sysid.parameter_scales)
    row_weight: np.ndarray  # per joint: 1 / effort scale

    @classmethod
    def of(cls, robot: RobotModel, seed: int = 0, samples: int = 200) -> 'RegressorConditioning':
        """Base columns by QR with column pivoting on random states within the limits."""
        from scipy.linalg import qr

        rng = np.random.default_rng(seed)
        spec = robot.spec
        lo = np.where(np.isfinite(spec.lower), spec.lower, -np.pi)
        hi = np.where(np.isfinite(spec.upper), spec.upper, np.pi)
        q = rng.uniform(lo, hi, (samples, robot.n))
        qd = rng.normal(size=(samples, robot.n))
        qdd = rng.normal(size=(samples, robot.n)) * 3.0
        scales = parameter_scales(robot)
        eff = spec.effort_limit
        finite = np.isfinite(eff) & (eff > 0)
        ref = float(np.max(eff[finite])) if finite.any() else 1.0
        row_weight = 1.0 / np.where(finite, eff, ref)
        A = cls._matrix(robot, q, qd, qdd, scales, row_weight)
        _, R, piv = qr(A, mode='economic', pivoting=True)
        d = np.abs(np.diag(R))
        rank = int(np.sum(d > 1e-8 * d[0])) if d.size and d[0] > 0 else 0
        return cls(np.sort(piv[:rank]), scales, row_weight)

    @staticmethod
    def _matrix(robot, q, qd, qdd, scales, row_weight) -> np.ndarray:
        Phi = regressor(robot, q, qd, qdd)
        return (Phi * row_weight[None, :, None] * scales[None, None, :]).reshape(-1, scales.size)

    def condition_number(self, robot: RobotModel, q, qd, qdd) -> float:
        """Condition number of the scaled, row-weighted regressor's identifiable columns over the
        states ``q, qd, qdd (T, n)``: how well they excite the parameters (inf when rank
        deficient)."""
        A = self._matrix(robot, q, qd, qdd, self.scales, self.row_weight)[:, self.columns]
        s = np.linalg.svd(A, compute_uv=False)
        return float(s[0] / s[-1]) if s[-1] > 0 else float('inf')


#: share of the effort limits an excitation may need by the URDF model: the rest is for the
#: plant's mismatch (a payload, friction) and the feedback
EXCITATION_EFFORT_FRACTION = 0.6


def designed_excitation(
    robot: RobotModel,
    lower: np.ndarray,
    upper: np.ndarray,
    max_velocity: np.ndarray,
    seed: int = 0,
    candidates: int = 16,
    points: int = 100,
    velocity_fraction: float = 0.6,
    conditioning: Optional[RegressorConditioning] = None,
    effort_fraction: float = EXCITATION_EFFORT_FRACTION,
    base_freq: float = 0.1,
) -> FourierTrajectory:
    """The best-conditioned of ``candidates`` seeded random Fourier excitations (one period
    sampled at ``points`` states) among those that need at most ``effort_fraction`` of the
    effort limits by the URDF model (the least demanding one when none does): a candidate that
    holds a heavy arm stretched out with a payload would saturate the motors, the tracking
    controller loses the arm, and the data fill with end-stop impacts. The same ``seed`` gives
    the same trajectory."""
    cond = conditioning or RegressorConditioning.of(robot)
    lim = robot.operating_effort_limit()
    best: Optional[FourierTrajectory] = None
    best_key = (np.inf, np.inf)
    for k in range(max(1, candidates)):
        traj = random_fourier_trajectory(
            lower,
            upper,
            max_velocity,
            seed=seed * 1009 + k,
            velocity_fraction=velocity_fraction,
            base_freq=base_freq,
        )
        if candidates <= 1:
            return traj
        t = np.linspace(0.0, traj.period, points, endpoint=False)
        q, qd, qdd = traj.sample(t)
        need = effort_share(robot.inverse, lim, q, qd, qdd)
        c = cond.condition_number(robot, q, qd, qdd)
        # a share or condition number that is not finite (NaN torques of a broken URDF model)
        # ranks last, but a candidate is always returned
        need, c = (float(x) if np.isfinite(x) else np.inf for x in (need, c))
        key = (0.0, c) if need <= effort_fraction else (need, c)
        if best is None or key < best_key:
            best, best_key = traj, key
    assert best is not None  # the loop ran at least once
    if best_key[0] > 0.0:
        best = slowed_to_effort(best, robot.inverse, lim, effort_fraction, points)
    return best


def slowed_to_effort(
    traj: FourierTrajectory,
    inverse: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray],
    effort_limit: np.ndarray,
    fraction: float = EXCITATION_EFFORT_FRACTION,
    points: int = 100,
    rounds: int = 12,
) -> FourierTrajectory:
    """``traj`` with the motion of each joint that needs more than ``fraction`` of its effort
    limit by the model ``inverse(q, qd, qdd)`` scaled down (its swing, velocity and
    acceleration), round by round, until every joint fits or ``rounds`` are spent; the least
    demanding version seen is returned.

    A joint whose own friction or inertia asks more than its motor gives (a light wrist with a
    large URDF ``damping`` and an effort limit under 1 N m: every random series of the others'
    speed needs twice its limit) then moves less instead of saturating its motor for most of
    the excitation, which loses the arm to its end stops and leaves no data to learn from. The
    other joints keep their motion. A share the posture alone causes (gravity) does not shrink;
    the demo's checks report such an arm."""
    t = np.linspace(0.0, traj.period, points, endpoint=False)
    factor = np.ones(traj.q0.size)
    best, best_need = traj, np.inf
    for _ in range(rounds):
        current = traj.scaled(factor)
        share = joint_effort_shares(inverse, effort_limit, *current.sample(t))
        if not np.all(np.isfinite(share)):
            return best
        need = float(share.max())
        if need < best_need:
            best, best_need = current, need
        if need <= fraction:
            break
        over = share > fraction
        # a little under the bound, so the coupling of the joints scaled together settles
        factor[over] *= np.clip(0.95 * fraction / share[over], 0.2, 1.0)
    return best


def robot_excitation(
    robot: RobotDescription,
    seed: int,
    velocity_fraction: float,
    candidates: int = 8,
    design: Optional[Tuple[RobotModel, RegressorConditioning]] = None,
    base_freq: float = 0.1,
) -> FourierTrajectory:
    """The excitation of ``seed`` for ``robot`` within its limits, as the reference node
    publishes it: :func:`designed_excitation` on the URDF model and its conditioning
    ``design`` when given and ``candidates > 1``, a plain random one otherwise. ``base_freq``
    [Hz]: the Fourier series' fundamental (the reference node's; a bench may vary it)."""
    if design is not None and candidates > 1:
        model, conditioning = design
        return designed_excitation(
            model,
            robot.lower,
            robot.upper,
            robot.planning_velocity_limits,
            seed=seed,
            candidates=candidates,
            velocity_fraction=velocity_fraction,
            conditioning=conditioning,
            base_freq=base_freq,
        )
    return random_fourier_trajectory(
        robot.lower,
        robot.upper,
        robot.planning_velocity_limits,
        seed=seed,
        velocity_fraction=velocity_fraction,
        base_freq=base_freq,
    )
