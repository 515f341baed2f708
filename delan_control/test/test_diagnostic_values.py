"""The torque controller's diagnostics from its ROS-free parts: the command order's status,
the loop's timing, law energy's state."""

import numpy as np

from delan_common.robot_model import RobotModel, find_urdf
from delan_control.command_order import ReceiverOrderQuery
from delan_control.control_laws import EnergyLaw
from delan_control.loop_stats import LoopStats
from delan_control.swing_up import FURUTA, FURUTA_ACTUATED, FURUTA_UPRIGHT


def test_the_order_status_waits_then_reports_the_decision():
    query = ReceiverOrderQuery(['a', 'b'], '/sim', 1.0, 0.0)
    assert query.status() == ('warning', 'waiting for the joint order of /sim')
    query.answer(['b', 'a'])
    assert query.status() == ('info', 'ok')
    refused = ReceiverOrderQuery(['a', 'b'], '/sim', 1.0, 0.0)
    refused.answer(['a', 'c'])
    level, message = refused.status()
    assert level == 'error' and message.startswith('refusing to command: /sim')
    late = ReceiverOrderQuery(['a', 'b'], '/sim', 1.0, 0.0)
    late.expire(2.0)
    assert late.status()[0] == 'warning' and 'model joint order' in late.status()[1]


def test_loop_diagnostics_are_a_windows_timing():
    stats = LoopStats()
    stats.received([1_000_000, 2_000_000])
    stats.command(2_000_000, 2_150_000)  # 150 us
    values = dict(stats.diagnostics(loop_errors=3))
    assert values['loop_latency_max_us'] == '150' and values['loop_latency_max_all_us'] == '150'
    assert values['joint_states_received'] == 2 and values['missed_cycles'] == 1
    assert values['loop_errors'] == 3
    again = dict(stats.diagnostics(loop_errors=3))  # a new window: nothing in it
    assert again['loop_latency_max_us'] == '0' and again['loop_latency_max_all_us'] == '150'


def test_energy_diagnostics_follow_the_law():
    law = EnergyLaw(np.array(FURUTA_ACTUATED), FURUTA_UPRIGHT, [0.5, 0.0]).build(
        RobotModel(find_urdf(FURUTA)), 'pinocchio'
    )
    values = dict(law.diagnostics())
    assert values['energy_mode'] == 'swing' and values['energy_passive_J'] == 'nan'
    assert values['energy_target_J'] == f'{law.e_target:.5f}'
    law.command(np.array([0.0, 0.3]), np.array([0.0, 2.0]))
    assert dict(law.diagnostics())['energy_passive_J'] == f'{law.last_energy:.5f}'
