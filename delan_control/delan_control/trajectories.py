"""Reference trajectories: excitation for learning, test strokes for evaluation, and a sampler for
trajectories received as ``trajectory_msgs/JointTrajectory`` points. Pure numpy."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Protocol, Tuple, cast

import numpy as np

from delan_common.excitation import FourierTrajectory, random_fourier_trajectory

__all__ = [
    'FourierTrajectory',
    'random_fourier_trajectory',
    'FigureEight',
    'figure_eight',
    'PiecewiseQuintic',
    'rejoin_offset',
    'sample_points',
    'Trajectory',
]


class Trajectory(Protocol):
    """A reference in time: positions, velocities and accelerations at any ``t``."""

    def sample(self, t: np.ndarray) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """q, qd, qdd at times ``t`` ``(T,)``, each ``(T, n)``."""


#: peak velocity of an excitation, as a share of the velocity limit; the evaluation's fastest
#: figure eight stays below it too (``fit_figure_eight``)
EXCITATION_VELOCITY_FRACTION = 0.6


@dataclass(frozen=True)
class FigureEight:
    """Joint-space Lissajous figure eight: joint i follows ``c_i + A_i sin(k_i w t + phi_i)`` with
    frequency ratios 1:2 alternating over joints. It ramps in smoothly from rest at ``c``.

    ``speed`` scales time, so ``speed=2`` is the same path twice as fast (4x the accelerations):
    the extrapolation test of the DeLaN papers.
    """

    center: np.ndarray
    amplitude: np.ndarray
    period: float
    speed: float = 1.0
    ramp: float = 1.0  # [s at speed 1] quintic ramp of the amplitude from 0 to 1

    def sample(self, t):
        """q, qd, qdd ``(T, n)`` at times ``t`` (``(T,)`` or a scalar), amplitude ramp included;
        ``speed`` scales time, so the derivatives scale by ``speed`` and ``speed^2``."""
        t = np.asarray(t, dtype=np.float64).reshape(-1, 1) * self.speed
        n = self.center.size
        k = np.where(np.arange(n) % 2 == 0, 1.0, 2.0)
        w = 2.0 * np.pi / self.period
        ph = k * w * t
        s, c = np.sin(ph), np.cos(ph)
        # amplitude ramp r(t): quintic 0 -> 1 with zero first and second derivatives at both ends
        x = np.clip(t / self.ramp, 0.0, 1.0) if self.ramp > 0 else np.ones_like(t)
        r = x**3 * (10 - 15 * x + 6 * x**2)
        inside = (x > 0) & (x < 1)
        rd = np.where(inside, 30 * x**2 * (1 - x) ** 2 / self.ramp, 0.0)
        rdd = np.where(inside, 60 * x * (1 - x) * (1 - 2 * x) / self.ramp**2, 0.0)
        f, fd, fdd = s, k * w * c, -((k * w) ** 2) * s
        a = self.amplitude
        q = self.center + a * r * f
        qd = a * (rd * f + r * fd) * self.speed
        qdd = a * (rdd * f + 2 * rd * fd + r * fdd) * self.speed**2
        return q, qd, qdd

    def at_speed(self, speed: float) -> 'FigureEight':
        """The same path at another ``speed`` (the evaluation tracks it at 1x and 2x)."""
        return FigureEight(self.center, self.amplitude, self.period, speed, self.ramp)


def figure_eight(
    lower: np.ndarray,
    upper: np.ndarray,
    max_velocity: np.ndarray,
    period: float = 4.0,
    amplitude_fraction: float = 0.3,
    center: Optional[np.ndarray] = None,
    velocity_fraction: float = 0.5,
) -> FigureEight:
    """A figure eight inside the limits whose 1x-speed velocity stays below
    ``velocity_fraction`` of the limit (so that 2x stays within the limit)."""
    lower, upper = np.asarray(lower, float), np.asarray(upper, float)
    lo = np.where(np.isfinite(lower), lower, -np.pi)
    hi = np.where(np.isfinite(upper), upper, np.pi)
    c = 0.5 * (lo + hi) if center is None else np.asarray(center, float)
    amp = amplitude_fraction * 0.5 * (hi - lo)
    amp = np.minimum(amp, np.minimum(hi - c, c - lo) * 0.9)
    k = np.where(np.arange(c.size) % 2 == 0, 1.0, 2.0)
    w = 2.0 * np.pi / period
    amp = np.minimum(amp, velocity_fraction * np.asarray(max_velocity, float) / (k * w))
    return FigureEight(center=c, amplitude=amp, period=period)


def joint_effort_shares(
    inverse: Callable, effort_limit: np.ndarray, q: np.ndarray, qd: np.ndarray, qdd: np.ndarray
) -> np.ndarray:
    """Per joint ``(n,)``, the largest share ``|tau| / limit`` of its effort limit that the
    motion ``q, qd, qdd (k, n)`` needs by the model ``inverse(q, qd, qdd)``; 0 on the joints
    without a finite limit (the model is not evaluated when no joint has one)."""
    lim = np.asarray(effort_limit, dtype=np.float64)
    finite = np.isfinite(lim) & (lim > 0)
    share = np.zeros(lim.size)
    if finite.any():
        tau = np.asarray(inverse(q, qd, qdd))
        share[finite] = np.max(np.abs(tau[:, finite]) / lim[finite], axis=0)
    return share


def effort_share(
    inverse: Callable, effort_limit: np.ndarray, q: np.ndarray, qd: np.ndarray, qdd: np.ndarray
) -> float:
    """Largest share ``|tau| / limit`` of the finite effort limits ``(n,)`` that the motion
    ``q, qd, qdd (k, n)`` needs by the model ``inverse(q, qd, qdd)``; 0 where none is finite
    (:func:`joint_effort_shares`, over the joints)."""
    return float(np.max(joint_effort_shares(inverse, effort_limit, q, qd, qdd), initial=0.0))


def fit_figure_eight(
    fig: FigureEight,
    inverse: Callable,
    effort_limit: np.ndarray,
    speed: float = 2.0,
    fraction: float = 0.8,
    points: int = 400,
    max_velocity: Optional[np.ndarray] = None,
    velocity_fraction: float = EXCITATION_VELOCITY_FRACTION,
) -> FigureEight:
    """``fig`` with its amplitude scaled (by the largest factor in (0, 1], bisection) so that
    played at ``speed`` it needs at most ``fraction`` of the effort limits by the model
    ``inverse(q, qd, qdd)``, and (with ``max_velocity``) moves no faster than
    ``velocity_fraction`` of the velocity limits, the ramp-in included: a test every controller
    could track, whatever the arm's motors, inside the velocities the excitation covers (a
    learned model is not asked to extrapolate). Joints without a finite limit do not
    constrain it."""
    lim = np.asarray(effort_limit, dtype=np.float64)
    finite = np.isfinite(lim) & (lim > 0)
    vlim = (
        np.full(lim.shape, np.inf)
        if max_velocity is None
        else np.asarray(max_velocity, dtype=np.float64)
    )
    vfinite = np.isfinite(vlim) & (vlim > 0)
    if not finite.any() and not vfinite.any():
        return fig
    fast = fig.at_speed(speed)
    t = np.linspace(0.0, (fast.ramp + fig.period) / speed, points)  # the ramp-in and a period

    def scaled(k: float) -> FigureEight:
        return FigureEight(fig.center, fig.amplitude * k, fig.period, fig.speed, fig.ramp)

    def need(k: float) -> float:
        """Largest share of an allowed limit used at amplitude factor ``k`` (<= 1: fits)."""
        q, qd, qdd = scaled(k).at_speed(speed).sample(t)
        worst = effort_share(inverse, lim, q, qd, qdd) / fraction
        if vfinite.any():
            worst = max(
                worst, float(np.max(np.abs(qd[:, vfinite]) / vlim[vfinite])) / velocity_fraction
            )
        return worst

    if need(1.0) <= 1.0:
        return fig
    return scaled(largest_fitting(lambda k: need(k) <= 1.0, 0.0, 1.0, steps=14))


def largest_fitting(fits: Callable[[float], bool], lo: float, hi: float, steps: int) -> float:
    """The largest ``x`` in ``[lo, hi]`` for which ``fits(x)`` holds, by ``steps`` bisections,
    with ``fits`` taken to hold below some threshold and fail above it; ``lo`` when nothing
    above it fits (``fits(lo)`` is not tested)."""
    for _ in range(steps):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def sample_points(traj: Trajectory, duration: float, dt: float):
    """Times ``(T,)`` and q, qd, qdd ``(T, n)`` on a grid from 0 to ``duration`` inclusive."""
    t = np.arange(0.0, duration + 0.5 * dt, dt)
    q, qd, qdd = traj.sample(t)
    return t, q, qd, qdd


class PiecewiseQuintic:
    """Interpolates waypoints given with positions, velocities and accelerations (as in a
    ``JointTrajectory``) by quintic Hermite segments: q, qd, qdd are continuous and exact at the
    waypoints (the first one included). Before the first point it holds the first, after the last
    it holds the last (at rest).
    Missing velocities/accelerations are taken as zero.
    """

    def __init__(
        self,
        t: np.ndarray,
        q: np.ndarray,
        qd: Optional[np.ndarray] = None,
        qdd: Optional[np.ndarray] = None,
    ):
        t = np.asarray(t, dtype=np.float64)
        q = np.atleast_2d(np.asarray(q, dtype=np.float64))
        if t.ndim != 1 or q.shape[0] != t.size or t.size == 0:
            raise ValueError(f'{t.size} times for {q.shape[0]} points')
        if np.any(np.diff(t) <= 0):
            raise ValueError('waypoint times must increase strictly')
        self.t = t
        self.q = q
        self.qd = np.zeros_like(q) if qd is None or np.size(qd) == 0 else np.asarray(qd, float)
        self.qdd = np.zeros_like(q) if qdd is None or np.size(qdd) == 0 else np.asarray(qdd, float)
        if self.qd.shape != q.shape or self.qdd.shape != q.shape:
            raise ValueError('velocities/accelerations must match positions in shape')
        if not (
            np.all(np.isfinite(q))
            and np.all(np.isfinite(self.qd))
            and np.all(np.isfinite(self.qdd))
            and np.all(np.isfinite(t))
        ):
            raise ValueError('non-finite waypoint')

    @property
    def end_time(self) -> float:
        """Time of the last waypoint [s]: after it the trajectory holds still."""
        return float(self.t[-1])

    def sample(self, t):
        """q, qd, qdd ``(T, n)`` at times ``t`` ``(T,)`` (a scalar: ``T = 1``, on a faster path),
        holding the first / last waypoint at rest outside the waypoints' times."""
        t = np.atleast_1d(np.asarray(t, dtype=np.float64))
        if t.size == 1:
            return self._sample_one(float(t[0]))
        n_pts = self.t.size
        out_q = np.empty((t.size, self.q.shape[1]))
        out_qd = np.empty_like(out_q)
        out_qdd = np.empty_like(out_q)
        before = t < self.t[0]
        after = t >= self.t[-1]
        out_q[before], out_qd[before], out_qdd[before] = self.q[0], 0.0, 0.0
        out_q[after], out_qd[after], out_qdd[after] = self.q[-1], 0.0, 0.0
        if n_pts > 1:
            mid = ~(before | after)
            if np.any(mid):
                tm = t[mid]
                i = np.clip(np.searchsorted(self.t, tm, side='right') - 1, 0, n_pts - 2)
                h = (self.t[i + 1] - self.t[i])[:, None]
                s = ((tm - self.t[i])[:, None]) / h
                out_q[mid], out_qd[mid], out_qdd[mid] = _quintic_hermite(
                    s,
                    h,
                    self.q[i],
                    self.q[i + 1],
                    self.qd[i] * h,
                    self.qd[i + 1] * h,
                    self.qdd[i] * h * h,
                    self.qdd[i + 1] * h * h,
                )
        return out_q, out_qd, out_qdd

    def _sample_one(self, t: float):
        """:meth:`sample` at one time (what a controller asks at every tick): the same
        arithmetic on Python floats and ``(n,)`` rows instead of masked ``(T, n)`` arrays --
        about 10x faster (the vectorised path costs ~150 us per call)."""
        n = self.q.shape[1]
        if t >= self.t[-1] or t < self.t[0]:
            q = self.q[-1] if t >= self.t[-1] else self.q[0]
            return q[None, :].copy(), np.zeros((1, n)), np.zeros((1, n))
        i = min(max(int(np.searchsorted(self.t, t, side='right')) - 1, 0), self.t.size - 2)
        h = float(self.t[i + 1] - self.t[i])
        s = (t - float(self.t[i])) / h
        q, qd, qdd = _quintic_hermite(
            s,
            h,
            self.q[i],
            self.q[i + 1],
            self.qd[i] * h,
            self.qd[i + 1] * h,
            self.qdd[i] * h * h,
            self.qdd[i + 1] * h * h,
        )
        return q[None, :], qd[None, :], qdd[None, :]


def _quintic_hermite(s, h, q0, q1, v0, v1, a0, a1):
    """q, qd, qdd of the quintic Hermite segment at normalised time ``s`` in [0, 1] (a float, or
    ``(T, 1)`` with ``(T, n)`` end values); ``v``/``a`` are scaled by ``h`` and ``h**2``."""
    s2, s3, s4, s5 = s * s, s**3, s**4, s**5
    dq = q1 - q0
    q = (
        q0
        + (s - 6 * s3 + 8 * s4 - 3 * s5) * v0
        + (0.5 * s2 - 1.5 * s3 + 1.5 * s4 - 0.5 * s5) * a0
        + (10 * s3 - 15 * s4 + 6 * s5) * dq
        + (-4 * s3 + 7 * s4 - 3 * s5) * v1
        + (0.5 * s3 - s4 + 0.5 * s5) * a1
    )
    qd = (
        (-30 * s2 + 60 * s3 - 30 * s4) * -dq
        + (1 - 18 * s2 + 32 * s3 - 15 * s4) * v0
        + (s - 4.5 * s2 + 6 * s3 - 2.5 * s4) * a0
        + (-12 * s2 + 28 * s3 - 15 * s4) * v1
        + (1.5 * s2 - 4 * s3 + 2.5 * s4) * a1
    ) / h
    qdd = (
        (-60 * s + 180 * s2 - 120 * s3) * -dq
        + (-36 * s + 96 * s2 - 60 * s3) * v0
        + (1 - 9 * s + 18 * s2 - 10 * s3) * a0
        + (-24 * s + 84 * s2 - 60 * s3) * v1
        + (3 * s - 12 * s2 + 10 * s3) * a1
    ) / h**2
    return q, qd, qdd


def rejoin_offset(
    t0: float,
    dq: np.ndarray,
    dqd: np.ndarray,
    velocity_limit: np.ndarray,
    min_time: float = 1.0,
    speed_fraction: float = 0.25,
    dqdd: Optional[np.ndarray] = None,
) -> PiecewiseQuintic:
    """The offset "arm minus reference" from ``(dq, dqd, dqdd)`` at ``t0`` smoothly down to
    zero (``dqdd`` None: zero, the offset of a reference the arm was on).

    Added to a reference the arm fell behind (joint states stopped for a while, the reference
    went on), the command starts where the arm is and moves as it moves -- no torque step on the
    first command -- and joins the reference after ``T`` seconds: at least ``min_time``, longer
    when the offset is large, so that catching up adds at most ``speed_fraction`` of the velocity
    limit (a quintic's peak speed is 1.875 x offset / T). Joints without a limit count as
    1 rad/s (or m/s).
    """
    dq, dqd = np.asarray(dq, float), np.asarray(dqd, float)
    vmax = np.asarray(velocity_limit, float)
    vmax = np.where(np.isfinite(vmax) & (vmax > 0), vmax, 1.0)
    T = max(float(min_time), float(np.max(1.875 * np.abs(dq) / (speed_fraction * vmax))), 1e-3)
    zero = np.zeros_like(dq)
    acc = zero if dqdd is None else np.asarray(dqdd, float)
    return PiecewiseQuintic(
        np.array([t0, t0 + T]), np.stack([dq, zero]), np.stack([dqd, zero]), np.stack([acc, zero])
    )


REFERENCE_KINDS = ('excitation', 'figure_eight', 'hold')


def make_reference(
    kind: str,
    lower: np.ndarray,
    upper: np.ndarray,
    max_velocity: np.ndarray,
    q_now: Optional[np.ndarray],
    *,
    speed: float = 1.0,
    seed: int = 0,
    duration: float = 20.0,
    period: float = 4.0,
    dt: float = 0.01,
    approach_time: float = 2.0,
    excitation: Optional[Callable[[int, float], FourierTrajectory]] = None,
    fit: Optional[Callable[[FigureEight], FigureEight]] = None,
    start: Optional[Tuple[np.ndarray, np.ndarray, np.ndarray]] = None,
):
    """Waypoints ``t, q, qd, qdd`` of a reference that starts at rest at ``q_now``.

    A quintic approach of ``approach_time`` seconds leads from ``q_now`` to the start of the
    trajectory (with its velocity and acceleration there), so switching references never asks for
    a jump. ``duration`` is the length after the approach.

    ``fit(figure_eight)`` may shrink the figure eight (:func:`fit_figure_eight`) before it is
    played at ``speed``. ``excitation(seed, velocity_fraction)`` makes the excitation (default: a
    random Fourier series); ``start = (q, qd, qdd)`` approaches from that moving state instead of
    from rest (an
    excitation following the previous one without stopping): directly, over a longer time, or
    braking to rest first, whichever first stays inside the limits' inner margin (only when none
    does, from rest at ``q_now``). The approach then lasts up to twice ``approach_time``.
    """
    if kind not in REFERENCE_KINDS:
        raise ValueError(f'unknown reference {kind!r}; expected one of {REFERENCE_KINDS}')
    if kind == 'hold':
        q = np.asarray(q_now if q_now is not None else 0.5 * (lower + upper), float)
        return np.array([0.0]), q[None, :], np.zeros((1, q.size)), np.zeros((1, q.size))
    if kind == 'excitation':
        fraction = EXCITATION_VELOCITY_FRACTION / max(speed, 1.0)
        traj: Trajectory = (
            excitation(seed, fraction)
            if excitation is not None
            else random_fourier_trajectory(
                lower, upper, max_velocity, seed=seed, velocity_fraction=fraction
            )
        ).at_speed(speed)
    else:
        fig = figure_eight(lower, upper, max_velocity, period=period)
        traj = (fit(fig) if fit is not None else fig).at_speed(speed)
    t, q, qd, qdd = sample_points(traj, duration, dt)
    if q_now is None or approach_time <= 0:
        return t, q, qd, qdd
    approach = None
    if start is not None:
        approach, ta, (qa, qda, qdda), span = _moving_approach(
            start, (q[0], qd[0], qdd[0]), lower, upper, approach_time, dt
        )
    if approach is None:
        ta, span = np.arange(0.0, approach_time, dt), approach_time
        approach = PiecewiseQuintic(
            np.array([0.0, approach_time]),
            np.stack([q_now, q[0]]),
            np.stack([np.zeros_like(q_now), qd[0]]),
            np.stack([np.zeros_like(q_now), qdd[0]]),
        )
        qa, qda, qdda = approach.sample(ta)
        qda[0] = 0.0
        qdda[0] = 0.0
    return (
        np.concatenate([ta, t + span]),
        np.concatenate([qa, q]),
        np.concatenate([qda, qd]),
        np.concatenate([qdda, qdd]),
    )


def _moving_approach(start, goal, lower, upper, approach_time: float, dt: float):
    """``(PiecewiseQuintic, times, (q, qd, qdd), duration)`` leading from the moving state
    ``start`` to ``goal`` (each ``(q, qd, qdd)``) inside the limits' inner margin, or
    ``(None, ...)``.

    A direct quintic over ``approach_time`` (or twice that) where it stays inside; else one
    that first brakes to rest along the motion (a constant deceleration's distance, in at most
    ``approach_time`` and short enough to stop inside the margin), then approaches from
    there. Starting from rest at the measured position instead would step the reference
    velocity from the arm's speed to zero: a kick of the feedback's damping times that speed,
    enough to saturate a heavy arm's motors."""
    lo, hi = np.asarray(lower, float), np.asarray(upper, float)
    inner = 0.05 * np.where(np.isfinite(hi - lo), hi - lo, 0.0)

    def inside(qa: np.ndarray) -> bool:
        return not (np.any(qa < lo + inner) or np.any(qa > hi - inner))

    q0, v0 = np.asarray(start[0], float), np.asarray(start[1], float)
    room = np.where(v0 > 0, hi - inner - q0, q0 - lo - inner)
    moving = np.abs(v0) > 1e-9
    brake = float(
        np.clip(
            np.min(2.0 * room[moving] / np.abs(v0[moving]), initial=approach_time),
            min(5.0 * dt, approach_time),
            approach_time,
        )
    )
    stop = np.clip(q0 + 0.5 * brake * v0, lo + inner, hi - inner)
    rest = (stop, np.zeros_like(stop), np.zeros_like(stop))
    for times, points in (
        (np.array([0.0, approach_time]), (start, goal)),
        (np.array([0.0, 2.0 * approach_time]), (start, goal)),
        (np.array([0.0, brake, brake + approach_time]), (start, rest, goal)),
    ):
        span = float(times[-1])
        curve = PiecewiseQuintic(times, *(np.stack([p[i] for p in points]) for i in range(3)))
        ta = np.arange(0.0, span, dt)
        sampled = curve.sample(ta)
        if inside(sampled[0]):
            return curve, ta, sampled, span
    return None, ta, sampled, span


Waypoints = Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def splice(previous: Waypoints, following: Waypoints, overlap: float) -> Tuple[float, Waypoints]:
    """``(offset, waypoints)``: ``following`` joined to the end of ``previous``, as one reference
    that begins ``overlap`` seconds before ``previous`` ends.

    Both are waypoints ``(t (k,), q, qd, qdd (k, n))`` with ``t`` from 0, and ``following``
    starts in the state where ``previous`` ends. The result repeats ``previous``'s last
    ``overlap`` seconds (from its waypoint at time ``offset``) before going on with
    ``following``, so it can be sent while ``previous`` is still being tracked, stamped at
    ``previous``'s start + ``offset``: a controller that receives it any time within the
    overlap switches between two references that agree, instead of holding the last point
    (the arm stops) until the next one comes and then starting it with a velocity step."""
    tp = previous[0]
    k = min(int(np.searchsorted(tp, tp[-1] - overlap, side='left')), tp.size - 1)
    offset = float(tp[k])
    head = [a[k:-1] for a in previous]
    t = np.concatenate([head[0] - offset, following[0] + (tp[-1] - offset)])
    rest = tuple(np.concatenate([h, f]) for h, f in zip(head[1:], following[1:]))
    return offset, cast(Waypoints, (t,) + rest)
