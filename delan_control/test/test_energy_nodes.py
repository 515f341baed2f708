"""Law ``energy`` on the torque_controller over real DDS (issue 15): the sim node simulates the
Furuta pendulum of ``delan_bringup`` with the pendulum passive (``actuated_joints: [arm]``), the
controller swings it up from hanging and balances it, with the URDF's model and with a DeLaN
the learner node learned from the sim's excitation data.

The nodes run in this process (``test_controller_node.Rig``: one executor, lockstep sim at
``real_time_factor = 0``, so the closed loop is the ideal sampled loop at 250 Hz whatever the
load on the machine).
"""

from __future__ import annotations

import math
import os
import time
from typing import List

import numpy as np
import pytest
from rclpy.parameter import Parameter
from test_controller_node import Rig, rig_factory, stamp_s  # noqa: F401 (the fixture)

from delan_control.nodes.sim import SimNode
from delan_control.nodes.torque_controller import TorqueControllerNode
from delan_control.swing_up import first_hold, in_upright_set
from delan_msgs.msg import ControllerState
from delan_testing.ros import ros_context

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), '..', '..'))
FURUTA = os.path.join(ROOT, 'delan_bringup', 'urdf', 'furuta_pendulum.urdf')
UPRIGHT = [0.0, math.pi]
RATE = 250.0  # joint states and commands [Hz of sim time]
#: hanging, the pendulum 0.05 rad off (at rest exactly below, the law has nothing to pump on)
HANGING = [0.0, 0.05]
#: the swing-up must hold the upright set from at most this long after the start [s] (the
#: analytic model takes ~5 s, bench/bench_swing_up.py)
WITHIN = 8.0
HOLD = 2.0  # [s] in the upright set: within 0.1 rad, slower than 0.5 rad/s

SIM = {
    'urdf_path': FURUTA,
    'actuated_joints': ['arm'],
    'initial_position': HANGING,
    'publish_rate': RATE,
    'lockstep_timeout': 1.0,  # the first state goes out before the controller listens
}
#: the arm's PD (the fall-back, and the excitation's tracking) as excitation_data uses
CTL = {
    'urdf_path': FURUTA,
    'actuated_joints': ['arm'],
    'upright_position': UPRIGHT,
    'law': 'energy',
    'control_rate': RATE,
    'kp': [3.0],
    'kd': [0.2],
}


def _swing_up(rig: Rig, t_start: float, seconds: float):
    """Run until ``seconds`` of sim time after ``t_start``; returns (time to upright from
    ``t_start`` or None, the recorded (t, q, qd, effort) since then)."""
    rig.wait_sim_time(t_start + seconds)
    t, q, qd, effort = rig.recorded(t_start)
    law = rig.ctl._energy
    assert law is not None
    ok = in_upright_set(law, q, qd)
    t_up = first_hold(t, ok, HOLD)
    return (None if t_up is None else t_up - t_start), (t, q, qd, effort)


def _passive_never_commanded(rig: Rig) -> None:
    cmds = np.array([d for _, d in rig.commands])
    assert len(cmds) > 100
    assert np.all(cmds[:, 1] == 0.0), 'the pendulum was commanded'
    assert np.all(np.abs(cmds[:, 0]) <= 0.5 + 1e-12)  # the arm's effort limit


def test_energy_law_swings_up_on_the_urdf_model_and_refuses_models_without_energies(
    rig_factory,  # noqa: F811
):
    """model=pinocchio: from hanging to the upright within WITHIN s, held; the pendulum never
    commanded; mode and energy in the diagnostics, the upright as the reference in
    ~/controller_state. Then the switches law energy cannot take are refused."""
    rig = rig_factory(sim=SIM, ctl=dict(CTL, model='pinocchio'))
    states: List[ControllerState] = []
    rig.probe.create_subscription(
        ControllerState, 'torque_controller/controller_state', states.append, 100
    )
    rig.wait_states(1)
    t0 = stamp_s(rig.states[0].header.stamp)
    t_up, (t, q, _, effort) = _swing_up(rig, t0, WITHIN + HOLD + 0.5)
    print(f'\nURDF model: upright (held {HOLD} s) {t_up} s after the start')
    assert t_up is not None and t_up <= WITHIN, t_up
    assert np.all(effort[:, 1] == 0.0)
    _passive_never_commanded(rig)
    law = rig.ctl._energy
    assert law.mode == 'balance' and law.catches >= 1
    deadline = time.monotonic() + 30.0
    while not rig.diags or rig.diags[-1][3].get('energy_mode') != 'balance':
        assert time.monotonic() < deadline, rig.diags[-1:]
        time.sleep(0.1)
    values = rig.diags[-1][3]
    assert values['law'] == 'energy' and values['passive_joints'] == 'pendulum'
    assert float(values['energy_target_J']) == pytest.approx(law.e_target)
    assert int(values['energy_catches']) >= 1
    assert states and states[-1].law == 'energy' and states[-1].fallback == 'none'
    assert list(states[-1].reference.positions) == pytest.approx(UPRIGHT)
    assert states[-1].command[1] == 0.0

    # ---- the lockstep sim slowed down and back to flat out: a new real_time_factor applies
    # at once (a wait computed with it on the old schedule lasted for hours)
    for rtf in (0.01, 0.0):
        assert rig.sim.set_parameters([Parameter('real_time_factor', value=rtf)])[0].successful
        t_set = rig.sim_time()
        rig.wait_sim_time(t_set + 0.02)

    # ---- what law energy cannot run on is refused; the controller keeps balancing
    def refused(result, *words):
        assert not result.successful
        assert all(w in result.reason for w in words), result.reason

    refused(rig.set_params(model='pd')[0], 'pd', 'energies')
    refused(rig.set_params(model='delan')[0], 'delan')  # no checkpoint
    assert rig.ctl.model_kind == 'pinocchio' and rig.ctl.law == 'energy'
    # away from energy and back: the switch builds the law on a fresh instance of the model
    # (the control thread's own is in use)
    in_use = rig.ctl._model
    assert rig.set_params(law='feedforward_pd')[0].successful
    assert rig.ctl._energy is None and rig.ctl._model is in_use
    assert rig.set_params(law='energy')[0].successful
    assert rig.ctl._energy is not None and rig.ctl._energy.model is rig.ctl._model
    assert rig.ctl._model is not in_use
    assert rig.set_params(law='feedforward_pd')[0].successful
    assert rig.set_params(model='pd')[0].successful
    refused(rig.set_params(law='energy')[0], 'pd', 'energies')
    refused(rig.set_params_atomically(law='energy', model='pd')[0], 'pd', 'energies')
    assert rig.ctl.law == 'feedforward_pd'
    _passive_never_commanded(rig)  # PD on every joint, the pendulum's clamped to 0


#: the learned model's data: the reference node's excitation of the arm, 3x its speed (at 1x
#: the pendulum hardly swings and its own inertia and weight are not identified), this long, at
#: half the control rate (half the cycles to run; the swing-up runs at RATE)
EXCITATION_S = 40.0
LEARN_RATE = 125.0
#: the learner's training: rounds of 100 steps (rate 3e-3, its default) on minibatches of 256
#: (its default 512 takes twice as long for the same swing-up)
ROUNDS = 30
BATCH = 256


def _wait(what: str, predicate, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f'timed out waiting for {what}'
        time.sleep(0.02)


@pytest.mark.solo  # learns live against the clock
@pytest.mark.slow
def test_energy_law_swings_up_on_a_model_the_learner_node_learned(rig_factory, tmp_path):  # noqa: F811
    """The chain in one process over DDS: the sim (pendulum passive), the reference node's
    excitation tracked by the controller's PD on the arm alone, the learner node taking the
    sim's joint states; its training driven here for ROUNDS rounds (the sim paused
    meanwhile, so the run does not depend on the machine's load), its versions published on
    learner/model_update. Then the controller switches to law energy on model delan (the
    learner's latest version, the law built on it off the loop) and the sim is reset to
    hanging: the pendulum must reach the upright set within WITHIN s and stay."""
    from std_srvs.srv import Trigger

    from delan_control.nodes.reference import ReferenceNode
    from delan_learning.nodes.learner import LearnerNode

    rig = rig_factory(
        sim=dict(SIM, publish_rate=LEARN_RATE),
        ctl=dict(CTL, model='pd', law='computed_torque', control_rate=LEARN_RATE),
    )
    added = []

    def node(cls, **values):
        made = cls(
            context=rig.ctx,
            parameter_overrides=[Parameter(k, value=v) for k, v in values.items()],
        )
        added.append(made)
        rig.ex.add_node(made)
        return made

    learner = node(
        LearnerNode,
        urdf_path=FURUTA,
        checkpoint_dir=str(tmp_path / 'ckpt'),
        resume=False,
        training_enabled=False,
        estimate_publish_rate=0.0,
        torch_threads=1,
        seed=0,
        batch_size=BATCH,
    )
    try:
        node(ReferenceNode, urdf_path=FURUTA, trajectory='excitation', speed=3.0)
        rig.wait_states(1)
        t0, wall = stamp_s(rig.states[0].header.stamp), time.monotonic()
        rig.wait_sim_time(t0 + EXCITATION_S)
        print(f'\nexcitation: {EXCITATION_S:g} s of sim time in {time.monotonic() - wall:.1f} s')
        # ---- train with the sim (nearly) paused
        assert rig.sim.set_parameters([Parameter('real_time_factor', value=0.01)])[0].successful
        print(f'{learner.samples_seen} samples, {learner.rejected.total} rejected')
        rng = np.random.default_rng(0)
        wall = time.monotonic()
        for k in range(ROUNDS):
            learner.train_once(rng, now=10.0 * k)
        print(
            f'{ROUNDS} rounds in {time.monotonic() - wall:.1f} s: v{learner.version}, '
            f'validation nMSE {np.round(learner.val_nmse, 4).tolist()}'
        )
        assert learner.version >= 1
        _wait(
            'the version at the controller',
            lambda: (
                rig.ctl._latest_update is not None
                and rig.ctl._latest_update.model_version == learner.version
            ),
        )
        # ---- law energy on the learned model, from hanging
        result = rig.set_params_atomically(law='energy', model='delan')[0]
        assert result.successful, result.reason
        assert rig.ctl._energy is not None and rig.ctl._model_version == learner.version
        reset = rig.probe.create_client(Trigger, 'sim/reset')
        assert reset.wait_for_service(timeout_sec=10.0)
        # counted before the call: the state from hanging can arrive before the reply
        n = len(rig.states)
        done = reset.call_async(Trigger.Request())
        _wait('the reset', done.done)
        assert rig.sim.set_parameters(
            [Parameter('real_time_factor', value=0.0), Parameter('publish_rate', value=RATE)]
        )[0].successful
        _wait(
            'a state from hanging',
            lambda: any(np.allclose(m.position, HANGING) for m in rig.states[n:]),
        )
        t_start = next(
            stamp_s(m.header.stamp) for m in rig.states[n:] if np.allclose(m.position, HANGING)
        )
        wall = time.monotonic()
        t_up, _ = _swing_up(rig, t_start, WITHIN + HOLD + 0.5)
        print(
            f'swing-up: {WITHIN + HOLD + 0.5:g} s of sim time in {time.monotonic() - wall:.1f} s'
        )
        law = rig.ctl._energy
        print(
            f'learned model v{learner.version}: E* {law.e_target:.4f} J (its own V), upright '
            f'(held {HOLD} s) {t_up} s after the reset, {law.catches} catches'
        )
        assert t_up is not None and t_up <= WITHIN, t_up
        _passive_never_commanded(rig)
    finally:
        # the executor stops first: a node closed while it spins may be in the wait set it is
        # building (InvalidHandle in its thread); the rig's own close shuts it down again
        rig.ex.shutdown(timeout_sec=10.0)
        for made in added:
            made.close()
            made.destroy_node()


@pytest.mark.parametrize(
    'overrides, match',
    [
        ({'model': 'pd'}, 'model=pd has none'),
        ({'actuated_joints': []}, 'actuated_joints'),
        ({'actuated_joints': ['arm', 'pendulum']}, 'actuated_joints'),
        ({'actuated_joints': ['wrist']}, "unknown joints \\['wrist'\\]"),
        ({'upright_position': [math.nan]}, 'upright_position'),
        ({'energy_release_angle': 0.2}, 'hysteresis'),
    ],
)
def test_energy_law_refused_at_start_up(overrides, match):
    values = {**CTL, 'model': 'pinocchio', 'command_joints': ['arm', 'pendulum'], **overrides}
    with ros_context() as ctx:
        with pytest.raises(ValueError, match=match):
            TorqueControllerNode(
                context=ctx, parameter_overrides=[Parameter(k, value=v) for k, v in values.items()]
            )


def test_sim_refuses_unknown_actuated_joints():
    with ros_context() as ctx:
        with pytest.raises(ValueError, match="actuated_joints: \\['wrist'\\] are not joints"):
            SimNode(
                context=ctx,
                parameter_overrides=[
                    Parameter('urdf_path', value=FURUTA),
                    Parameter('actuated_joints', value=['arm', 'wrist']),
                ],
            )
