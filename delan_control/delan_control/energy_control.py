"""Swing-up and balance of an under-actuated robot from a dynamics model's energies (issue 15).

The law needs nothing but a :class:`~delan_common.dynamics.DynamicsModel` (``energy``,
``mass_matrix``, ``forward``, ``friction``): the analytic :class:`RobotModel` or a learned DeLaN
behind :class:`~delan_learning.torch_dynamics.TorchDynamics`, whose ``T = 1/2 qd^T H(q) qd``
and ``V(q)`` are an energy model (Lutter & Peters 2021; the IROS 2019 companion swings up a
Furuta pendulum and a cart-pole this way). Joints split into actuated ``a`` (``m`` of them, the
motor torques ``u (m,)``) and passive ``p``. Arrays are float64, one state: ``q, qd (n,)``.

**Swing-up** (the energy-based law of Astrom & Furuta 2000 and Spong 1995, written for any
model). The energy of the passive motion, the actuated joints held still, and its target::

    E_p(q, qd) = E(q, qd with qd_a = 0) = 1/2 qd_p^T H_pp(q) qd_p + V(q)
    E*         = V(q_up)                       (the model's own V: any offset cancels)

At an instant with ``qd_a = 0`` the passive equation gives ``dE_p/dt = s^T qdd_a - qd_p^T
tau_f,p`` with ``s = -H_ap(q) qd_p (m,)``: accelerating the actuated joints along ``s`` pumps
energy into the passive ones. The commanded actuated acceleration::

    v = clip(k_E (E* - E_p) s, +-a_pump) - k_p (q_a - r) - k_d qd_a

(``k_E`` large: the bang-bang law of Astrom-Furuta with amplitude ``a_pump``; the PD keeps the
arm / cart near its reference ``r`` and inside its limits), realised by collocated partial
feedback linearisation on the model: ``qdd_a = alpha(q, qd) + M(q) u`` with ``alpha`` the
actuated acceleration at ``u = 0`` (friction compensated) and ``M = (H^-1)_aa`` (both from one
batched ``model.forward``), so ``u = M^-1 (v - alpha) + tau_f,a(qd)``.

Why not ``u_a = k_E (E* - E) qd_a`` on the total energy ``E``: ``dE/dt = qd_a^T u_a >= 0`` holds,
but much of the energy goes into the actuated joints' own kinetic energy: on the Furuta
pendulum of ``delan_bringup`` (light arm) with a PD on the arm it held the upright in 6 of 20
runs (``k_E`` 0.5-4 1/(J s), five starts), each swinging the arm 1.8-2.5 rad (its stops: 2.5);
in the others the arm spun without lifting the pendulum (``bench/bench_swing_up.py`` shows two).
Pumping the passive energy through the coupling is what works.

**Balance**: LQR on the model's rigid-body dynamics linearised numerically at the upright at
rest (``forward(q, qd, tau + tau_f(qd))``: friction left to the compensation), continuous
Riccati equation (scipy); ``u = u_eq - K [q - q_up; qd] + tau_f,a(qd)``, passive angles wrapped
to ``(-pi, pi]``; ``u_eq`` holds the model's actuated joints still at the top.

**Switch with hysteresis**: swing -> balance when every passive joint is within
``catch_angle`` of the upright and slower than ``catch_rate``; balance -> swing only when one
leaves ``release_angle`` (> ``catch_angle``), so the switch does not chatter at the boundary.

Torques are clipped to ``effort_limit``; passive joints always get 0. Construct once per robot
(the linearisation and the Riccati solution happen here); :meth:`EnergySwingUp.command` is the
per-cycle call (one ``energy``, ``mass_matrix``, ``friction`` and a batched ``forward`` of the
model while swinging; one ``friction`` while balancing).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple, Union

import numpy as np
import scipy.linalg

from delan_common.dynamics import DynamicsModel

MODES = ('swing', 'balance')


@dataclass
class EnergyControlConfig:
    """Gains of :class:`EnergySwingUp` (defaults: the Furuta pendulum of ``delan_bringup``)."""

    #: pumping gain ``k_E`` [rad/s^2 per (J * kg m^2 rad/s)]; large: near bang-bang
    k_energy: float = 1e5
    #: amplitude ``a_pump`` of the pumping acceleration [rad/s^2 or m/s^2]
    pump_accel: float = 10.0
    #: PD of the actuated joints around their reference during the swing [1/s^2], [1/s]
    kp: float = 10.0
    kd: float = 4.4
    #: swing -> balance: every passive joint within this angle of the upright [rad] ...
    catch_angle: float = 0.3
    #: ... and slower than this [rad/s]
    catch_rate: float = 4.0
    #: balance -> swing: a passive joint further than this from the upright [rad]
    release_angle: float = 0.6
    #: LQR state weights ``diag(Q)`` on ``[q - q_up, qd]`` (2n,); None: 1 on actuated and 10
    #: on passive positions, 0.1 on actuated and 0.5 on passive velocities
    lqr_q: Optional[Sequence[float]] = None
    #: LQR torque weight (``R = lqr_r I``)
    lqr_r: float = 1.0
    #: add the model's friction torque on the actuated joints (when the model has friction)
    compensate_friction: bool = True
    #: central-difference step of the linearisation [rad, rad/s]
    fd_step: float = 1e-5

    def __post_init__(self) -> None:
        for name in ('k_energy', 'pump_accel', 'kp', 'kd', 'catch_angle', 'catch_rate'):
            if not getattr(self, name) >= 0:
                raise ValueError(f'{name} must be >= 0, got {getattr(self, name)}')
        if not self.release_angle > self.catch_angle:
            raise ValueError(
                f'release_angle ({self.release_angle}) must exceed catch_angle '
                f'({self.catch_angle}): that gap is the hysteresis'
            )
        if not (self.lqr_r > 0 and self.fd_step > 0):
            raise ValueError('lqr_r and fd_step must be > 0')


def wrap_angle(x: np.ndarray) -> np.ndarray:
    """Angles ``(...)`` wrapped to ``[-pi, pi)``."""
    return (np.asarray(x, dtype=np.float64) + np.pi) % (2.0 * np.pi) - np.pi


def actuated_mask(
    actuated: Union[Sequence[bool], Sequence[str], np.ndarray], joint_names: Sequence[str]
) -> np.ndarray:
    """``(n,)`` bool from ``n`` bools or a list of joint names (of ``joint_names``)."""
    names = list(joint_names)
    items = list(actuated)
    if items and all(isinstance(x, str) for x in items):
        unknown = [x for x in items if x not in names]
        if unknown:
            raise ValueError(f'actuated: unknown joints {unknown} (have {names})')
        return np.array([nm in items for nm in names], dtype=bool)
    mask = np.asarray(items)
    if mask.shape != (len(names),) or mask.dtype != bool:
        raise ValueError(f'actuated needs {len(names)} bools or joint names, got {actuated!r}')
    return mask.copy()


def linearize(
    model: DynamicsModel,
    q: np.ndarray,
    qd: np.ndarray,
    tau: np.ndarray,
    actuated: np.ndarray,
    step: float = 1e-5,
    rigid: bool = True,
) -> Tuple[np.ndarray, np.ndarray]:
    """``(A (2n, 2n), B (2n, m))`` of ``x = [q; qd]``, ``xd = [qd; forward(q, qd, tau)]`` at
    ``(q, qd, tau)`` (each ``(n,)``), the torque entering at the ``m`` ``actuated`` joints.

    Central differences of ``model.forward``, all ``4n + 2m`` states in one batched call.
    ``rigid``: the model's friction is added back to the torque (``tau + friction(qd)``), so
    this is the rigid-body dynamics, friction left to a compensation."""
    q = np.asarray(q, dtype=np.float64)
    qd = np.asarray(qd, dtype=np.float64)
    tau = np.asarray(tau, dtype=np.float64)
    n = q.size
    a_idx = np.flatnonzero(actuated)
    m = a_idx.size
    eye = np.eye(n)
    dq = np.concatenate([step * eye, -step * eye, np.zeros((2 * n + 2 * m, n))])
    dqd = np.concatenate([np.zeros((2 * n, n)), step * eye, -step * eye, np.zeros((2 * m, n))])
    du = np.zeros((4 * n + 2 * m, n))
    du[4 * n + np.arange(m), a_idx] = step
    du[4 * n + m + np.arange(m), a_idx] = -step
    Q, QD, U = q + dq, qd + dqd, tau + du
    if rigid:
        U = U + np.asarray(model.friction(QD), dtype=np.float64)
    acc = np.asarray(model.forward(Q, QD, U), dtype=np.float64)  # (4n + 2m, n)
    d_q = (acc[:n] - acc[n : 2 * n]).T / (2 * step)  # (n, n): column j = d qdd / d q_j
    d_qd = (acc[2 * n : 3 * n] - acc[3 * n : 4 * n]).T / (2 * step)
    d_u = (acc[4 * n : 4 * n + m] - acc[4 * n + m :]).T / (2 * step)  # (n, m)
    A = np.block([[np.zeros((n, n)), eye], [d_q, d_qd]])
    B = np.vstack([np.zeros((n, m)), d_u])
    return A, B


def lqr_gain(
    A: np.ndarray, B: np.ndarray, Q: np.ndarray, R: np.ndarray
) -> Tuple[np.ndarray, np.ndarray]:
    """Continuous-time LQR: ``(K (m, N), P (N, N))`` with ``u = -K x`` minimising
    ``int x^T Q x + u^T R u`` for ``xd = A x + B u``; ``P`` solves the Riccati equation."""
    P = scipy.linalg.solve_continuous_are(A, B, Q, R)
    K = np.linalg.solve(R, B.T @ P)
    return K, P


class EnergySwingUp:
    """Energy swing-up, LQR balance and the switch between them (module docstring).

    ``model``: any dynamics model with ``energy``, ``mass_matrix``, ``forward`` (and
    ``friction`` for the compensation); ``joint_names`` in its order. ``actuated``: ``n`` bools
    or joint names. ``upright (n,)``: the configuration to balance at (the passive joints'
    upright; its actuated entries are the reference ``r`` unless ``reference (m,)`` is given).
    ``effort_limit``: scalar or ``(m,)`` [N m or N], the clip of the actuated torques. ``wrap
    (n,)`` bool: joints whose error to the upright is an angle wrapped to ``[-pi, pi)``
    (default: the passive ones).

    Attributes: ``e_target`` (``E*`` [J]), ``A, B, K, P`` (linearisation and LQR), ``u_eq (m,)``,
    ``mode`` (``'swing'`` / ``'balance'``), ``catches`` / ``releases`` (switch counts),
    ``catch_energy_error`` (``E_p - E*`` at the last catch, the model's view) and
    ``last_energy`` (``E_p`` of the last swing command).
    """

    def __init__(
        self,
        model: DynamicsModel,
        actuated: Union[Sequence[bool], Sequence[str], np.ndarray],
        upright: Union[Sequence[float], np.ndarray],
        effort_limit: Union[float, Sequence[float], np.ndarray],
        config: Optional[EnergyControlConfig] = None,
        *,
        reference: Optional[Sequence[float]] = None,
        wrap: Optional[Sequence[bool]] = None,
    ):
        self.model = model
        self.config = cfg = config or EnergyControlConfig()
        self.joint_names: List[str] = list(model.joint_names)
        n = self.n = len(self.joint_names)
        self.actuated = actuated_mask(actuated, self.joint_names)
        self.a_idx = np.flatnonzero(self.actuated)
        self.p_idx = np.flatnonzero(~self.actuated)
        m = self.m = self.a_idx.size
        if m == 0 or self.p_idx.size == 0:
            raise ValueError('EnergySwingUp needs at least one actuated and one passive joint')
        self.upright = np.array(upright, dtype=np.float64).reshape(-1)  # own copy
        if self.upright.shape != (n,) or not np.all(np.isfinite(self.upright)):
            raise ValueError(f'upright needs {n} finite values, got {upright!r}')
        ref = self.upright[self.a_idx] if reference is None else reference
        self.reference = np.asarray(ref, dtype=np.float64).reshape(-1)
        if self.reference.shape != (m,):
            raise ValueError(f'reference needs {m} values, got {reference!r}')
        self.upright[self.a_idx] = self.reference
        lim = np.broadcast_to(np.asarray(effort_limit, dtype=np.float64), (m,)).copy()
        if not np.all(lim > 0):
            raise ValueError(f'effort_limit must be > 0, got {effort_limit!r}')
        self.effort_limit = lim
        self.wrap = ~self.actuated if wrap is None else np.asarray(wrap, dtype=bool).reshape(-1)
        if self.wrap.shape != (n,):
            raise ValueError(f'wrap needs {n} bools')
        self._friction = cfg.compensate_friction and self._has_friction()

        zero = np.zeros(n)
        self.e_target = float(np.asarray(model.energy(self.upright, zero)[1]))
        # torque holding the actuated joints still at the upright, rigid-body model
        alpha, M = self._actuated_response(self.upright, zero, self._fric(zero))
        self.u_eq = np.linalg.solve(M, -alpha)
        tau_eq = np.zeros(n)
        tau_eq[self.a_idx] = self.u_eq
        self.A, self.B = linearize(
            model, self.upright, zero, tau_eq, self.actuated, cfg.fd_step, rigid=self._friction
        )
        if cfg.lqr_q is None:
            qw = np.concatenate(
                [np.where(self.actuated, 1.0, 10.0), np.where(self.actuated, 0.1, 0.5)]
            )
        else:
            qw = np.asarray(cfg.lqr_q, dtype=np.float64).reshape(-1)
            if qw.shape != (2 * n,):
                raise ValueError(f'lqr_q needs {2 * n} weights')
        self.K, self.P = lqr_gain(self.A, self.B, np.diag(qw), cfg.lqr_r * np.eye(m))
        self.reset()

    # ------------------------------------------------------------------ helpers
    def _has_friction(self) -> bool:
        try:
            f = self.model.friction(np.zeros(self.n))
        except NotImplementedError:
            return False
        return np.asarray(f).shape == (self.n,)

    def _fric(self, qd: np.ndarray) -> np.ndarray:
        """The model's friction torque ``(n,)`` on the actuated joints (0 on passive ones)."""
        out = np.zeros(self.n)
        if self._friction:
            out[self.a_idx] = np.asarray(self.model.friction(qd), dtype=np.float64)[self.a_idx]
        return out

    def _actuated_response(
        self, q: np.ndarray, qd: np.ndarray, tau: np.ndarray
    ) -> Tuple[np.ndarray, np.ndarray]:
        """``(alpha (m,), M (m, m))``: actuated accelerations ``alpha + M u`` under ``tau (n,)``
        plus ``u`` on the actuated joints; one batched ``forward`` of ``m + 1`` rows."""
        m = self.m
        taus = np.repeat(tau[None], m + 1, axis=0)
        taus[1 + np.arange(m), self.a_idx] += 1.0
        acc = np.asarray(
            self.model.forward(np.repeat(q[None], m + 1, 0), np.repeat(qd[None], m + 1, 0), taus),
            dtype=np.float64,
        )[:, self.a_idx]
        return acc[0], (acc[1:] - acc[0]).T

    def reset(self) -> None:
        """Back to the swing mode; counters cleared."""
        self.mode = 'swing'
        self.catches = 0
        self.releases = 0
        self.catch_energy_error = float('nan')
        self.last_energy = float('nan')

    def diagnostics(self) -> Tuple[Tuple[str, object], ...]:
        """Diagnostic values: the mode, the passive energy ``E_p`` it last pumped on and its
        target ``E*`` [J, the model's], the switch counts."""
        return (
            ('energy_mode', self.mode),
            ('energy_passive_J', f'{self.last_energy:.5f}'),
            ('energy_target_J', f'{self.e_target:.5f}'),
            ('energy_catches', self.catches),
            ('energy_releases', self.releases),
        )

    def error(self, q: np.ndarray) -> np.ndarray:
        """``q - upright (n,)``, wrapped to ``[-pi, pi)`` on the ``wrap`` joints."""
        e = np.asarray(q, dtype=np.float64) - self.upright
        return np.where(self.wrap, wrap_angle(e), e)

    def energy(self, q: np.ndarray, qd: np.ndarray) -> float:
        """The model's total energy ``T + V`` [J] at one state ``(n,)``."""
        T, V = self.model.energy(q, qd)
        return float(np.asarray(T) + np.asarray(V))

    def passive_energy(self, q: np.ndarray, qd: np.ndarray) -> float:
        """``E_p`` [J]: the model's energy with the actuated joints' velocities set to 0."""
        return self.energy(q, np.where(self.actuated, 0.0, np.asarray(qd, dtype=np.float64)))

    # ------------------------------------------------------------------ the law
    def swing_command(self, q: np.ndarray, qd: np.ndarray) -> np.ndarray:
        """The swing-up torque ``u (m,)`` (unclipped); sets :attr:`last_energy`."""
        cfg = self.config
        a, p = self.a_idx, self.p_idx
        e_p = self.passive_energy(q, qd)
        self.last_energy = e_p
        H = np.asarray(self.model.mass_matrix(q), dtype=np.float64)
        s = -H[np.ix_(a, p)] @ qd[p]
        pump = np.clip(cfg.k_energy * (self.e_target - e_p) * s, -cfg.pump_accel, cfg.pump_accel)
        v = pump - cfg.kp * (q[a] - self.reference) - cfg.kd * qd[a]
        fric = self._fric(qd)
        alpha, M = self._actuated_response(q, qd, fric)
        return np.linalg.solve(M, v - alpha) + fric[a]

    def balance_command(self, q: np.ndarray, qd: np.ndarray) -> np.ndarray:
        """The LQR torque ``u (m,)`` (unclipped)."""
        x = np.concatenate([self.error(q), qd])
        return self.u_eq - self.K @ x + self._fric(qd)[self.a_idx]

    def update_mode(self, q: np.ndarray, qd: np.ndarray) -> str:
        """Apply the switch with hysteresis to state ``(q, qd)``; returns the mode."""
        cfg = self.config
        p = self.p_idx
        angle = float(np.max(np.abs(self.error(q)[p])))
        if self.mode == 'swing':
            if angle < cfg.catch_angle and float(np.max(np.abs(qd[p]))) < cfg.catch_rate:
                self.mode = 'balance'
                self.catches += 1
                self.catch_energy_error = self.passive_energy(q, qd) - self.e_target
        elif angle > cfg.release_angle:
            self.mode = 'swing'
            self.releases += 1
        return self.mode

    def command(self, q: np.ndarray, qd: np.ndarray) -> np.ndarray:
        """The torque ``(n,)`` for state ``q, qd (n,)``: clipped to ``effort_limit`` on the
        actuated joints, 0 on the passive ones. Updates :attr:`mode`."""
        q = np.asarray(q, dtype=np.float64)
        qd = np.asarray(qd, dtype=np.float64)
        if q.shape != (self.n,) or qd.shape != (self.n,):
            raise ValueError(f'q and qd need shape ({self.n},), got {q.shape}, {qd.shape}')
        mode = self.update_mode(q, qd)
        u = self.swing_command(q, qd) if mode == 'swing' else self.balance_command(q, qd)
        tau = np.zeros(self.n)
        tau[self.a_idx] = np.clip(u, -self.effort_limit, self.effort_limit)
        return tau
