"""Torque control laws as pure functions of arrays (no ROS), so they are tested and reused alone.

The laws hold any :class:`~delan_common.dynamics.DynamicsModel`:

* computed torque: ``tau = model.inverse(q, qd, qdd_ref + Kp e + Kd e_dot)`` -- gains in 1/s^2
  and 1/s, i.e. they set the closed-loop natural frequency independent of the arm's inertia;
* feed-forward + PD: ``tau = model.inverse(q_ref, qd_ref, qdd_ref) + Kp e + Kd e_dot`` -- gains in
  N*m/rad and N*m*s/rad; robust when the model is poor because feedback does not pass through it;
* computed torque with URDF feedback: ``tau = model.inverse(q, qd, qdd_ref) + H_urdf(q) (Kp e +
  Kd e_dot)`` -- the computed-torque gains (1/s^2, 1/s) through the URDF's mass matrix: a learned
  model whose inertia is poorly excited in some direction (near zero, or several times too
  large: no feedback there, or a loop unstable at the control rate) does not set the gains;
* feed-forward + URDF PD: ``tau = model.inverse(q_ref, qd_ref, qdd_ref) + H_urdf(q) (Kp e +
  Kd e_dot)`` -- the same feedback, and the model evaluated on the reference only, so it adds no
  loop gain at all: a learned velocity dependence that is too steep (friction or Coriolis terms
  overestimated, which through the measured velocity is negative damping) cannot destabilise
  the loop, it only biases the feed-forward.

* energy -- swing-up and balance of an under-actuated robot (a Furuta pendulum) on the model's
  energies: :class:`~delan_control.energy_control.EnergySwingUp`, built per model by
  :meth:`EnergyLaw.build` (linearisation and Riccati solution: off the control cycle). It
  tracks no reference: the actuated joints are held at their entries of the upright.

With no model (``pd``) the feed-forward term is zero: a plain PD controller (for ``energy``,
towards the upright at rest, which the caller passes as the reference).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional, Tuple

import numpy as np

from delan_common.dynamics import DynamicsModel, gravity_stiffness, pull_away
from delan_control.energy_control import EnergyControlConfig, EnergySwingUp

if TYPE_CHECKING:
    from delan_common.robot_model import RobotModel
    from delan_common.urdf_joints import RobotDescription

#: swing-up and balance on the model's energies (under-actuated robots)
ENERGY_LAW = 'energy'
LAWS = (
    'computed_torque',
    'feedforward_pd',
    'computed_torque_urdf_feedback',
    'feedforward_urdf_pd',
    ENERGY_LAW,
)
#: laws whose feedback goes through the URDF's mass matrix
URDF_FEEDBACK_LAWS = ('computed_torque_urdf_feedback', 'feedforward_urdf_pd')


@dataclass
class Gains:
    """Per-joint gains ``(n,)`` for both laws."""

    ct_kp: np.ndarray  # computed torque [1/s^2]
    ct_kd: np.ndarray  # computed torque [1/s]
    kp: np.ndarray  # feed-forward + PD / plain PD [N*m/rad]
    kd: np.ndarray  # feed-forward + PD / plain PD [N*m*s/rad]


def wrap_angle(x: np.ndarray) -> np.ndarray:
    """``x`` wrapped to ``(-pi, pi]``."""
    return -np.remainder(-x + np.pi, 2.0 * np.pi) + np.pi


def position_error(
    q_ref: np.ndarray, q: np.ndarray, continuous: Optional[np.ndarray] = None
) -> np.ndarray:
    """``q_ref - q``, wrapped to ``(-pi, pi]`` where the boolean mask ``continuous`` is set: a
    continuous joint's angle is only defined modulo 2 pi (a driver may report it wrapped), and
    2 pi - 0.01 rad off is 0.01 rad off, not a turn to drive back."""
    e = q_ref - q
    if continuous is not None:
        e = np.where(continuous, wrap_angle(e), e)
    return e


def control_torque(
    model: Optional[DynamicsModel],
    law: str,
    gains: Gains,
    q: np.ndarray,
    qd: np.ndarray,
    q_ref: np.ndarray,
    qd_ref: np.ndarray,
    qdd_ref: np.ndarray,
    feedback_model: Optional[DynamicsModel] = None,
    continuous: Optional[np.ndarray] = None,
    energy: Optional[EnergySwingUp] = None,
) -> np.ndarray:
    """Unclamped joint torque ``(n,)`` of ``law`` with ``model`` (None = PD only);
    ``feedback_model`` (the URDF's) is needed by the ``URDF_FEEDBACK_LAWS``, ``energy`` (the
    law built on ``model``, :meth:`EnergyLaw.build`) by :data:`ENERGY_LAW`; ``continuous``
    masks the continuous joints, whose position error is wrapped."""
    return control_terms(
        model, law, gains, q, qd, q_ref, qd_ref, qdd_ref, feedback_model, continuous, energy
    )[0]


def control_terms(
    model: Optional[DynamicsModel],
    law: str,
    gains: Gains,
    q: np.ndarray,
    qd: np.ndarray,
    q_ref: np.ndarray,
    qd_ref: np.ndarray,
    qdd_ref: np.ndarray,
    feedback_model: Optional[DynamicsModel] = None,
    continuous: Optional[np.ndarray] = None,
    energy: Optional[EnergySwingUp] = None,
) -> Tuple[np.ndarray, Optional[np.ndarray]]:
    """``(torque, model torque)``: :func:`control_torque` and the model's share of it, what
    ``model.inverse`` returned within the law (None without a model) -- for computed torque
    that is all of it, the feedback acceleration included: reported, not computed again; for
    :data:`ENERGY_LAW` all of it too (the law is the model's)."""
    e = position_error(q_ref, q, continuous)
    e_dot = qd_ref - qd
    if model is None:
        return gains.kp * e + gains.kd * e_dot, None
    if law == ENERGY_LAW:
        if energy is None:
            raise ValueError(f'law {ENERGY_LAW} needs the swing-up law built on the model')
        tau = energy.command(q, qd)
        return tau, tau
    if law == 'computed_torque':
        ff = np.asarray(model.inverse(q, qd, qdd_ref + gains.ct_kp * e + gains.ct_kd * e_dot))
        return ff, ff
    if law == 'feedforward_pd':
        ff = np.asarray(model.inverse(q_ref, qd_ref, qdd_ref))
        return ff + gains.kp * e + gains.kd * e_dot, ff
    if law in URDF_FEEDBACK_LAWS:
        if feedback_model is None:
            raise ValueError(f'{law} needs the URDF model (its inertias) for the feedback')
        v = gains.ct_kp * e + gains.ct_kd * e_dot
        ff = np.asarray(
            model.inverse(q, qd, qdd_ref)
            if law == 'computed_torque_urdf_feedback'
            else model.inverse(q_ref, qd_ref, qdd_ref)
        )
        return ff + np.asarray(feedback_model.mass_matrix(q)) @ v, ff
    raise ValueError(f'unknown control law {law!r}; expected one of {LAWS}')


class EnergyLaw:
    """What :data:`ENERGY_LAW` needs besides the model, fixed for the controller's life: the
    actuated joints (``actuated (n,)`` bool; the others are passive), the ``upright (n,)``
    posture (the passive joints' upright, the actuated joints' hold position), the effort
    limits ``(n,)`` (the actuated entries clip the law) and the gains. :meth:`build` makes the
    law for one model; ``ValueError`` says why one cannot be made."""

    def __init__(
        self,
        actuated: np.ndarray,
        upright: np.ndarray,
        effort_limit: np.ndarray,
        config: Optional[EnergyControlConfig] = None,
    ):
        self.actuated = np.asarray(actuated, dtype=bool).reshape(-1)
        n = self.actuated.size
        self.upright = np.array(upright, dtype=np.float64).reshape(-1)
        self.effort_limit = np.broadcast_to(
            np.asarray(effort_limit, dtype=np.float64), (n,)
        ).copy()
        self.config = config or EnergyControlConfig()
        if self.actuated.all() or not self.actuated.any():
            raise ValueError(
                f'law {ENERGY_LAW} needs actuated and passive joints: set actuated_joints to the '
                'joints with a motor (the others swing freely)'
            )
        if self.upright.shape != (n,) or not np.all(np.isfinite(self.upright)):
            raise ValueError(
                f'law {ENERGY_LAW} needs upright_position: {n} finite values (the posture to '
                'swing up to; the actuated entries are where those joints are held)'
            )

    def reference(self) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(q, qd, qdd)`` ``(n,)``: the upright at rest, what the law works towards (the
        reference a PD fall-back holds, ``~/controller_state`` reports)."""
        zero = np.zeros_like(self.upright)
        return self.upright.copy(), zero, zero.copy()

    def build(self, model: Optional[DynamicsModel], kind: str) -> EnergySwingUp:
        """:class:`EnergySwingUp` on ``model`` (of model kind ``kind``, for the message):
        refused for a model without energies (None: ``pd``) or where the law cannot be designed
        (no LQR at the upright: a learned model singular there, ...)."""
        if model is None or not callable(getattr(model, 'energy', None)):
            raise ValueError(
                f'law {ENERGY_LAW} needs a model with energies T(q, qd), V(q) (pinocchio, '
                f'identified, delan, delan_residual); model={kind} has none'
            )
        try:
            return EnergySwingUp(
                model,
                self.actuated,
                self.upright,
                self.effort_limit[self.actuated],
                self.config,
            )
        except NotImplementedError as err:
            raise ValueError(f'law {ENERGY_LAW}: model={kind} has no energies ({err})') from None
        except (ValueError, ArithmeticError) as err:  # LinAlgError is a ValueError
            raise ValueError(
                f'law {ENERGY_LAW} cannot be designed on model={kind} at the upright: {err}'
            ) from None


#: closed-loop natural frequency of the PD gains of :func:`pd_gains` [rad/s]
PD_OMEGA = 12.0


def pd_gains(
    mass_matrix: np.ndarray, dt: float, omega: float = PD_OMEGA, max_radius: float = 1.0
) -> Tuple[np.ndarray, np.ndarray]:
    """Critically damped per-joint PD gains ``(kp, kd)`` ``(n,)`` for an arm of mass matrix
    ``(n, n)`` at one configuration, stable when commanded every ``dt`` seconds.

    Each joint's gains are ``omega^2 m`` and ``2 omega m`` with ``m = 1 / (H^-1)_ii``, the
    inertia the joint moves when the others give way (as they do under independent joint
    loops), not ``H_ii``, the inertia with the others held: where two axes line up (a Panda's
    joints 1 and 3 at mid range) ``H_ii`` overstates the inertia of the mode they make together
    by an order of magnitude or more, and a derivative gain sized on it drives that mode
    unstable at the control rate. ``omega`` is then lowered (x0.8 at a time) until the sampled
    loop, with one period of delay, has a spectral radius below ``max_radius``."""
    h_inv = np.linalg.inv(np.asarray(mass_matrix, dtype=np.float64))
    m = 1.0 / np.diag(h_inv)
    w = float(omega)
    while True:
        kp, kd = w * w * m, 2.0 * w * m
        if _sampled_loop_stable(kp, kd, h_inv, dt, max_radius) or w < 1e-3 * omega:
            return kp, kd
        w *= 0.8


#: closed-loop natural frequency of the computed-torque gains (ct_kp = omega^2) [rad/s]
CT_OMEGA = 20.0
#: how many times the feedback's stiffness must exceed the nominal model's gravity pulling the
#: arm away (an upright posture): the unknown payload adds to that pull
GRAVITY_MARGIN = 4.0


def gravity_pull(model: DynamicsModel, postures: np.ndarray) -> float:
    """The strongest pull of gravity away from any of ``postures`` ``(k, n)``
    (:func:`~delan_common.dynamics.pull_away` of :func:`gravity_stiffness`) [1/s^2]."""
    return max(
        (
            pull_away(gravity_stiffness(model, q), model.mass_matrix(q))
            for q in np.atleast_2d(np.asarray(postures, dtype=np.float64))
        ),
        default=0.0,
    )


def _sampled_loop_stable(
    kp: np.ndarray, kd: np.ndarray, h_inv: np.ndarray, dt: float, max_radius: float
) -> bool:
    """Whether feedback torques ``kp e + kd e_dot`` (gain matrices ``(n, n)``, or ``(n,)`` for
    diagonal ones) hold an arm of inverse mass matrix ``h_inv``, commanded every ``dt`` with one
    period of delay."""
    n = h_inv.shape[0]
    kp, kd = (np.diag(k) if np.ndim(k) == 1 else np.asarray(k) for k in (kp, kd))
    eye, zero = np.eye(n), np.zeros((n, n))
    # x = (q, qd, tau applied now); tau from the state of one period ago (zero-order hold)
    step = np.block([[eye, dt * eye], [zero, eye]])
    drive = np.vstack([0.5 * dt * dt * h_inv, dt * h_inv])
    loop = np.block([[step, drive], [-np.hstack([kp, kd]), zero]])
    return bool(np.max(np.abs(np.linalg.eigvals(loop))) < max_radius)


def ct_gains(
    mass_matrix: np.ndarray,
    gravity: np.ndarray,
    dt: float,
    omega: float = CT_OMEGA,
    margin: float = GRAVITY_MARGIN,
    max_radius: float = 1.0,
    pull: float = 0.0,
) -> Tuple[np.ndarray, np.ndarray, bool]:
    """Computed-torque gains ``(ct_kp, ct_kd, stiff_enough)`` ``(n,)`` [1/s^2, 1/s], critically
    damped, for feedback through the mass matrix ``(n, n)`` at a posture where gravity has
    the stiffness ``gravity`` (:func:`gravity_stiffness`), and elsewhere a ``pull`` (of
    :func:`gravity_pull`, at the other postures the arm goes through).

    ``omega`` is raised until ``omega^2 H`` exceeds ``margin`` times gravity's pull away from
    the posture (the largest ``lambda`` of ``-G v = lambda H v``), or ``pull`` if larger: gains
    that suit a hanging arm let an upright light one (a Kinova's wrist, with a payload the URDF
    does not know; an SO-101 with its elbow raised) sink into a static error, or an end stop,
    that no model's feed-forward removes. It is capped where the sampled loop (one period of
    delay) would no longer be stable; ``stiff_enough`` is False then."""
    h = np.asarray(mass_matrix, dtype=np.float64)
    pull = max(float(pull), pull_away(gravity, h))
    w = max(float(omega), math.sqrt(max(margin * pull, 0.0)))
    h_inv = np.linalg.inv(h)
    stiff_enough = True
    while not _sampled_loop_stable(w * w * h, 2.0 * w * h, h_inv, dt, max_radius):
        stiff_enough = False
        w *= 0.9
        if w < 1e-3 * omega:
            break
    n = h.shape[0]
    return np.full(n, w * w), np.full(n, 2.0 * w), stiff_enough


def arm_gains(
    model: DynamicsModel, q: np.ndarray, dt: float, postures: Optional[np.ndarray] = None
) -> Tuple[Gains, bool]:
    """Both laws' gains for an arm held about ``q`` by ``model`` (its URDF), commanded every
    ``dt``, that goes through ``postures`` ``(k, n)`` as well (:func:`robot_gains`):
    :func:`pd_gains` at ``q`` and :func:`ct_gains` against gravity's pull anywhere; the flag
    is False where the computed-torque gains could not be made stiff enough against gravity
    (see :func:`ct_gains`)."""
    h = np.asarray(model.mass_matrix(q), dtype=np.float64)
    kp, kd = pd_gains(h, dt)
    pull = 0.0 if postures is None or len(postures) == 0 else gravity_pull(model, postures)
    ct_kp, ct_kd, stiff_enough = ct_gains(h, gravity_stiffness(model, q), dt, pull=pull)
    return Gains(ct_kp=ct_kp, ct_kd=ct_kd, kp=kp, kd=kd), stiff_enough


def robot_gains(model: RobotModel, robot: RobotDescription, dt: float) -> Tuple[Gains, bool]:
    """:func:`arm_gains` of ``robot`` and ``model``, its URDF's: held about its home posture,
    moving anywhere in its joint ranges (:meth:`RobotModel.configuration_samples`)."""
    return arm_gains(model, robot.home(), dt, model.configuration_samples())


def clamp_torque(tau: np.ndarray, limits: np.ndarray) -> np.ndarray:
    """Clip to the symmetric effort limits ``(n,)`` (URDF ``<limit effort>``)."""
    return np.clip(tau, -limits, limits)


class BumplessBlend:
    """Cross-fades from the torque of the old model to the new one over ``duration`` seconds.

    A model switch changes the feed-forward torque in one step; blending both outputs linearly
    keeps the commanded torque continuous, so a runtime switch does not kick the arm. The
    controller times the blend by the joint states' stamps, so it spans ``duration`` of the
    arm's motion whether the loop stalls or a sim runs faster or slower than real time.
    """

    _PENDING = math.nan

    def __init__(self, duration: float):
        self.duration = float(duration)
        self._start: Optional[float] = None

    def start(self, t: Optional[float] = None) -> None:
        """Begin a blend at time ``t``; None: at the time of the next :meth:`weight` call."""
        if self.duration <= 0:
            self._start = None
        else:
            self._start = self._PENDING if t is None else float(t)

    def stop(self) -> None:
        """End a blend at once: the new output alone from now on."""
        self._start = None

    def weight(self, t: float) -> Optional[float]:
        """Weight of the *new* output in [0, 1), or None once the blend is over (or when ``t``
        lies before its start: the clock went back, a sim reset)."""
        if self._start is None:
            return None
        if math.isnan(self._start):
            self._start = float(t)
        w = (t - self._start) / self.duration
        if w >= 1.0 or w < 0.0:
            self._start = None
            return None
        return w
