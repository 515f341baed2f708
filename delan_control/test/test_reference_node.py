"""The reference node over real DDS: it publishes on start, latched (a subscriber that joins later
still gets the reference in force), starts from the arm's current position, republishes when
``trajectory`` / ``speed`` / ``seed`` are set at runtime, and refuses bad values (keeping the old
ones and publishing nothing)."""

from __future__ import annotations

import math
import os
import subprocess
import time
from contextlib import contextmanager
from typing import Iterable, Iterator, List, Sequence

import numpy as np
import pytest
import rclpy
from rclpy.executors import SingleThreadedExecutor
from rclpy.parameter import Parameter, parameter_value_to_python
from rclpy.parameter_client import AsyncParameterClient
from sensor_msgs.msg import JointState
from trajectory_msgs.msg import JointTrajectory

from delan_common.ros.qos import LATCHED
from delan_common.ros.stamps import seconds
from delan_common.urdf_joints import RobotDescription
from delan_control.nodes.reference import STATE_STALE_S, ReferenceNode
from delan_control.trajectories import PiecewiseQuintic
from delan_testing.ros import node_process, ros_context, spin_in_thread

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), '..', '..'))
URDF = os.path.join(ROOT, 'delan_bringup', 'urdf', 'two_link_arm.urdf')
ROBOT = RobotDescription.load(URDF)
NAMES = list(ROBOT.joint_names)


def arrays(msg: JointTrajectory):
    t = np.array([p.time_from_start.sec + 1e-9 * p.time_from_start.nanosec for p in msg.points])
    q, qd, qdd = (
        np.array([getattr(p, f) for p in msg.points])
        for f in ('positions', 'velocities', 'accelerations')
    )
    return t, q, qd, qdd


class Listener:
    """A test node (spun by a background thread) that can subscribe late and set parameters."""

    def __init__(self, ctx):
        self.node = rclpy.create_node('reference_test', context=ctx)
        self.received: List[tuple] = []  # (monotonic, JointTrajectory)
        self.ex = SingleThreadedExecutor(context=ctx)
        self.ex.add_node(self.node)
        self.params = AsyncParameterClient(self.node, 'reference')
        self._thread = spin_in_thread(self.ex)

    def subscribe(self, topic: str = 'reference_trajectory') -> None:
        self.node.create_subscription(
            JointTrajectory, topic, lambda m: self.received.append((time.monotonic(), m)), LATCHED
        )

    def wait_count(self, n: int, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while len(self.received) < n:
            assert time.monotonic() < deadline, f'{len(self.received)} references, wanted {n}'
            time.sleep(0.02)

    def _result(self, future, timeout: float = 30.0):
        deadline = time.monotonic() + timeout
        while not future.done():
            assert time.monotonic() < deadline, 'parameter service call timed out'
            time.sleep(0.01)
        return future.result()

    def set(self, **values):
        assert self.params.wait_for_services(timeout_sec=60.0)
        return self._result(
            self.params.set_parameters([Parameter(k, value=v) for k, v in values.items()])
        ).results

    def get(self, *names):
        assert self.params.wait_for_services(timeout_sec=60.0)
        values = self._result(self.params.get_parameters(list(names))).values
        return [parameter_value_to_python(v) for v in values]

    def close(self) -> None:
        self.ex.shutdown(timeout_sec=10.0)
        self.node.destroy_node()


@pytest.fixture(scope='module')
def reference_process():
    """The installed `reference` node as a process: figure eight, no joint states (it starts
    anyway after wait_for_joint_states), and a listener that joins only after it published."""
    proc = node_process(
        'delan_control',
        'reference',
        [
            '-p',
            f'urdf_path:={URDF}',
            '-p',
            'trajectory:=figure_eight',
            '-p',
            'duration:=4.0',
            '-p',
            'wait_for_joint_states:=0.0',
            '-p',
            'point_rate:=50.0',
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        with ros_context() as ctx:
            listener = Listener(ctx)
            try:
                yield proc, listener
            finally:
                listener.close()
    finally:
        proc.terminate()
        try:
            out = proc.communicate(timeout=20)[0]
        except subprocess.TimeoutExpired:
            proc.kill()
            out = proc.communicate()[0]
        print(f'\nreference node output:\n{out}')


def test_published_on_start_and_latched_for_a_late_subscriber(reference_process):
    proc, lis = reference_process
    # the node is up (its parameter services answer) and has had time to publish: only now
    # does the listener subscribe
    assert lis.get('trajectory') == ['figure_eight']
    time.sleep(1.0)
    assert proc.poll() is None
    lis.subscribe()
    lis.wait_count(1)
    time.sleep(1.0)
    assert len(lis.received) == 1, 'one reference published, one received'
    msg = lis.received[0][1]
    assert list(msg.joint_names) == NAMES
    t, q, qd, qdd = arrays(msg)
    assert len(t) == 4.0 * 50.0 + 1 and t[0] == 0.0 and t[-1] == pytest.approx(4.0)
    assert np.all(np.diff(t) > 0)
    assert np.all(q >= ROBOT.lower) and np.all(q <= ROBOT.upper)
    assert np.all(np.abs(qd) <= ROBOT.velocity_limits)
    # a figure eight: ramps in from rest at the centre of the joint ranges, spans both joints
    assert np.allclose(q[0], 0.5 * (ROBOT.lower + ROBOT.upper)) and np.allclose(qd[0], 0.0)
    assert np.ptp(q, axis=0).min() > 0.3
    # stamped (a little ahead of) the node's clock: the time base the controller samples on
    stamp = msg.header.stamp.sec + 1e-9 * msg.header.stamp.nanosec
    assert abs(stamp - time.time()) < 60.0


def test_republished_when_trajectory_speed_or_seed_change(reference_process):
    proc, lis = reference_process
    if not lis.received:  # (run alone: test 1 subscribes otherwise)
        lis.subscribe()
    lis.wait_count(1)
    n = len(lis.received)
    base = lis.received[-1][1]
    # speed 2x: the same path twice as fast (duration = length in time: two periods)
    assert all(r.successful for r in lis.set(speed=2.0))
    lis.wait_count(n + 1)
    fast = lis.received[-1][1]
    _, q1, qd1, qdd1 = arrays(base)
    _, q2, qd2, qdd2 = arrays(fast)
    assert np.abs(qd2).max(axis=0) == pytest.approx(2.0 * np.abs(qd1).max(axis=0), rel=0.02)
    assert np.abs(qdd2).max(axis=0) == pytest.approx(4.0 * np.abs(qdd1).max(axis=0), rel=0.05)
    assert np.allclose(q2.min(axis=0), q1.min(axis=0), atol=0.01)  # same path
    # another trajectory kind (not repeated: the next seed would come on its own), and the
    # speed with it in the same request: one reference, not one per parameter (the first at
    # the old speed, each taken up anew by the controller)
    assert all(r.successful for r in lis.set(trajectory='excitation', speed=1.0, repeat=False))
    lis.wait_count(n + 2)
    time.sleep(0.5)
    assert len(lis.received) == n + 2, len(lis.received)
    exc = lis.received[-1][1]
    _, q3, _, _ = arrays(exc)
    assert not np.allclose(q3[: len(q1)], q1[: len(q3)])
    # a new seed: a new excitation
    k = len(lis.received)
    assert lis.set(seed=7)[0].successful
    lis.wait_count(k + 1)
    _, q4, _, _ = arrays(lis.received[-1][1])
    assert q4.shape == q3.shape and not np.allclose(q4, q3)
    # `repeat` is not a change of the reference: nothing is published (set again as it is:
    # turned on, the excitation would go on by itself and the later tests see it)
    k = len(lis.received)
    assert lis.set(repeat=False)[0].successful
    time.sleep(1.0)
    assert len(lis.received) == k
    assert proc.poll() is None


@pytest.mark.parametrize(
    'name, value',
    [
        ('speed', 0.0),
        ('speed', 10.0),
        ('speed', math.nan),
        ('speed', 'fast'),
        ('trajectory', 'circle'),
        ('trajectory', ''),
        ('seed', -1),
        ('duration', 0.0),
        ('point_rate', 5000.0),
        ('approach_time', -1.0),
        ('period', 0.0),
        ('urdf_path', URDF),  # read-only
    ],
)
def test_bad_values_are_refused(reference_process, name, value):
    proc, lis = reference_process
    if not lis.received:  # (run alone: test 1 subscribes otherwise)
        lis.subscribe()
    lis.wait_count(1)
    before = lis.get(
        'trajectory', 'speed', 'seed', 'duration', 'point_rate', 'approach_time', 'period'
    )
    n = len(lis.received)
    result = lis.set(**{name: value})[0]
    assert not result.successful and result.reason
    time.sleep(0.3)
    assert len(lis.received) == n, 'a refused value published a reference'
    assert (
        lis.get('trajectory', 'speed', 'seed', 'duration', 'point_rate', 'approach_time', 'period')
        == before
    )
    assert proc.poll() is None


def approaching_node(ctx, namespace: str, trajectory: str) -> ReferenceNode:
    """An in-process reference node in a namespace of its own (the module's reference process
    may still be publishing): 1.5 s of approach, 2 s of ``trajectory``, waiting up to 30 s for
    the arm's position."""
    return ReferenceNode(
        context=ctx,
        namespace=namespace,
        parameter_overrides=[
            Parameter('urdf_path', value=URDF),
            Parameter('trajectory', value=trajectory),
            Parameter('approach_time', value=1.5),
            Parameter('duration', value=2.0),
            Parameter('wait_for_joint_states', value=30.0),
        ],
    )


@contextmanager
def spun_with_listener(ctx, node: ReferenceNode, namespace: str) -> Iterator[Listener]:
    """``node`` spun by a listener's thread, the listener subscribed to its references in
    ``namespace``; both torn down after."""
    lis = Listener(ctx)
    try:
        lis.ex.add_node(node)
        lis.subscribe(f'/{namespace}/reference_trajectory')
        yield lis
    finally:
        lis.ex.remove_node(node)
        lis.close()
        node.destroy_node()


def send_states_until_a_reference(
    lis: Listener, namespace: str, names: Iterable[str], q: Sequence[float]
) -> JointTrajectory:
    """Joint states (``names`` in any order, at ``q``, at rest) to ``namespace`` until the
    listener hears a reference; that reference."""
    names = list(names)  # every message carries them (an iterator would be spent on the first)
    pub = lis.node.create_publisher(JointState, f'/{namespace}/joint_states', 10)
    deadline = time.monotonic() + 30.0
    while not lis.received:
        assert time.monotonic() < deadline, 'no reference after the joint states came'
        pub.publish(JointState(name=names, position=list(q), velocity=[0.0] * len(q)))
        time.sleep(0.05)
    return lis.received[0][1]


def test_starts_from_the_current_joint_state():
    """In-process: with joint states, the reference approaches from where the arm is, at rest."""
    q_now = [0.2, -0.4]
    with ros_context() as ctx:
        node = approaching_node(ctx, 'from_state', 'figure_eight')
        with spun_with_listener(ctx, node, 'from_state') as lis:
            # any joint order, by name
            msg = send_states_until_a_reference(
                lis, 'from_state', reversed(NAMES), list(reversed(q_now))
            )
            t, q, qd, qdd = arrays(msg)
            assert np.allclose(q[0], q_now) and np.allclose(qd[0], 0.0)
            assert np.allclose(qdd[0], 0.0)
            assert t[-1] == pytest.approx(3.5)
            # the approach meets the figure eight smoothly: no jump between points
            assert np.abs(np.diff(q, axis=0)).max() < 0.05
            assert node.published == 1


def test_a_reference_set_before_any_joint_state_waits_for_the_arm():
    """In-process: the trajectory is set before the node has the arm's position (a demo that
    switches to the excitation while DDS still connects the node to the sim). Nothing goes out
    until a joint state comes; then the reference approaches from it. Made without it, it began
    at its own first point: on a Panda at rest 1-2 rad away, a step the controller's gains
    turned into saturated torques on every joint and an arm thrown into its end stops."""
    q_now = [0.2, -0.4]
    with ros_context() as ctx:
        node = approaching_node(ctx, 'set_early', 'hold')
        with spun_with_listener(ctx, node, 'set_early') as lis:
            (result,) = node.set_parameters([Parameter('trajectory', value='figure_eight')])
            assert result.successful
            time.sleep(1.0)  # the listener's thread spins the node meanwhile
            assert not lis.received and node.published == 0
            msg = send_states_until_a_reference(lis, 'set_early', NAMES, q_now)
            t, q, qd, _ = arrays(msg)
            assert np.allclose(q[0], q_now) and np.allclose(qd[0], 0.0)
            assert t[-1] == pytest.approx(3.5)  # the approach, then the figure eight
            assert node.published == 1  # the figure eight only: the hold never went out


def repeating_excitation_node(ctx, namespace: str) -> ReferenceNode:
    """An in-process reference node in ``namespace``: short excitations (0.5 s approach, 2 s),
    each followed by the next seed, starting without waiting for joint states."""
    return ReferenceNode(
        context=ctx,
        namespace=namespace,
        parameter_overrides=[
            Parameter('urdf_path', value=URDF),
            Parameter('trajectory', value='excitation'),
            Parameter('approach_time', value=0.5),
            Parameter('duration', value=2.0),
            Parameter('wait_for_joint_states', value=0.0),
            Parameter('repeat', value=True),
        ],
    )


def test_a_repeated_excitation_is_handed_over_before_the_last_one_ends():
    """In-process: the next seed's excitation comes while the current one still runs, stamped so
    that both command the same motion until the current one ends (no stop, no velocity step)."""
    with ros_context() as ctx:
        node = repeating_excitation_node(ctx, 'handover')
        with spun_with_listener(ctx, node, 'handover') as lis:
            lis.wait_count(3, timeout=60.0)
            for (arrived0, first), (arrived1, second) in zip(lis.received, lis.received[1:]):
                stamp = [
                    m.header.stamp.sec + 1e-9 * m.header.stamp.nanosec for m in (first, second)
                ]
                a, b = arrays(first), arrays(second)
                end = stamp[0] + a[0][-1]
                # the next begins 1 s (half a trajectory at most) before the last one ends ...
                assert end - stamp[1] == pytest.approx(min(1.0, 0.5 * a[0][-1]), abs=0.011)
                # ... arrives before it ends, and agrees with it over that second
                assert arrived1 - arrived0 < a[0][-1]
                ta, tb = PiecewiseQuintic(*a), PiecewiseQuintic(*b)
                times = np.linspace(stamp[1], end - 1e-6, 20)
                for x, y in zip(ta.sample(times - stamp[0]), tb.sample(times - stamp[1])):
                    assert np.allclose(x, y, atol=1e-9)


def test_a_reference_set_while_the_joint_states_are_stale_is_stamped_by_the_clock():
    """In-process: the arm's last state is stamped 1000 s and then the states stop (a driver
    down). A reference set a second later is stamped by the node's clock (the time a restarted
    driver's states will carry), not at the stale state's time, which the controller would meet
    long past; while the states are fresh their stamp is used."""
    from rclpy.serialization import serialize_message

    msg = JointState(name=NAMES, position=[0.1, -0.3], velocity=[0.0, 0.0])
    msg.header.stamp.sec = 1000
    with ros_context() as ctx:
        node = repeating_excitation_node(ctx, 'stale')
        try:
            node._on_states([(serialize_message(msg), {})])
            assert node._now_ns() == 1000 * 10**9
            time.sleep(STATE_STALE_S + 0.1)
            now = node.get_clock().now().nanoseconds
            assert abs(node._now_ns() - now) < 0.1e9
            node._on_states([(serialize_message(msg), {})])  # the driver is back
            assert node._now_ns() == 1000 * 10**9
        finally:
            node.destroy_node()


def test_a_repeat_too_late_to_splice_starts_from_rest_where_the_arm_is():
    """In-process, the node's timer driven by hand: when the node comes to the next excitation
    only after the last one ended (the arm already holds its last point), the next one starts
    from rest at the arm's position, now, instead of a splice stamped in the past."""
    from rclpy.serialization import serialize_message

    q_now = [0.1, -0.3]
    with ros_context() as ctx:
        node = repeating_excitation_node(ctx, 'late')
        lis = Listener(ctx)  # the node is not spun: only the listener
        try:
            lis.subscribe('/late/reference_trajectory')
            time.sleep(1.0)
            node._tick()
            lis.wait_count(1)
            node._tick()  # makes the next one ahead
            state = JointState(name=NAMES, position=q_now, velocity=[0.0, 0.0])
            node._on_states([(serialize_message(state), {})])
            node._end_ns = node.get_clock().now().nanoseconds - 500_000_000
            node._tick()
            lis.wait_count(2)
            msg = lis.received[1][1]
            t, q, qd, qdd = arrays(msg)
            stamp = msg.header.stamp.sec + 1e-9 * msg.header.stamp.nanosec
            assert stamp >= node.get_clock().now().nanoseconds * 1e-9 - 1.0
            assert np.allclose(q[0], q_now) and np.allclose(qd[0], 0.0)
            assert node.seed == 1 and node.published == 2
        finally:
            lis.close()
            node.destroy_node()


def test_a_repeat_waits_for_stopped_joint_states_and_then_splices_in_their_time():
    """In-process, the node's timer driven by hand: an arm whose time (1000 s) lags the node's
    clock stops sending states (a paused sim) while its excitation is running. However far the
    clock runs past that excitation's end, nothing is sent meanwhile (a restart from rest stamped
    by the clock would be a step in the reference when the arm goes on); when the states come
    back in the arm's time, the next excitation is spliced on in that time."""
    from rclpy.serialization import serialize_message

    def state(t: float) -> bytes:
        msg = JointState(name=NAMES, position=[0.1, -0.3], velocity=[0.0, 0.0])
        msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(int(round(t * 1e9)), 10**9)
        return serialize_message(msg)

    with ros_context() as ctx:
        node = repeating_excitation_node(ctx, 'paused')
        lis = Listener(ctx)  # the node is not spun: only the listener
        try:
            lis.subscribe('/paused/reference_trajectory')
            node._on_states([(state(1000.0), {})])
            node._tick()
            lis.wait_count(1)
            end = node._end_ns * 1e-9
            assert 1000.0 < end < 1010.0  # stamped in the arm's time
            node._tick()  # makes the next one ahead
            time.sleep(STATE_STALE_S + 0.1)  # the states stop; the clock is far past `end`
            for _ in range(3):
                node._tick()
            time.sleep(0.3)
            assert node.published == 1 and len(lis.received) == 1
            node._on_states([(state(end - 0.5), {})])  # back, within the handover
            node._tick()
            lis.wait_count(2)
            assert node.published == 2 and node.seed == 1
            first, second = (m for _, m in lis.received)
            stamps = [m.header.stamp.sec + 1e-9 * m.header.stamp.nanosec for m in (first, second)]
            # spliced: it begins before the running one ends, in the arm's time
            assert stamps[0] < stamps[1] < end
        finally:
            lis.close()
            node.destroy_node()


def test_references_are_stamped_and_handed_over_in_the_time_of_the_joint_states():
    """In-process, the node's timer driven by hand and its executor never spun: an arm whose
    stamps are not the node's clock (a sim's time from 0, running faster than the clock) gets
    its references stamped in its own time as it is when they are sent, where the controller
    evaluates them, and the next excitation when *its* time comes (not by a clock as old as the
    last message the executor served, which a controller would enter past the approach)."""
    import threading

    from rclpy.serialization import serialize_message

    def message(t: float) -> JointState:
        msg = JointState(name=NAMES, position=[0.1, -0.3], velocity=[0.0, 0.0])
        msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(int(round(t * 1e9)), 10**9)
        return msg

    def state(t: float) -> bytes:
        return serialize_message(message(t))

    with ros_context() as ctx:
        node = repeating_excitation_node(ctx, 'state_time')
        lis = Listener(ctx)  # the node is not spun: only the listener
        try:
            lis.subscribe('/state_time/reference_trajectory')
            # an arm whose time runs from 1000 s at twice the clock's pace, 250 states/s
            pub = lis.node.create_publisher(JointState, '/state_time/joint_states', 10)
            sent, stop = [], threading.Event()

            def stream():
                t = 1000.0
                while not stop.is_set():
                    pub.publish(message(t))
                    sent.append(t)
                    t += 0.008
                    time.sleep(0.004)

            streamer = threading.Thread(target=stream)
            streamer.start()
            time.sleep(1.0)
            node._tick()
            newest = sent[-1]
            stop.set()
            streamer.join()
            lis.wait_count(1)
            first = lis.received[0][1]
            # stamped 20 ms (the transport lead) after the arm's newest state, within the
            # taker's period and a few states of this stream
            assert newest - 0.1 <= seconds(first.header.stamp) - 0.02 <= newest
            time.sleep(0.2)  # the taker has taken the last of the stream
            end = seconds(first.header.stamp) + arrays(first)[0][-1]
            node._tick()  # makes the next one ahead
            node._on_states([(state(end - 2.0), {})])  # the arm's time moved, not to the handover
            node._tick()
            time.sleep(0.5)
            assert len(lis.received) == 1
            node._on_states([(state(end - 0.9), {})])  # within the last second: handed over
            node._tick()
            lis.wait_count(2)
            second = lis.received[1][1]
            assert seconds(second.header.stamp) == pytest.approx(end - 1.0, abs=0.011)
            a, b = PiecewiseQuintic(*arrays(first)), PiecewiseQuintic(*arrays(second))
            times = np.linspace(seconds(second.header.stamp), end - 1e-6, 10)
            for x, y in zip(
                a.sample(times - seconds(first.header.stamp)),
                b.sample(times - seconds(second.header.stamp)),
            ):
                assert np.allclose(x, y, atol=1e-9)
        finally:
            lis.close()
            node.destroy_node()
