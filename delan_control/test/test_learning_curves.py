"""Learning curves: a real learner replayed on simulated joint states publishes versions with the
data they had seen, and the table names the first version within the demo's bound."""

from __future__ import annotations

import os

import numpy as np
from sensor_msgs.msg import JointState

from delan_common.param_table import robot_table
from delan_control.datagen import generate_dataset
from delan_control.learning_curves import BOUND, Curve, table
from delan_learning.learner_replay import RUN_OWN, carried, learner_overrides, replay_learner
from delan_learning.params.learner import TABLE

URDF = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    'delan_bringup',
    'urdf',
    'two_link_arm.urdf',
)


def _states(data) -> list:
    """The dataset as JointState messages, stamped from 100 s, trajectories one after another."""
    msgs, t0 = [], 100.0
    for k in np.unique(data['traj']):
        idx = np.flatnonzero(data['traj'] == k)
        for i in idx:
            msg = JointState(
                name=['shoulder', 'elbow'],
                position=data['q'][i].tolist(),
                velocity=data['qd'][i].tolist(),
                effort=data['tau'][i].tolist(),
            )
            stamp = t0 + data['t'][i]
            msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(int(round(stamp * 1e9)), 10**9)
            msgs.append(msg)
        t0 += float(data['t'][idx[-1]]) + 0.002
    return msgs


def test_a_replayed_learner_reports_each_version_with_the_data_it_had_seen(tmp_path):
    data = generate_dataset(URDF, trajectories=1, duration=12.0, rate=250.0, seed=3)
    published = []

    def on_publish(node, seconds):
        published.append((seconds, node.samples_seen, node.version, node.checkpoint_path))

    steps, last, _ = replay_learner(
        _states(data),
        URDF,
        {'min_samples': 500, 'publish_period': 0.5, 'publish_max_nmse': 1.0},
        rate=80.0,
        until=0.0,
        seed=0,
        checkpoint_dir=str(tmp_path / 'ckpt'),
        threads=1,
        on_publish=on_publish,
        say=lambda _: None,
    )
    assert steps >= 500 and len(published) >= 2, (steps, published)
    seconds = [p[0] for p in published]
    samples = [p[1] for p in published]
    assert seconds == sorted(seconds) and samples == sorted(samples)
    assert 0 < seconds[0] < seconds[-1] <= 12.1
    assert [p[2] for p in published] == sorted({p[2] for p in published})
    assert last == published[-1][3] and os.path.isfile(last)


def test_a_replay_learns_the_joints_the_demo_learned(tmp_path):
    """A demo run with --joints (or limits) writes them in the learner's section: a replay that
    took the node's default chain instead rejected every joint state of a mobile manipulator
    (PR2: 'message lacks joints [torso_lift_joint]')."""
    params = tmp_path / 'params.yaml'
    params.write_text(
        '/**/learner:\n  ros__parameters:\n'
        '    joints: [r_shoulder_pan_joint, r_shoulder_lift_joint]\n'
        "    locked_joint_positions: ['torso_lift_joint=0.1']\n"
        '    effort_limits: [0.0, 60.0]\n    velocity_limits: []\n'
        '    width: 32\n    checkpoint_dir: /elsewhere\n'
        '    end_stop_margin: 0.05\n    shift_factor: 4.0\n    torch_threads: 2\n'
        '    not_a_learner_parameter: 1\n'
    )
    assert learner_overrides(str(params)) == {
        'joints': ['r_shoulder_pan_joint', 'r_shoulder_lift_joint'],
        'locked_joint_positions': ['torso_lift_joint=0.1'],
        'effort_limits': [0.0, 60.0],
        'width': 32,
        # what shapes the samples and the rounds is carried whether or not a list names it
        'end_stop_margin': 0.05,
        'shift_factor': 4.0,
    }


def test_what_a_replay_leaves_to_itself_are_learner_parameters():
    """A renamed parameter of the run's own (where it writes, its threads) would otherwise be
    carried under its new name."""
    declared = {p.name for p in robot_table() + TABLE}  # as the node declares them
    assert RUN_OWN <= declared, sorted(RUN_OWN - declared)
    assert set(carried()) == declared - RUN_OWN


def test_the_table_names_the_first_version_within_the_bound_at_every_speed():
    c = Curve('delan', seconds=[10, 20, 30], samples=[100, 200, 300])
    c.ratio = [[0.2, 0.5], [0.3, BOUND], [0.1, 0.1]]
    assert c.first_within() == 1
    never = Curve('mlp', seconds=[10], samples=[100], ratio=[[0.5, 0.1]])
    assert never.first_within() is None
    md = table([c, never])
    assert '| `delan` | 3 | 0 | 20 (200) | 0.300 / 0.333 | 0.100 / 0.100 |' in md
    assert '| `mlp` | 1 | 0 | never | - | 0.500 / 0.100 |' in md
    assert Curve('delan').first_within() is None
