"""Per-joint effects of the simulated "true" robot that rigid-body identification cannot fit.

One implementation, shared by the plant's integrator (:mod:`delan_control.plant`) and the
truth model (:class:`~delan_common.robot_model.RobotModel` with a
:class:`~delan_common.robot_model.Mismatch`), so the plant integrates exactly what the truth
model's ``forward`` / ``inverse`` / ``friction`` / ``gravity`` / ``energy`` report. All arrays are
``(n,)`` per joint (``eps = COULOMB_SMOOTHING``):

* friction (dissipative, ``tau_f(0) = 0``, ``qd tau_f(qd) >= 0``)::

      tau_f(qd) = b qd + fc(qd) tanh(qd / eps)
      fc(qd)    = fc (1 + a tanh(qd / eps)) (1 + (r - 1) exp(-(qd / vs)^2))

  ``a`` (``coulomb_asymmetry``, in [-1, 1]): the Coulomb level is ``fc (1 + a)`` moving in
  the positive direction and ``fc (1 - a)`` in the negative one, blended by the same tanh.
  ``r`` (``stribeck_static_ratio``, >= 1) and ``vs`` (``stribeck_velocity``, > 0): Stribeck
  friction, the level starts at the break-away (static) friction ``fs = r fc`` and decays to
  ``fc`` over a few ``vs``; the tanh ramp (``eps`` = 0.05) rounds off the peak the torque
  reaches (~1.17 ``fc`` for ``r = 1.5, vs = 0.1``). ``a = 0, r = 1`` is the URDF's law
  (:func:`~delan_common.dynamics.friction_torque`) bit for bit.
* spring (conservative; a torsion spring, counterbalance or cable pulling toward ``q0``)::

      tau_s(q) = -k (q - q0),   V_s(q) = k (q - q0)^2 / 2

  ``k`` (``spring_stiffness`` >= 0, N m/rad or N/m), ``q0`` (``spring_offset``). Linear in
  ``q`` on purpose: a rigid body's gravity torque on a revolute joint is a trigonometric
  polynomial of the angles, so no inertial parameter can absorb it. On a continuous joint it
  acts on the unwrapped angle the plant integrates (a cable winds up).

The dynamics then read ``H qdd + c + g + k (q - q0) + tau_f(qd) = tau``: the truth model counts
the spring in ``g = dV/dq`` and in the potential energy.
"""

from __future__ import annotations

import numpy as np

from delan_common.dynamics import COULOMB_SMOOTHING, friction_torque

_TINY = 1e-300  # keeps |x| > 0 in tanh(x) / x, whose limit at rest is 1


class JointEffects:
    """Friction law and spring of the true robot's joints (module docstring), ``(n,)`` each.

    ``shaped``: the friction differs from the URDF's law (Stribeck or asymmetry on a joint with
    Coulomb friction); ``sprung``: some joint has a spring. With neither, every method returns
    what the plain law gives, so a robot without these effects computes as it always has.
    """

    def __init__(
        self,
        viscous: np.ndarray,
        coulomb: np.ndarray,
        *,
        static_ratio: np.ndarray,
        stribeck_velocity: np.ndarray,
        asymmetry: np.ndarray,
        stiffness: np.ndarray,
        offset: np.ndarray,
    ):
        arrays = (viscous, coulomb, static_ratio, stribeck_velocity, asymmetry, stiffness, offset)
        viscous, coulomb, r, vs, a, k, q0 = (np.asarray(x, dtype=np.float64) for x in arrays)
        if np.any(r < 1.0):
            raise ValueError(f'stribeck_static_ratio must be >= 1, got {r.tolist()}')
        if np.any(vs <= 0.0):
            raise ValueError(f'stribeck_velocity must be > 0, got {vs.tolist()}')
        if np.any(np.abs(a) > 1.0):
            raise ValueError(f'coulomb_asymmetry must be in [-1, 1], got {a.tolist()}')
        if np.any(k < 0.0):
            raise ValueError(f'spring_stiffness must be >= 0, got {k.tolist()}')
        self.viscous, self.coulomb = viscous, coulomb
        self.static_ratio, self.stribeck_velocity, self.asymmetry = r, vs, a
        self.stiffness, self.offset = k, q0
        self.shaped = bool(np.any((coulomb != 0) & ((r != 1.0) | (a != 0.0))))
        self.sprung = bool(np.any(k != 0.0))
        # constants of coulomb_level: fc (1 + a t) (1 + (r - 1) e) = (fc + fc a t) (1 + dr e)
        self._inv_eps = np.full(coulomb.shape, 1.0 / COULOMB_SMOOTHING)
        self._fc_a = coulomb * a
        self._dr = r - 1.0
        self._neg_inv_vs2 = -1.0 / (vs * vs)

    def coulomb_level(self, qd: np.ndarray) -> np.ndarray:
        """``fc(qd)``: the Coulomb level at velocity ``qd`` (``fc`` when not ``shaped``)."""
        if not self.shaped:
            return np.broadcast_to(self.coulomb, np.shape(qd))
        return self._level(qd, np.tanh(qd * self._inv_eps))

    def _level(self, qd: np.ndarray, t: np.ndarray) -> np.ndarray:
        """``fc(qd)`` given ``t = tanh(qd / eps)`` (the friction needs ``t`` itself too)."""
        return (self.coulomb + self._fc_a * t) * (
            1.0 + self._dr * np.exp(qd * qd * self._neg_inv_vs2)
        )

    def friction(self, qd: np.ndarray) -> np.ndarray:
        """``tau_f(qd)`` ``(..., n)``: the URDF's law (``friction_torque``) with the Coulomb
        level :meth:`coulomb_level` in place of ``fc``."""
        if not self.shaped:
            return friction_torque(qd, self.viscous, self.coulomb)
        t = np.tanh(qd * self._inv_eps)
        return self.viscous * qd + self._level(qd, t) * t

    def slope(self, qd: np.ndarray) -> np.ndarray:
        """Secant slope ``S = tau_f(qd) / qd > 0`` (-> ``b + r fc / eps`` at rest): the
        friction as a velocity-dependent damping, ``tau_f = S qd``, which the semi-implicit
        step treats implicitly (armature ``dt S``)."""
        ax = np.abs(qd) * self._inv_eps + _TINY
        return self.viscous + self.coulomb_level(qd) * self._inv_eps * (np.tanh(ax) / ax)

    def max_slope(self) -> np.ndarray:
        """Largest tangent slope ``max_qd d tau_f / d qd`` ``(n,)``: the stiffness an explicit
        step must survive. ``b + fc / eps`` at rest for the URDF's law; for a shaped law its
        maximum over a fine velocity grid (asymmetry moves it slightly off rest) and never
        below the slope at rest, ``b + r fc / eps``."""
        at_rest = self.viscous + self.static_ratio * self.coulomb * self._inv_eps
        if not self.shaped:
            return at_rest
        span = 10.0 * np.maximum(self.stribeck_velocity.max(), COULOMB_SMOOTHING)
        v = np.linspace(-span, span, 20001)[:, None] * np.ones(self.coulomb.shape)
        grid = np.gradient(self.friction(v), v[:, 0], axis=0).max(axis=0)
        return np.maximum(at_rest, grid)

    def spring_gradient(self, q: np.ndarray) -> np.ndarray:
        """``dV_s/dq = k (q - q0) = -tau_s(q)`` ``(..., n)``: the spring's share of ``g``."""
        return self.stiffness * (q - self.offset)

    def spring_energy(self, q: np.ndarray) -> np.ndarray:
        """``V_s(q) = sum_i k_i (q_i - q0_i)^2 / 2`` ``(...)`` [J]."""
        d = q - self.offset
        return 0.5 * np.sum(self.stiffness * d * d, axis=-1)

    def passive(self, q: np.ndarray, qd: np.ndarray) -> np.ndarray:
        """``tau_f(qd) + k (q - q0)``: what friction and spring take from the motor torque
        (``H qdd + c + g_rigid = tau - passive``)."""
        f = self.friction(qd)
        return f + self.spring_gradient(q) if self.sprung else f
