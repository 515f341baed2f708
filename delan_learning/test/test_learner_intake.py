"""The learner's joint-state intake, its status and its estimates (ROS-free): what is refused
and how a refusal breaks the stream, the estimator sized from the stamps, the split into
training and validation data, the estimates' rate, and what the status and /diagnostics say."""

from __future__ import annotations

import math
import os
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from delan_common.urdf_joints import RobotDescription
from delan_learning.learner_estimates import SnapshotEstimator
from delan_learning.learner_intake import FIRST_STAMPS, SampleIntake
from delan_learning.learner_status import Health, status_fields
from delan_learning.models import build_model
from delan_learning.online import SplitBuffers, held_out

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..'))
URDF = os.path.join(ROOT, 'delan_bringup', 'urdf', 'two_link_arm.urdf')
DT = 0.004  # 250 Hz


class Rejected:
    def __init__(self):
        self.reasons = []

    def reject(self, reason, detail):
        self.reasons.append(reason)


class Log:
    def __init__(self):
        self.lines = []

    def info(self, message):
        self.lines.append(message)

    warning = error = info


def _intake(buffers=None, **kw):
    robot = RobotDescription.load(URDF)
    buffers = buffers or SplitBuffers(5000, 5, 2)
    args = dict(
        window_s=0.02,
        max_gap=0.1,
        acceleration_source='velocity',
        range_factor=1.5,
        end_stop_margin=0.0,
        estimate_rate=0.0,
    )
    args.update(kw)
    return SampleIntake(robot, buffers, Rejected(), Log(), lambda: 123.0, **args)


def _msg(k: int, effort=(1.0, -1.0), position=None, velocity=(0.1, 0.2)):
    """Joint state ``k`` of a smooth motion, its joints in the message's own order."""
    q = position if position is not None else (0.1 * math.sin(k * DT), 0.2 * math.cos(k * DT))
    return SimpleNamespace(
        name=['elbow', 'shoulder'],
        position=[q[1], q[0]],
        velocity=[velocity[1], velocity[0]],
        effort=[] if effort is None else [effort[1], effort[0]],
    )


def _stream(intake, ks, **kw):
    """Joint states ``ks``, stamped ``k * DT`` (k > 0: a stamp of 0 takes the clock)."""
    for k in ks:
        intake.take(_msg(k, **kw), k * DT)


def test_samples_flow_once_the_estimator_is_sized_and_are_split_by_chunk():
    intake = _intake()
    _stream(intake, range(1, FIRST_STAMPS))
    assert intake.diff is None and intake.samples_seen == FIRST_STAMPS - 1
    _stream(intake, range(FIRST_STAMPS, 2001))
    assert intake.diff is not None and intake.diff.window == 5  # 20 ms at 250 Hz
    assert any('250 Hz' in line for line in intake.log.lines)
    n_train, n_val = intake.buffers.sizes()
    # the first FIRST_STAMPS - 1 only size the estimator, which then lags by its window
    assert n_train + n_val == 2000 - (FIRST_STAMPS - 1) - (5 - 1)
    assert n_val > 0 and n_train > 3 * n_val
    s = intake.latest_sample
    assert held_out(s.t, 5) == (intake.buffers.val.newest_t == s.t)
    assert np.allclose(s.tau, [1.0, -1.0])  # in model order: shoulder, elbow
    assert intake.rejected.reasons == []


def test_refused_joint_states_are_counted_and_break_the_stream():
    intake = _intake(end_stop_margin=0.05)
    _stream(intake, range(1, 101))
    seen, pos = intake.samples_seen, intake.diff._pos
    intake.take(_msg(101, effort=None), 101 * DT)
    intake.take(_msg(102, effort=(61.0, 0.0)), 102 * DT)  # 1.5 x 40 N m
    intake.take(_msg(103, velocity=(0.0, 12.1)), 103 * DT)  # 1.5 x 8 rad/s
    intake.take(_msg(104), 50 * DT)  # a stamp that goes back
    bad = _msg(105)
    bad.position = [1.0]
    intake.take(bad, 105 * DT)
    assert intake.rejected.reasons == [
        'no_effort',
        'out_of_range',
        'out_of_range',
        'stamp_backwards',
        'length_mismatch',
    ]
    # none counted as seen; each one skips a stream position (no rollout window spans it)
    assert intake.samples_seen == seen and intake.diff._pos == pos + 5
    assert intake.diff._count > 0
    intake.take(_msg(106, position=(3.08, 0.0)), 106 * DT)  # within 0.05 rad of 3.1
    assert intake.rejected.reasons[-1] == 'at_end_stop'
    assert intake.diff._count == 0  # the estimator restarts
    # the range is a runtime parameter
    intake.range_factor = 2.0
    intake.take(_msg(107, effort=(61.0, 0.0)), 107 * DT)
    assert intake.rejected.reasons[-1] == 'at_end_stop' and intake.samples_seen == seen + 1


def test_a_stamp_of_zero_takes_the_clock_and_restart_sizes_the_estimator_anew():
    intake = _intake()
    intake.take(_msg(0), 0.0)
    assert intake.stamps.last == 123.0
    _stream(intake, range(1, 100))
    assert intake.diff is not None
    intake.restart()
    assert intake.diff is None
    intake.break_stream()  # nothing to break: no estimator
    _stream(intake, range(100, 100 + FIRST_STAMPS))
    assert intake.diff is not None


def test_estimates_are_picked_at_their_rate_of_stamps():
    intake = _intake(estimate_rate=50.0)
    _stream(intake, range(1, 1001))  # 4 s of stamps
    due = intake.take_estimates_due()
    assert 190 <= len(due) <= 200 and intake.take_estimates_due() == []
    intake.estimate_rate.rate_hz = 0.0
    _stream(intake, range(1001, 1101))
    assert intake.take_estimates_due() == []


def test_estimates_are_the_snapshots_dynamics():
    intake = _intake(estimate_rate=1000.0)
    _stream(intake, range(1, 201))
    due = intake.take_estimates_due()
    torch.manual_seed(0)
    model = build_model('delan', ['revolute', 'revolute'], width=8, depth=1).double().eval()
    estimator = SnapshotEstimator(['shoulder', 'elbow'])
    est = estimator(model, due)
    q, qd, qdd = (
        torch.as_tensor(np.array([getattr(s, k) for s in due])) for k in 'q qd qdd'.split()
    )
    with torch.no_grad():
        tau = model.inverse(q, qd, qdd).numpy()
    b = len(due)
    assert est.mass_matrix.shape == (b, 2, 2) and est.kinetic.shape == (b,)
    assert np.allclose(est.predicted, tau, atol=1e-8)
    assert np.allclose(
        est.predicted,
        np.einsum('bij,bj->bi', est.mass_matrix, qdd.numpy())
        + est.coriolis
        + est.gravity
        + est.friction,
    )
    cached = estimator._model
    estimator(model, due[:3])
    assert estimator._model is cached  # one numpy model per snapshot
    estimator(model.double(), due[:3])  # the same object
    assert estimator._model is cached
    other = build_model('delan', ['revolute', 'revolute'], width=8, depth=1).double().eval()
    estimator(other, due[:3])
    assert estimator._model is not cached


def test_status_and_health_say_what_the_trainer_does():
    lineage = SimpleNamespace(model_id='abc', version=3, checkpoint_path='/ck/v3.pt', stamp=None)
    buffers = SplitBuffers(1000, 5, 2)
    learning = SimpleNamespace(
        lineage=lineage,
        message='training',
        state='diverged',
        buffers=buffers,
        training_steps=500,
        policy=SimpleNamespace(rollbacks=2),
        train_loss=0.25,
        val_nmse=[0.01, 0.02],
        last_round_s=0.5,
        lr=1e-3,
    )
    fields = status_fields(learning, samples_seen=7, rejected=1)
    assert fields['model_version'] == 3 and fields['samples_in_buffer'] == 0
    assert fields['rollbacks'] == 2 and fields['validation_nmse'] == [0.01, 0.02]
    now = [10.0]
    health = Health(lambda: now[0])
    now[0] = 12.0
    state, text, values = health.report(learning, 7, 1, 50.0)
    assert (state, text) == ('diverged', 'diverged: training')
    assert values['steps_per_s'] == '250.0' and values['validation_nmse_max'] == '0.02'
    now[0], learning.training_steps = 13.0, 600
    assert health.report(learning, 7, 1, 50.0)[2]['steps_per_s'] == '100.0'


@pytest.mark.parametrize('factor', [1.0, 0.5])
def test_the_range_follows_range_factor(factor):
    intake = _intake(range_factor=factor)
    assert np.allclose(intake._effort_lim, np.array([40.0, 20.0]) * factor)
    assert np.allclose(intake._vel_lim, np.array([6.0, 8.0]) * factor)


def test_each_sample_gets_the_urdfs_inverse_inertia_and_a_singular_one_is_refused():
    """loss_metric both/acceleration: each sample carries ``H_URDF(q)^-1``; a pose where the
    URDF's mass matrix cannot be inverted is a counted rejection, not a crash of the intake."""
    from delan_common.robot_model import RobotModel

    class SingularAbove(RobotModel):
        """The two-link arm's model, its mass matrix singular for shoulder angles above 0.05
        once ``faulty`` (a fault injected on the real model, after its own checks)."""

        faulty = False

        def mass_matrix(self, q):
            H = super().mass_matrix(q)
            return 0.0 * H if self.faulty and np.asarray(q)[0] > 0.05 else H

    nominal = SingularAbove(URDF)
    nominal.faulty = True
    intake = _intake(SplitBuffers(5000, 5, 2, metric=True), nominal=nominal, metric=True)
    _stream(intake, range(1, 100), position=(0.0, 0.3))
    s = intake.latest_sample
    assert np.allclose(s.metric @ RobotModel(URDF).mass_matrix(s.q), np.eye(2))
    assert intake.rejected.reasons == []
    _stream(intake, range(100, 110), position=(0.1, 0.3))
    # the estimator's delay: the first two of these still come out at the old pose
    assert intake.rejected.reasons == ['singular_inertia'] * 8
    assert np.allclose(intake.latest_sample.q, [0.0, 0.3])
