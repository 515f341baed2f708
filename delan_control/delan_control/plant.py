"""The simulated "true" robot: a pure integrator (no rclpy) of the URDF with configurable mismatch.

Integrator (default ``'rk4'``), per physics step ``dt``: classical RK4 of
``qdd = (H(q) + A)^-1 (tau - n(q, qd) - tau_f(qd))``, friction in every stage. The Coulomb term
is stiff on a light joint (time constant ``eps H / fc``: ~20 us on the 7-DoF arm's wrist, far
below the step); there the armature ``A = dt (b + fc/eps) - H_min`` keeps the explicit stages
stable (``dt S / (H + A) <= 1``) and the step settles on the quasi-static velocity the friction
balances, at the cost of an unmodelled inertia ``A qdd`` while the joint creeps. Light links
coupled to each other (a humanoid's forearm and hand) have directions of motion lighter than
any diagonal entry of ``H``; there the friction joints get more armature, until
``H + A >= dt S / 2`` as matrices. ``A`` is zero where friction dominates no direction of
motion, which RK4 then integrates to 4th order. (A split step,
implicit friction first and RK4 without it, is stable too but wrong where friction is stiff: its
friction sub-step zeroes a light joint's velocity each step and the rigid-body step then reports
``tau dt / H``, a motion the torques do not explain.) Without friction, energy is conserved to
~4e-10 of the kinetic energy swing on the 2-DoF arm and ~6e-6 on the chaotic 7-DoF arm over 10 s
at 1 kHz.

``'semi_implicit_euler'``: one ABA per step, the same implicit friction folded into the step
(``qd+ = qd + dt (H + dt S)^-1 (tau - n - tau_f)``, ``q+ = q + dt qd+``). About 3x cheaper but
only 1st order and only conditionally stable: it drifts ~3 % in energy on the frictionless
2-DoF arm and diverges on the frictionless 7-DoF arm (stiff gyroscopic coupling of the light
wrist). Kept for speed experiments with friction on; not the default.

The mismatch's joint effects (:mod:`delan_common.joint_effects`: Stribeck and asymmetric
friction, springs) enter the same places, through the truth model's own :class:`JointEffects`:
the shaped friction in every RK4 stage, its largest slope sizing the armature, its secant slope
``S = tau_f / qd`` the Euler step's implicit armature; the spring torque ``-k (q - q0)`` at
each stage's position, explicit as gravity is (stable while ``dt sqrt(k / H)`` stays well
below 1). With no effect on, the step runs the plain friction law inline, as fast as without
them.

Torque is clamped to the URDF effort limits, then zeroed on the joints that have no motor
(``actuated``: a mask or joint names; default every joint actuated, and then the clamp is
exactly what it was without the option): an under-actuated robot (a Furuta pendulum's passive
pendulum) gets no torque there whatever it is commanded, and the reported torque
(:attr:`Plant.last_torque`, the return value of :meth:`Plant.step`) is that zero. An optional
Gaussian torque disturbance (``torque_noise``, N m per physics step) is added after clamping
(not part of the reported torque; a disturbance, not a motor's torque, so it acts on passive
joints too unless their ``torque_noise`` is 0); ``measure()`` adds position/velocity
measurement noise. Position limits act as inelastic end stops (position clamped, velocity into
the stop zeroed) unless disabled.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Optional, Sequence, Tuple, Union

import numpy as np
import pinocchio as pin

from delan_common.dynamics import COULOMB_SMOOTHING
from delan_common.robot_model import ArrayLike, Mismatch, RobotModel, _per_joint

INTEGRATORS = ('rk4', 'semi_implicit_euler')
#: largest friction rate ``dt S / (H + A)`` of any direction of motion that the armature lets
#: through (RK4 is stable to 2.78 on a decaying mode); each joint's own is held to 1
STIFF_RATE_BOUND = 2.0
#: rounds of that check, each raising the armature by its shortfall
STIFF_ARMATURE_ROUNDS = 20


def _revolute_twin(model: RobotModel) -> RobotModel:
    """``model`` with every continuous joint written as an (unlimited) revolute joint."""
    if 'continuous' not in model.joint_types:
        return model
    root = ET.fromstring(model.xml)
    for joint in root.findall('joint'):
        if joint.get('type') == 'continuous':
            joint.set('type', 'revolute')
            limit = joint.find('limit')
            if limit is None:
                limit = ET.SubElement(joint, 'limit', effort='0', velocity='0')
            limit.set('lower', '-1e9')
            limit.set('upper', '1e9')
    twin = RobotModel(
        ET.tostring(root, encoding='unicode'), model.mismatch, **model.selection_kwargs()
    )
    assert twin.joint_names == model.joint_names and twin.model.nq == twin.n
    return twin


class Plant:
    """``Plant(robot, mismatch=None, physics_rate=1000.0, ...)``.

    ``robot`` is a :class:`RobotModel` (its nominal URDF is used) or anything
    :class:`RobotModel` accepts (path, file name, XML). ``self.truth`` is the mismatched model
    the plant integrates; ``self.nominal`` the URDF as written. ``actuated``: which joints have
    a motor, ``n`` bools in model order or a list of joint names (None: all); the others get
    zero torque (:meth:`clamp`). The mask is :attr:`actuated` ``(n,)`` bool.
    """

    def __init__(
        self,
        robot: Union[RobotModel, str],
        mismatch: Optional[Mismatch] = None,
        *,
        physics_rate: float = 1000.0,
        integrator: str = 'rk4',
        torque_noise: ArrayLike = 0.0,
        position_noise: ArrayLike = 0.0,
        velocity_noise: ArrayLike = 0.0,
        seed: Optional[int] = None,
        q0: Optional[ArrayLike] = None,
        qd0: Optional[ArrayLike] = None,
        clamp_torque: bool = True,
        position_limits: bool = True,
        actuated: Optional[Union[Sequence[bool], Sequence[str], np.ndarray]] = None,
    ):
        nominal = robot if isinstance(robot, RobotModel) else RobotModel(robot)
        if not nominal.mismatch.is_identity():
            nominal = nominal.mismatched(Mismatch())
        self.nominal = nominal
        self.truth = nominal.mismatched(mismatch or Mismatch())
        self.n = self.truth.n
        self.joint_names = list(self.truth.joint_names)
        if not (np.isfinite(physics_rate) and physics_rate > 0):
            raise ValueError(f'physics_rate must be > 0, got {physics_rate}')
        if integrator not in INTEGRATORS:
            raise ValueError(f'integrator {integrator!r} not in {INTEGRATORS}')
        self.physics_rate = float(physics_rate)
        self.dt = 1.0 / self.physics_rate
        self.integrator = integrator
        n = self.n
        self.torque_noise = torque_noise
        self.position_noise = position_noise
        self.velocity_noise = velocity_noise
        self.rng = np.random.default_rng(seed)
        self.clamp_torque = clamp_torque
        self.position_limits = position_limits
        spec = self.truth.spec
        self._lim = spec.effort_limit.copy()
        self.actuated = self._actuated_mask(actuated)
        self._passive = ~self.actuated
        self._under = bool(self._passive.any())  # False: clamp exactly as without the option
        self._lower = spec.lower.copy()
        self._upper = spec.upper.copy()
        self._has_limits = bool(np.any(np.isfinite(self._lower) | np.isfinite(self._upper)))
        self._visc = self.truth.viscous.copy()
        self._coul = self.truth.coulomb.copy()
        self._has_friction = bool(np.any(self._visc != 0) or np.any(self._coul != 0))
        self._coul_eps = self._coul * (1.0 / COULOMB_SMOOTHING)
        self._effects = self.truth.effects
        # shaped friction or a spring: the stages call the shared effects, else the inline law
        self._extra = self._effects.shaped or self._effects.sprung
        # Step constants as vectors: numpy computes array * array faster than array * Python
        # float (no scalar conversion per call), with bitwise the same products.
        h = self.dt
        self._k_inv_eps = np.full(n, 1.0 / COULOMB_SMOOTHING)
        self._k_tiny = np.full(n, 1e-300)
        self._k_rk4 = tuple(
            np.full(n, x) for x in (h, 0.5 * h, h / 6.0, 0.5 * h * h, h * h / 6.0, 0.25 * h * h)
        )
        self._no_stop = bytes(n)  # (q > upper).tobytes() when no joint is past a stop
        self._zero = np.zeros(n)
        # Private Pinocchio models: the step writes armature (= dt * friction slope) into them.
        # Continuous joints become unlimited revolute ones there (same dynamics, nq = 1), so
        # the inner loop needs no angle -> (cos, sin) conversion.
        twin = _revolute_twin(self.truth)
        self._m = twin.model.copy()
        self._d = self._m.createData()
        self._m0 = twin.model.copy()  # RK4 stages
        self._stiff_armature = self._armature_for_stiff_friction(twin)
        self._m0.armature = self._stiff_armature
        self._d0 = self._m0.createData()
        self._mg = twin.model.copy()  # no gravity: (H + A)^-1 x via ABA(q, 0, x)
        self._mg.gravity = pin.Motion.Zero()
        self._dg = self._mg.createData()
        # q -> Pinocchio configuration; the identity (no call at all) without continuous joints
        self._cfg = None if twin.model.nq == n and twin._identity_config else twin.configuration
        self.q = np.zeros(n)
        self.qd = np.zeros(n)
        self.t = 0.0
        self.steps = 0
        self.last_torque = np.zeros(n)  # clamped torque of the last step (what the motors gave)
        self.blowups = 0  # integrations that went non-finite (see advance)
        self.reset(q0, qd0)

    def _actuated_mask(
        self, actuated: Optional[Union[Sequence[bool], Sequence[str], np.ndarray]]
    ) -> np.ndarray:
        """``(n,)`` bool from the ``actuated`` option: None (all), bools or joint names."""
        if actuated is None:
            return np.ones(self.n, dtype=bool)
        items = list(actuated)
        if items and all(isinstance(x, str) for x in items):
            unknown = [x for x in items if x not in self.joint_names]
            if unknown:
                raise ValueError(f'actuated: unknown joints {unknown} (have {self.joint_names})')
            return np.array([name in items for name in self.joint_names], dtype=bool)
        mask = np.asarray(items)
        if mask.shape != (self.n,) or mask.dtype != bool:
            raise ValueError(
                f'actuated needs {self.n} bools or joint names, got {np.asarray(actuated)!r}'
            )
        return mask.copy()

    def _armature_for_stiff_friction(self, model: RobotModel) -> np.ndarray:
        """Armature ``A (n,)`` that keeps RK4 with explicit friction stable: the friction's
        largest slope ``S0`` (``b + fc / eps``, at rest, for the URDF's law; see
        :meth:`JointEffects.max_slope`) against the joint's smallest inertia ``H_min`` over
        sampled configurations, ``A = max(0, dt S0 - H_min)``, so ``dt S0 / (H + A) <= 1`` (RK4
        is stable to 2.78), then raised on the friction joints until ``H + A - dt S0 /
        STIFF_RATE_BOUND`` is positive semi-definite on every sample (the coupled light
        directions). Zero where friction dominates no direction of motion."""
        if not self._has_friction:
            return np.zeros(self.n)
        lo, hi = model.sample_bounds()
        rng = np.random.default_rng(0)
        q = np.vstack([0.5 * (lo + hi), np.zeros(self.n), rng.uniform(lo, hi, (32, self.n))])
        H = model.mass_matrix(q)
        stiffness = self.dt * self._effects.max_slope()
        armature = np.maximum(0.0, stiffness - np.diagonal(H, axis1=1, axis2=2).min(axis=0))
        # Light links coupled to each other (a humanoid's wrist and hand) move in directions
        # lighter than any diagonal entry, where the stages' friction rate dt S / (H + A) can
        # pass RK4's bound although no joint's own ratio does: the friction joints get more
        # armature until H + A >= dt S / STIFF_RATE_BOUND as matrices on every sample.
        rubbing = stiffness > 0.0
        for _ in range(STIFF_ARMATURE_ROUNDS):
            slack = H + np.diag(armature - stiffness / STIFF_RATE_BOUND)
            margin = float(np.linalg.eigvalsh(slack).min())
            if margin >= 0.0 or not rubbing.any():
                break
            armature[rubbing] += 1.05 * -margin
        return armature

    @property
    def torque_noise(self) -> np.ndarray:
        """Std of the torque disturbance per joint [N m], drawn every physics step."""
        return self._torque_noise

    @torque_noise.setter
    def torque_noise(self, value: ArrayLike) -> None:
        self._torque_noise = _per_joint(value, self.n, 'torque_noise', nonnegative=True)
        self._noisy = bool(np.any(self._torque_noise > 0))

    # ------------------------------------------------------------------ state
    def reset(
        self, q0: Optional[ArrayLike] = None, qd0: Optional[ArrayLike] = None, t: float = 0.0
    ) -> None:
        """Put the arm at ``q0, qd0`` ``(n,)`` (default: zeros) at time ``t`` [s], with the step
        count and the last torque cleared."""
        n = self.n
        self.q = np.zeros(n) if q0 is None else _per_joint(q0, n, 'q0').copy()
        self.qd = np.zeros(n) if qd0 is None else _per_joint(qd0, n, 'qd0').copy()
        self.t = float(t)
        self._t0 = float(t)
        self.steps = 0
        self.last_torque = np.zeros(n)

    def state(self) -> Tuple[float, np.ndarray, np.ndarray]:
        """``(t, q, qd)``: exact (noise-free) copies."""
        return self.t, self.q.copy(), self.qd.copy()

    def measure(self) -> Tuple[np.ndarray, np.ndarray]:
        """``(q, qd)`` with the configured measurement noise (fresh arrays)."""
        q, qd = self.q, self.qd
        if self._pos_noisy:
            q = q + self.rng.normal(size=self.n) * self._position_noise
        if self._vel_noisy:
            qd = qd + self.rng.normal(size=self.n) * self._velocity_noise
        return q.copy() if q is self.q else q, qd.copy() if qd is self.qd else qd

    def measure_into(self, q_out: np.ndarray, qd_out: np.ndarray) -> None:
        """:meth:`measure` written into given arrays (bitwise the same values, the same draws):
        the sim fills its joint-state message this way without allocating."""
        if self._pos_noisy:
            np.add(self.q, self.rng.normal(size=self.n) * self._position_noise, out=q_out)
        else:
            q_out[:] = self.q
        if self._vel_noisy:
            np.add(self.qd, self.rng.normal(size=self.n) * self._velocity_noise, out=qd_out)
        else:
            qd_out[:] = self.qd

    @property
    def position_noise(self) -> np.ndarray:
        """Std of the position measurement noise per joint ``(n,)`` [rad or m], added by
        :meth:`measure`."""
        return self._position_noise

    @position_noise.setter
    def position_noise(self, value: ArrayLike) -> None:
        self._position_noise = _per_joint(value, self.n, 'position_noise', nonnegative=True)
        self._pos_noisy = bool(np.any(self._position_noise > 0))

    @property
    def velocity_noise(self) -> np.ndarray:
        """Std of the velocity measurement noise per joint ``(n,)`` [rad/s or m/s], added by
        :meth:`measure`."""
        return self._velocity_noise

    @velocity_noise.setter
    def velocity_noise(self, value: ArrayLike) -> None:
        self._velocity_noise = _per_joint(value, self.n, 'velocity_noise', nonnegative=True)
        self._vel_noisy = bool(np.any(self._velocity_noise > 0))

    def energy(self) -> Tuple[float, float]:
        """``(T, V)`` of the true robot [J]; ``V`` includes the springs' potential."""
        T, V = self.truth.energy(self.q, self.qd)
        return float(T), float(V)

    def acceleration(self, q: np.ndarray, qd: np.ndarray, tau: np.ndarray) -> np.ndarray:
        """Continuous-time acceleration of the true robot (ABA with friction and the joint
        effects), no clamping."""
        return self.truth.forward(q, qd, tau)

    def clamp(self, tau: ArrayLike) -> np.ndarray:
        """The torque ``(n,)`` the motors give for the command ``tau (n,)``: clamped to the
        effort limits (when ``clamp_torque``), zero on joints without a motor (``actuated``).
        ``ValueError`` on a wrong shape or a non-finite value."""
        tau = np.asarray(tau, dtype=np.float64)
        if tau.shape != (self.n,):
            raise ValueError(f'torque needs shape ({self.n},), got {tau.shape}')
        if not np.all(np.isfinite(tau)):
            raise ValueError('torque has NaN/Inf')
        if self.clamp_torque:
            out = np.minimum(np.maximum(tau, -self._lim), self._lim)
        else:
            out = tau.copy()
        if self._under:
            out[self._passive] = 0.0
        return out

    # ------------------------------------------------------------------ integration
    def step(self, tau: ArrayLike, n_steps: int = 1) -> np.ndarray:
        """Apply ``tau`` (clamped) for ``n_steps`` physics steps; returns the clamped torque."""
        applied = self.clamp(tau)
        self.advance(applied, n_steps)
        return applied.copy()

    def advance(self, applied: np.ndarray, n_steps: int = 1) -> None:
        """:meth:`step` without checks or clamping: ``applied`` must come from :meth:`clamp`.

        A state the integrator made non-finite (an arm flung far beyond what the step size
        resolves) is never kept: the arm stops where it was before these steps and
        :attr:`blowups` counts it, so the sim never publishes NaN and a controller keeps
        getting states it can answer."""
        self.last_torque = applied
        if n_steps <= 0:
            return
        q0 = self.q  # the integrators rebind, never write into it
        if self.integrator == 'rk4':
            self._run_rk4(applied, n_steps)
        else:
            self._run_euler(applied, n_steps)
        if not (np.isfinite(self.q).all() and np.isfinite(self.qd).all()):
            self.q, self.qd = q0, np.zeros(self.n)
            self.blowups += 1
        self.steps += n_steps
        self.t = self._t0 + self.steps * self.dt

    def _slope(self, qd: np.ndarray) -> np.ndarray:
        """Secant slope of the friction, ``S = b + fc tanh(qd/eps) / qd`` (-> ``b + fc/eps`` at
        rest): ``tau_f(qd) = S qd``, and ``dt S`` is the implicit armature."""
        ax = np.abs(qd)
        ax *= self._k_inv_eps
        ax += self._k_tiny  # > 0 always: tanh(ax)/ax -> 1 at rest
        S = np.tanh(ax)
        S /= ax
        S *= self._coul_eps
        S += self._visc
        return S

    def _run_euler(self, applied: np.ndarray, n_steps: int) -> None:
        m, d, cfg = self._m, self._d, self._cfg
        dt = self._k_rk4[0]
        q, qd = self.q, self.qd
        fric = self._has_friction
        noisy = self._noisy
        limits = self.position_limits and self._has_limits
        fx = self._effects
        slope = fx.slope if fx.shaped else self._slope
        spring, sprung = fx.spring_gradient, fx.sprung
        aba, stops, rng, sig, n = pin.aba, self._stops, self.rng, self._torque_noise, self.n
        for _ in range(n_steps):
            u = applied + rng.normal(size=n) * sig if noisy else applied
            if fric:
                S = slope(qd)
                m.armature = dt * S
                u = u - S * qd
            if sprung:
                u = u - spring(q)
            qd = qd + dt * aba(m, d, q if cfg is None else cfg(q), qd, u)
            q = q + dt * qd
            if limits:
                q, qd = stops(q, qd)
        self.q, self.qd = q, qd

    def _run_rk4(self, applied: np.ndarray, n_steps: int) -> None:
        # classical RK4 for q'' = a(q, q'), written out for a second-order ODE:
        #   a1 = a(q, v); a2 = a(q + h/2 v, v + h/2 a1); a3 = a(q + h/2 v + h^2/4 a1, v + h/2 a2)
        #   a4 = a(q + h v + h^2/2 a2, v + h a3)
        #   q+ = q + h v + h^2/6 (a1 + a2 + a3),  v+ = v + h/6 (a1 + 2 a2 + 2 a3 + a4)
        # This loop is the simulator's cost (bench/bench_sim.py): 5 ABA calls and ~35 numpy
        # operations on n-vectors per step, each ~0.3 us of call overhead, so constants are
        # vectors (a Python-float scalar costs twice as much per operation) and no operation
        # is repeated. Same operations in the same order as ever: bitwise the same results.
        cfg = self._cfg
        h, h2, h6, hh2, hh6, h22 = self._k_rk4
        q, v = self.q, self.qd
        fric = self._has_friction
        m, d = self._m0, self._d0  # armature: self._stiff_armature
        noisy = self._noisy
        limits = self.position_limits and self._has_limits
        aba, stops, rng, sig, n = pin.aba, self._stops, self.rng, self._torque_noise, self.n
        visc, coul, inv_eps, tanh = self._visc, self._coul, self._k_inv_eps, np.tanh
        extra, passive = self._extra, self._effects.passive  # the joint effects, if any
        for _ in range(n_steps):
            u = applied + rng.normal(size=n) * sig if noisy else applied
            c = q if cfg is None else cfg(q)
            if extra:
                a1 = aba(m, d, c, v, u - passive(q, v))
            elif fric:
                a1 = aba(m, d, c, v, u - (visc * v + coul * tanh(v * inv_eps)))
            else:
                a1 = aba(m, d, c, v, u)
            hv = h2 * v
            q2 = q + hv
            qh = q2 + hv  # q + h v
            q3 = q2 + h22 * a1
            vs = v + h2 * a1
            a = aba(
                m,
                d,
                q2 if cfg is None else cfg(q2),
                vs,
                u - passive(q2, vs)
                if extra
                else u - (visc * vs + coul * tanh(vs * inv_eps))
                if fric
                else u,
            )  # a2
            sq = a1 + a
            sv = sq + a
            q4 = qh + hh2 * a
            vs = v + h2 * a
            a = aba(
                m,
                d,
                q3 if cfg is None else cfg(q3),
                vs,
                u - passive(q3, vs)
                if extra
                else u - (visc * vs + coul * tanh(vs * inv_eps))
                if fric
                else u,
            )  # a3
            sq += a
            sv += a + a  # + 2 a3 (exactly)
            vs = v + h * a
            sv += aba(
                m,
                d,
                q4 if cfg is None else cfg(q4),
                vs,
                u - passive(q4, vs)
                if extra
                else u - (visc * vs + coul * tanh(vs * inv_eps))
                if fric
                else u,
            )  # a4
            q = qh + hh6 * sq
            v = v + h6 * sv
            if limits:
                q, v = stops(q, v)
        self.q, self.qd = q, v

    def _stops(self, q: np.ndarray, qd: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        """Inelastic end stops: clamp the position, zero the velocity into the stop."""
        over = q > self._upper
        under = q < self._lower
        if over.tobytes() != self._no_stop or under.tobytes() != self._no_stop:  # cheap any()
            q = np.minimum(np.maximum(q, self._lower), self._upper)
            qd = np.where(over, np.minimum(qd, 0.0), np.where(under, np.maximum(qd, 0.0), qd))
        return q, qd

    def run(self, tau: ArrayLike, duration: float) -> np.ndarray:
        """Apply a constant ``tau`` for ``round(duration * physics_rate)`` steps."""
        return self.step(tau, int(round(duration * self.physics_rate)))
