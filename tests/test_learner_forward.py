"""The learner's forward loss (``loss`` forward / both) over real DDS: the sim (a real process, in
lockstep, with the demo's measurement noise) is driven by a computed-torque loop in this test
along an excitation trajectory, and a learner process learns from the sim's joint states.

- ``loss:=both`` from scratch: a version goes out whose validation passes the quality gate
  (``publish_max_nmse``, default 0.25, on the torque nMSE: validation stays on torques);
- ``loss`` set to forward at runtime over the parameter service: the next round trains through
  the forward model on rollout windows, and a version trained so goes out, past the same gate
  (its checkpoint says which loss made it). From scratch, forward alone needs thousands of steps
  to pass the torque gate (``bench/bench_forward_loss_online.py``), too long for this test;
- a model kind without a differentiable forward model (delan_residual) is refused: at start-up
  with ``invalid parameter: loss ...``, and a runtime set with the reason.
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from typing import List

import numpy as np
import pytest
import rclpy
from rclpy.executors import SingleThreadedExecutor
from rclpy.parameter import Parameter
from rclpy.parameter_client import AsyncParameterClient
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray

from delan_common.excitation import random_fourier_trajectory
from delan_common.ros.qos import LATCHED
from delan_common.urdf_joints import RobotDescription
from delan_msgs.msg import ModelStatus, ModelUpdate
from delan_testing.ros import node_process, ros_context, spin_in_thread, stop_process

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))
URDF = os.path.join(ROOT, 'delan_bringup', 'urdf', 'two_link_arm.urdf')
ROBOT = RobotDescription.load(URDF)
RATE = 250.0  # joint states [Hz of sim time]
GATE = 0.25  # the learner's publish_max_nmse (its default)
WAIT = 90.0


def _args(values: dict) -> List[str]:
    out = []
    for k, v in values.items():
        v = str(v).lower() if isinstance(v, bool) else v
        out += ['-p', f'{k}:={v}']
    return out


class Loop:
    """Computed torque on the nominal URDF along an excitation, answering every joint state of
    the sim (in lockstep: the sim steps once the answer is in)."""

    def __init__(self, node):
        from delan_common.robot_model import RobotModel

        self.model = RobotModel(URDF)
        self.ref = random_fourier_trajectory(
            ROBOT.lower, ROBOT.upper, ROBOT.velocity_limits, seed=4, velocity_fraction=0.5
        )
        self.start = self.ref.sample(np.zeros(1))[0][0]
        self.t0 = None
        self.states = 0
        self.pub = node.create_publisher(Float64MultiArray, 'effort_controller/commands', 10)
        node.create_subscription(JointState, 'joint_states', self._on_state, 10)

    def _on_state(self, msg: JointState) -> None:
        t = msg.header.stamp.sec + 1e-9 * msg.header.stamp.nanosec
        self.t0 = t if self.t0 is None else self.t0
        q_ref, qd_ref, qdd_ref = (x[0] for x in self.ref.sample(np.array([t - self.t0])))
        q, qd = np.asarray(msg.position), np.asarray(msg.velocity)
        bw = 30.0
        a = qdd_ref + bw * bw * (q_ref - q) + 2.0 * bw * (qd_ref - qd)
        tau = self.model.rigid_body_torque(q, qd, a) + self.model.friction(qd_ref)
        self.pub.publish(Float64MultiArray(data=tau.tolist()))
        self.states += 1


@pytest.fixture
def rig(tmp_path):
    pytest.importorskip('pinocchio')
    ns = '/fwd_' + uuid.uuid4().hex[:8]
    with ros_context() as ctx:
        node = rclpy.create_node('forward_probe', namespace=ns, context=ctx)
        loop = Loop(node)
        status: List[ModelStatus] = []
        updates: List[ModelUpdate] = []
        node.create_subscription(ModelStatus, 'learner/status', status.append, 100)
        node.create_subscription(ModelUpdate, 'learner/model_update', updates.append, LATCHED)
        ex = SingleThreadedExecutor(context=ctx)
        ex.add_node(node)
        spin_in_thread(ex)
        logs, procs = {}, {}
        common = ['-r', f'__ns:={ns}', '-p', f'urdf_path:={URDF}']
        sim = {
            'publish_rate': RATE,
            'lockstep': True,
            # every state waits for the test loop's answer: a loaded machine that made the sim
            # step on an old command swung the arm off its excitation
            'lockstep_timeout': 2.0,
            'real_time_factor': 2.0,
            'position_noise': 1e-4,
            'velocity_noise': 2e-3,
            'seed': 1,
            'initial_position': '[' + ', '.join(f'{x:.6f}' for x in loop.start) + ']',
        }
        learner = {
            'checkpoint_dir': str(tmp_path / 'ckpt'),
            'resume': False,
            'loss': 'both',
            'horizon': 5,
            'integrator': 'euler',
            'min_samples': 500,
            'validation_every': 2,
            'steps_per_round': 25,
            'batch_size': 128,
            'publish_period': 0.5,
            'keep_versions': 1000,  # every version announced stays readable
            'status_rate': 10.0,
            'estimate_publish_rate': 0.0,
            'torch_threads': 1,
        }
        try:
            for name, pkg, params in (
                ('sim', 'delan_control', sim),
                ('learner', 'delan_learning', learner),
            ):
                logs[name] = open(tmp_path / f'{name}.log', 'w')
                procs[name] = node_process(
                    pkg,
                    name,
                    common + _args(params),
                    stdout=logs[name],
                    stderr=subprocess.STDOUT,
                    cwd=str(tmp_path),
                )
            yield ns, node, loop, status, updates, procs
        finally:
            for proc in procs.values():
                stop_process(proc)
            for f in logs.values():
                f.close()
            ex.shutdown(timeout_sec=10.0)
            node.destroy_node()
            print(f'\nlogs: {tmp_path}')


def _wait(what, pred, procs, status, timeout=WAIT):
    deadline = time.monotonic() + timeout
    while not pred():
        for name, proc in procs.items():
            assert proc.poll() is None, f'{name} exited with {proc.returncode}'
        st = status[-1] if status else None
        assert time.monotonic() < deadline, f'timed out waiting for {what}; last status: ' + (
            'none'
            if st is None
            else f'"{st.message}", {st.samples_seen} seen, {st.training_steps} steps, '
            f'val nMSE {list(st.validation_nmse)}, v{st.model_version}'
        )
        time.sleep(0.05)


_TRAINED_WITH: dict = {}


def _trained_with(update: ModelUpdate) -> str:
    """The loss the version was trained with, from its checkpoint (read once)."""
    from delan_learning.checkpoint import load_model

    if update.checkpoint_path not in _TRAINED_WITH:
        meta = load_model(update.checkpoint_path)[1]
        _TRAINED_WITH[update.checkpoint_path] = meta['online']['loss']['loss']
    return _TRAINED_WITH[update.checkpoint_path]


@pytest.mark.solo  # learns live against the clock
def test_forward_and_both_losses_learn_from_the_sim_and_pass_the_gate(rig):
    ns, node, loop, status, updates, procs = rig
    _wait('a version trained with loss both', lambda: len(updates) > 0, procs, status)
    first = updates[0]
    assert max(first.validation_nmse) <= GATE, list(first.validation_nmse)
    assert _trained_with(first) == 'both'

    # to the forward loss at runtime, over the parameter service
    client = AsyncParameterClient(node, f'{ns}/learner')
    assert client.wait_for_services(timeout_sec=30.0)
    results = []
    for params in ([Parameter('loss', value='sideways')], [Parameter('loss', value='forward')]):
        future = client.set_parameters(params)
        _wait('the parameter service', future.done, procs, status, 30.0)
        results.append(future.result().results[0])
    assert not results[0].successful and 'loss' in results[0].reason
    assert results[1].successful, results[1].reason
    n = len(updates)
    _wait(
        'a version trained with loss forward',
        lambda: any(_trained_with(u) == 'forward' for u in updates[n:]),
        procs,
        status,
    )
    forward = next(u for u in updates[n:] if _trained_with(u) == 'forward')
    assert forward.model_version > first.model_version
    assert forward.model_id == first.model_id  # the same lineage, trained on
    assert max(forward.validation_nmse) <= GATE, list(forward.validation_nmse)
    st = status[-1]
    assert st.samples_rejected == 0 and np.isfinite(st.train_loss)
    print(
        f'\n{loop.states} joint states; v{first.model_version} (both) validation nMSE '
        f'{np.round(first.validation_nmse, 4).tolist()}; v{forward.model_version} (forward) '
        f'{np.round(forward.validation_nmse, 4).tolist()}; {st.training_steps} steps'
    )


def test_a_model_without_a_differentiable_forward_model_is_refused(tmp_path):
    from delan_learning.nodes.learner import LearnerNode

    base = dict(
        urdf_path=URDF,
        checkpoint_dir=str(tmp_path),
        resume=False,
        training_enabled=False,
        model='delan_residual',
    )
    with ros_context() as ctx:
        for loss in ('forward', 'both'):
            why = f"invalid parameter: loss '{loss}'.*'delan_residual'"
            with pytest.raises(ValueError, match=why):
                LearnerNode(
                    context=ctx,
                    parameter_overrides=[
                        Parameter(k, value=v) for k, v in dict(base, loss=loss).items()
                    ],
                )
        node = LearnerNode(
            context=ctx, parameter_overrides=[Parameter(k, value=v) for k, v in base.items()]
        )
        try:
            res = node.set_parameters([Parameter('loss', value='forward')])[0]
            assert not res.successful and 'differentiable' in res.reason, res.reason
            assert node.get_parameter('loss').value == 'inverse' and node.loss == 'inverse'
            # the rollout settings may change (they apply once a forward loss does)
            assert node.set_parameters([Parameter('horizon', value=3)])[0].successful
            assert not node.set_parameters([Parameter('horizon', value=0)])[0].successful
        finally:
            node.close()
            node.destroy_node()
        # delan with an acceleration-weighted loss: no rollout loss either
        with pytest.raises(ValueError, match='invalid parameter: loss_metric'):
            LearnerNode(
                context=ctx,
                parameter_overrides=[
                    Parameter(k, value=v)
                    for k, v in dict(
                        base, model='delan', loss_metric='acceleration', loss='forward'
                    ).items()
                ],
            )
