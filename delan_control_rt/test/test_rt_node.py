"""The compiled torque controller over real DDS, beside the Python one: the same commands on the
same joint states (every model: pd, delan, pinocchio, identified, delan_residual; every law, the
URDF-feedback ones included) and after the same parameter changes while they run, counted
rejection of bad input, the watchdog's single zero."""

import os
import subprocess
import time

import numpy as np
import pytest
import rclpy
import torch
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.parameter import Parameter
from rclpy.parameter_client import AsyncParameterClient
from rclpy.time import Time
from rt_build import NODE, ROOT, require
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray

from delan_common.robot_model import RobotModel
from delan_control.rt_params import ensure_weights, model_files, rt_parameters
from delan_control.sysid import IdentifiedModel, nominal_parameters
from delan_learning.c_export import export_delan, file_role, weights_path
from delan_learning.checkpoint import load_model, save_model
from delan_learning.residual_model import ResidualDelanModel
from delan_learning.version_store import VersionStore
from delan_testing.logs import Log
from delan_testing.models import random_delan
from delan_testing.processes import node_process

URDF = os.path.join(ROOT, 'delan_bringup', 'urdf', 'two_link_arm.urdf')
GAINS = {'kp': [30.0, 10.0], 'kd': [3.0, 1.0], 'ct_kp': [400.0], 'ct_kd': [40.0]}


def ros_args(params):
    out = []
    for k, v in params.items():
        text = '[' + ','.join(map(str, v)) + ']' if isinstance(v, list) else str(v)
        out += ['-p', f'{k}:={text}']
    return out


class Bench:
    """A test node publishing joint states and hearing each controller's commands."""

    def __init__(self, tmp):
        self.ctx = rclpy.Context()
        rclpy.init(context=self.ctx)
        self.node = rclpy.create_node('rt_test', context=self.ctx)
        self.ex = rclpy.executors.SingleThreadedExecutor(context=self.ctx)
        self.ex.add_node(self.node)
        self.pub = self.node.create_publisher(JointState, 'joint_states', 10)
        self.got, self.diag, self.procs = {}, {}, []
        self.tmp = tmp
        self.node.create_subscription(DiagnosticArray, '/diagnostics', self._on_diag, 10)

    def _on_diag(self, msg):
        for st in msg.status:
            self.diag[st.name] = {kv.key: kv.value for kv in st.values}

    def listen(self, topic):
        self.got[topic] = []
        self.node.create_subscription(
            Float64MultiArray, topic, lambda m: self.got[topic].append(list(m.data)), 10
        )

    def start(self, package, exe, name, params):
        topic = f'{name}_commands'
        self.listen(topic)
        args = ['-r', f'__node:={name}', '-r', f'effort_controller/commands:={topic}']
        log = open(os.path.join(self.tmp, f'{name}.log'), 'w')
        self.procs.append(
            node_process(
                package, exe, args + ros_args(params), stdout=log, stderr=subprocess.STDOUT
            )
        )
        return topic

    def spin(self, seconds):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.ex.spin_once(timeout_sec=0.01)

    def send(self, names, q, qd, effort=None, stamp=None):
        """Publish one state, stamped now (or at ``stamp`` [s])."""
        m = JointState(name=names, position=list(q), velocity=list(qd), effort=list(effort or []))
        if stamp is None:
            m.header.stamp = self.node.get_clock().now().to_msg()
        else:
            m.header.stamp = Time(nanoseconds=int(round(stamp * 1e9))).to_msg()
        self.pub.publish(m)

    def until(self, cond, timeout, what):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if cond():
                return
            self.spin(0.02)
        raise AssertionError(f'timed out waiting for {what}')

    def close(self):
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        self.node.destroy_node()
        rclpy.try_shutdown(context=self.ctx)


@pytest.fixture
def bench(tmp_path):
    require(NODE)
    b = Bench(str(tmp_path))
    yield b
    b.close()


def rt_params(**extra):
    return {**rt_parameters(URDF, given=GAINS), 'watchdog_timeout': 2.0, **extra}


def checkpoint(tmp, names):
    m = random_delan(['revolute', 'revolute'], seed=3, std=0.3, width=16, depth=2)
    path = os.path.join(tmp, 'delan.pt')
    save_model(m, path, {'joint_names': names})
    # the weights as the checkpoint holds them (it may store them rounded), as the Python node
    # loads them
    export_delan(load_model(path)[0], weights_path(path), names)
    return path


def residual_checkpoint(tmp, names):
    """A delan_residual checkpoint (its weights exported as the launch files export them)."""
    m = random_delan(
        ['revolute', 'revolute'],
        seed=4,
        std=0.3,
        model_class=ResidualDelanModel,
        width=16,
        depth=2,
    )
    path = os.path.join(tmp, 'residual.pt')
    save_model(m, path, {'joint_names': names})
    ensure_weights(path, 'delan_residual')
    return path


def learner_version(tmp, kind, model, version, names):
    """``model`` saved as the learner saves ``version`` of a ``kind`` learner (VersionStore: the
    checkpoint and, written by the store, its compiled weights); the checkpoint's path."""
    store = VersionStore(os.path.join(tmp, f'learner_{kind}'), 3, names, kind, Log())
    path = store.write(model, version, {'joint_names': names, 'model_version': version})
    assert file_role(weights_path(path)) == kind  # the store wrote them, of the kind's role
    return path


def update_publisher(bench):
    """A publisher of learner/model_update, latched as the learner's."""
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy

    from delan_msgs.msg import ModelUpdate

    latched = QoSProfile(
        depth=1,
        reliability=ReliabilityPolicy.RELIABLE,
        durability=DurabilityPolicy.TRANSIENT_LOCAL,
    )
    pub = bench.node.create_publisher(ModelUpdate, 'learner/model_update', latched)

    def publish(path, version, names):
        update = ModelUpdate(model_id='test', model_version=version, checkpoint_path=path)
        update.joint_names = names
        pub.publish(update)

    return publish


def identified_file(tmp):
    """Identified parameters (delan-sysid's format) that differ from the URDF's."""
    kinematics = RobotModel(URDF)
    theta = nominal_parameters(kinematics) * np.linspace(0.8, 1.3, 24)
    theta[20:] = [0.3, 0.1, 0.5, 0.2]  # viscous, Coulomb
    path = os.path.join(tmp, 'identified.json')
    IdentifiedModel(kinematics, theta).save(path)
    return path


def answer(bench, topics, names, q, qd, timeout=30.0, stamp=None):
    """Publish one state (stamped now, or at ``stamp``) until every controller answered it;
    the answers."""
    for t in topics:
        bench.got[t].clear()
    end = time.monotonic() + timeout
    while not all(bench.got[t] for t in topics):
        assert time.monotonic() < end, f'no command on {[t for t in topics if not bench.got[t]]}'
        bench.send(names, q, qd, stamp=stamp)
        bench.spin(0.03)
    return [np.array(bench.got[t][-1]) for t in topics]


def test_same_commands_as_the_python_node(bench, tmp_path):
    params = rt_params()
    names = params['joint_names']
    ckpt = checkpoint(str(tmp_path), names)
    order = list(reversed(names))  # the receiver's order differs from the model's
    common = {**GAINS, 'command_joints': order, 'watchdog_timeout': 2.0, 'switch_blend_time': 0.0}
    py = bench.start(
        'delan_control',
        'torque_controller',
        'py_ctl',
        {**common, 'urdf_path': URDF, 'model': 'pd'},
    )
    rt_pd = bench.start(
        'delan_control_rt', 'torque_controller_rt', 'rt_pd', {**params, 'command_joints': order}
    )
    rt_delan = bench.start(
        'delan_control_rt',
        'torque_controller_rt',
        'rt_delan',
        {**params, 'command_joints': order, 'model': 'delan', 'delan_checkpoint': ckpt},
    )
    hold, qd0 = [0.3, -0.5], [0.0, 0.0]
    answer(bench, [py, rt_pd, rt_delan], names, hold, qd0, timeout=40.0)
    # a state near the held one: the error and the velocity drive both laws
    q, qd = [0.305, -0.497], [0.2, -0.1]
    a_py, a_rt, a_rt_delan = answer(bench, [py, rt_pd, rt_delan], names, q, qd)
    assert np.abs(a_py).max() > 0.1
    np.testing.assert_allclose(a_rt, a_py, rtol=0, atol=1e-9)
    # the Python node switched to the same DeLaN
    client = AsyncParameterClient(bench.node, 'py_ctl')
    assert client.wait_for_services(10.0)
    fut = client.set_parameters(
        [Parameter('delan_checkpoint', value=ckpt), Parameter('model', value='delan')]
    )
    bench.until(fut.done, 20.0, 'the model switch')
    assert all(r.successful for r in fut.result().results), fut.result()
    a_py, a_rt_delan = answer(bench, [py, rt_delan], names, q, qd)
    assert np.abs(a_py - a_rt).max() > 1e-3  # the model changed the command
    np.testing.assert_allclose(a_rt_delan, a_py, rtol=0, atol=1e-9)


def test_same_commands_as_the_python_node_with_rigid_body_models(bench, tmp_path):
    """pinocchio, identified and delan_residual: the C node's RNEA on the files rt_params
    exports (as the launch files do) against the Python node switched to each model; a
    delan_residual without a checkpoint takes the learner's version from learner/model_update
    (its weights as the learner writes them) and adds it to the URDF's model."""
    tmp = str(tmp_path)
    params = rt_params()
    names = params['joint_names']
    residual = residual_checkpoint(tmp, names)
    identified = identified_file(tmp)
    files = {
        'pinocchio': model_files('pinocchio', URDF, folder=tmp),
        'identified': model_files('identified', URDF, identified_params=identified, folder=tmp),
        'delan_residual': model_files('delan_residual', URDF, residual, folder=tmp),
    }
    assert files['pinocchio'] == files['delan_residual']  # the URDF's model, once
    files['delan_residual']['delan_checkpoint'] = residual
    order = list(reversed(names))
    common = {**GAINS, 'command_joints': order, 'watchdog_timeout': 2.0, 'switch_blend_time': 0.0}
    py = bench.start(
        'delan_control',
        'torque_controller',
        'py_rb',
        {**common, 'urdf_path': URDF, 'model': 'pinocchio'},
    )
    rt = {
        kind: bench.start(
            'delan_control_rt',
            'torque_controller_rt',
            f'rt_{kind}',
            {
                **params,
                **files[kind],
                'command_joints': order,
                'model': kind,
            },
        )
        for kind in files
    }
    follow = {**files['delan_residual'], 'model': 'delan_residual'}
    del follow['delan_checkpoint']
    rt['follow'] = bench.start(
        'delan_control_rt',
        'torque_controller_rt',
        'rt_follow',
        {**params, **follow, 'command_joints': order, 'switch_blend_time': 0.0},
    )
    hold, qd0 = [0.3, -0.5], [0.0, 0.0]
    answer(bench, [py, *rt.values()], names, hold, qd0, timeout=40.0)
    q, qd = [0.305, -0.497], [0.2, -0.1]
    client = AsyncParameterClient(bench.node, 'py_rb')
    assert client.wait_for_services(10.0)
    answers = {}
    for kind, switch in (
        ('pinocchio', []),
        ('identified', [Parameter('identified_params', value=identified)]),
        ('delan_residual', [Parameter('delan_checkpoint', value=residual)]),
    ):
        if switch:
            fut = client.set_parameters(switch + [Parameter('model', value=kind)])
            bench.until(fut.done, 20.0, f'the switch to {kind}')
            assert all(r.successful for r in fut.result().results), fut.result()
        a_py, a_rt = answer(bench, [py, rt[kind]], names, q, qd)
        np.testing.assert_allclose(a_rt, a_py, rtol=0, atol=1e-9, err_msg=kind)
        answers[kind] = a_py
    # the follower: PD until a learner version, then the URDF's model + that residual
    (a_pd,) = answer(bench, [rt['follow']], names, q, qd)
    assert np.abs(a_pd - answers['delan_residual']).max() > 1e-3
    version = learner_version(tmp, 'delan_residual', load_model(residual)[0], 3, names)
    update_publisher(bench)(version, 3, names)
    bench.until(
        lambda: bench.diag.get('/rt_follow', {}).get('model_loads') == '1',
        20.0,
        'the follower taking the version',
    )
    (a_follow,) = answer(bench, [rt['follow']], names, q, qd)
    np.testing.assert_allclose(a_follow, answers['delan_residual'], rtol=0, atol=1e-9)
    # three different models: three different commands
    assert np.abs(answers['identified'] - answers['pinocchio']).max() > 1e-3
    assert np.abs(answers['delan_residual'] - answers['pinocchio']).max() > 1e-3


def test_a_learner_version_is_followed_only_by_a_node_of_its_kind(bench, tmp_path):
    """The weights the learner writes say whether they are a whole model or a residual: a node
    following the learner with model delan takes a delan version and refuses a delan_residual
    one (a fraction of the torque the arm needs), a delan_residual node the other way round
    (the whole model added to the URDF's would be twice it); a refusal is logged with the
    reason, counted in updates_refused, and the node commands with the model it had."""
    tmp = str(tmp_path)
    params = rt_params()
    names = params['joint_names']
    rigid_body = model_files('delan_residual', URDF, folder=tmp)
    common = {**params, **rigid_body, 'switch_blend_time': 0.0, 'watchdog_timeout': 10.0}
    nodes = {
        kind: bench.start(
            'delan_control_rt', 'torque_controller_rt', f'rt_{kind}', {**common, 'model': kind}
        )
        for kind in ('delan', 'delan_residual')
    }
    types = ['revolute', 'revolute']
    versions = {
        'delan': learner_version(tmp, 'delan', random_delan(types, seed=3, std=0.3), 1, names),
        'delan_residual': learner_version(
            tmp,
            'delan_residual',
            random_delan(types, seed=4, std=0.3, model_class=ResidualDelanModel),
            2,
            names,
        ),
    }
    q, qd = [0.305, -0.497], [0.2, -0.1]
    topics = list(nodes.values())
    before = answer(bench, topics, names, q, qd, timeout=40.0)  # PD: no version yet
    np.testing.assert_array_equal(before[0], before[1])
    publish = update_publisher(bench)
    other = {'delan': 'delan_residual', 'delan_residual': 'delan'}

    def counts(kind):
        """(model_loads, model_version, updates_refused) in rt_<kind>'s diagnostics."""
        d = bench.diag.get(f'/rt_{kind}', {})
        return tuple(d.get(k) for k in ('model_loads', 'model_version', 'updates_refused'))

    for number, (kind, path) in enumerate(versions.items(), start=1):
        publish(path, number, names)
        refuser = other[kind]
        bench.until(
            lambda: counts(kind)[:2] == ('1', str(number)) and counts(refuser)[2] == '1',
            20.0,
            f'v{number} taken by rt_{kind}, refused by rt_{refuser}',
        )
        with open(os.path.join(tmp, f'rt_{refuser}.log')) as f:
            refusals = [x for x in f.read().splitlines() if 'model refused: ' in x]
        reason = f'{weights_path(path)} holds the weights of a {kind} model, not of {refuser}'
        assert len(refusals) == 1 and reason in refusals[0], refusals
        after = answer(bench, topics, names, q, qd)
        changed, kept = (topics.index(nodes[k]) for k in (kind, refuser))
        assert np.abs(after[changed] - before[changed]).max() > 1e-3, kind
        np.testing.assert_array_equal(after[kept], before[kept], err_msg=refuser)
        before = after
    assert counts('delan') == ('1', '1', '1') and counts('delan_residual') == ('1', '2', '1')


def test_urdf_feedback_laws_as_by_the_python_node(bench, tmp_path):
    """computed_torque_urdf_feedback and feedforward_urdf_pd with pinocchio and delan: the
    compiled node started with each (model, law) commands what the Python node commands after
    the same model and law are set on it; the feedback goes through the URDF's mass matrix
    (rigid_body_file) whatever the model."""
    tmp = str(tmp_path)
    params = rt_params()
    names = params['joint_names']
    ckpt = checkpoint(tmp, names)
    files = model_files('delan', URDF, ckpt, folder=tmp)
    order = list(reversed(names))
    common = {**GAINS, 'command_joints': order, 'watchdog_timeout': 2.0, 'switch_blend_time': 0.0}
    py = bench.start(
        'delan_control',
        'torque_controller',
        'py_uf',
        {
            **common,
            'urdf_path': URDF,
            'model': 'pinocchio',
            'law': 'computed_torque_urdf_feedback',
        },
    )
    cases = [
        ('pinocchio', 'computed_torque_urdf_feedback'),
        ('pinocchio', 'feedforward_urdf_pd'),
        ('delan', 'feedforward_urdf_pd'),
        ('delan', 'computed_torque_urdf_feedback'),
    ]
    rt = {
        case: bench.start(
            'delan_control_rt',
            'torque_controller_rt',
            f'rt_{case[0]}_{case[1]}',
            {
                **params,
                **files,
                'command_joints': order,
                'model': case[0],
                'law': case[1],
                **({'delan_checkpoint': ckpt} if case[0] == 'delan' else {}),
            },
        )
        for case in cases
    }
    plain = bench.start(
        'delan_control_rt',
        'torque_controller_rt',
        'rt_plain',
        {**params, **files, 'command_joints': order, 'model': 'pinocchio'},
    )
    hold, qd0 = [0.3, -0.5], [0.0, 0.0]
    answer(bench, [py, plain, *rt.values()], names, hold, qd0, timeout=60.0)
    q, qd = [0.305, -0.497], [0.2, -0.1]
    answers = {}
    for model, law in cases:
        switch = [Parameter('law', value=law)]
        if model == 'delan':
            switch += [Parameter('delan_checkpoint', value=ckpt), Parameter('model', value=model)]
        results = set_parameters(bench, 'py_uf', switch)
        assert all(r.successful for r in results), (model, law, results)
        a_py, a_rt = answer(bench, [py, rt[model, law]], names, q, qd)
        np.testing.assert_allclose(a_rt, a_py, rtol=0, atol=1e-9, err_msg=f'{model} {law}')
        answers[model, law] = a_py
    # with the URDF's own model the URDF feedback is computed torque: H (qdd_ref + v) + c + g
    (a_plain,) = answer(bench, [plain], names, q, qd)
    np.testing.assert_allclose(
        answers['pinocchio', 'computed_torque_urdf_feedback'], a_plain, rtol=0, atol=1e-9
    )
    distinct = list(answers.values())
    for i, a in enumerate(distinct):
        for b in distinct[i + 1 :]:
            assert np.abs(a - b).max() > 1e-3
    bench.until(
        lambda: (
            bench.diag.get('/rt_delan_feedforward_urdf_pd', {}).get('law') == 'feedforward_urdf_pd'
        ),
        10.0,
        'the law in the diagnostics',
    )


def set_parameters(bench, node, params):
    """Set ``params`` on ``node`` (each on its own, in order, as ``ros2 param set``); the
    results."""
    client = AsyncParameterClient(bench.node, node)
    assert client.wait_for_services(10.0), node
    fut = client.set_parameters(params)
    bench.until(fut.done, 20.0, f'parameters of {node}')
    return fut.result().results


def test_runtime_parameter_changes_as_by_the_python_node(bench, tmp_path):
    """The compiled node serves the parameter services: model switches (to the URDF's model, to
    identified parameters, to a residual checkpoint), laws (the URDF-feedback ones too) and gains
    set while it runs command what the Python node commands after the same sets; a read-only
    parameter, an unknown one, a wrong type, an unknown law and a model its files cannot give
    are refused and change nothing."""
    tmp = str(tmp_path)
    params = rt_params()
    names = params['joint_names']
    residual = residual_checkpoint(tmp, names)
    identified = identified_file(tmp)
    # the URDF's model and the identified one, for switches
    files = model_files('pd', URDF, identified_params=identified, folder=tmp)
    order = list(reversed(names))
    common = {**GAINS, 'command_joints': order, 'watchdog_timeout': 2.0, 'switch_blend_time': 0.0}
    py = bench.start('delan_control', 'torque_controller', 'py_sw', {**common, 'urdf_path': URDF})
    rt = bench.start(
        'delan_control_rt',
        'torque_controller_rt',
        'rt_sw',
        {**params, **files, 'command_joints': order, 'switch_blend_time': 0.0},
    )
    answer(bench, [py, rt], names, [0.3, -0.5], [0.0, 0.0], timeout=40.0)
    q, qd = [0.305, -0.497], [0.2, -0.1]
    a_py, a_rt = answer(bench, [py, rt], names, q, qd)
    np.testing.assert_allclose(a_rt, a_py, rtol=0, atol=1e-9)
    before = a_py
    for change, python_only in (
        ([Parameter('model', value='pinocchio')], []),
        (
            [Parameter('model', value='identified')],
            [Parameter('identified_params', value=identified)],
        ),
        # the identified model's feed-forward, the URDF's mass matrix in the feedback
        ([Parameter('law', value='computed_torque_urdf_feedback')], []),
        ([Parameter('law', value='feedforward_pd'), Parameter('kp', value=[20.0, 5.0])], []),
        (
            [
                Parameter('delan_checkpoint', value=residual),
                Parameter('model', value='delan_residual'),
            ],
            [],
        ),
        ([Parameter('law', value='feedforward_urdf_pd')], []),
    ):
        for node, extra in (('py_sw', python_only), ('rt_sw', [])):
            results = set_parameters(bench, node, extra + change)
            assert all(r.successful for r in results), (node, results)
        a_py, a_rt = answer(bench, [py, rt], names, q, qd)
        assert np.abs(a_py - before).max() > 1e-3, change  # the change changed the command
        np.testing.assert_allclose(a_rt, a_py, rtol=0, atol=1e-9, err_msg=str(change))
        before = a_py
    refused = {
        'joint_names': (Parameter('joint_names', value=['a', 'b']), 'read-only'),
        'unknown': (Parameter('no_such_parameter', value=1.0), 'not declared'),
        'type': (Parameter('watchdog_timeout', value=1), 'of type double'),
        'file': (
            Parameter('rigid_body_file', value=files['identified_rigid_body_file']),
            "identified, not the URDF's",
        ),
        'law': (Parameter('law', value='sliding_mode'), 'not one of'),
        # the URDF-feedback law in force has nothing to feed back through without the file
        'feedback': (
            Parameter('rigid_body_file', value=''),
            'law=feedforward_urdf_pd with model=delan_residual needs rigid_body_file',
        ),
    }
    for what, (param, reason) in refused.items():
        (result,) = set_parameters(bench, 'rt_sw', [param])
        assert not result.successful and reason in result.reason, (what, result)
    (a_rt,) = answer(bench, [rt], names, q, qd)
    np.testing.assert_allclose(a_rt, before, rtol=0, atol=1e-9)
    client = AsyncParameterClient(bench.node, 'rt_sw')
    fut = client.get_parameters(['model', 'law', 'kp'])
    bench.until(fut.done, 20.0, 'parameter values')
    model, law, kp = fut.result().values
    assert (model.string_value, law.string_value) == ('delan_residual', 'feedforward_urdf_pd')
    assert list(kp.double_array_value) == [20.0, 5.0]


def test_a_switch_blends_over_the_states_stamps_as_the_python_node(bench, tmp_path):
    """pd -> pinocchio with a 1 s blend: both nodes fade over the stamps of the states they
    answer (not over their own clocks), from the first state after the switch; the commands
    lie on the blend line at the stamps' weights and agree to 1e-9."""
    tmp = str(tmp_path)
    params = rt_params()
    names = params['joint_names']
    files = model_files('pd', URDF, folder=tmp)
    order = list(reversed(names))
    blend = {'command_joints': order, 'watchdog_timeout': 10.0, 'switch_blend_time': 1.0}
    py = bench.start(
        'delan_control', 'torque_controller', 'py_bl', {**GAINS, **blend, 'urdf_path': URDF}
    )
    rt = bench.start(
        'delan_control_rt', 'torque_controller_rt', 'rt_bl', {**params, **files, **blend}
    )
    answer(bench, [py, rt], names, [0.3, -0.5], [0.0, 0.0], timeout=40.0)
    q, qd = [0.305, -0.497], [0.2, -0.1]
    old_py, old_rt = answer(bench, [py, rt], names, q, qd)
    np.testing.assert_allclose(old_rt, old_py, rtol=0, atol=1e-9)
    for node in ('py_bl', 'rt_bl'):
        results = set_parameters(bench, node, [Parameter('model', value='pinocchio')])
        assert all(r.successful for r in results), (node, results)
    # the same state at stamps 0, 0.25, 0.5 and 1.5 s after the first one after the switch,
    # however long the wall-clock gaps between them
    t0 = bench.node.get_clock().now().nanoseconds * 1e-9
    got = []
    for dt in (0.0, 0.25, 0.5, 1.5):
        a_py, a_rt = answer(bench, [py, rt], names, q, qd, stamp=t0 + dt)
        np.testing.assert_allclose(a_rt, a_py, rtol=0, atol=1e-9, err_msg=f'{dt} s in')
        got.append(a_py)
        time.sleep(0.3)
    new = got[-1]
    assert np.abs(new - old_py).max() > 1.0  # gravity feed-forward: a hard switch would step
    d = new - old_py
    for w, c in zip((0.0, 0.25, 0.5), got):
        # the weight the command was blended with (the hold's rejoin after the start moves
        # the torques by ~1e-6 between these stamps); by the wall clock it would be off by
        # the 0.3 s sleeps and more
        seen = float(np.dot(c - old_py, d) / np.dot(d, d))
        assert seen == pytest.approx(w, abs=1e-3), (w, seen)


def test_rigid_body_models_refuse_missing_and_wrong_files(bench, tmp_path):
    """The node exits with the reason: no rigid_body_file (for a rigid-body model, or for a
    URDF-feedback law with a model), a truncated one, the URDF's model as identified parameters
    or identified ones as the URDF's mass matrix; a whole DeLaN as a residual is caught before
    (ensure_weights)."""
    tmp = str(tmp_path)
    params = rt_params()
    urdf_file = model_files('pinocchio', URDF, folder=tmp)['rigid_body_file']
    identified_rb = model_files(
        'identified', URDF, identified_params=identified_file(tmp), folder=tmp
    )['identified_rigid_body_file']
    truncated = os.path.join(tmp, 'truncated.rbd')
    with open(urdf_file, 'rb') as f, open(truncated, 'wb') as g:
        g.write(f.read()[:-40])
    cases = {
        'none': ({'model': 'pinocchio'}, 'needs rigid_body_file'),
        # a model's feedback through the URDF's mass matrix, without (the URDF's) model file
        'feedback': (
            {'model': 'delan', 'law': 'feedforward_urdf_pd'},
            'law=feedforward_urdf_pd with model=delan needs rigid_body_file',
        ),
        'feedback_source': (
            {
                'model': 'delan',
                'law': 'computed_torque_urdf_feedback',
                'rigid_body_file': identified_rb,
            },
            "identified, not the URDF's",
        ),
        'truncated': ({'model': 'pinocchio', 'rigid_body_file': truncated}, 'checksum'),
        'source': (
            {'model': 'identified', 'identified_rigid_body_file': urdf_file},
            'not identified',
        ),
    }
    for name, (extra, reason) in cases.items():
        bench.start('delan_control_rt', 'torque_controller_rt', f'rt_{name}', {**params, **extra})
    for proc in bench.procs:
        assert proc.wait(timeout=30) != 0
    for name, (_, reason) in cases.items():
        with open(os.path.join(bench.tmp, f'rt_{name}.log')) as f:
            assert reason in f.read(), name
    whole = checkpoint(tmp, params['joint_names'])
    with pytest.raises(ValueError, match="holds a 'delan' model, not 'delan_residual'"):
        model_files('delan_residual', URDF, whole, folder=tmp)


def test_bad_input_is_counted_and_the_watchdog_zeroes_once(bench):
    # the watchdog must not trip while the bad states are sent, however loaded the machine
    params = rt_params(watchdog_timeout=1.0)
    names = params['joint_names']
    params['command_joints'] = names
    topic = bench.start('delan_control_rt', 'torque_controller_rt', 'rt_bad', params)

    def settle():
        """Wait until the answers to the states answer() repeated stop arriving."""
        n = -1
        while n != len(bench.got[topic]):
            n = len(bench.got[topic])
            bench.spin(0.15)

    answer(bench, [topic], names, [0.1, 0.2], [0.0, 0.0], timeout=20.0)
    settle()
    bad = [
        (['elbow', 'nope'], [0.1, 0.2], [0.0, 0.0]),  # wrong names
        (names, [float('nan'), 0.2], [0.0, 0.0]),  # NaN
        (names, [0.1], [0.0, 0.0]),  # short positions
        (names, [0.1, 0.2], []),
    ]  # no velocities
    bench.got[topic].clear()
    for args in bad:
        bench.send(*args)
        bench.spin(0.05)
    assert bench.got[topic] == []  # no command for any of them
    # still alive and commanding: off the held position, so the answers are not zero
    (alive,) = answer(bench, [topic], names, [0.15, 0.25], [0.0, 0.0])
    assert np.abs(alive).max() > 0.1
    settle()
    bench.got[topic].clear()
    bench.spin(2.5)  # states stop
    assert bench.got[topic] == [[0.0, 0.0]]  # one zero, then silence
    bench.until(
        lambda: int(bench.diag.get('/rt_bad', {}).get('watchdog_trips', 0)) == 1,
        5.0,
        'diagnostics',
    )
    diag = bench.diag['/rt_bad']
    assert int(diag['rejected_joint_states']) == len(bad)
    assert bench.procs[0].poll() is None


def reference_message(names, t0_msg, period=4.0, amplitude=(0.4, -0.3), dt=0.25, length=30.0):
    """A JointTrajectory in ``names`` order (sinusoids with their derivatives) stamped ``t0_msg``
    and the PiecewiseQuintic the controllers make of it, in model order."""
    from builtin_interfaces.msg import Duration
    from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

    from delan_control.trajectories import PiecewiseQuintic

    w = 2 * np.pi / period
    ts = np.arange(0.0, length, dt)
    a = np.array(amplitude)
    q, qd, qdd = (
        a * np.sin(w * ts)[:, None] + np.array([0.3, -0.5]),
        a * w * np.cos(w * ts)[:, None],
        -a * w * w * np.sin(w * ts)[:, None],
    )
    model_order = ['shoulder', 'elbow']

    def row(x, k):  # in ``names`` order; 0 for a joint the controllers do not control
        return [float(x[k, model_order.index(n)]) if n in model_order else 0.0 for n in names]

    msg = JointTrajectory(joint_names=list(names))
    msg.header.stamp = t0_msg
    for k, tk in enumerate(ts):
        msg.points.append(
            JointTrajectoryPoint(
                positions=row(q, k),
                velocities=row(qd, k),
                accelerations=row(qdd, k),
                time_from_start=Duration(sec=int(tk), nanosec=int(round((tk % 1) * 1e9))),
            )
        )
    t0 = t0_msg.sec + 1e-9 * t0_msg.nanosec
    return msg, PiecewiseQuintic(t0 + ts, q, qd, qdd)


def answer_at(bench, topics, names, state_at, timeout=30.0, resend=False, after=None):
    """Publish a state ``state_at(stamp) -> (q, qd)`` and wait until every controller answered
    it; the answers. ``resend``: publish a fresh one every second until then (start-up: the
    controllers may not hear the first ones). Without, one state only: after a stall the first
    state decides how the reference is rejoined, and both controllers must decide on the same.
    ``after``: stamp the state this many seconds after the previous one (default: now)."""
    end = time.monotonic() + timeout
    while True:
        for t in topics:
            bench.got[t].clear()
        stamp = bench.node.get_clock().now()
        if after is not None:
            stamp = Time(
                nanoseconds=bench.last_stamp.nanoseconds + int(after * 1e9),
                clock_type=stamp.clock_type,
            )
        bench.last_stamp = stamp
        q, qd = state_at(stamp.nanoseconds * 1e-9)
        m = JointState(name=names, position=list(q), velocity=list(qd))
        m.header.stamp = stamp.to_msg()
        bench.pub.publish(m)
        wait = time.monotonic() + (0.2 if resend else timeout)
        while time.monotonic() < min(wait, end) and not all(bench.got[t] for t in topics):
            bench.spin(0.01)
        if all(bench.got[t] for t in topics):
            return [np.array(bench.got[t][-1]) for t in topics]
        assert resend and time.monotonic() < end, (
            f'no command on {[t for t in topics if not bench.got[t]]}'
        )


WATCHDOG = 2.0


def stall(bench, names, state_at):
    """Joint states stop for longer than the watchdog; then one state that both controllers
    refuse (its stamp is over 1 s after their last: the stamp gate takes it as a candidate), so
    that the next one, which continues it, is the first both take after the stall."""
    bench.spin(1.75 * WATCHDOG)  # the watchdogs check at half their timeout
    stamp = bench.node.get_clock().now()
    q, qd = state_at(stamp.nanoseconds * 1e-9)
    m = JointState(name=names, position=list(q), velocity=list(qd))
    m.header.stamp = stamp.to_msg()
    bench.pub.publish(m)
    bench.spin(0.05)


def test_reference_tracked_rejoined_and_dropped_as_by_the_python_node(bench, tmp_path):
    """A JointTrajectory (joints in another order, one extra) sampled at each state's stamp;
    after a stall or a jump of the arm a near reference is rejoined and a far one dropped, and
    a new reference joined without a step or dropped when far from the arm, as the Python node
    does."""
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
    from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

    # a watchdog no answer on a loaded machine trips; the stalls below are longer
    params = rt_params(watchdog_timeout=WATCHDOG)
    names = params['joint_names']
    ckpt = checkpoint(str(tmp_path), names)
    common = {
        **GAINS,
        'watchdog_timeout': WATCHDOG,
        'switch_blend_time': 0.0,
        'command_joints': names,
    }
    py = bench.start(
        'delan_control',
        'torque_controller',
        'py_ref',
        {**common, 'urdf_path': URDF, 'model': 'delan', 'delan_checkpoint': ckpt},
    )
    rt = bench.start(
        'delan_control_rt',
        'torque_controller_rt',
        'rt_ref',
        {**params, 'command_joints': names, 'model': 'delan', 'delan_checkpoint': ckpt},
    )
    latched = QoSProfile(
        depth=1,
        reliability=ReliabilityPolicy.RELIABLE,
        durability=DurabilityPolicy.TRANSIENT_LOCAL,
    )
    ref_pub = bench.node.create_publisher(JointTrajectory, 'reference_trajectory', latched)
    msg, ref = reference_message(
        ['gripper', 'elbow', 'shoulder'], bench.node.get_clock().now().to_msg()
    )
    ref_pub.publish(msg)
    bad = JointTrajectory(joint_names=['elbow'])  # lacks a joint: refused, ref kept
    bad.points = msg.points[:2]

    def on_ref(off_q=(0.0, 0.0), off_qd=(0.0, 0.0)):
        def state(t):
            q, qd, _ = (a[0] for a in ref.sample(t))
            return q + np.array(off_q), qd + np.array(off_qd)

        return state

    # on the reference from the first state. Both must have the (latched) reference before
    # anything is compared: one that answers first holds its position (states go on meanwhile:
    # a pause would be a stall)
    answer_at(bench, [py, rt], names, on_ref(), timeout=40.0, resend=True)
    end = time.monotonic() + 20.0
    while not all(
        bench.diag.get(n, {}).get('references_received') == '1' for n in ('/py_ref', '/rt_ref')
    ):
        assert time.monotonic() < end, ('the reference never reached both', bench.diag)
        answer_at(bench, [py, rt], names, on_ref(), resend=True)
        bench.spin(0.05)
    # each took it up at the first state it had it for, joining it from the hold position (at
    # rest: the reference moves) over resume_time, 1 s: on it, and alike, once that is over
    settle = time.monotonic() + 1.5
    while time.monotonic() < settle:
        answer_at(bench, [py, rt], names, on_ref(), resend=True)
        bench.spin(0.05)
    answer_at(bench, [py, rt], names, on_ref())
    ref_pub.publish(bad)
    bench.spin(0.1)
    a_py, a_rt = answer_at(bench, [py, rt], names, on_ref((0.01, -0.02), (0.1, 0.05)))
    assert np.abs(a_py).max() > 0.1
    np.testing.assert_allclose(a_rt, a_py, rtol=0, atol=1e-9)
    # a stall, then the arm 0.2 rad off: rejoined (the command starts from where the arm is)
    stall(bench, names, on_ref((0.2, -0.1)))
    a_py, a_rt = answer_at(bench, [py, rt], names, on_ref((0.2, -0.1)))
    np.testing.assert_allclose(a_rt, a_py, rtol=0, atol=1e-9)
    a_py, a_rt = answer_at(bench, [py, rt], names, on_ref((0.2, -0.1)))
    np.testing.assert_allclose(a_rt, a_py, rtol=0, atol=1e-9)
    # no stall, but 2 ms after the last state the arm is 0.5 rad elsewhere (a sim reset): a jump,
    # taken as a restart: rejoined as well
    a_py, a_rt = answer_at(bench, [py, rt], names, on_ref((0.7, -0.1)), after=0.002)
    np.testing.assert_allclose(a_rt, a_py, rtol=0, atol=1e-9)
    a_py, a_rt = answer_at(bench, [py, rt], names, on_ref((0.7, -0.1)))
    np.testing.assert_allclose(a_rt, a_py, rtol=0, atol=1e-9)
    # a stall, then the arm 2 rad off (beyond resume_tolerance 1): dropped, held where it is
    stall(bench, names, on_ref((2.0, 0.0)))
    a_py, a_rt = answer_at(bench, [py, rt], names, on_ref((2.0, 0.0)))
    np.testing.assert_allclose(a_rt, a_py, rtol=0, atol=1e-9)
    bench.until(
        lambda: (
            bench.diag.get('/rt_ref', {}).get('references_dropped') == '1'
            and bench.diag.get('/py_ref', {}).get('references_dropped') == '1'
        ),
        10.0,
        'diagnostics',
    )
    for name in ('/rt_ref', '/py_ref'):
        d = bench.diag[name]
        assert (d['references_rejoined'], d['rejected_references']) == ('2', '1'), (name, d)
    assert bench.diag['/rt_ref']['holding'] == 'true'
    # a new reference 0.3 rad from the arm, held still: both take it up from where the arm is
    # (no position error on the first command, no kp x 0.3 step) on the same first state
    q_arm = on_ref((2.0, 0.0))(bench.last_stamp.nanoseconds * 1e-9)[0]

    def still(t):
        return q_arm, np.zeros(2)

    def send(offset) -> None:
        away = JointTrajectory(joint_names=names)
        away.points = [JointTrajectoryPoint(positions=list(q_arm + np.array(offset)))]
        ref_pub.publish(away)
        bench.spin(0.5)  # both have it before the state that takes it up (stamped 0.5 s on)

    # at rest where the arm is, the command is the model's own torque there (its gravity): no
    # feedback on a position error. A bound on the command itself depended on where the arm
    # happened to be (the random model's gravity reaches 0.1 N m)
    model = load_model(ckpt)[0].double()
    zero = torch.zeros(1, 2, dtype=torch.float64)
    with torch.no_grad():
        at_rest = model(torch.as_tensor(q_arm, dtype=torch.float64)[None], zero, zero)[0].numpy()

    send([0.3, 0.0])
    first, a_rt = answer_at(bench, [py, rt], names, still, after=0.5)
    np.testing.assert_allclose(a_rt, first, rtol=0, atol=1e-9)
    np.testing.assert_allclose(first, at_rest, rtol=0, atol=1e-6)
    for _ in range(3):  # on the way: the same command from both
        a_py, a_rt = answer_at(bench, [py, rt], names, still, after=0.2)
        np.testing.assert_allclose(a_rt, a_py, rtol=0, atol=1e-9)
    assert np.abs(a_py - first).max() > 1.0
    # one 1.5 rad from the arm: dropped by both, the arm held where it is
    send([1.5, 0.0])
    a_py, a_rt = answer_at(bench, [py, rt], names, still, after=0.5)
    np.testing.assert_allclose(a_rt, a_py, rtol=0, atol=1e-9)
    np.testing.assert_allclose(a_py, at_rest, rtol=0, atol=1e-6)  # not kp x 1.5 towards it
    bench.until(
        lambda: all(
            bench.diag.get(n, {}).get('references_dropped') == '2' for n in ('/rt_ref', '/py_ref')
        ),
        10.0,
        'diagnostics of the dropped new reference',
    )
    assert bench.diag['/rt_ref']['holding'] == 'true'


def test_commands_in_the_joint_order_the_receiving_controller_declares(bench):
    """Without command_joints the order is asked of effort_controller_name's joints parameter,
    as the Python node asks it: reordered when its joints are the model's in another order,
    no commands at all (diagnostics ERROR) when they are other joints, the model order with a
    warning when it never answers; nothing is commanded before the order is known."""
    params = rt_params()
    names = params['joint_names']
    receivers = {'recv_ok': list(reversed(names)), 'recv_bad': [names[0], 'gripper']}
    for name, joints in receivers.items():
        n = rclpy.create_node(name, context=bench.ctx)
        n.declare_parameter('joints', joints)
        bench.ex.add_node(n)
    ok = bench.start(
        'delan_control_rt',
        'torque_controller_rt',
        'rt_ok',
        {**params, 'effort_controller_name': 'recv_ok'},
    )
    bad = bench.start(
        'delan_control_rt',
        'torque_controller_rt',
        'rt_refused',
        {**params, 'effort_controller_name': 'recv_bad'},
    )
    gone = bench.start(
        'delan_control_rt',
        'torque_controller_rt',
        'rt_fallback',
        {**params, 'effort_controller_name': 'nobody', 'effort_controller_timeout': 1.0},
    )
    (model_order,) = answer(bench, [gone], names, [0.3, -0.5], [0.2, -0.1], timeout=40.0)
    (reordered,) = answer(bench, [ok], names, [0.3, -0.5], [0.2, -0.1])
    assert np.abs(model_order).max() > 0.1
    np.testing.assert_array_equal(reordered, model_order[::-1])
    bench.until(
        lambda: all(
            bench.diag.get(n, {}).get('command_order', 'pending') != 'pending'
            for n in ('/rt_ok', '/rt_refused', '/rt_fallback')
        ),
        10.0,
        'diagnostics of the decided orders',
    )  # (1 Hz: may predate them)
    assert bench.diag['/rt_ok']['command_order'] == '/recv_ok'
    assert bench.diag['/rt_fallback']['command_order'] == 'model order (fallback)'
    assert bench.diag['/rt_refused']['command_order'] == 'refused: /recv_bad'
    assert bench.got[bad] == [] and int(bench.diag['/rt_refused']['commands_sent']) == 0
    with open(os.path.join(bench.tmp, 'rt_refused.log')) as f:
        assert 'refusing to command: /recv_bad takes commands for' in f.read()
