"""Every delan_msgs message and service goes between two real rclpy nodes, in one process and
across processes over Fast DDS, and arrives with its field values intact."""

import math
import signal
import subprocess
import textwrap

import pytest
import rclpy
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy

from delan_msgs.msg import ControllerState, DynamicsEstimate, ModelStatus, ModelUpdate
from delan_msgs.srv import LoadModel, SaveModel
from delan_testing.ros import make_executor, python_process, ros_context, spin_until

RELIABLE = QoSProfile(
    depth=10, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL
)


def sample_status() -> ModelStatus:
    m = ModelStatus()
    m.header.stamp.sec, m.header.stamp.nanosec = 1234, 5678
    m.header.frame_id = 'base_link'
    m.model_id, m.model_version = 'abc123', 7
    m.joint_names = ['shoulder', 'elbow']
    m.state, m.message = ModelStatus.STATE_DIVERGED, 'rolled back'
    m.samples_seen, m.samples_in_buffer, m.samples_rejected, m.training_steps = 2**40, 5000, 3, 99
    m.rollbacks = 4
    m.train_loss = 0.125
    m.validation_nmse = [1e-3, 2.5e-4]
    m.last_update_stamp.sec = 42
    m.last_update_duration = 0.75
    m.checkpoint_path = '/tmp/model.pt'
    return m


def sample_estimate() -> DynamicsEstimate:
    m = DynamicsEstimate()
    m.header.stamp.sec = 9
    m.model_id, m.model_version = 'abc123', 8
    m.joint_names = ['a', 'b']
    m.position, m.velocity, m.acceleration = [0.1, -0.2], [1.0, 2.0], [3.0, -4.0]
    m.mass_matrix = [1.5, 0.25, 0.25, 0.5]
    m.coriolis_torque, m.gravity_torque = [0.01, -0.02], [9.81, 1.0]
    m.friction_torque, m.predicted_torque = [0.3, 0.1], [11.0, -0.5]
    m.measured_torque = [10.9, -0.4]
    m.kinetic_energy, m.potential_energy = 2.25, -math.pi
    return m


def sample_update() -> ModelUpdate:
    m = ModelUpdate()
    m.header.stamp.sec = 77
    m.model_id, m.model_version = 'lineage', 3
    m.checkpoint_path = '/ckpt/v3.pt'
    m.joint_names = ['j1', 'j2', 'j3']
    m.validation_nmse = [0.1, 0.2, 0.3]
    return m


def sample_controller_state() -> ControllerState:
    m = ControllerState()
    m.header.stamp.sec, m.header.stamp.nanosec = 12, 500
    m.joint_names = ['shoulder', 'elbow']
    m.reference.positions, m.reference.velocities = [0.5, -0.25], [0.1, 0.0]
    m.reference.accelerations = [1.0, -1.0]
    m.feedback.positions, m.feedback.velocities = [0.4, -0.3], [0.0, 0.2]
    m.feedback.effort = [3.0, -1.5]
    m.error.positions, m.error.velocities = [0.1, 0.05], [0.1, -0.2]
    m.feedforward, m.command = [2.5, -1.0], [3.5, -1.25]
    m.model, m.model_version, m.law = 'delan', 4, 'feedforward_pd'
    m.fallback, m.holding = ControllerState.FALLBACK_PD_MODEL_FAILED, True
    return m


SAMPLES = {
    'status': (ModelStatus, sample_status),
    'estimate': (DynamicsEstimate, sample_estimate),
    'update': (ModelUpdate, sample_update),
    'controller_state': (ControllerState, sample_controller_state),
}


def fields_equal(a, b) -> bool:
    # generated messages implement __eq__ over every field (nested ones included)
    return a == b


def _serve(node):
    """Service servers whose answers depend on the request, so a test can tell them apart."""

    def save(req, resp):
        resp.success = req.path.endswith('.pt')
        resp.message = f'saved {req.path}'
        resp.path = req.path or '/default.pt'
        return resp

    def load(req, resp):
        resp.success = req.path == 'good.pt'
        resp.message = 'loaded' if resp.success else f'no such checkpoint {req.path}'
        resp.model_id = 'id-' + req.path
        return resp

    return [
        node.create_service(SaveModel, 'save_model', save),
        node.create_service(LoadModel, 'load_model', load),
    ]


def _check_services(node, executor):
    save = node.create_client(SaveModel, 'save_model')
    load = node.create_client(LoadModel, 'load_model')
    assert spin_until(executor, lambda: save.service_is_ready() and load.service_is_ready(), 20.0)
    f1 = save.call_async(SaveModel.Request(path='/x/model.pt'))
    f2 = load.call_async(LoadModel.Request(path='missing.pt'))
    f3 = load.call_async(LoadModel.Request(path='good.pt'))
    assert spin_until(executor, lambda: f1.done() and f2.done() and f3.done(), 20.0)
    r1, r2, r3 = f1.result(), f2.result(), f3.result()
    assert (r1.success, r1.message, r1.path) == (True, 'saved /x/model.pt', '/x/model.pt')
    assert (r2.success, r2.model_id) == (False, 'id-missing.pt')
    assert 'no such checkpoint' in r2.message
    assert (r3.success, r3.message, r3.model_id) == (True, 'loaded', 'id-good.pt')


def test_messages_and_services_in_one_process():
    with ros_context() as ctx:
        a = rclpy.create_node('sender', context=ctx)
        b = rclpy.create_node('receiver', context=ctx)
        got = {}
        pubs = {}
        for key, (typ, _) in SAMPLES.items():
            pubs[key] = a.create_publisher(typ, f'test/{key}', RELIABLE)
            b.create_subscription(
                typ, f'test/{key}', lambda m, k=key: got.setdefault(k, m), RELIABLE
            )
        _serve(b)
        ex = make_executor(ctx, [a, b])
        for key, (_, make) in SAMPLES.items():
            pubs[key].publish(make())
        assert spin_until(ex, lambda: len(got) == len(SAMPLES), 20.0), got.keys()
        for key, (_, make) in SAMPLES.items():
            assert fields_equal(got[key], make()), key
        _check_services(a, ex)
        ex.shutdown()


ECHO_CHILD = textwrap.dedent("""
    import rclpy, sys
    from rclpy.qos import QoSProfile, ReliabilityPolicy, DurabilityPolicy
    from delan_msgs.msg import ControllerState, ModelStatus, DynamicsEstimate, ModelUpdate
    sys.path.insert(0, {testdir!r})
    from test_interfaces import _serve, RELIABLE
    rclpy.init()
    node = rclpy.create_node('echo_child')
    pubs = {{}}
    for key, typ in (('status', ModelStatus), ('estimate', DynamicsEstimate),
                     ('update', ModelUpdate), ('controller_state', ControllerState)):
        pubs[key] = node.create_publisher(typ, 'pong/' + key, RELIABLE)
        node.create_subscription(typ, 'ping/' + key, lambda m, k=key: pubs[k].publish(m), RELIABLE)
    _serve(node)
    print('READY', flush=True)
    try:
        rclpy.spin(node)
    except (KeyboardInterrupt, rclpy.executors.ExternalShutdownException):
        pass
    rclpy.try_shutdown()
""")


def test_messages_and_services_across_processes(tmp_path):
    import os

    child = python_process(
        ECHO_CHILD.format(testdir=os.path.dirname(__file__)),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert child.stdout.readline().strip() == 'READY'
        with ros_context() as ctx:
            node = rclpy.create_node('parent', context=ctx)
            got = {}
            pubs = {}
            for key, (typ, _) in SAMPLES.items():
                pubs[key] = node.create_publisher(typ, f'ping/{key}', RELIABLE)
                node.create_subscription(
                    typ, f'pong/{key}', lambda m, k=key: got.setdefault(k, m), RELIABLE
                )
            ex = make_executor(ctx, [node])
            # wait until the child's subscriptions are matched, then publish
            assert spin_until(
                ex, lambda: all(p.get_subscription_count() > 0 for p in pubs.values()), 30.0
            )
            for key, (_, make) in SAMPLES.items():
                pubs[key].publish(make())
            assert spin_until(ex, lambda: len(got) == len(SAMPLES), 30.0), got.keys()
            for key, (_, make) in SAMPLES.items():
                assert fields_equal(got[key], make()), key
            _check_services(node, ex)
            ex.shutdown()
    finally:
        child.send_signal(signal.SIGINT)
        try:
            child.wait(10)
        except subprocess.TimeoutExpired:
            child.kill()
            pytest.fail('echo child did not exit on SIGINT')
    assert child.returncode == 0, child.stdout.read()


def test_state_constants_are_distinct():
    states = [v for k, v in vars(ModelStatus).items() if k.startswith('STATE_')]
    assert len(states) == len(set(states)) >= 5
