"""The demo's parameter sets over real DDS (``delan_control.demo.set_parameters``): a reply that
does not come in time is not waited for further; the values are read back and the request is
sent again only when they are not set, so a value is applied once, a refusal still comes back
with its reason, and a node that never answers is a clear error."""

from __future__ import annotations

import time

import pytest
from rcl_interfaces.msg import SetParametersResult
from rclpy.node import Node
from rclpy.parameter_client import AsyncParameterClient

from delan_common.ros.spin import BackgroundSpin, make_executor
from delan_control.demo import DemoError, set_parameters
from delan_testing.ros import ros_context


class Target(Node):
    """A node with parameter ``x`` that refuses negative values and counts what it applied."""

    def __init__(self, context):
        super().__init__('target', context=context)
        self.declare_parameter('x', 1.0)
        self.applied = []
        self.add_on_set_parameters_callback(self._on_set)

    def _on_set(self, params):
        for p in params:
            if p.value < 0:
                return SetParametersResult(successful=False, reason='x must be >= 0')
        self.applied += [p.value for p in params]
        return SetParametersResult(successful=True)


@pytest.fixture
def rig():
    with ros_context() as ctx:
        target, caller = Target(ctx), Node('caller', context=ctx)
        # as the demo spins: its default executor in a background thread, the calls waited
        # for on the main thread
        ex = make_executor(context=ctx)
        ex.add_node(target)
        ex.add_node(caller)
        spinner = BackgroundSpin(ex)
        client = AsyncParameterClient(caller, 'target')
        assert client.wait_for_services(timeout_sec=10.0)
        try:
            yield target, client
        finally:
            spinner.stop()
            target.destroy_node()
            caller.destroy_node()


def test_a_reply_in_time_is_used(rig):
    target, client = rig
    assert set_parameters(client, {'x': 2.0}, timeout=10.0) == [(True, '')]
    assert target.applied == [2.0] and target.get_parameter('x').value == 2.0


def test_without_a_reply_the_values_are_read_back_and_set_once(rig):
    """``reply_wait=0``: no reply is ever in time, as when DDS loses it."""
    target, client = rig
    assert set_parameters(client, {'x': 3.0}, timeout=10.0, reply_wait=0.0) == [(True, '')]
    assert target.get_parameter('x').value == 3.0
    # applied by the first request, or by the second when the read came first; never else
    assert target.applied in ([3.0], [3.0, 3.0])
    # a value already set: read back at once, not sent again
    before = len(target.applied)
    assert set_parameters(client, {'x': 3.0}, timeout=10.0, reply_wait=0.0) == [(True, '')]
    assert len(target.applied) - before <= 1


def test_a_refusal_without_a_reply_is_asked_again_and_comes_back(rig):
    target, client = rig
    results = set_parameters(client, {'x': -1.0}, timeout=10.0, reply_wait=0.0)
    assert results == [(False, 'x must be >= 0')]
    assert target.get_parameter('x').value == 1.0 and target.applied == []


def test_a_node_that_never_answers_is_a_clear_error():
    with ros_context() as ctx:
        caller = Node('caller', context=ctx)
        try:
            client = AsyncParameterClient(caller, 'nobody')
            with pytest.raises(DemoError, match=r"setting \{'x': 1.0\}.*timed out"):
                set_parameters(client, {'x': 1.0}, timeout=0.3, reply_wait=0.1)
        finally:
            caller.destroy_node()


def test_the_background_spin_stops_within_a_slice(rig):
    """The demo ends its spinning thread on the way out; a spin that outlived it would keep
    the process (and its nodes' callbacks) alive."""
    target, client = rig
    spinner = BackgroundSpin(make_executor(context=target.context), slice_s=0.05)
    t0 = time.monotonic()
    spinner.stop(timeout=5.0)
    assert not spinner.running and time.monotonic() - t0 < 1.0
