"""The torque controller's command for one joint state: the law on the active model, cross-faded
with the model fading out after a switch, PD where a model fails (non-finite torque or an
error), clamped to the effort limits -- 0 on the passive joints, so no law ever commands them.

:class:`ControlCycle` also holds what the cycle uses that is derived once from the URDF: the
gains not given, effort limits the URDF does not give, the URDF's model for the feedback of the
``URDF_FEEDBACK_LAWS``.
"""

from __future__ import annotations

import math
from typing import Any, Dict, NamedTuple, Optional, Protocol, Sequence, Tuple

import numpy as np

from delan_common.dynamics import DynamicsModel
from delan_common.joint_state import MappedJointState
from delan_common.urdf_joints import RobotDescription
from delan_control.control_laws import (
    URDF_FEEDBACK_LAWS,
    Gains,
    clamp_torque,
    control_terms,
    robot_gains,
)
from delan_control.energy_control import EnergySwingUp
from delan_control.model_switch import Slot

#: gains for an arm whose URDF gives no inertias to derive them from
FALLBACK_GAINS = {'ct_kp': 400.0, 'ct_kd': 40.0, 'kp': 60.0, 'kd': 6.0}

#: what stands in for the selected model (ControllerState.fallback, its FALLBACK_* values)
FALLBACK_NONE = 'none'
FALLBACK_PD_NO_MODEL = 'pd_no_model'  # a learned model with no checkpoint yet: plain PD
FALLBACK_PD_MODEL_FAILED = 'pd_model_failed'  # the model failed this cycle: plain PD


class Logger(Protocol):
    """What the cycle logs through: a node's logger (rclpy's takes ``throttle_duration_sec``
    and throttles per call site)."""

    def info(self, message: str, **kwargs: Any) -> Any:
        """Report an informational message."""

    def warning(self, message: str, **kwargs: Any) -> Any:
        """Report a warning."""

    def error(self, message: str, **kwargs: Any) -> Any:
        """Report an error."""


class CycleState(NamedTuple):
    """What one control cycle computed (model order, ``(n,)`` arrays), for
    ``~/controller_state``: its arrays are the cycle's own (made anew every cycle, never written
    again; the model's torque is copied, a model may return a buffer it reuses), so the message
    is built from them off the loop."""

    stamp: float  # source stamp of the joint state [s]
    q_ref: np.ndarray
    qd_ref: np.ndarray
    qdd_ref: np.ndarray
    q: np.ndarray
    qd: np.ndarray
    effort: Optional[np.ndarray]
    feedforward: Optional[np.ndarray]  # None: no model in the torque
    command: np.ndarray
    model: str
    model_version: int
    law: str
    fallback: str
    holding: bool


def blend(w: float, new: Optional[np.ndarray], old: Optional[np.ndarray]) -> Optional[np.ndarray]:
    """``w new + (1 - w) old`` of two model torques ``(n,)``, None standing for no model
    (zero)."""
    if new is None and old is None:
        return None
    return np.asarray(
        w * (0.0 if new is None else new) + (1.0 - w) * (0.0 if old is None else old)
    )


def fallback_reason(kind: str, model: Optional[DynamicsModel], failed: bool) -> str:
    """What stands in for the selected model ``kind`` this cycle: ``model`` is what the switch
    holds (None: no model), ``failed`` whether it failed and PD stood in."""
    if failed:
        return FALLBACK_PD_MODEL_FAILED
    if model is None and kind != 'pd':
        return FALLBACK_PD_NO_MODEL
    return FALLBACK_NONE


class ControlCycle:
    """Commands for ``robot``: its ``actuated (n,)`` bool joints (the others are passive),
    gains ``given`` by name (``[nan]``: derived from the URDF for ``control_rate`` [Hz]), the
    URDF's effort limits times ``effort_scale``. ``fallbacks`` counts the model failures."""

    def __init__(
        self,
        robot: RobotDescription,
        actuated: np.ndarray,
        given: Dict[str, Sequence[float]],
        control_rate: float,
        effort_scale: float,
        log: Logger,
    ):
        self.robot, self.actuated, self.control_rate = robot, actuated, control_rate
        self._log = log
        # continuous joints: their position error is wrapped (control_laws.position_error)
        cont = np.array([t == 'continuous' for t in robot.joint_types])
        self.continuous = cont if cont.any() else None
        self.gains = Gains(**self._resolve_gains(given))
        self.urdf_limits = self._effort_limits()
        self.limits = self.urdf_limits
        self.set_effort_scale(effort_scale)
        self.fallbacks = 0
        self._feedback_model: Any = None  # the URDF's RobotModel, built on first use

    def set_gain(self, name: str, value: Sequence[float]) -> None:
        """Gain ``name`` as given (``[nan]``: derived from the URDF again)."""
        setattr(self.gains, name, self._resolve_gains({name: value})[name])

    def set_effort_scale(self, scale: float) -> None:
        """Clamp commands to ``scale`` times the effort limits, 0 on the passive joints."""
        self.limits = self.urdf_limits * scale * self.actuated

    def run(
        self,
        t: float,
        slot: Slot,
        js: MappedJointState,
        reference: Tuple[np.ndarray, np.ndarray, np.ndarray],
        holding: bool,
    ) -> CycleState:
        """The command for joint state ``js`` stamped ``t`` [s] towards ``reference`` ``(q_ref,
        qd_ref, qdd_ref)`` with what ``slot`` holds, and what the cycle computed."""
        q_ref, qd_ref, qdd_ref = reference
        tau, ff, failed = self._terms(slot.model, slot.energy, slot, js, reference)
        w = slot.weight
        if w is not None:
            tau_old, ff_old, _ = self._terms(slot.old_model, slot.old_energy, slot, js, reference)
            tau = w * tau + (1.0 - w) * tau_old
            ff = blend(w, ff, ff_old)
        return CycleState(
            t,
            q_ref,
            qd_ref,
            qdd_ref,
            js.position,
            js.velocity,
            js.effort,
            None if ff is None else ff.copy(),
            clamp_torque(tau, self.limits),
            slot.kind,
            slot.version,
            slot.law,
            fallback_reason(slot.kind, slot.model, failed),
            holding,
        )

    def _terms(
        self,
        model: Optional[DynamicsModel],
        energy: Optional[EnergySwingUp],
        slot: Slot,
        js: MappedJointState,
        reference: Tuple[np.ndarray, np.ndarray, np.ndarray],
    ) -> Tuple[np.ndarray, Optional[np.ndarray], bool]:
        """``(torque, the model's share, whether the model failed and PD stands in)``; the PD
        on the passive joints is clamped to 0 with every other command."""
        q, qd, law = js.position, js.velocity, slot.law
        try:
            tau, ff = control_terms(
                model,
                law,
                self.gains,
                q,
                qd,
                *reference,
                self._urdf_feedback(law),
                self.continuous,
                energy,
            )
            if np.all(np.isfinite(tau)):
                return tau, ff, False
        except (ValueError, ArithmeticError, RuntimeError) as err:
            self._log.error(f'model {slot.kind} failed: {err}', throttle_duration_sec=2.0)
        self.fallbacks += 1
        self._log.error(
            f'model {slot.kind} returned non-finite torque: PD fallback ({self.fallbacks} so far)',
            throttle_duration_sec=2.0,
        )
        tau, _ = control_terms(None, law, self.gains, q, qd, *reference, None, self.continuous)
        return tau, None, True

    def _urdf_feedback(self, law: str) -> Optional[DynamicsModel]:
        """The URDF's model for the feedback of the URDF_FEEDBACK_LAWS (built once, in the
        control thread that uses it; None for the other laws or when the URDF has no inertias,
        which those laws then report as a model failure)."""
        if law not in URDF_FEEDBACK_LAWS:
            return None
        if self._feedback_model is None:
            from delan_common.robot_model import RobotModel

            try:
                self._feedback_model = RobotModel(self.robot.xml, **self.robot.selection_kwargs())
            except ValueError as err:
                self._feedback_model = False
                self._log.error(f'no URDF model for the feedback: {err}')
        return self._feedback_model or None

    def _resolve_gains(self, given: Dict[str, Sequence[float]]) -> Dict[str, np.ndarray]:
        """The gains given ``(n,)``, and the others derived from the URDF at the middle of the
        joint ranges for ``control_rate`` (``control_laws.robot_gains``): one set of numbers is
        too stiff for one arm's wrist (unstable at the control rate) and too soft for another's
        shoulder; :data:`FALLBACK_GAINS` when the URDF has no inertias."""
        n = len(self.robot.joint_names)
        missing = [k for k, v in given.items() if len(v) == 1 and math.isnan(v[0])]
        derived: Dict[str, Any] = dict(FALLBACK_GAINS)
        if missing:
            from delan_common.robot_model import RobotModel

            robot = self.robot
            try:
                model = RobotModel(robot.xml, **robot.selection_kwargs())
                gains, stiff = robot_gains(model, robot, 1.0 / self.control_rate)
                derived = {k: getattr(gains, k) for k in given}
                if not stiff:
                    self._log.warning(
                        f'at {self.control_rate:g} Hz computed torque cannot be made stiffer '
                        'than gravity pulls this arm: it will track poorly'
                    )
            except ValueError as err:
                self._log.warning(
                    f'gains {missing} not given and not derivable from '
                    f'the URDF ({err}): using {FALLBACK_GAINS}'
                )
            self._log.info(
                'gains not given: '
                + ', '.join(
                    f'{k} {np.round(np.broadcast_to(derived[k], (n,)), 2).tolist()}'
                    for k in missing
                )
            )
        return {
            k: np.broadcast_to(np.asarray(derived[k] if k in missing else v, float), (n,)).copy()
            for k, v in given.items()
        }

    def _effort_limits(self) -> np.ndarray:
        """The URDF's effort limits ``(n,)``; where it gives none (effort="0"), a conservative
        one derived from the inertia, so every command is clamped."""
        r = self.robot
        if np.all(r.effort_given):
            return r.effort_limits.copy()
        from delan_common.robot_model import RobotModel

        limits = RobotModel(r.xml, **r.selection_kwargs()).operating_effort_limit()
        missing = ~r.effort_given & self.actuated  # a passive joint has no motor to limit
        if missing.any():
            self._log.warning(
                f'no effort limit in the URDF for {np.array(r.joint_names)[missing].tolist()}: '
                f'clamping to {np.round(limits[missing], 3).tolist()} (from the inertia; set '
                'effort_limits to choose)'
            )
        return limits
