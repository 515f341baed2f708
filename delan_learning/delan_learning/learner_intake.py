"""Joint states to the samples the online learner trains on (its intake thread, ROS-free).

A joint state is refused (counted by reason) when it carries no effort, a torque or velocity
beyond ``range_factor`` x the URDF's limits, a joint within ``end_stop_margin`` of a position
limit (an end stop pushes with a force no model has) or a stamp that goes back or far ahead. A
refused message breaks the stream: no acceleration estimate or rollout window of the forward
loss spans it. The acceleration estimator (:class:`~delan_learning.online.DelayedDifferentiator`)
is sized from the median period of the first 21 stamps; its samples get the nominal model's
torque (residual learning) or acceleration metric where the learner needs them and go to the
training or the validation buffer (:class:`~delan_learning.online.SplitBuffers`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, List, Optional, Protocol

import numpy as np

from delan_common.decimation import Decimator
from delan_common.joint_state import JointStateError, JointStateMapper, MappedJointState, StampGate
from delan_common.urdf_joints import RobotDescription, at_position_limit
from delan_learning.online import DelayedDifferentiator, Log, Sample, SplitBuffers

#: joint states whose stamps size the acceleration estimator
FIRST_STAMPS = 21


class Rejections(Protocol):
    """Counts refused joint states by reason (``RejectionCounter``)."""

    def reject(self, reason: str, detail: str) -> None:
        """Count one refused joint state under ``reason``; ``detail`` is for the log."""


class SampleIntake:
    """Takes joint states (:meth:`take`) into ``buffers``; ``rejected`` counts the refused
    ones. ``nominal``: the URDF's model (a ``RobotModel``), for ``prior`` (each sample's
    nominal torque) and ``metric`` (its acceleration metric). ``now()``: the time [s] of a
    joint state stamped 0. ``estimate_rate`` [Hz of stamps]: how many samples
    :meth:`take_estimates_due` hands out."""

    def __init__(
        self,
        robot: RobotDescription,
        buffers: SplitBuffers,
        rejected: Rejections,
        log: Log,
        now: Callable[[], float],
        *,
        window_s: float,
        max_gap: float,
        acceleration_source: str,
        range_factor: float,
        end_stop_margin: float,
        estimate_rate: float,
        nominal: Any = None,
        prior: bool = False,
        metric: bool = False,
    ):
        self.robot, self.buffers, self.rejected = robot, buffers, rejected
        self.log, self.now = log, now
        self.window_s, self.max_gap = window_s, max_gap
        self.acceleration_source = acceleration_source
        self.range_factor = range_factor
        self.end_stop_margin = end_stop_margin
        self.estimate_rate = Decimator(estimate_rate)
        self.nominal, self.prior, self.metric = nominal, prior, metric
        self.mapper = JointStateMapper(robot.joint_names)
        self.stamps = StampGate(strict=True)
        self.diff: Optional[DelayedDifferentiator] = None  # sized from the observed rate
        self._first_stamps: List[float] = []
        self.samples_seen = 0
        self.latest_sample: Optional[Sample] = None
        self._estimates_due: List[Sample] = []

    @property
    def range_factor(self) -> float:
        """Multiple of the URDF's effort and velocity limits beyond which a joint state is refused
        (a glitch, not a motion)."""
        return self._range_factor

    @range_factor.setter
    def range_factor(self, factor: float) -> None:
        self._range_factor = factor
        self._effort_lim = self.robot.effort_limits * factor  # (n,)
        self._vel_lim = self.robot.velocity_limits * factor  # (n,)

    def restart(self) -> None:
        """Size the estimator anew from the next stamps (a reset of the learner)."""
        self.diff, self._first_stamps = None, []

    def break_stream(self) -> None:
        """A message was rejected: the samples after it do not continue those before it."""
        if self.diff is not None:
            self.diff.skip()

    def _reject(self, reason: str, detail: str) -> None:
        self.rejected.reject(reason, detail)
        self.break_stream()

    def take(self, msg: Any, t: float) -> None:
        """A joint state stamped ``t`` [s]: a JointState, a ``RawJointState`` or anything
        else :class:`~delan_common.joint_state.JointStateMapper` maps."""
        try:
            js = self.mapper.map(msg)
        except JointStateError as err:
            self._reject(err.reason, err.detail)
            return
        if js.effort is None:
            self._reject('no_effort', 'joint state carries no effort: nothing to learn')
            return
        if np.any(np.abs(js.effort) > self._effort_lim) or np.any(
            np.abs(js.velocity) > self._vel_lim
        ):
            self._reject(
                'out_of_range', f'torque or velocity beyond {self.range_factor} x the URDF limits'
            )
            return
        if self.end_stop_margin > 0.0 and np.any(
            at_position_limit(
                js.position, self.robot.lower, self.robot.upper, self.end_stop_margin
            )
        ):
            self.rejected.reject(
                'at_end_stop',
                'a joint within end_stop_margin of its position limit (the estimator restarts)',
            )
            if self.diff is not None:
                self.diff.reset()  # a break of the stream too
            return
        if t == 0.0:
            t = self.now()
        try:
            self.stamps.check(t)  # backwards / far ahead: rejected (the estimator restarts)
        except JointStateError as err:
            self._reject(err.reason, err.detail)
            return
        try:
            self._ingest(t, js)
        finally:
            # counted once the sample is in the buffers: the count is a barrier for readers
            self.samples_seen += 1

    def _ingest(self, t: float, js: MappedJointState) -> None:
        if self.diff is None:
            self._first_stamps.append(t)
            if len(self._first_stamps) < FIRST_STAMPS:
                return
            dt = float(np.median(np.diff(self._first_stamps)))
            if not dt > 0:
                self._first_stamps.clear()
                return
            window = DelayedDifferentiator.samples_for(self.window_s, dt)
            self.diff = DelayedDifferentiator(
                window=window, max_gap=self.max_gap, source=self.acceleration_source
            )
            self.log.info(
                f'joint states at {1.0 / dt:.0f} Hz: acceleration from the '
                f'{self.acceleration_source}, window {window} samples'
            )
        assert js.effort is not None  # checked by take()
        sample = self.diff.push(t, js.position, js.velocity, js.effort)
        if sample is None:
            return
        if self.prior:
            sample = replace(
                sample, tau_prior=self.nominal.inverse(sample.q, sample.qd, sample.qdd)
            )
        if self.metric:
            try:
                metric = self.nominal.acceleration_metric(sample.q)
            except np.linalg.LinAlgError:
                metric = None
            if metric is None or not np.all(np.isfinite(metric)):
                self._reject(
                    'singular_inertia',
                    "the URDF's mass matrix is singular at this pose: no acceleration metric",
                )
                return
            sample = replace(sample, metric=metric)
        self.latest_sample = sample
        if self.estimate_rate.due(sample.t):
            self._estimates_due.append(sample)
        self.buffers.add(sample)

    def take_estimates_due(self) -> List[Sample]:
        """The samples picked for ``~/dynamics_estimate`` since the last call."""
        due, self._estimates_due = self._estimates_due, []
        return due
