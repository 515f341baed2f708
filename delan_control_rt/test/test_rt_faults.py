"""The compiled torque controller under the bad input and the faults of docs/reliability.md,
row by row as the Python node's tests of the same rows: real node processes over real DDS, the
bench of test_rt_node publishing the joint states (or a state source process that is frozen and
killed) and hearing the commands and the diagnostics.

A rejected state leaves no trace but the diagnostics (1 Hz) and the log, and the node answers
only the newest of the states queued when it wakes: each bad state is therefore sent alone and
the next one only once the diagnostics counted it (``rejected``), so that every count is exact.
"""

import math
import os
import pickle
import re
import signal
import struct
import subprocess
import sys
import time

import numpy as np
import pytest
import rclpy
import torch
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from rclpy.parameter import Parameter
from rclpy.parameter_client import AsyncParameterClient
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from rt_build import NODE, require
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray
from test_exported_weights import delan, resigned
from test_rt_node import GAINS, URDF, Bench, checkpoint, ros_args, rt_params, set_parameters
from test_rt_params import BARE
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from delan_control.rt_params import controller_node
from delan_learning.c_export import FORMAT_VERSION, export_delan, weights_path
from delan_learning.checkpoint import FORMAT_VERSION as CHECKPOINT_FORMAT
from delan_learning.checkpoint import CheckpointError, load_model
from delan_msgs.msg import ModelUpdate
from delan_testing.bad_joint_states import BAD_JOINT_STATES
from delan_testing.bad_parameters import torque_controller_bad_values
from delan_testing.processes import node_process

NAMES = ['shoulder', 'elbow']  # two_link_arm.urdf's joints, model order
KD = np.array(GAINS['kd'])
Q, QD, TAU = [0.1, 0.2], [0.3, -0.4], [1.5, -0.5]  # as tests/test_bad_input_joint_states.py
HOLD = -KD * QD  # PD holding the arm where it is: -kd qd
LATCHED = QoSProfile(
    depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL
)


def state(names, q, qd, t, effort=()):
    """A JointState stamped ``t`` [s]."""
    m = JointState(
        name=list(names),
        position=[float(x) for x in q],
        velocity=[float(x) for x in qd],
        effort=[float(x) for x in effort],
    )
    m.header.stamp.sec, m.header.stamp.nanosec = divmod(int(round(t * 1e9)), 1_000_000_000)
    return m


class FaultBench(Bench):
    """test_rt_node's bench, plus: the commands with their arrival times, each node's whole
    diagnostics status (level, message, values), compiled nodes on joint-state topics of their
    own, their logs."""

    def __init__(self, tmp):
        super().__init__(tmp)
        self.timed = {}  # topic -> [(publication time [ns, system clock], command)]
        self.status = {}  # node -> (level, message, values), the latest
        self.node.create_subscription(DiagnosticArray, '/diagnostics', self._on_status, 100)

    def _on_status(self, msg):
        for st in msg.status:
            self.status[st.name] = (st.level, st.message, {kv.key: kv.value for kv in st.values})

    def listen(self, topic):
        self.got[topic], self.timed[topic] = [], []

        def on(m, info):
            self.got[topic].append(list(m.data))
            self.timed[topic].append((info['source_timestamp'], list(m.data)))

        self.node.create_subscription(Float64MultiArray, topic, on, 1000)

    def start_rt(self, name, params, states='joint_states'):
        """The compiled node ``name`` on ``params``, its joint states from ``states``; its
        command topic."""
        topic = f'{name}_commands'
        self.listen(topic)
        args = ['-r', f'__node:={name}', '-r', f'effort_controller/commands:={topic}']
        args += ['-r', f'joint_states:={states}']
        log = open(os.path.join(self.tmp, f'{name}.log'), 'w')
        self.procs.append(
            node_process(
                'delan_control_rt',
                'torque_controller_rt',
                args + ros_args(params),
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        )
        return topic

    def log(self, name):
        with open(os.path.join(self.tmp, f'{name}.log')) as f:
            return f.read()

    def values(self, name):
        return self.status.get(f'/{name}', (None, '', {}))[2]

    def diag_until(self, name, pred, what, timeout=20.0):
        """Spin until the latest diagnostics of node ``name`` satisfy ``pred(level, message,
        values)``; them."""
        self.until(
            lambda: f'/{name}' in self.status and pred(*self.status[f'/{name}']),
            timeout,
            f'{what} ({name}: {self.status.get(f"/{name}")})',
        )
        return self.status[f'/{name}']

    def rejected(self, name, count, reason):
        """Wait until node ``name`` counted ``count`` rejected states, the last for ``reason``."""
        self.diag_until(
            name,
            lambda lv, msg, v: (
                v.get('rejected_joint_states') == str(count) and v.get('last_rejection') == reason
            ),
            f'{count} rejected, the last {reason}',
        )

    def first_answer(self, pub, topic, names, q, qd, t, dt=0.01, timeout=40.0, effort=()):
        """Publish states (stamps from ``t`` on, ``dt`` apart) until the node answers (it is up
        and has the order); the answer and the next stamp."""
        self.got[topic].clear()
        end = time.monotonic() + timeout
        while not self.got[topic]:
            assert time.monotonic() < end, f'no command on {topic}'
            pub.publish(state(names, q, qd, t, effort))
            t += dt
            self.spin(0.05)
        while True:  # the answers to the states sent before it, if any
            count = len(self.got[topic])
            self.spin(0.3)
            if len(self.got[topic]) == count:
                return np.array(self.got[topic][-1]), t

    def answer1(self, pub, topic, msg, timeout=20.0):
        """Publish ``msg`` once; the command that answers it."""
        self.got[topic].clear()
        pub.publish(msg)
        self.until(lambda: bool(self.got[topic]), timeout, f'the answer on {topic}')
        self.spin(0.02)
        assert len(self.got[topic]) == 1, self.got[topic]
        return np.array(self.got[topic][0])


@pytest.fixture
def bench(tmp_path):
    require(NODE)
    b = FaultBench(str(tmp_path))
    yield b
    b.close()


BAD = BAD_JOINT_STATES
#: the kinds each of four controllers gets, one reason once per controller
BAD_SPLIT = [
    ['position_too_short', 'nan_position', 'unknown_name'],
    ['velocity_too_long', 'inf_velocity', 'missing_joint'],
    ['effort_too_short', 'nan_effort', 'all_empty'],
    ['names_but_no_values', 'duplicated_name', 'no_velocity'],
]


def bad_state(kind, t):
    """The state of BAD's ``kind``, stamped ``t``."""
    f = {'name': NAMES, 'position': Q, 'velocity': QD, 'effort': TAU, **BAD[kind][0]}
    return state(f['name'], f['position'], f['velocity'], t, f['effort'])


def test_bad_joint_states_rejected_by_reason_counted_logged_and_the_node_goes_on(bench):
    """Rows "array lengths differ", "empty / no velocities", "NaN / Inf", "unknown or missing
    name", "duplicated names", "counters published": each kind of bad state (the Python test's
    twelve) is rejected with its reason, counted in rejected_joint_states and logged with the
    reason's count; no command answers it; the node commands on as before."""
    assert sorted(sum(BAD_SPLIT, [])) == sorted(BAD)
    names = [f'rt_bad{k}' for k in range(len(BAD_SPLIT))]
    pubs, topics, t, before = [], [], [], []
    for k, name in enumerate(names):
        topics.append(
            bench.start_rt(name, rt_params(watchdog_timeout=10.0, command_joints=NAMES), f'js{k}')
        )
        pubs.append(bench.node.create_publisher(JointState, f'js{k}', 10))
    for k in range(len(names)):
        first, t_next = bench.first_answer(pubs[k], topics[k], NAMES, Q, QD, 1000.0, effort=TAU)
        np.testing.assert_allclose(first, HOLD, rtol=0, atol=1e-12)
        t.append(t_next)
        before.append(first)
    for topic in topics:
        bench.got[topic].clear()
    for r in range(3):
        for k, name in enumerate(names):
            pubs[k].publish(bad_state(BAD_SPLIT[k][r], t[k]))
            t[k] += 0.01
        for k, name in enumerate(names):
            bench.rejected(name, r + 1, BAD[BAD_SPLIT[k][r]][1])
    assert all(bench.got[topic] == [] for topic in topics)  # none was answered
    for k, name in enumerate(names):
        after = bench.answer1(pubs[k], topics[k], state(NAMES, Q, QD, t[k], TAU))
        np.testing.assert_allclose(after, before[k], rtol=0, atol=1e-12)
        log = bench.log(name)
        for kind in BAD_SPLIT[k]:
            assert f'rejected joint state ({BAD[kind][1]}, 1 so far): ' in log, (kind, log)
        assert bench.procs[k].poll() is None


def test_reordered_extra_effort_free_and_end_stop_states_are_commanded(bench):
    """Rows "reordered names, extra joints", "without effort", "at its position limit": each is
    commanded, mapped by name into the model order (the gripper's values ignored): the same
    physical state gives the same command however it is named and ordered."""
    topic = bench.start_rt('rt_map', rt_params(watchdog_timeout=10.0, command_joints=NAMES))
    pub = bench.pub
    first, t = bench.first_answer(pub, topic, NAMES, Q, QD, 100.0, effort=TAU)
    np.testing.assert_allclose(first, HOLD, rtol=0, atol=1e-12)
    variants = [
        (['elbow', 'shoulder'], Q[::-1], QD[::-1], TAU[::-1]),
        (['gripper', 'shoulder', 'elbow'], [9.0] + Q, [9.0] + QD, [9.0] + TAU),
        (NAMES, Q, QD, []),  # no effort: a control input all the same
        (['elbow', 'gripper', 'shoulder'], [Q[1], 9.0, Q[0]], [QD[1], 9.0, QD[0]], []),
    ]
    for _ in range(3):
        for names, q, qd, effort in variants:
            got = bench.answer1(pub, topic, state(names, q, qd, t, effort))
            t += 0.01
            np.testing.assert_allclose(got, HOLD, rtol=0, atol=1e-12, err_msg=str(names))
    # the elbow at its upper limit (2.8), then the shoulder within 1e-3 of its lower one (-3.1):
    # commanded (a jump of the arm: held where it now is)
    for q in ([Q[0], 2.8], [-3.1 + 5e-4, Q[1]]):
        got = bench.answer1(pub, topic, state(NAMES, q, QD, t))
        t += 0.01
        np.testing.assert_allclose(got, HOLD, rtol=0, atol=1e-12)
    # every command heard, the first answers' too; the node may have answered a state or two
    # before this probe's subscription matched its publisher (discovery, on a loaded machine):
    # counted there, never heard here
    sent = len(bench.timed[topic])
    bench.diag_until(
        'rt_map', lambda lv, msg, v: int(v.get('commands_sent', 0)) >= sent, 'every state counted'
    )
    assert bench.values('rt_map')['rejected_joint_states'] == '0'


def test_stamps_far_future_backwards_repeated_and_a_restarted_clock(bench):
    """Rows "stamp far in the future", "stamp backwards / repeated": a state 1e6 s ahead is
    rejected stamp_jump and never commands the end of the reference, the next in-sequence one
    is answered at once; a repeated stamp is answered, a stale one rejected stamp_backwards; a
    restarted clock costs one state (as tests/test_bad_input_joint_states.py's
    test_stamps_backwards_repeated_and_far_future)."""
    t = 1000.0
    ref = JointTrajectory(joint_names=NAMES)
    ref.header.stamp.sec, ref.header.stamp.nanosec = divmod(int((t + 0.5) * 1e9), 1_000_000_000)
    ref.points = [JointTrajectoryPoint(positions=Q), JointTrajectoryPoint(positions=[2.5, -2.5])]
    ref.points[1].time_from_start.sec = 5
    bench.node.create_publisher(JointTrajectory, 'reference_trajectory', LATCHED).publish(ref)
    params = rt_params(watchdog_timeout=10.0, command_joints=NAMES)
    topic = bench.start_rt('rt_stamps', params)
    bench.diag_until(
        'rt_stamps', lambda lv, msg, v: v.get('references_received') == '1', 'the reference'
    )
    pub, commands = bench.pub, []
    _, t = bench.first_answer(pub, topic, NAMES, Q, QD, t)

    def good(k):
        nonlocal t
        for _ in range(k):
            commands.append(bench.answer1(pub, topic, state(NAMES, Q, QD, t)))
            t += 0.01

    def refused(stamp, count, reason):
        bench.got[topic].clear()
        pub.publish(state(NAMES, Q, QD, stamp))
        bench.rejected('rt_stamps', count, reason)
        assert bench.got[topic] == []

    good(5)
    refused(t + 1e6, 1, 'stamp_jump')
    good(5)  # the stream goes on: answered at once
    commands.append(bench.answer1(pub, topic, state(NAMES, Q, QD, t - 0.01)))  # a repeat
    refused(t - 0.5, 2, 'stamp_backwards')
    good(5)
    t -= 100.0  # the sender's clock restarts: one state lost, then on
    refused(t, 3, 'stamp_backwards')
    t += 0.01
    good(10)
    # no command ever steered to the end of the reference (PD to [2.5, -2.5] saturates)
    limits = np.array(params['effort_limits'])
    assert all(np.all(np.abs(c) < 0.5 * limits) for c in commands)
    assert bench.values('rt_stamps')['rejected_joint_states'] == '3'


#: a state source of its own (a sim): states at 200 Hz, stamped by a clock of its own that
#: stops when it is stopped (sim time), at ``q`` with velocity ``qd``, from when the file ``go``
#: exists; argv: t0 q0,q1 qd0,qd1 go
SOURCE = """
import os, sys, time
import rclpy
from sensor_msgs.msg import JointState
t = float(sys.argv[1])
q, qd = ([float(x) for x in a.split(',')] for a in sys.argv[2:4])
rclpy.init()
node = rclpy.create_node('state_source')
pub = node.create_publisher(JointState, 'joint_states', 10)
while not os.path.exists(sys.argv[4]):
    time.sleep(0.01)
while rclpy.ok():
    t += 0.005
    m = JointState(name=['shoulder', 'elbow'], position=q, velocity=qd)
    m.header.stamp.sec, m.header.stamp.nanosec = divmod(int(round(t * 1e9)), 1_000_000_000)
    pub.publish(m)
    time.sleep(0.005)
"""


def test_a_frozen_or_killed_state_source_gets_one_zero_then_silence_then_commands(bench):
    """Row "the sim freezes (SIGSTOP) or dies (SIGKILL)", the state source a process of its own:
    frozen, the watchdog sends one zero command 1-1.5 watchdog_timeout after the last answer,
    then nothing, diagnostics WARN (stale) with watchdog_trips; continued, commanding resumes
    with the command of before (no step); killed, one zero again; a new source (its clock from
    1 s, the arm elsewhere) costs one state (stamp_backwards) and the arm is held where it now
    is."""
    timeout = 0.5
    topic = bench.start_rt('rt_wd', rt_params(watchdog_timeout=timeout, command_joints=NAMES))
    script = os.path.join(bench.tmp, 'source.py')
    with open(script, 'w') as f:
        f.write(SOURCE)
    qd = [0.2, -0.1]
    hold = list(-KD * qd)

    def source(t0, q, go):
        """A source process, publishing once ``go`` exists (started ahead: its imports take
        seconds on a loaded machine)."""
        args = [str(t0), ','.join(map(str, q)), ','.join(map(str, qd)), go]
        p = subprocess.Popen([sys.executable, script, *args])
        bench.procs.append(p)
        return p

    def since(t0):
        """The commands the node published after ``t0`` [ns, system clock]."""
        return [(w, c) for w, c in bench.timed[topic] if w > t0]

    def trips(n, level, stale):
        return bench.diag_until(
            'rt_wd',
            lambda lv, msg, v: (
                v.get('watchdog_trips') == str(n) and lv == level and ('stale' in msg) == stale
            ),
            f'{n} watchdog trips',
        )

    def stopped(t_stop, n, what):
        """One zero after t_stop, n trips in all, then silence for 4 timeouts."""
        bench.until(lambda: any(not any(c) for _, c in since(t_stop)), 20.0, 'the zero command')
        trips(n, DiagnosticStatus.WARN, True)
        bench.spin(4 * timeout)
        after = since(t_stop)
        zeros = [w for w, c in after if not any(c)]
        assert len(zeros) == 1 and not any(after[-1][1]), after[-5:]
        # by the node's own publication times: from the answer to the last state to the zero
        last = max(w for w, c in bench.timed[topic] if any(c))
        delay = 1e-9 * (zeros[0] - last)
        print(
            f'\n{what}: zero command {delay * 1e3:.0f} ms after the answer to the last joint '
            f'state (watchdog_timeout {timeout * 1e3:.0f} ms), then silence'
        )
        assert 0.9 * timeout < delay < 1.5 * timeout + 1.0, delay

    go = [os.path.join(bench.tmp, f'go{k}') for k in range(2)]
    open(go[0], 'w').close()
    sim = source(100.0, [0.3, -0.5], go[0])
    restarted = source(1.0, [0.5, -0.3], go[1])  # the sim started again, below
    bench.until(lambda: len(bench.got[topic]) >= 100, 40.0, '100 commands')
    assert all(c == pytest.approx(hold, abs=1e-12) for c in bench.got[topic])
    trips(0, DiagnosticStatus.OK, False)
    # ---- frozen
    os.kill(sim.pid, signal.SIGSTOP)
    stopped(time.time_ns(), 1, 'SIGSTOP')
    last_before = next(c for c in reversed(bench.got[topic]) if any(c))
    os.kill(sim.pid, signal.SIGCONT)
    t_cont = time.time_ns()
    bench.until(lambda: len(since(t_cont)) >= 50, 20.0, '50 commands after SIGCONT')
    resumed = [c for _, c in since(t_cont)]
    np.testing.assert_allclose(resumed[0], last_before, rtol=0, atol=1e-12)  # no step
    assert all(c == pytest.approx(hold, abs=1e-12) for c in resumed)
    trips(1, DiagnosticStatus.OK, False)
    # ---- killed, and a new one at its initial position, its clock from 1 s
    os.kill(sim.pid, signal.SIGKILL)
    sim.wait(timeout=10)
    stopped(time.time_ns(), 2, 'SIGKILL')
    t_new = time.time_ns()
    open(go[1], 'w').close()
    bench.until(lambda: len(since(t_new)) >= 50, 40.0, '50 commands from the new source')
    # held where the arm now is: kp (old hold - q) would pull it back by 6 and 2 N m
    assert all(c == pytest.approx(hold, abs=1e-12) for _, c in since(t_new))
    _, _, values = trips(2, DiagnosticStatus.OK, False)
    assert (values['rejected_joint_states'], values['last_rejection']) == ('1', 'stamp_backwards')
    assert restarted.poll() is None


def hold_reference(bench, name, topic, q_hold, q0, qd, t):
    """Publish a one-point reference at ``q_hold`` (latched) and answer states at ``q0`` with
    velocity ``qd`` (stamps 4 ms apart after ``t``) until node ``name`` counted it; ``at(q)``,
    which sends the next state at ``q`` and returns the command that answered it."""
    hold = JointTrajectory(joint_names=NAMES)
    hold.points = [JointTrajectoryPoint(positions=[float(x) for x in q_hold])]
    bench.node.create_publisher(JointTrajectory, 'reference_trajectory', LATCHED).publish(hold)
    stamp = [t]

    def at(q):
        stamp[0] += 0.004
        return bench.answer1(bench.pub, topic, state(NAMES, q, qd, stamp[0]))

    end = time.monotonic() + 20.0
    while bench.values(name).get('references_received') != '1':  # states flow meanwhile
        assert time.monotonic() < end, 'the reference never arrived'
        at(q0)
        bench.spin(0.1)
    return at


def test_a_jump_of_the_arm_drops_a_far_reference_and_holds(bench):
    """Row "the arm jumps while states flow": a step the arm can make is tracked on, a 0.5 rad
    jump (resume_tolerance 0.1) drops the reference and holds the arm where it now is, as
    delan_control's test_a_jump_of_the_arm_is_taken_as_a_restart (PD kp 30, kd 3 on the
    shoulder; states with velocity (0.1, -0.1))."""
    params = rt_params(
        watchdog_timeout=10.0, command_joints=NAMES, resume_tolerance=0.1, resume_time=0.0
    )
    topic = bench.start_rt('rt_jump', params)
    q0, qd = np.array([0.3, -0.2]), [0.1, -0.1]
    holding = list(-KD * qd)
    pub = bench.pub
    got, t = bench.first_answer(pub, topic, NAMES, q0, qd, 100.0, dt=0.004)
    np.testing.assert_allclose(got, holding, rtol=0, atol=1e-12)
    at = hold_reference(bench, 'rt_jump', topic, q0 + [0.05, 0.0], q0, qd, t)
    for _ in range(20):  # taken up from the arm: 0.05 rad takes 63 ms (20 states: 80)
        at(q0)
    kp0 = GAINS['kp'][0]
    np.testing.assert_allclose(at(q0), [kp0 * 0.05 - 0.3, 0.1], rtol=0, atol=1e-12)
    np.testing.assert_allclose(at(q0 + [0.01, 0.0]), [kp0 * 0.04 - 0.3, 0.1], rtol=0, atol=1e-12)
    for _ in range(3):  # jumped 0.49 rad: the reference dropped, the arm held where it is
        np.testing.assert_allclose(at(q0 + [0.5, 0.0]), holding, rtol=0, atol=1e-12)
    _, _, v = bench.diag_until(
        'rt_jump', lambda lv, msg, v: v.get('references_dropped') == '1', 'the drop'
    )
    assert (v['holding'], v['references_rejoined']) == ('true', '0')
    assert 'the arm jumped 0.490' in bench.log('rt_jump')


def test_a_step_the_measured_velocities_do_not_explain_is_a_jump(bench):
    """A sim reset 0.09 rad away, at rest: under the velocity limits' bound (0.1 rad plus twice
    the limits times 4 ms), but the measured velocities (zero) say the arm did not move there:
    taken as a restart, as delan_control's JumpDetector does (its WITNESS_* constants); a step
    the velocities do explain is none."""
    params = rt_params(
        watchdog_timeout=10.0, command_joints=NAMES, resume_tolerance=0.5, resume_time=0.0
    )
    topic = bench.start_rt('rt_witness', params)
    q0 = np.array([0.3, -0.2])
    _, t = bench.first_answer(bench.pub, topic, NAMES, q0, [0.0, 0.0], 100.0, dt=0.004)
    at = hold_reference(bench, 'rt_witness', topic, q0, q0, [0.0, 0.0], t)
    at(q0)
    at(q0 + [0.0, 0.09])
    bench.diag_until(
        'rt_witness', lambda lv, msg, v: v.get('references_rejoined') == '1', 'the restart'
    )
    assert 'the arm jumped 0.090' in bench.log('rt_witness')


def test_a_continuous_joint_reported_wrapped_does_not_jump(bench):
    """A driver that reports a continuous joint in (-pi, pi] (the elbow declared continuous
    here): crossing pi by 0.02 rad is no jump, the reference is kept and the position error
    wrapped, as delan_control's JumpDetector and ReferenceTracker have it."""
    params = rt_params(
        watchdog_timeout=10.0,
        command_joints=NAMES,
        continuous_joints=['elbow'],
        resume_tolerance=0.1,
        resume_time=0.0,
    )
    topic = bench.start_rt('rt_wrap', params)
    q0, qd = np.array([0.3, math.pi - 0.01]), [0.1, -0.1]
    pub = bench.pub
    got, t = bench.first_answer(pub, topic, NAMES, q0, qd, 100.0, dt=0.004)
    np.testing.assert_allclose(got, list(-KD * qd), rtol=0, atol=1e-12)
    at = hold_reference(bench, 'rt_wrap', topic, q0, q0, qd, t)
    wrapped = np.array([0.3, -math.pi + 0.01])  # 0.02 rad on, reported wrapped
    kp1 = GAINS['kp'][1]
    for _ in range(3):
        np.testing.assert_allclose(
            at(wrapped), [-KD[0] * qd[0], kp1 * -0.02 - KD[1] * qd[1]], rtol=0, atol=1e-9
        )
    _, _, v = bench.diag_until(
        'rt_wrap', lambda lv, msg, v: int(v.get('commands_sent', 0)) >= 4, 'the commands'
    )
    assert (v['holding'], v['references_dropped'], v['references_rejoined']) == ('false', '0', '0')
    assert 'jumped' not in bench.log('rt_wrap')


def test_receivers_of_other_joints_are_refused_and_a_late_one_waited_for(bench):
    """Row "effort controller whose joints are not the model's": a receiver missing a joint,
    with an extra one, with one repeated: no command at all, not even the watchdog's zero (no
    trip either), diagnostics ERROR with the reason; a receiver that comes up late is waited
    for, and commanding begins holding the arm where it is then (not where it was at the
    first state)."""
    receivers = {
        'recv_missing': (['shoulder'], "missing ['elbow']"),
        'recv_extra': (['shoulder', 'elbow', 'gripper'], "extra ['gripper']"),
        'recv_repeated': (['shoulder', 'elbow', 'shoulder'], "repeated ['shoulder']"),
    }
    for name, (joints, _) in receivers.items():
        n = rclpy.create_node(name, context=bench.ctx)
        n.declare_parameter('joints', joints)
        bench.ex.add_node(n)
    timeout = 0.5
    params = rt_params(watchdog_timeout=timeout)
    topics = {
        name: bench.start_rt(f'rt_{name}', {**params, 'effort_controller_name': name})
        for name in receivers
    }
    late = bench.start_rt(
        'rt_late',
        {**params, 'effort_controller_name': 'recv_late', 'effort_controller_timeout': 600.0},
    )
    qd, t = [0.2, -0.1], 100.0

    def stream(seconds, q):
        nonlocal t
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            bench.pub.publish(state(NAMES, q, qd, t))
            t += 0.01
            bench.spin(0.01)

    a = np.array([0.3, -0.5])
    for name, (_, reason) in receivers.items():
        end = time.monotonic() + 30.0
        while not bench.status.get(f'/rt_{name}', (0, '', {}))[2].get('command_order', '') == (
            f'refused: /{name}'
        ):
            assert time.monotonic() < end, (name, bench.status.get(f'/rt_{name}'))
            stream(0.1, a)
        level, message, _ = bench.status[f'/rt_{name}']
        assert level == DiagnosticStatus.ERROR, (name, level)
        assert message.startswith(f'refusing to command: /{name} takes commands for joints ')
        assert reason in message, (name, message)
    level, message, values = bench.diag_until('rt_late', lambda lv, msg, v: True, 'diagnostics')
    assert (level, message, values['command_order']) == (
        DiagnosticStatus.WARN,
        'waiting for the joint order of /recv_late',
        'pending',
    )
    stream(0.5, a)
    b = a + [0.05, 0.0]  # the arm moved (nobody commanded it): 0.05 rad, no jump
    stream(0.5, b)
    assert all(bench.got[topic] == [] for topic in [*topics.values(), late])
    recv = rclpy.create_node('recv_late', context=bench.ctx)
    recv.declare_parameter('joints', list(reversed(NAMES)))
    bench.ex.add_node(recv)
    end = time.monotonic() + 30.0
    while len(bench.got[late]) < 20:
        assert time.monotonic() < end, 'the late receiver never answered'
        stream(0.1, b)
    # the receiver's order, holding where the arm was when commanding began: -kd qd (holding
    # the first state's position instead would add kp (a - b) = -1.5 N m on the shoulder)
    assert all(c == pytest.approx(list(-KD * qd)[::-1], abs=1e-12) for c in bench.got[late])
    t_stop = time.time_ns()
    bench.spin(1.0 + 4 * timeout)  # the states stop
    zeros = [c for w, c in bench.timed[late] if w > t_stop and not any(c)]
    assert len(zeros) == 1 and not any(bench.got[late][-1])
    bench.diag_until(
        'rt_late', lambda lv, msg, v: v.get('watchdog_trips') == '1', 'the late one trips'
    )
    for name in receivers:
        values = bench.diag_until(
            f'rt_{name}', lambda lv, msg, v: lv == DiagnosticStatus.ERROR, 'refused'
        )[2]
        assert (values['commands_sent'], values['watchdog_trips']) == ('0', '0'), name
        assert bench.got[topics[name]] == []
        assert 'ERROR: refusing to command' in bench.log(f'rt_{name}')


def test_bad_order_parameters_fail_the_start_up(bench):
    """As delan_control's test_bad_order_parameters_fail_the_start_up: command_joints naming
    other joints than the model's, an effort_controller_name that is no node name or empty."""
    cases = {
        'missing': ({'command_joints': ['shoulder']}, r"command_joints: joints \['shoulder'\]"),
        'extra': (
            {'command_joints': ['shoulder', 'elbow', 'gripper']},
            r"command_joints: .*: extra \['gripper'\]",
        ),
        'space': ({'effort_controller_name': 'effort controller'}, 'is not a node name'),
        'empty': ({'effort_controller_name': "''"}, "effort_controller_name='' must name"),
        # even when command_joints is given, as the Python node checks it
        'tilde': (
            {'effort_controller_name': '~/x', 'command_joints': NAMES},
            "effort_controller_name='~/x' must name",
        ),
    }
    for name, (extra, _) in cases.items():
        bench.start_rt(f'rt_{name}', {**rt_params(), **extra})
    for proc in bench.procs:
        assert proc.wait(timeout=30) != 0
    for name, (_, reason) in cases.items():
        assert re.search(reason, bench.log(f'rt_{name}')), (name, bench.log(f'rt_{name}'))


def test_bad_parameters_refused_old_value_kept(bench):
    """Row "parameters": the torque controller's bad values of
    tests/test_bad_input_files_and_params.py, set on the running compiled node, are refused
    with a reason and change nothing (parameters it does not have, such as urdf_path and
    state_publish_rate, are refused as not declared); a valid change is accepted after."""
    bad = torque_controller_bad_values(URDF)
    topic = bench.start_rt('rt_params', rt_params(command_joints=NAMES, watchdog_timeout=10.0))
    before, t = bench.first_answer(bench.pub, topic, NAMES, Q, QD, 100.0)
    declared = sorted({n for n, _ in bad} - {'urdf_path', 'state_publish_rate'})
    client = AsyncParameterClient(bench.node, 'rt_params')
    assert client.wait_for_services(10.0)

    def values():
        fut = client.get_parameters(declared)
        bench.until(fut.done, 20.0, 'parameter values')
        return list(fut.result().values)

    old = values()
    for name, value in bad:
        (result,) = set_parameters(bench, 'rt_params', [Parameter(name, value=value)])
        assert not result.successful and result.reason, (name, value, result)
    assert values() == old
    after = bench.answer1(bench.pub, topic, state(NAMES, Q, QD, t))
    np.testing.assert_allclose(after, before, rtol=0, atol=1e-12)
    (result,) = set_parameters(bench, 'rt_params', [Parameter('kd', value=[6.0])])
    assert result.successful, result
    after = bench.answer1(bench.pub, topic, state(NAMES, Q, QD, t + 0.01))
    np.testing.assert_allclose(after, -6.0 * np.array(QD), rtol=0, atol=1e-12)


def test_urdfs_that_do_not_parse_or_lack_inertias(bench, tmp_path, monkeypatch):
    """Rows "URDF that does not parse" and "URDF without inertias": the compiled node reads no
    URDF, the launch files derive its parameters (rt_params.controller_node): one that does not
    parse stops the launch with a ValueError; without inertias model=pinocchio stops it, and
    the node started with model=pd refuses a switch to pinocchio (no rigid-body model file)."""
    monkeypatch.setenv('DELAN_RT_MODEL_DIR', str(tmp_path / 'models'))
    broken = tmp_path / 'broken.urdf'
    broken.write_text('<robot name="x"><link')
    with pytest.raises(ValueError, match='does not parse'):
        controller_node('rt', str(broken), model='pd')
    bare = tmp_path / 'bare.urdf'
    bare.write_text(BARE)
    with pytest.raises(ValueError):
        controller_node('rt', str(bare), model='pinocchio')
    params = controller_node('rt', str(bare), model='pd')[2]
    assert 'rigid_body_file' not in params
    topic = bench.start_rt('rt_bare', {**params, 'watchdog_timeout': 10.0})
    bench.first_answer(bench.pub, topic, ['j1', 'j2'], [0.1, 0.2], [0.0, 0.0], 100.0)
    (result,) = set_parameters(bench, 'rt_bare', [Parameter('model', value='pinocchio')])
    assert not result.successful and 'model=pinocchio needs rigid_body_file' in result.reason


def test_bad_checkpoints_refused_model_kept_and_a_learner_version_without_weights(bench, tmp_path):
    """Row "delan_checkpoint: truncated, newer format, other joints, pickle with code, missing
    file": the compiled node loads the weights exported beside a checkpoint (``.cw``), never
    the checkpoint itself: a set naming one whose weights are truncated, newer, of other joints
    or absent is refused with the reason and the model kept; the launch files' export loads
    the checkpoint as the Python node does and refuses the truncated, newer and pickled ones
    (no code runs). Row "kill -9 of the learner": a controller following the learner keeps the
    version it has when one comes without (or with broken) weights, answering every state."""
    tmp = str(tmp_path)
    good = checkpoint(tmp, NAMES)
    export_delan(load_model(good)[0], weights_path(good), NAMES, 1)
    cw = open(weights_path(good), 'rb').read()
    files = {
        'truncated': cw[:-100],
        'newer': resigned(cw, 8, struct.pack('<I', FORMAT_VERSION + 1)),
        'other': open(
            export_delan(delan(['revolute'] * 7, False, 'softplus', 2), weights_path(good) + '7'),
            'rb',
        ).read(),
    }
    for name, data in files.items():
        with open(os.path.join(tmp, f'{name}.pt'), 'wb') as f:  # a stand-in: never read
            f.write(open(good, 'rb').read())
        with open(weights_path(os.path.join(tmp, f'{name}.pt')), 'wb') as f:
            f.write(data)
    marker = tmp_path / 'PWNED'

    class Payload:
        def __reduce__(self):
            return (open, (str(marker), 'w'))

    evil = os.path.join(tmp, 'evil.pt')
    with open(evil, 'wb') as f:
        pickle.dump({'format_version': 1, 'metadata_json': '{}', 'state_dict': Payload()}, f)
    truncated_pt = os.path.join(tmp, 'truncated_pt.pt')
    with open(truncated_pt, 'wb') as f:
        f.write(open(good, 'rb').read()[:1000])
    newer_pt = os.path.join(tmp, 'newer_pt.pt')
    payload = torch.load(good, weights_only=True)
    payload['format_version'] = CHECKPOINT_FORMAT + 1
    torch.save(payload, newer_pt)
    reasons = {
        'truncated.pt': 'checksum',
        'newer.pt': 'format version',
        'other.pt': 'has 7 joints, the controller 2',
        'evil.pt': 'cannot open',
        'absent.pt': 'cannot open',
    }
    from delan_control.rt_params import ensure_weights

    for bad in (evil, truncated_pt, newer_pt):  # the launch files' export refuses them
        with pytest.raises((CheckpointError, ValueError)):
            ensure_weights(bad, 'delan')
        assert not os.path.exists(weights_path(bad))
    params = rt_params(watchdog_timeout=10.0, command_joints=NAMES, switch_blend_time=0.0)
    rt = bench.start_rt('rt_ckpt', {**params, 'model': 'delan', 'delan_checkpoint': good})
    follow = bench.start_rt('rt_follow', {**params, 'model': 'delan'})
    q, qd = [0.305, -0.497], [0.2, -0.1]
    a_good, t = bench.first_answer(bench.pub, rt, NAMES, q, qd, 100.0)
    a_pd, t = bench.first_answer(bench.pub, follow, NAMES, q, qd, t)
    assert np.abs(a_good - a_pd).max() > 1e-3
    update_pub = bench.node.create_publisher(ModelUpdate, 'learner/model_update', LATCHED)

    def update(path, version):
        u = ModelUpdate(model_id='test', model_version=version, checkpoint_path=path)
        u.joint_names = NAMES
        update_pub.publish(u)

    update(good, 1)
    bench.diag_until(
        'rt_follow', lambda lv, msg, v: v.get('model_loads') == '1', 'the learner version'
    )
    both = [rt, follow]

    def answers():
        nonlocal t
        t += 0.01
        for topic in both:
            bench.got[topic].clear()
        bench.pub.publish(state(NAMES, q, qd, t))
        bench.until(lambda: all(bench.got[c] for c in both), 20.0, 'both answers')
        return [np.array(bench.got[c][-1]) for c in both]

    for a in answers():
        np.testing.assert_allclose(a, a_good, rtol=0, atol=1e-12)
    for version, (bad, reason) in enumerate(reasons.items(), start=2):
        path = os.path.join(tmp, bad)
        (result,) = set_parameters(bench, 'rt_ckpt', [Parameter('delan_checkpoint', value=path)])
        assert not result.successful and reason in result.reason, (bad, result)
        update(path, version)  # a version the learner could not finish
        bench.until(
            lambda: bench.log('rt_follow').count('model refused: ') == version - 1,
            20.0,
            f'the follower refusing {bad}',
        )
        refusals = [x for x in bench.log('rt_follow').splitlines() if 'model refused: ' in x]
        assert weights_path(path) in refusals[-1], refusals[-1]
        for a in answers():  # the model it has, on every state
            np.testing.assert_allclose(a, a_good, rtol=0, atol=1e-12)
    fut = AsyncParameterClient(bench.node, 'rt_ckpt').get_parameters(['delan_checkpoint'])
    bench.until(fut.done, 20.0, 'the parameter')
    assert fut.result().values[0].string_value == good
    assert not marker.exists(), 'a checkpoint ran code'
    for name in ('rt_ckpt', 'rt_follow'):
        _, _, v = bench.diag_until(
            name, lambda lv, msg, v: v.get('commands_sent', '0') != '0', 'diagnostics'
        )
        assert (v['model_loads'], v['model_version'], v['watchdog_trips']) == ('1', '1', '0')
        assert all(any(c) for c in bench.got[rt] + bench.got[follow])  # no zero command


def test_non_finite_model_output_falls_back_to_pd(bench, tmp_path):
    """As delan_control's test_non_finite_model_output_falls_back_to_pd: a DeLaN whose network
    weights are all NaN commands the PD torque on every state, each counted in fallbacks,
    logged (throttled, with the count). Unlike the Python node, which loads a checkpoint whose
    friction coefficients are NaN too and falls back on every state, the compiled node refuses
    such weights when it loads them (the model kept)."""

    def nan_weights(name, friction):
        m = delan(['revolute'] * 2, False, 'softplus', 2)
        with torch.no_grad():
            for key, p in m.named_parameters():
                if friction or key != 'friction_raw':
                    p.fill_(math.nan)
        return export_delan(m, str(tmp_path / name), NAMES, 1)

    weights = nan_weights('nan.cw', False)
    params = rt_params(watchdog_timeout=10.0, command_joints=NAMES)
    topic = bench.start_rt('rt_nan', {**params, 'model': 'delan', 'delan_weights': weights})
    q, qd = [0.3, -0.2], [0.1, -0.1]
    first, t = bench.first_answer(bench.pub, topic, NAMES, q, qd, 100.0)
    cmds = [first]
    for _ in range(20):
        cmds.append(bench.answer1(bench.pub, topic, state(NAMES, q, qd, t)))
        t += 0.01
    assert all(np.array_equal(c, -KD * qd) for c in cmds), cmds[:3]
    (result,) = set_parameters(
        bench, 'rt_nan', [Parameter('delan_weights', value=nan_weights('all.cw', True))]
    )
    assert not result.successful and 'friction coefficient' in result.reason, result
    cmds.append(bench.answer1(bench.pub, topic, state(NAMES, q, qd, t)))
    assert np.array_equal(cmds[-1], -KD * qd)
    sent = len(bench.timed[topic])  # every command heard, the first answers' too
    _, _, v = bench.diag_until(
        'rt_nan', lambda lv, msg, v: int(v.get('commands_sent', 0)) >= sent, 'the commands counted'
    )
    assert (v['model'], v['fallbacks']) == ('delan', v['commands_sent'])
    assert 'model delan returned non-finite torque: PD fallback (1 so far)' in bench.log('rt_nan')


@pytest.mark.parametrize('sig', [signal.SIGINT, signal.SIGTERM])
def test_a_signal_ends_the_node_cleanly(bench, sig):
    """Row "a node's teardown hangs after Ctrl-C": SIGINT and SIGTERM end the compiled node's
    loop; it finalises its entities and exits 0 within the 4 s the Python nodes get."""
    topic = bench.start_rt('rt_sig', rt_params(command_joints=NAMES, watchdog_timeout=10.0))
    bench.first_answer(bench.pub, topic, NAMES, Q, QD, 100.0)
    proc = bench.procs[-1]
    t0 = time.monotonic()
    proc.send_signal(sig)
    assert proc.wait(timeout=10) == 0
    assert time.monotonic() - t0 < 4.0
    assert 'shutting down' in bench.log('rt_sig')
