"""CommandOrder and ReceiverOrderQuery without ROS: the permutation between the model's joint
order and a receiving controller's, the refusal of other joints, and the one-time decision
between the receiver's answer, the model order after the timeout, and a refusal."""

import numpy as np
import pytest

from delan_control.command_order import (
    REQUEST_RETRY_S,
    CommandOrder,
    CommandOrderError,
    ReceiverOrderQuery,
    order_mismatch,
)

MODEL = ['a', 'b', 'c', 'd']


def test_the_permutation_carries_each_torque_to_its_joint():
    order = CommandOrder(MODEL, ['c', 'a', 'd', 'b'])
    tau = np.array([1.0, 2.0, 3.0, 4.0])  # a=1 b=2 c=3 d=4
    cmd = order.to_command(tau)
    assert cmd.tolist() == [3.0, 1.0, 4.0, 2.0]
    assert {j: v for j, v in zip(order.joints, cmd)} == dict(zip(MODEL, tau))
    assert order.to_model(cmd).tolist() == tau.tolist()
    assert not order.is_model_order and order.index.tolist() == [2, 0, 3, 1]


def test_the_model_order_costs_nothing():
    order = CommandOrder(MODEL, MODEL)
    tau = np.arange(4.0)
    assert order.is_model_order and order.index is None
    assert order.to_command(tau) is tau and order.to_model(tau) is tau


@pytest.mark.parametrize(
    'command, words',
    [
        (['a', 'b', 'c'], ["missing ['d']"]),
        (['a', 'b', 'c', 'd', 'gripper'], ["extra ['gripper']"]),
        (['a', 'b', 'c', 'c'], ["repeated ['c']", "missing ['d']"]),
        (['a', 'b', 'c', 'x'], ["missing ['d']", "extra ['x']"]),
        ([], ['missing']),
    ],
    ids=['missing', 'extra', 'repeated', 'renamed', 'empty'],
)
def test_other_joints_are_refused_with_the_reason(command, words):
    reason = order_mismatch(MODEL, command)
    assert reason is not None and all(w in reason for w in words), reason
    with pytest.raises(CommandOrderError) as err:
        CommandOrder(MODEL, command)
    assert str(err.value) == reason
    assert order_mismatch(MODEL, list(reversed(MODEL))) is None


def _query(**kw):
    return ReceiverOrderQuery(MODEL, '/arm/effort_controller', timeout_s=5.0, start=100.0, **kw)


def test_the_receivers_answer_decides_once():
    q = _query()
    d = q.answer(['d', 'c', 'b', 'a'])
    assert d.level == 'info' and d.source == '/arm/effort_controller'
    assert d.order.joints == ('d', 'c', 'b', 'a') and '/arm/effort_controller' in d.message
    assert q.decision is d
    # nothing changes it afterwards: a late answer, the deadline
    assert q.answer(MODEL) is None and q.expire(1000.0) is None and q.decision is d
    assert not q.request_due(101.0, True)


def test_receiver_joints_that_differ_are_refused():
    d = _query().answer(['a', 'b', 'c', 'e'])
    assert d.order is None and d.level == 'error' and d.source.startswith('refused')
    assert d.message.startswith('refusing to command') and "missing ['d']" in d.message
    assert "extra ['e']" in d.message


def test_no_answer_in_time_falls_back_to_the_model_order_with_a_warning():
    q = _query()
    assert q.expire(104.9) is None and q.decision is None
    d = q.expire(105.0)
    assert d.order.is_model_order and d.level == 'warning'
    assert d.source == 'model order (fallback)'
    assert 'never appeared' in d.message and 'command_joints' in d.message
    q = _query()
    q.sent(101.0)
    assert 'did not answer' in q.expire(106.0).message


def test_an_answer_without_joint_names_falls_back():
    d = _query().answer(None, ' (its joints is 3)')
    assert d.order.is_model_order and d.level == 'warning' and 'its joints is 3' in d.message
    d = _query().answer([])  # no default selection to stand for []
    assert d.order.is_model_order and d.level == 'warning'


def test_an_empty_answer_is_the_main_chain_of_the_suites_nodes():
    d = _query(default_joints=MODEL).answer([])
    assert d.level == 'info' and d.order.is_model_order and 'main chain' in d.message
    # a controller on a selection other than the main chain is refused, not commanding blind
    d = ReceiverOrderQuery(['a', 'b'], '/sim', 5.0, 0.0, default_joints=MODEL).answer([])
    assert d.order is None and "extra ['c', 'd']" in d.message


def test_requests_wait_for_the_services_and_are_repeated_when_unanswered():
    q = _query()
    assert not q.request_due(100.0, False)
    assert q.request_due(100.0, True)
    q.sent(100.0)
    assert not q.request_due(100.0 + REQUEST_RETRY_S / 2, True)
    assert q.request_due(100.0 + REQUEST_RETRY_S, True)
