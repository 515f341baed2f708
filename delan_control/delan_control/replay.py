"""The demo's evaluation run without ROS: a model judged in seconds instead of a six-minute demo.

``make demo`` tracks a figure eight with each model over DDS, the sim in lockstep with the
controller. Lockstep makes that run a deterministic function of the parameter file: the same
reference (``make_reference`` sized by ``fit_figure_eight``), the same control law and gains at
the sim's ``publish_rate``, the same mismatched plant and measurement noise.
:func:`replay_tracking` steps exactly that loop in one process (the gains as the demo derives
them from the URDF), so a checkpoint, a training change or a control law can be compared with
nominal Pinocchio on the demo's own terms (``bench/bench_replay.py``). ROS-free.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Dict, Optional

import numpy as np
import yaml

from delan_common.dynamics import DynamicsModel
from delan_common.robot_model import Mismatch, RobotModel
from delan_common.urdf_joints import RobotDescription, at_position_limit
from delan_control.control_laws import Gains, clamp_torque, control_torque, robot_gains
from delan_control.evaluation import joint_errors
from delan_control.plant import Plant
from delan_control.trajectories import PiecewiseQuintic, fit_figure_eight, make_reference


def node_parameters(params_file: str, node: str) -> dict:
    """``ros__parameters`` of ``node`` in a launch parameter file (``/**/node`` keys)."""
    with open(params_file) as f:
        tree = yaml.safe_load(f) or {}
    return dict(tree.get(f'/**/{node}', {}).get('ros__parameters', {}))


#: the speeds of the demo's evaluation: its figure eight at 1x and 2x
SPEEDS = (1.0, 2.0)


@dataclass
class EvaluationSetup:
    """What a demo evaluation run is made of, read from the parameter file the nodes use."""

    robot: RobotDescription
    nominal: RobotModel
    mismatch: Mismatch
    sim: dict
    reference: dict
    home: np.ndarray

    @classmethod
    def from_params(
        cls, urdf: str, params_file: str, joints: Optional[list] = None
    ) -> 'EvaluationSetup':
        """The setup of the robot ``urdf`` (its ``joints``, with the sim's ``effort_limits``
        and ``velocity_limits``) and the ``sim`` and ``reference`` nodes' parameters in
        ``params_file``."""
        sim = node_parameters(params_file, 'sim')
        robot = RobotDescription.load(
            urdf,
            joints=joints or None,
            effort_limits=sim.get('effort_limits') or None,
            velocity_limits=sim.get('velocity_limits') or None,
        )
        nominal = RobotModel(urdf, **robot.selection_kwargs())
        return cls(
            robot,
            nominal,
            Mismatch.from_params(sim),
            sim,
            node_parameters(params_file, 'reference'),
            robot.home(),
        )

    @property
    def approach_time(self) -> float:
        """The reference node's ``approach_time`` [s]: from rest at ``home`` to the reference."""
        return float(self.reference.get('approach_time', 2.0))

    @property
    def rate(self) -> float:
        """The sim's ``publish_rate`` [Hz]: the control rate of the evaluation."""
        return float(self.sim.get('publish_rate', 500.0))

    def gains(self) -> Gains:
        """The gains the demo gives the controller (``control_laws.robot_gains``)."""
        return robot_gains(self.nominal, self.robot, 1.0 / self.rate)[0]

    def carrying_what_it_can(self) -> 'EvaluationSetup':
        """This setup with the payload lowered as the demo lowers it (``Demo.payload``): to
        what the arm carries under its gains (:meth:`RobotModel.payload_capacity`)."""
        stiffness = float(np.min(self.gains().ct_kp))
        capacity = self.nominal.payload_capacity(loop_stiffness=stiffness)
        mass = min(self.mismatch.payload_mass, capacity)
        return replace(self, mismatch=replace(self.mismatch, payload_mass=mass))

    def figure_eight(self, speed: float, duration: float = 8.0) -> PiecewiseQuintic:
        """The reference node's figure eight at ``speed``, approached from ``home`` at rest."""
        r, ref, nom = self.robot, self.reference, self.nominal

        def fit(fig):
            return fit_figure_eight(
                fig,
                nom.inverse,
                nom.operating_effort_limit(),
                speed=float(ref.get('max_test_speed', 2.0)),
                max_velocity=r.planning_velocity_limits,
            )

        t, q, qd, qdd = make_reference(
            'figure_eight',
            r.lower,
            r.upper,
            r.planning_velocity_limits,
            self.home,
            speed=speed,
            duration=duration,
            period=float(ref.get('period', 4.0)),
            dt=1.0 / float(ref.get('point_rate', 100.0)),
            approach_time=self.approach_time,
            fit=fit,
        )
        return PiecewiseQuintic(t, q, qd, qdd)

    def excitation(self, seed: int = 0, duration: Optional[float] = None) -> PiecewiseQuintic:
        """The reference node's excitation of ``seed`` (designed for the URDF's regressor, as
        ``excitation_candidates`` says), approached from ``home`` at rest."""
        from delan_control.excitation_design import RegressorConditioning, robot_excitation

        r, ref, nom = self.robot, self.reference, self.nominal
        design = (nom, RegressorConditioning.of(nom))
        candidates = int(ref.get('excitation_candidates', 8))

        def excitation(s: int, velocity_fraction: float):
            return robot_excitation(r, s, velocity_fraction, candidates, design)

        t, q, qd, qdd = make_reference(
            'excitation',
            r.lower,
            r.upper,
            r.planning_velocity_limits,
            self.home,
            seed=seed,
            duration=float(ref.get('duration', 20.0) if duration is None else duration),
            dt=1.0 / float(ref.get('point_rate', 100.0)),
            approach_time=self.approach_time,
            excitation=excitation,
        )
        return PiecewiseQuintic(t, q, qd, qdd)


@dataclass
class Tracked:
    """What :func:`track` measured after the settling time, per joint ``(n,)``."""

    rms: np.ndarray  # RMS tracking error [rad or m]; all inf once the run diverged
    end_stops: np.ndarray  # share of the states at an end stop
    saturated: np.ndarray  # share of the commands clamped to the effort limit


def track(
    setup: EvaluationSetup,
    model: Optional[DynamicsModel],
    ref: PiecewiseQuintic,
    law: str = 'feedforward_urdf_pd',
    settle: float = 0.0,
    diverge_error: float = 1.0,
    on_state: Optional[Callable[[float, np.ndarray, np.ndarray, np.ndarray], None]] = None,
) -> Tracked:
    """The demo's control loop on ``ref`` from ``home`` at rest, to its end: ``model`` (None =
    PD) under ``law`` with the demo's gains, the mismatched plant at the sim's rates, measured
    from ``settle`` [s] on as the demo measures (the state against the reference at its
    stamp; continuous joints' errors wrapped). A non-finite torque falls back to PD, as in the
    controller. The run stops once an error passes ``diverge_error`` (the demo stops it too).
    ``on_state(t, q, qd, effort)``: each joint state as the sim publishes it (measured, with the
    torque the motors applied up to it).
    """
    sim = setup.sim
    physics_rate = float(sim.get('physics_rate', 1000.0))
    substeps = max(1, int(round(physics_rate / setup.rate)))
    plant = Plant(
        setup.nominal,
        setup.mismatch,
        physics_rate=physics_rate,
        integrator=str(sim.get('integrator', 'rk4')),
        position_noise=float(sim.get('position_noise', 0.0)),
        velocity_noise=float(sim.get('velocity_noise', 0.0)),
        seed=int(sim.get('seed', 0)),
    )
    plant.reset(setup.home, np.zeros_like(setup.home))
    gains, limit = setup.gains(), setup.nominal.operating_effort_limit()
    r = setup.robot
    types = r.joint_types
    is_continuous = np.array([t == 'continuous' for t in types])
    continuous = is_continuous if is_continuous.any() else None
    n = len(setup.home)
    sq, stops, clamped, count = np.zeros(n), np.zeros(n), np.zeros(n), 0
    for k in range(int(round(float(ref.t[-1]) * setup.rate))):
        t = k / setup.rate
        q, qd = plant.measure()
        if on_state is not None:
            on_state(t, q, qd, plant.last_torque.copy())
        q_ref, qd_ref, qdd_ref = (x[0] for x in ref.sample(np.array([t])))
        err = joint_errors(q_ref, q, types)
        if not np.all(np.isfinite(err)) or np.abs(err).max() > diverge_error:
            inf = np.full(n, np.inf)
            return Tracked(inf, stops / max(count, 1), clamped / max(count, 1))
        tau = control_torque(
            model,
            law,
            gains,
            q,
            qd,
            q_ref,
            qd_ref,
            qdd_ref,
            feedback_model=setup.nominal,
            continuous=continuous,
        )
        if not np.all(np.isfinite(tau)):
            tau = control_torque(
                None, law, gains, q, qd, q_ref, qd_ref, qdd_ref, continuous=continuous
            )
        command = clamp_torque(tau, limit)
        if t >= settle:
            sq += err * err
            stops += at_position_limit(q, r.lower, r.upper)
            clamped += command != tau
            count += 1
        plant.step(command, substeps)
    c = max(count, 1)
    return Tracked(np.sqrt(sq / c), stops / c, clamped / c)


def replay_tracking(
    setup: EvaluationSetup,
    model: Optional[DynamicsModel],
    speed: float,
    law: str = 'feedforward_urdf_pd',
    duration: float = 8.0,
    diverge_error: float = 1.0,
) -> np.ndarray:
    """Per-joint RMS tracking error ``(n,)`` [rad or m] of ``model`` (None = PD) on the demo's
    figure eight at ``speed``, after the approach, as the demo measures it (:func:`track`).
    All inf once an error passes ``diverge_error`` (the demo stops such a run)."""
    approach = setup.approach_time
    ref = setup.figure_eight(speed, duration)
    return track(setup, model, ref, law, approach, diverge_error).rms


def mean_rms(
    setup: EvaluationSetup, model: Optional[DynamicsModel], speeds=SPEEDS, **replay: Any
) -> Dict[float, float]:
    """Mean over joints of :func:`replay_tracking`'s RMS error of ``model``, per speed: the
    figure the demo's verdict compares with nominal Pinocchio's. ``replay``: the other
    arguments of :func:`replay_tracking` (``law``, ``duration``, ``diverge_error``)."""
    return {sp: float(np.mean(replay_tracking(setup, model, sp, **replay))) for sp in speeds}


def true_model(setup: EvaluationSetup) -> RobotModel:
    """The sim's own model (nominal URDF with the mismatch): the best any model can be."""
    return setup.nominal.mismatched(setup.mismatch)
