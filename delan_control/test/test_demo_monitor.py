"""The demo's monitor node over real DDS, spun as the demo spins it (``spin.BackgroundSpin`` on
the default executor): a reference trajectory of another arm on the same topic (a second demo
in the same ROS domain) or a malformed one is a counted rejection, the monitor goes on taking
its own; a callback that raises does not end the spinning the demo's waits depend on; and a
sim reset whose reply is lost is asked for again."""

from __future__ import annotations

import time
import uuid

import pytest
from builtin_interfaces.msg import Duration
from rclpy.node import Node
from std_msgs.msg import Empty
from std_srvs.srv import Trigger
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from delan_common.ros.qos import LATCHED
from delan_common.ros.spin import BackgroundSpin, make_executor
from delan_control.demo import Monitor
from delan_testing.ros import ros_context

JOINTS = ['a', 'b']


def _trajectory(names, n_points: int = 3) -> JointTrajectory:
    msg = JointTrajectory(joint_names=list(names))
    for k in range(n_points):
        zeros = [0.1 * k] * len(names)
        msg.points.append(
            JointTrajectoryPoint(
                positions=zeros,
                velocities=[0.0] * len(names),
                accelerations=[0.0] * len(names),
                time_from_start=Duration(sec=k),
            )
        )
    return msg


def _wait(predicate, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.01)
    return predicate()


@pytest.fixture
def rig():
    with ros_context() as ctx:
        ns = '/demo_monitor_' + uuid.uuid4().hex[:8]
        mon = Monitor(JOINTS, context=ctx, namespace=ns)
        peer = Node('peer', context=ctx, namespace=ns)
        ex = make_executor(context=ctx)
        ex.add_node(mon)
        ex.add_node(peer)
        spinner = BackgroundSpin(ex)
        try:
            yield mon, peer, spinner
        finally:
            spinner.stop()
            mon.close()
            mon.destroy_node()
            peer.destroy_node()


def test_another_arms_or_a_malformed_reference_is_rejected_and_its_own_taken(rig):
    mon, peer, spinner = rig
    pub = peer.create_publisher(JointTrajectory, 'reference_trajectory', LATCHED)
    assert _wait(lambda: pub.get_subscription_count() > 0)
    pub.publish(_trajectory(['shoulder_pan', 'elbow']))  # another arm
    assert _wait(lambda: mon.rejected_references.total == 1)
    short = _trajectory(['b', 'a'])
    short.points[1].velocities = []  # malformed: a point without velocities
    pub.publish(short)
    assert _wait(lambda: mon.rejected_references.total == 2)
    assert mon.reference_count() == 0 and spinner.running and spinner.errors == 0
    pub.publish(_trajectory(['b', 'x', 'a']))  # its joints among others, in another order
    assert _wait(lambda: mon.reference_count() == 1)
    assert mon.rejected_references.total == 2


def test_a_callback_that_raises_leaves_the_spinning_going(rig):
    mon, peer, spinner = rig
    calls = []

    def boom(_msg) -> None:
        calls.append(1)
        raise RuntimeError('a bug in one callback')

    peer.create_subscription(Empty, 'poke', boom, 10)
    pub = mon.create_publisher(Empty, 'poke', 10)
    assert _wait(lambda: pub.get_subscription_count() > 0)
    pub.publish(Empty())
    assert _wait(lambda: spinner.errors == 1)
    assert spinner.running
    pub.publish(Empty())  # still served: the thread went on
    assert _wait(lambda: len(calls) == 2 and spinner.errors == 2)


def test_a_sim_reset_whose_reply_is_lost_is_asked_again(rig):
    mon, peer, spinner = rig
    sim = Node('sim', context=peer.context, namespace=peer.get_namespace())
    spinner.executor.add_node(sim)
    calls = []

    def on_reset(_request, response):
        calls.append(time.monotonic())
        if len(calls) == 1:
            raise RuntimeError('the first reply never goes out')  # as DDS losing it
        response.success = True
        return response

    sim.create_service(Trigger, '~/reset', on_reset)
    try:
        mon.reset_sim(timeout=10.0, reply_wait=0.5)
        assert len(calls) == 2 and spinner.errors == 1
        assert calls[1] - calls[0] >= 0.4  # asked again only after the reply wait
    finally:
        spinner.executor.remove_node(sim)
        sim.destroy_node()
