"""The torque controller free of ROS: what goes on between its parts -- the models
(:mod:`~delan_control.model_switch`), the command (:mod:`~delan_control.control_cycle`), the
reference (:mod:`~delan_control.reference_tracking`), the watch on the joint states
(:mod:`~delan_control.continuity`) -- which reference a cycle tracks, the rejoin after a
restart, where a parameter change goes, the status on /diagnostics. Here it is tested without a
node; the ``torque_controller`` node wires messages, parameters and timers to it.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Mapping, Optional, Protocol, Sequence, Tuple

import numpy as np

from delan_common.command_order import CommandOrder
from delan_common.decimation import Decimator
from delan_common.joint_state import MappedJointState
from delan_common.urdf_joints import RobotDescription
from delan_control.continuity import StateContinuity
from delan_control.control_cycle import ControlCycle, CycleState, Logger
from delan_control.control_laws import ENERGY_LAW, EnergyLaw
from delan_control.energy_control import actuated_mask
from delan_control.model_loader import ModelLoadError
from delan_control.model_switch import ModelSwitch
from delan_control.params.torque_controller import energy_config
from delan_control.reference_tracking import NEW_REFERENCE, ReferenceTracker, Resumed
from delan_control.rt_params import GAIN_NAMES

#: (level, message, values) of a status: level ``info``, ``warning`` or ``error``
Status = Tuple[str, str, Dict[str, object]]


def actuated_joints(names: Sequence[str], joint_names: Sequence[str]) -> np.ndarray:
    """``(n,)`` bool of the ``actuated_joints`` parameter ``names`` ([] = every joint)."""
    if not names:
        return np.ones(len(joint_names), dtype=bool)
    try:
        return actuated_mask(list(names), joint_names)
    except ValueError as err:
        raise ValueError(f'invalid parameter: actuated_joints: {err}') from None


def energy_law(
    actuated: np.ndarray, limits: np.ndarray, values: Dict[str, Any]
) -> Tuple[Optional[EnergyLaw], str]:
    """What law ``energy`` needs besides the model (from the parameter ``values``), else None
    and why: an arm it does not suit still runs the other laws, only asking for it is refused."""
    try:
        upright = np.broadcast_to(
            np.asarray(values['upright_position'], dtype=np.float64), actuated.shape
        )
        return EnergyLaw(actuated, upright, limits, energy_config(values)), ''
    except ValueError as err:
        return None, str(err)


class OrderSource(Protocol):
    """Where the commands' joint order comes from (the node's ``CommandOrderClient``)."""

    order: Optional[CommandOrder]  # None: not known yet, or refused
    source: str

    def status(self) -> Tuple[str, str]:
        """``(level, message)`` for diagnostics (level: info, warning or error)."""


class TorqueControl:
    """The controller's parts, taken together: ``models``, ``cycle``, ``tracker`` and
    ``continuity``; ``state_rate`` paces ``~/controller_state``. ``log`` says what a restart
    does to the reference."""

    def __init__(
        self,
        models: ModelSwitch,
        cycle: ControlCycle,
        tracker: ReferenceTracker,
        continuity: StateContinuity,
        state_rate: Decimator,
        log: Logger,
    ):
        self.models, self.cycle, self.tracker = models, cycle, tracker
        self.continuity, self.state_rate = continuity, state_rate
        self._log = log

    @classmethod
    def from_params(
        cls, robot: RobotDescription, values: Dict[str, Any], log: Logger
    ) -> TorqueControl:
        """The parts for ``robot`` as the node's parameter ``values`` make them, the model
        loaded: ``ModelLoadError``, or ``ValueError('invalid parameter: ...')`` for values the
        parts refuse."""
        v = values
        actuated = actuated_joints(v['actuated_joints'], robot.joint_names)
        gains = {k: v[k] for k in GAIN_NAMES}
        cycle = ControlCycle(
            robot, actuated, gains, v['control_rate'], v['effort_limit_scale'], log
        )
        models = ModelSwitch(
            robot,
            v['model'],
            v['law'],
            v['switch_blend_time'],
            v['delan_checkpoint'],
            v['identified_params'],
            *energy_law(actuated, cycle.limits, v),
        )
        tracker = ReferenceTracker(
            robot.velocity_limits,
            v['resume_tolerance'],
            v['resume_time'],
            tracked=actuated,
            continuous=cycle.continuous,
        )
        # a position the arm cannot have moved to (a sim reset, a re-homed driver) is handled
        # as a restart of the joint states, as their return after a stall
        continuity = StateContinuity(
            v['watchdog_timeout'], robot.velocity_limits, continuous=cycle.continuous
        )
        control = cls(models, cycle, tracker, continuity, Decimator(v['state_publish_rate']), log)
        try:
            models.start(log.warning)
        except ModelLoadError:
            raise
        except ValueError as err:  # law energy on a model it cannot be built on
            raise ValueError(f'invalid parameter: {err}') from None
        return control

    def passive_joints(self) -> List[str]:
        """The joints never commanded (``actuated_joints``)."""
        names = self.cycle.robot.joint_names
        return [j for j, a in zip(names, self.cycle.actuated) if not a]

    def command(self, now: float, t: float, js: MappedJointState) -> CycleState:
        """The cycle of joint state ``js`` stamped ``t`` [s], taken at ``now`` (monotonic):
        after a stall or a jump the reference is rejoined smoothly, or dropped when far; a new
        reference is taken up from the arm smoothly, or dropped when far."""
        restart = self.continuity.take(now, t, js.position, js.velocity)
        if restart is not None:
            self._report(self.tracker.resume(t, js.position, js.velocity), restart.cause, t)
            self._log.info(restart.message)
        adopted = self.tracker.adopt(t, js.position, js.velocity)
        if adopted is not None:
            self._report(adopted, NEW_REFERENCE, t)
        slot = self.models.slot(t)
        energy = self.models.energy_law
        if slot.law == ENERGY_LAW and energy is not None:
            # no reference: the upright, where the law works towards (the switch takes law
            # energy only with an energy law)
            q_ref, qd_ref, qdd_ref = energy.reference()
            holding = False
        else:
            q_ref, qd_ref, qdd_ref, holding = self.tracker.target(t, js.position, js.velocity)
        return self.cycle.run(t, slot, js, (q_ref, qd_ref, qdd_ref), holding)

    def _report(self, what: Resumed, cause: str, t: float) -> None:
        """Log what a restart, or a new reference, did to the reference."""
        note = what.describe(cause, t, self.tracker.resume_tolerance)
        # one call site per severity (rclpy refuses another severity at a call site)
        if note is not None and note[0] == 'warning':
            self._log.warning(note[1])
        elif note is not None:
            self._log.info(note[1])

    def apply(self, changes: Mapping[str, Any]) -> List[str]:
        """Parameter ``changes`` (name: value, accepted) to the parts they belong to, the law
        last (a switch, which may need the other changes); what to log. The node restarts its
        watchdog timer for a new ``watchdog_timeout``."""
        for name, value in changes.items():
            if name in GAIN_NAMES:
                self.cycle.set_gain(name, list(value))  # [nan]: derived from the URDF
            elif name == 'switch_blend_time':
                self.models.blend_time = value
            elif name == 'watchdog_timeout':
                self.continuity.timeout = value
            elif name == 'effort_limit_scale':
                self.cycle.set_effort_scale(value)
            elif name == 'state_publish_rate':
                self.state_rate.rate_hz = value
            elif name in ('delan_checkpoint', 'identified_params'):
                setattr(self.models, name, value)
            elif name in ('resume_tolerance', 'resume_time'):
                setattr(self.tracker, name, value)
        return self.models.apply(changes.get('law'))

    def status(
        self,
        orders: OrderSource,
        commands_sent: int,
        rejected: Tuple[int, int],
        loop: Iterable[Tuple[str, object]],
    ) -> Status:
        """The status on /diagnostics: the command order's (an error when it was refused, a
        warning while waiting for it and once fallen back to the model order), a warning while
        joint states are stale. ``rejected``: the joint states and references rejected, ``loop``
        the loop's own values."""
        order, models, tracker = orders.order, self.models, self.tracker
        level, message = orders.status()
        if order is not None and self.continuity.stale:
            level, message = 'warning', 'joint states stale: not commanding'
        energy = models.energy if models.law == ENERGY_LAW else None
        values: Dict[str, object] = {
            'model': models.kind,
            'model_version': models.version,
            'law': models.law,
            'commands_sent': commands_sent,
            'fallbacks': self.cycle.fallbacks,
            'updates_refused': models.updates_refused,
            'watchdog_trips': self.continuity.trips,
            'references_received': tracker.received,
            'references_dropped': tracker.dropped,
            'references_rejoined': tracker.rejoined,
            'rejected_joint_states': rejected[0],
            'rejected_references': rejected[1],
            'command_order': orders.source,
            'command_joints': ' '.join(order.joints) if order is not None else '',
            'state_publish_rate': self.state_rate.rate_hz,
            'passive_joints': ' '.join(self.passive_joints()),
            **dict(energy.diagnostics() if energy is not None else ()),
            **dict(loop),
        }
        return level, message, values
