"""The online learner's rollout windows for the forward loss (ROS-free): the differentiator
numbers the stream, the replay buffer hands out runs of consecutive samples, and no window the
trainer cuts from them spans a gap, an estimator restart or reset, a rejected message, a
held-out chunk or the ring's wrap; the learner's loss parameter check."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from delan_common.model_kinds import FORWARD_KINDS, TRAINABLE_KINDS
from delan_learning.models import build_model
from delan_learning.online import DelayedDifferentiator, ReplayBuffer, Sample, held_out
from delan_learning.params.learner import loss_error
from delan_learning.rollout import window_index
from delan_learning.training import TorqueNormalizer, TrainConfig, Trainer

DT = 0.004  # 250 Hz
H = 4  # rollout steps of the tests' windows


def _state(k: int):
    """Joint state ``k`` of a smooth 2-joint motion; the effort is ``k`` (identifies it)."""
    t = k * DT
    q = np.array([np.sin(t), 0.5 * np.cos(2 * t)])
    qd = np.array([np.cos(t), -np.sin(2 * t)])
    return t, q, qd, np.array([float(k), -float(k)])


def _feed(diff, buf, ks, skip=(), reset=(), val=None, every=2):
    """Push states ``ks`` (a gap in ``ks`` is a gap in the stamps); ``skip``: messages rejected
    (not pushed, ``diff.skip()``), ``reset``: the estimator reset before them (an end stop).
    With ``val``, held-out chunks go there (the learner's split)."""
    for k in ks:
        if k in skip:
            diff.skip()
            continue
        if k in reset:
            diff.reset()
        s = diff.push(*_state(k))
        if s is not None:
            (val if val is not None and held_out(s.t, every) else buf).add(s)


def _windows(buf, **kw):
    w = buf.windows(np.random.default_rng(0), min_run=H + 1, **kw)
    index, _ = window_index(w['traj'], w['t'], H)
    return w, index


def _spans_break(w, index, k_before: int) -> bool:
    """Whether a window has samples on both sides of state ``k_before`` / ``k_before + 1``."""
    k = np.rint(w['effort'][:, 0]).astype(int)[index]  # (M, H+1) state numbers
    return bool(np.any((k[:, 0] <= k_before) & (k[:, -1] > k_before)))


def test_samples_are_numbered_in_stream_order_with_their_raw_effort():
    diff = DelayedDifferentiator(window=5)
    out = [diff.push(*_state(k)) for k in range(20)]
    samples = [s for s in out if s is not None]
    assert [s.seq for s in samples] == list(range(2, 18))  # the centre sample's number
    # the effort as it came, beside the kernel-averaged torque of the inverse loss
    assert [s.effort[0] for s in samples] == [float(k) for k in range(2, 18)]
    assert not np.allclose([s.tau[0] for s in samples], [s.effort[0] for s in samples])
    # state 20 rejected (skipped): state 21 is numbered as if it had been there
    diff.skip()
    s = [diff.push(*_state(k)) for k in range(21, 26)][-1]
    assert (s.effort[0], s.seq) == (23.0, 23)
    diff.reset()  # an end stop: one number skipped, states 24 and 25 never emitted
    assert [diff.push(*_state(k)) for k in range(26, 30)] == [None] * 4
    s = diff.push(*_state(30))
    assert (s.effort[0], s.seq) == (28.0, 29)
    # a gap of seconds: the estimator restarts, one number skipped (state 30 had 31)
    t, q, qd, tau = _state(500)
    assert [diff.push(t + j * DT, q, qd, tau) for j in range(4)] == [None] * 4
    s = diff.push(t + 4 * DT, q, qd, tau)
    assert diff.restarts == 1 and s.seq == 31 + 2 + 2  # the third push after the restart


def test_a_rejected_message_cuts_the_runs_even_without_a_stamp_gap():
    """State 100 is rejected (a one-step hole the stamps show too); then samples whose stamps
    are contiguous but whose stream numbers jump: the numbers alone cut there."""
    diff, buf = DelayedDifferentiator(window=5), ReplayBuffer(1000, 2, windows=True)
    _feed(diff, buf, range(300), skip={100})
    w, index = _windows(buf)
    assert len(np.unique(w['traj'])) == 2
    assert not _spans_break(w, index, 99)
    # a buffer fed samples whose stamps are contiguous but whose numbers jump
    buf2 = ReplayBuffer(1000, 2, windows=True)
    for k in range(60):
        t, q, qd, tau = _state(k)
        buf2.add(Sample(t, q, qd, q, tau, effort=tau, seq=k + (5 if k >= 30 else 0)))
    w, index = _windows(buf2)
    assert np.unique(w['traj']).size == 2 and not _spans_break(w, index, 29)
    assert len(index) == 2 * (30 - H)  # every other window is there


def test_gaps_resets_and_held_out_chunks_cut_the_runs():
    diff = DelayedDifferentiator(window=5, max_gap=0.05)
    train, val = ReplayBuffer(5000, 2, windows=True), ReplayBuffer(5000, 2, windows=True)
    ks = list(range(0, 400)) + list(range(450, 900))  # a gap of 0.2 s > max_gap
    _feed(diff, train, ks, reset={700}, val=val, every=3)
    w, index = _windows(train)
    assert len(index) > 100
    assert not _spans_break(w, index, 399)  # the gap
    assert not _spans_break(w, index, 699)  # the reset (an end stop)
    # held-out chunks: no training window bridges one (its stamps jump by the chunk)
    t = w['t'][index]
    assert np.all(np.diff(t, axis=1) < 1.5 * DT)
    held = np.array([held_out(x, 3) for x in t.reshape(-1)])
    assert not held.any() and val.size > 0
    # within a run the samples follow each other and are all there
    for r in np.unique(w['traj']):
        k = np.rint(w['effort'][w['traj'] == r, 0])
        assert np.all(np.diff(k) == 1)


def test_the_ring_wrap_is_no_window_and_the_oldest_rows_come_first():
    diff, buf = DelayedDifferentiator(window=5), ReplayBuffer(100, 2, windows=True)
    _feed(diff, buf, range(257))
    w, index = _windows(buf)
    k = np.rint(w['effort'][:, 0]).astype(int)
    assert np.array_equal(k, np.arange(155, 255))  # the newest 100, in stream order
    assert np.unique(w['traj']).size == 1 and len(index) == 100 - H


def test_short_runs_are_left_out_and_a_limit_takes_random_stretches():
    diff, buf = DelayedDifferentiator(window=5), ReplayBuffer(10000, 2, windows=True)
    # rejected messages every 4 states for a while: runs too short for a window
    _feed(diff, buf, range(3000), skip=set(range(1000, 1400, 4)))
    w = buf.windows(np.random.default_rng(0), min_run=H + 1)
    k = np.rint(w['effort'][:, 0]).astype(int)
    assert not np.any((k > 1001) & (k < 1396))  # 1396: the last one rejected
    # a limit: stretches of limit / spans rows from all over the buffer, each a run
    w = buf.windows(np.random.default_rng(1), limit=800, min_run=H + 1, spans=8)
    k = np.rint(w['effort'][:, 0]).astype(int)
    assert len(k) <= 800 and len(k) >= 600
    assert k.max() - k.min() > 1500  # spread, not one stretch
    assert np.all(np.bincount(w['traj'])[np.unique(w['traj'])] <= 100)
    assert np.all(np.diff(k)[np.diff(w['traj']) == 0] == 1)
    # samples without numbers follow the one added before them (the stamps cut the rest)
    plain = ReplayBuffer(50, 2, windows=True)
    for j in range(20):
        t, q, qd, tau = _state(j if j < 10 else j + 30)
        plain.add(Sample(t, q, qd, q, tau))
    w, index = _windows(plain)
    assert np.unique(w['traj']).size == 1 and len(index) == 2 * (10 - H)
    with pytest.raises(ValueError, match='windows=True'):
        ReplayBuffer(10, 2).windows(np.random.default_rng(0))


def test_forward_trainer_rolls_out_under_the_effort_and_validates_on_torques():
    """``effort`` drives the rollouts (not the kernel-averaged ``tau``), and the learner's
    validation (``rollouts=False``) needs no consecutive samples."""
    diff, buf = DelayedDifferentiator(window=5), ReplayBuffer(1000, 2, windows=True)
    _feed(diff, buf, range(400))
    data = buf.windows(np.random.default_rng(0), min_run=H + 1)
    torch.manual_seed(0)
    model = build_model('delan', ['revolute', 'revolute'], width=8, depth=1)
    trainer = Trainer(
        model,
        TrainConfig(loss='both', horizon=H, integrator='euler', batch_size=16),
        TorqueNormalizer.from_torques(data['tau']),
    )
    pool = trainer._pool(data)
    batch = pool.take(torch.arange(4))
    assert torch.equal(batch.rollout_tau, batch.effort)
    assert not torch.allclose(batch.effort, batch.tau)
    assert np.isfinite(trainer.train_steps(data, 3))
    with_rollouts = trainer.evaluate(data)
    assert 'rollout' in with_rollouts
    shuffled = buf.sample(100, np.random.default_rng(1))  # no t, not consecutive
    ev = trainer.evaluate(shuffled, rollouts=False)
    assert set(ev) == {'loss', 'mse', 'nmse'}
    with pytest.raises(ValueError, match='time stamps'):
        trainer.evaluate(shuffled)


def test_the_learners_loss_check_follows_the_model_kinds():
    assert loss_error('inverse', 'delan_residual', 'both') is None
    assert loss_error('forward', 'delan', 'auto') is None
    assert loss_error('both', 'delan', 'torque') is None
    why = loss_error('forward', 'delan_residual', 'auto')
    assert why and 'delan_residual' in why and 'differentiable' in why
    assert 'loss_metric' in loss_error('both', 'delan', 'acceleration')
    # FORWARD_KINDS is what the model classes say of themselves
    for kind in TRAINABLE_KINDS:
        model = build_model(kind, ['revolute', 'revolute'], width=4, depth=1)
        assert (kind in FORWARD_KINDS) == bool(getattr(model, 'differentiable_forward', False))
