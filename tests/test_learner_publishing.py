"""The learner's publishing decisions, driven round by round in-process (real LearnerNode, real
training; its worker kept idle with ``training_enabled`` false, the buffers filled directly).

A lasting change of the robot that raises the error floor (here: a payload, and noisier sensors)
must not stop publishing for good: the validation losses of the old data are no yardstick for
the new ones, so the last good and the published weights are compared on the same, current
validation data.
"""
from __future__ import annotations

import os

import numpy as np
import pytest
from rclpy.parameter import Parameter

from delan_learning.online import Sample
from delan_learning.ros.testing import ros_context

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))
URDF = os.path.join(ROOT, 'urdf', 'two_link_arm.urdf')


def _fill(node, data) -> None:
    """Every 5th row to validation (the learner holds out data in the same proportion)."""
    node.train_buf.clear()
    node.val_buf.clear()
    for i in range(len(data['q'])):
        buf = node.val_buf if i % 5 == 0 else node.train_buf
        buf.add(Sample(i * 4e-3, data['q'][i], data['qd'][i], data['qdd'][i], data['tau'][i]))


def _rounds(node, rng, until, max_rounds: int) -> int:
    for k in range(max_rounds):
        node._train_round(rng)
        if until():
            return k + 1
    return -1


def test_publishing_goes_on_after_a_lasting_change_raises_the_error_floor(tmp_path):
    pytest.importorskip('pinocchio')
    from delan_control.datagen import generate_dataset
    from delan_control.robot_model import Mismatch
    from delan_learning.nodes.learner import LearnerNode

    before = generate_dataset(URDF, trajectories=2, duration=12.0, rate=250.0, seed=1)
    after = generate_dataset(URDF, trajectories=2, duration=12.0, rate=250.0, seed=2,
                             mismatch=Mismatch(payload_mass=0.2), noise=0.02)
    with ros_context() as ctx:
        node = LearnerNode(context=ctx, parameter_overrides=[
            Parameter('urdf_path', value=URDF), Parameter('checkpoint_dir', value=str(tmp_path)),
            Parameter('resume', value=False), Parameter('training_enabled', value=False),
            Parameter('steps_per_round', value=50), Parameter('batch_size', value=256),
            Parameter('publish_period', value=0.1), Parameter('estimate_rate', value=0.0)])
        try:
            rng = np.random.default_rng(0)
            _fill(node, before)
            rounds = _rounds(node, rng, lambda: node.version >= 1 and max(node.val_nmse) < 3e-3,
                             300)
            assert rounds > 0, f'no good first model: v{node.version}, nMSE {node.val_nmse}'
            v_before, published_loss = node.version, node._published_val
            # the robot picks up a payload, its sensors get noisier: a higher error floor
            _fill(node, after)
            new = _rounds(node, rng, lambda: node.version > v_before, 60)
            print(f'\nbefore: v{v_before} after {rounds} rounds (validation loss '
                  f'{published_loss:.3g}); after the change: validation loss {node.best_val:.3g}, '
                  f'nMSE {np.round(node.val_nmse, 4).tolist()}, '
                  f'{"v%d after %d rounds" % (node.version, new) if new > 0 else "no new version"}')
            assert new > 0, 'no version published after the change'
            # what went out is better than the old version on the new data, and a good model
            assert max(node._good_nmse) < 0.05, node._good_nmse
            assert node.best_val > published_loss     # the floor did rise: the case under test
        finally:
            node.close()
            node.destroy_node()
