"""Seeing the suite live, over real DDS in one process: the learner (resumed from a checkpoint,
not training) publishes ``~/dynamics_estimate`` at its configured rate of sample stamps, from a
*best-effort* joint-state stream, with the prediction of that checkpoint beside the measured
torque, and reports on ``/diagnostics``; a data logger with ``topics:=[...]`` records the
controller state (type taken from the graph) and the estimates (type given) beside the joint
states, into a bag the suite's reader reads back. The docs' PlotJuggler and Foxglove layouts parse
and plot only fields these nodes publish."""

from __future__ import annotations

import json
import os
import re
import time
import xml.etree.ElementTree as ET
from typing import Dict, List

import numpy as np
import pytest
import rclpy
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.parameter import Parameter
from rclpy.qos import qos_profile_sensor_data
from rclpy.serialization import deserialize_message
from rosidl_runtime_py.utilities import get_message
from sensor_msgs.msg import JointState

from delan_common.urdf_joints import RobotDescription
from delan_learning.bags import iter_bag_messages
from delan_msgs.msg import ControllerState, DynamicsEstimate
from delan_testing.ros import make_executor, ros_context, spin_in_thread

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))
URDF = os.path.join(ROOT, 'delan_bringup', 'urdf', 'two_link_arm.urdf')
ROBOT = RobotDescription.load(URDF)
NAMES = ROBOT.joint_names
# what the nodes of the suite publish under their launch names, root namespace
CONTROLLER_STATE = '/torque_controller/controller_state'
DYNAMICS_ESTIMATE = '/learner/dynamics_estimate'
PUBLISHED = {
    CONTROLLER_STATE: 'delan_msgs/msg/ControllerState',
    DYNAMICS_ESTIMATE: 'delan_msgs/msg/DynamicsEstimate',
    '/diagnostics': 'diagnostic_msgs/msg/DiagnosticArray',
}
ESTIMATE_RATE = 50.0  # [Hz of stamps] asked of the learner
STAMP_RATE = 500.0  # [Hz] of the joint states' stamps, sent in real time
EFFORT = [1.5, -0.5]
VERSION = 3


def _wait(what: str, pred, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, f'never: {what}'
        time.sleep(0.02)


def _params(**values) -> List[Parameter]:
    return [Parameter(k, value=v) for k, v in values.items()]


def _checkpoint(folder) -> str:
    """An untrained DeLaN as the learner's version VERSION (what it resumes from)."""
    import torch

    from delan_learning.checkpoint import save_model
    from delan_learning.models import build_model

    torch.manual_seed(0)
    model = build_model('delan', ROBOT.joint_types, width=16, depth=1)
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f'model_v{VERSION:05d}.pt')
    save_model(model, path, {'joint_names': NAMES, 'model_version': VERSION})
    return path


def test_estimates_diagnostics_and_a_bag_of_what_the_nodes_show(tmp_path):
    from delan_learning.checkpoint import load_model
    from delan_learning.nodes.data_logger import DataLoggerNode
    from delan_learning.nodes.learner import LearnerNode

    ckpt = _checkpoint(tmp_path / 'ckpt')
    with ros_context() as ctx:
        nodes, ex = [], None
        try:
            learner = LearnerNode(
                context=ctx,
                parameter_overrides=_params(
                    urdf_path=URDF,
                    checkpoint_dir=str(tmp_path / 'ckpt'),
                    resume=True,
                    training_enabled=False,
                    estimate_publish_rate=ESTIMATE_RATE,
                    torch_threads=1,
                ),
            )
            nodes.append(learner)
            logger = DataLoggerNode(
                context=ctx,
                parameter_overrides=_params(
                    bag_dir=str(tmp_path / 'bags'),
                    qos_reliability='best_effort',
                    topics=[CONTROLLER_STATE, f'{DYNAMICS_ESTIMATE}:delan_msgs/DynamicsEstimate'],
                    diagnostics_period_s=0.2,
                ),
            )
            nodes.append(logger)
            probe = rclpy.create_node('live_probe', context=ctx)
            nodes.append(probe)
            estimates: List[DynamicsEstimate] = []
            diags: Dict[str, object] = {}
            probe.create_subscription(DynamicsEstimate, DYNAMICS_ESTIMATE, estimates.append, 1000)
            probe.create_subscription(
                DiagnosticArray,
                '/diagnostics',
                lambda m: diags.update({s.name: s for s in m.status}),
                100,
            )
            js_pub = probe.create_publisher(JointState, 'joint_states', qos_profile_sensor_data)
            cs_pub = probe.create_publisher(ControllerState, CONTROLLER_STATE, 10)
            ex = make_executor(ctx, nodes)
            spin_in_thread(ex)
            assert learner.estimate_pub.topic_name == DYNAMICS_ESTIMATE
            _wait('the learner and the logger', lambda: js_pub.get_subscription_count() >= 2)

            # 1.2 s of a moving arm, stamped at STAMP_RATE, sent in real time (best effort)
            t0, sent = 1000.0, 0
            start = time.monotonic()
            while sent < 1.2 * STAMP_RATE:
                t = t0 + sent / STAMP_RATE
                q = [0.3 + 0.2 * np.sin(2.0 * t), -0.2 + 0.1 * np.cos(3.0 * t)]
                qd = [0.4 * np.cos(2.0 * t), -0.3 * np.sin(3.0 * t)]
                msg = JointState(name=NAMES, position=q, velocity=qd, effort=EFFORT)
                msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(
                    round(t * 1e9), 1_000_000_000
                )
                js_pub.publish(msg)
                sent += 1
                time.sleep(max(0.0, start + sent / STAMP_RATE - time.monotonic()))
            # the controller state: its type comes from the graph, once the logger saw it
            _wait('the logger on the controller state', lambda: CONTROLLER_STATE in logger.topics)
            for k in range(20):
                cs_pub.publish(
                    ControllerState(
                        joint_names=NAMES, model='pd', model_version=k, command=[0.1 * k, -0.1 * k]
                    )
                )
                time.sleep(0.01)
            _wait(
                'the estimates of the stream',
                lambda: learner.samples_seen >= 0.9 * sent and len(estimates) > 0,
                10.0,
            )
            _wait(
                "the learner's and the logger's status",
                lambda: {'/learner', 'data_logger: bag recording'} <= set(diags),
                10.0,
            )
            time.sleep(0.3)
        finally:
            if ex is not None:
                ex.shutdown(timeout_sec=10.0)
            for node in nodes:
                getattr(node, 'close', lambda: None)()
                node.destroy_node()

    # ~ESTIMATE_RATE estimates per second of the stamps they are for, from the best-effort stream
    stamps = np.array([e.header.stamp.sec + 1e-9 * e.header.stamp.nanosec for e in estimates])
    print(
        f'\n{learner.samples_seen} samples of {sent} sent, {len(estimates)} estimates over '
        f'{stamps[-1] - stamps[0]:.3f} s of stamps'
    )
    assert len(estimates) - 1 == pytest.approx(ESTIMATE_RATE * (stamps[-1] - stamps[0]), abs=2)
    assert np.all(np.diff(stamps) > 0.5 / ESTIMATE_RATE)
    # predicted = what the resumed checkpoint says for the sample, beside the measured torque
    import torch

    model, _ = load_model(ckpt)
    model = model.double()
    e = estimates[-1]
    assert list(e.joint_names) == NAMES and e.model_version == VERSION
    with torch.no_grad():
        expected = model.inverse(
            *(
                torch.tensor([list(x)], dtype=torch.float64)
                for x in (e.position, e.velocity, e.acceleration)
            )
        )[0].numpy()
    np.testing.assert_allclose(e.predicted_torque, expected, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(e.measured_torque, EFFORT, rtol=1e-9)

    status = diags['/learner']
    values = {kv.key: kv.value for kv in status.values}
    assert status.hardware_id == 'two_link_arm'
    assert values['model_version'] == str(VERSION) and 'steps_per_s' in values
    assert diags['data_logger: bag recording'].hardware_id == '/data_logger'

    # the bag holds all three, read back with the suite's reader
    by_topic: Dict[str, list] = {}
    for topic, msgtype, _, data in iter_bag_messages(tmp_path / 'bags'):
        by_topic.setdefault(topic, []).append(deserialize_message(data, get_message(msgtype)))
    # a best-effort stream shared with the learner on two executor threads: recorded, not
    # necessarily whole (the logger's completeness is tested reliable, test_data_logger.py)
    assert len(by_topic['/joint_states']) >= 0.2 * sent
    assert [m.model_version for m in by_topic[CONTROLLER_STATE]] == list(range(20))
    assert by_topic[CONTROLLER_STATE][-1].command.tolist() == pytest.approx([1.9, -1.9])
    assert len(by_topic[DYNAMICS_ESTIMATE]) == len(estimates)
    # ... and by a reader that knows only what the bag says (as PlotJuggler and Foxglove do):
    # rosbags builds every type from the definitions stored in the bag
    from rosbags.highlevel import AnyReader

    bags = sorted(p for p in (tmp_path / 'bags').iterdir() if p.is_dir())
    with AnyReader(bags) as reader:
        counts = {c.topic: c.msgcount for c in reader.connections}
        states = [
            reader.deserialize(raw, c.msgtype)
            for c, _, raw in reader.messages(
                connections=[c for c in reader.connections if c.topic == CONTROLLER_STATE]
            )
        ]
    assert counts[CONTROLLER_STATE] == 20 and counts[DYNAMICS_ESTIMATE] == len(estimates)
    assert [m.model_version for m in states] == list(range(20))


# ------------------------------------------------------------------------------------------ docs
def _field_type(msgtype: str, path: List[str]) -> str:
    """Type of the field at ``path`` (names, ``name[i]`` for a sequence element) in
    ``msgtype``; AssertionError naming the first part that does not exist."""
    cls = get_message(msgtype)
    for part in path:
        name, index = re.fullmatch(r'([a-z_0-9]+)(\[\d+\])?', part).groups()
        types = cls.get_fields_and_field_types()
        assert name in types, f'{msgtype} has no field {part} ({path})'
        kind = types[name]
        if index:
            assert kind.startswith('sequence<'), f'{part} of {msgtype} is not a sequence'
            kind = kind[len('sequence<') : -1]
        if '/' in kind:
            cls = get_message(kind.replace('/', '/msg/', 1) if '/msg/' not in kind else kind)
        else:
            cls = None
    return kind


def _check_path(topic: str, fields: List[str], seen: set) -> None:
    assert topic in PUBLISHED, f'{topic} is published by no node of the suite'
    seen.add(topic)
    if fields:
        kind = _field_type(PUBLISHED[topic], fields)
        assert kind in ('double', 'float', 'int32', 'uint32', 'boolean'), (topic, fields, kind)


def test_plotjuggler_layout_plots_fields_the_nodes_publish():
    root = ET.parse(os.path.join(ROOT, 'docs', 'plotjuggler_delan.xml')).getroot()
    curves = [c.get('name') for c in root.iter('curve')]
    assert curves
    seen: set = set()
    for name in curves:
        topic = next((t for t in PUBLISHED if name.startswith(t + '/')), None)
        assert topic is not None, f'curve {name}: no topic of the suite'
        _check_path(topic, name[len(topic) + 1 :].split('/'), seen)
    selected = root.find('.//plugin[@ID="ROS2 Topic Subscriber"]/selected_topics')
    assert set(selected.get('value').split(';')) == seen == {CONTROLLER_STATE, DYNAMICS_ESTIMATE}


def test_foxglove_layout_plots_fields_the_nodes_publish():
    with open(os.path.join(ROOT, 'docs', 'foxglove_delan.json'), encoding='utf-8') as f:
        layout = json.load(f)
    panels = layout['configById']
    seen: set = set()
    paths = [p['value'] for cfg in panels.values() for p in cfg.get('paths', [])]
    assert paths
    for value in paths:
        topic, *fields = value.split('.')
        _check_path(topic, fields, seen)
    seen.update(cfg['topicToRender'] for cfg in panels.values() if 'topicToRender' in cfg)
    assert seen <= set(PUBLISHED) and {CONTROLLER_STATE, DYNAMICS_ESTIMATE} <= seen

    def leaves(node):
        if isinstance(node, str):
            yield node
        else:
            yield from leaves(node['first'])
            yield from leaves(node['second'])

    assert sorted(leaves(layout['layout'])) == sorted(panels)
