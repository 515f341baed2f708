"""The learner node with ``model:=hamiltonian`` (in-process, real training, driven round by round
with its worker idle) over real DDS, beside a running torque controller on ``model=delan``
(tests/test_learner_node.py's harness): joint states go in through the node's intake, a version
goes out on ``learner/model_update`` with ``~/dynamics_estimate`` of it (computed only once
someone subscribes), and the controller refuses the version (counted), holding on with plain
PD. Settings a kind cannot have are refused at start-up with the reason. A module of its own:
test_learner_node.py's learner would publish on the same topics."""

from __future__ import annotations

import math
from typing import List

import numpy as np
import pytest
import torch
from rclpy.parameter import Parameter
from sensor_msgs.msg import JointState
from test_learner_node import NAMES, ROBOT, URDF, Harness, _truth

from delan_common.excitation import random_fourier_trajectory
from delan_msgs.msg import DynamicsEstimate
from delan_testing.ros import ros_context

RATE = 250.0  # joint-state stamps [Hz]


def _learner(ctx, tmp_path, **params):
    from delan_learning.nodes.learner import LearnerNode

    base = dict(
        urdf_path=URDF,
        checkpoint_dir=str(tmp_path / 'ckpt'),
        resume=False,
        training_enabled=False,  # rounds driven by the test
        min_samples=200,
        steps_per_round=20,
        batch_size=64,
        width=32,
        depth=1,
        learning_rate=1e-2,
        learning_rate_final=1e-2,
        publish_period=0.1,
        estimate_publish_rate=RATE,
    )
    base.update(params)
    return LearnerNode(
        context=ctx, parameter_overrides=[Parameter(k, value=v) for k, v in base.items()]
    )


def _states(seconds: float, t0: float = 100.0) -> List[JointState]:
    """The true arm along an excitation, as joint states stamped at RATE."""
    traj = random_fourier_trajectory(
        ROBOT.lower, ROBOT.upper, ROBOT.velocity_limits, seed=0, velocity_fraction=0.5
    )
    t = np.arange(int(seconds * RATE)) / RATE
    q, qd, qdd = traj.sample(t)
    tau = _truth().inverse(q, qd, qdd)
    out = []
    for k in range(len(t)):
        msg = JointState(name=list(NAMES), position=q[k].tolist(), velocity=qd[k].tolist())
        msg.effort = tau[k].tolist()
        msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(
            int(round((t0 + t[k]) * 1e9)), 1_000_000_000
        )
        out.append(msg)
    return out


def test_a_hamiltonian_learner_publishes_versions_a_delan_controller_refuses(tmp_path):
    from delan_learning.checkpoint import load_model

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the learner's torch_threads (its worker sets it; idle here)
    states = _states(12.0)
    try:
        with ros_context() as ctx:
            h = Harness(ctx, tmp_path, model='delan')
            estimates: List[DynamicsEstimate] = []
            node = _learner(ctx, tmp_path, model='hamiltonian')
            try:
                for msg in states[:-50]:
                    node._on_joint_state(msg)
                assert node.intake.samples_seen > 2500 and node.rejected.total == 0
                rng = np.random.default_rng(0)
                for _ in range(40):
                    node._train_round(rng)
                    if node.version:
                        break
                    node.policy.last_publish = -math.inf  # a round may publish at once
                assert node.version >= 1, (node.val_nmse, node.message)
                h.wait_for('the version over DDS', lambda: len(h.updates) > 0, 30.0)
                update = h.updates[-1]
                assert update.model_version == node.version and list(update.joint_names) == NAMES
                assert max(update.validation_nmse) <= 0.25, list(update.validation_nmse)
                assert load_model(update.checkpoint_path)[1]['model_kind'] == 'hamiltonian'
                # no one subscribes to the estimates yet: none computed
                for msg in states[-50:-25]:
                    node._on_joint_state(msg)
                assert node._estimator._snapshot is None
                # what the version predicts for the next joint states, with its terms
                h.node.create_subscription(
                    DynamicsEstimate, 'learner/dynamics_estimate', estimates.append, 100
                )
                h.wait_for(
                    'the estimates subscribed',
                    lambda: node.estimate_pub.get_subscription_count() > 0,
                    30.0,
                )
                for msg in states[-25:]:
                    node._on_joint_state(msg)
                h.wait_for('an estimate', lambda: len(estimates) > 0, 30.0)
                est = estimates[-1]
                assert est.model_version == node.version and len(est.mass_matrix) == 4
                assert np.isfinite(est.kinetic_energy) and np.all(
                    np.isfinite(est.predicted_torque)
                )
                # the controller on model=delan: refused (no controller commands with a
                # variant), counted, and still plain PD at rest
                h.wait_for(
                    'the controller to refuse the version',
                    lambda: h.ctl.models.updates_refused >= 1,
                    30.0,
                )
                assert h.ctl.models.model is None and h.ctl.models.version == 0
                assert h.ctl_command() == [0.0, 0.0]
            finally:
                node.close()
                node.destroy_node()
                h.close()
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize(
    'params, why',
    [
        (dict(model='mlp', loss='forward'), r"invalid parameter: loss 'forward'.*'mlp'"),
        (
            dict(model='blackbox_lagrangian', friction_model='stribeck'),
            'invalid parameter: friction_model.*viscous [+] Coulomb friction only',
        ),
    ],
)
def test_what_a_kind_cannot_have_is_refused_at_start_up(tmp_path, params, why):
    with ros_context() as ctx, pytest.raises(ValueError, match=why):
        _learner(ctx, tmp_path, **params)
