"""The learner's publishing decisions, driven round by round in-process (real LearnerNode, real
training; its worker kept idle with ``training_enabled`` false, the buffers filled directly, by
stamp, with the learner's own split into training and validation chunks).

- A lasting change of the robot that raises the error floor (here: a payload, and noisier
  sensors) must not stop publishing for good: the validation losses of the old data are no
  yardstick for the new ones, so the last good and the published weights are compared on the
  same, current validation data.
- A burst of bad but plausible data (efforts x 1.5 for 5 s: a push against the arm, a glitching
  sensor) looks like such a change while it is in the buffers; no version fitted to it may go
  out (the publication hold of ``publish_hold_s``). Without the hold (``publish_hold_s`` 0),
  this burst published versions 20x worse than the one before (torque nMSE on the good data;
  a burst of x -2.5 is caught by the rollbacks instead: its absurd data make every model far
  worse).
"""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
from rclpy.parameter import Parameter

from delan_learning.online import Sample, held_out
from delan_testing.ros import ros_context

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))
URDF = os.path.join(ROOT, 'delan_bringup', 'urdf', 'two_link_arm.urdf')
RATE = 250.0
BURST_GAIN = 1.5
#: stamps per training round around the burst: 25 steps per 0.15 s, 167 steps per second of
#: stamps (the live learner makes 90-120). Fewer rounds in the 5 s burst (0.25 s) left no
#: version fitted to it even without the hold: the test would then prove nothing
BURST_ROUND_S = 0.15


def _dataset(seed: int, **kw):
    pytest.importorskip('pinocchio')
    from delan_common.robot_model import RobotModel
    from delan_control.datagen import generate_dataset

    data = generate_dataset(URDF, trajectories=2, duration=12.0, rate=RATE, seed=seed, **kw)
    # the learner's loss weighs errors by the URDF's inverse inertia (loss_metric auto: both)
    data['metric'] = RobotModel(URDF).acceleration_metric(data['q'])
    return data


def _payload(mass: float):
    from delan_common.robot_model import Mismatch

    return Mismatch(payload_mass=mass)


def _learner(ctx, tmp_path, **params):
    from delan_learning.nodes.learner import LearnerNode

    base = dict(
        urdf_path=URDF,
        checkpoint_dir=str(tmp_path),
        resume=False,
        training_enabled=False,
        steps_per_round=50,
        batch_size=256,
        estimate_publish_rate=0.0,
        keep_versions=1000,
        publish_period=3600.0,
    )  # the stream decides when a round may publish
    base.update(params)
    return LearnerNode(
        context=ctx, parameter_overrides=[Parameter(k, value=v) for k, v in base.items()]
    )


class Stream:
    """Feeds a dataset into the learner's buffers by stamp, as its joint-state callback would,
    with training rounds in between; every round is a publication decision."""

    def __init__(self, node, rng, decide_every: int = 1):
        self.node, self.rng, self.t = node, rng, 0.0
        self.decide_every, self._rounds = decide_every, 0
        self.published = []  # (stamp at publication, version, path)

    def add(self, data, seconds: float = math.inf, scale: float = 1.0, start: int = 0) -> int:
        n = int(round(min(len(data['q']) - start, seconds * RATE)))
        for i in range(start, start + n):
            s = Sample(
                self.t,
                data['q'][i],
                data['qd'][i],
                data['qdd'][i],
                scale * data['tau'][i],
                metric=data['metric'][i],
            )
            (
                self.node.val_buf
                if held_out(s.t, self.node.validation_every)
                else self.node.train_buf
            ).add(s)
            self.t += 1.0 / RATE
        return start + n

    def round(self) -> None:
        node = self.node
        self._rounds += 1
        if self._rounds % self.decide_every == 0:
            node.policy.last_publish = node.policy.last_recheck = -math.inf
        v = node.version
        node._train_round(self.rng)
        if node.version > v:
            self.published.append((self.t, node.version, node.checkpoint_path))

    def rounds(self, until, max_rounds: int) -> int:
        for k in range(max_rounds):
            self.round()
            if until():
                return k + 1
        return -1

    def play(
        self, data, seconds_per_round: float, scale: float = 1.0, seconds: float = math.inf
    ) -> None:
        """Stream ``seconds`` of ``data`` (all by default), a round after each piece."""
        i, end = 0, int(round(min(len(data['q']), seconds * RATE)))
        while i < end:
            i = self.add(data, min(seconds_per_round, (end - i) / RATE), scale, start=i)
            self.round()


def _train_first_version(stream, data) -> None:
    node = stream.node
    stream.add(data)
    rounds = stream.rounds(lambda: node.version >= 1 and max(node.val_nmse) < 3e-3, 300)
    assert rounds > 0, f'no good first model: v{node.version}, nMSE {node.val_nmse}'


def _torque_nmse(path: str, data) -> float:
    import torch

    from delan_learning.checkpoint import load_model

    model, _ = load_model(path)
    with torch.no_grad():
        pred = model.inverse(*(torch.as_tensor(data[k]) for k in ('q', 'qd', 'qdd'))).numpy()
    return float(np.mean(np.mean((pred - data['tau']) ** 2, axis=0) / np.var(data['tau'], 0)))


def test_publishing_goes_on_after_a_lasting_change_raises_the_error_floor(tmp_path):
    before, after = _dataset(1), _dataset(2, noise=0.02, mismatch=_payload(0.2))
    with ros_context() as ctx:
        node = _learner(ctx, tmp_path)
        try:
            stream = Stream(node, np.random.default_rng(0))
            _train_first_version(stream, before)
            v_before, published_loss = node.version, node.policy.published_val
            path_before = node.checkpoint_path
            # the robot picks up a payload, its sensors get noisier: a higher error floor
            stream.play(after, seconds_per_round=0.5)
            stream.rounds(lambda: node.version > v_before, 60)
            print(
                f'\nbefore: v{v_before} (validation loss {published_loss:.3g}); after the '
                f'change: validation loss {node.policy.best_val:.3g}, nMSE '
                f'{np.round(node.val_nmse, 4).tolist()}, versions '
                f'{[(round(t, 1), v) for t, v, _ in stream.published]}, held: '
                f'{node.policy.shift_t is not None}'
            )
            assert node.version > v_before, 'no version published after the change'
            # what went out is better than the old version on the new data, and a good model
            assert max(node.policy.good_nmse) < 0.05, node.policy.good_nmse
            assert node.policy.best_val > published_loss  # the floor rose: the case under test
            assert _torque_nmse(node.checkpoint_path, after) < _torque_nmse(path_before, after)
        finally:
            node.close()
            node.destroy_node()


def test_no_version_fitted_to_a_burst_of_bad_data_goes_out(tmp_path):
    good = _dataset(3)
    with ros_context() as ctx:
        # buffers of 12 s of stamps: the burst leaves them during the test
        node = _learner(ctx, tmp_path, buffer_capacity=3000, steps_per_round=25)
        try:
            stream = Stream(node, np.random.default_rng(0), decide_every=5)
            _train_first_version(stream, good)
            # the burst starts with a held-out chunk: the validation data go bad first, then
            # the training data (the case where weights judged on bad data follow them)
            chunk = math.floor(stream.t) + 1
            while not held_out(chunk, node.validation_every):
                chunk += 1
            stream.play(good, seconds_per_round=BURST_ROUND_S, seconds=chunk - stream.t)
            v_before, path_before = node.version, node.checkpoint_path
            t_burst = stream.t
            stream.play(good, seconds_per_round=BURST_ROUND_S, scale=BURST_GAIN, seconds=5.0)
            t_clean = stream.t
            stream.play(good, seconds_per_round=BURST_ROUND_S)  # 24 s of good data
            recovered = stream.rounds(
                lambda: node.version > v_before and stream.published[-1][0] > t_clean + 12.0, 200
            )
            reference = _torque_nmse(path_before, good)
            after = [(t, v, _torque_nmse(p, good)) for t, v, p in stream.published if t > t_burst]
            print(
                f'\nv{v_before} before the burst (stamps {t_burst:.1f}-{t_clean:.1f}), torque '
                f'nMSE {reference:.4f}; versions after: '
                f'{[(round(t, 1), v, round(x, 4)) for t, v, x in after]}; '
                f'rollbacks {node.policy.rollbacks}; {node.message}'
            )
            for t, v, x in after:
                assert x < 3.0 * reference, (t, v, x, reference)
            # and publishing goes on once the burst is out of the buffers
            assert recovered > 0, 'no version after the burst left the buffers'
        finally:
            node.close()
            node.destroy_node()
