"""The whole chain on the Furuta pendulum, online: sim -> excitation -> online learner -> energy
swing-up on the learned model, every node a real process over DDS.

The nodes (installed console scripts, own parameters, no parameter file): the ``sim`` with the
pendulum passive (``actuated_joints: [arm]``), lockstep at real time, hanging 0.05 rad off at
the start; the ``reference`` node's excitation at ``speed`` 3 (at 1x the pendulum hardly
swings, and its own inertia and weight stay unidentified); the ``torque_controller`` on model
pd (the arm's PD: its law does not matter without a model; the pendulum is never commanded);
the ``learner`` at its defaults, training while the data come.

After ``--excite`` seconds of sim time, three runs:

1. *learning on*: the controller switched to law energy on model delan, following the
   learner's versions (the law built on each off the control loop), from wherever the
   excitation left the pendulum, the learner still learning, for ``--online-swing`` s;
2. the learner paused (the reset below would put a jump into its data), the sim reset to
   hanging, ``--swing`` s on its last version;
3. the same on model pinocchio (the URDF), for comparison.

Printed: the learner's progress, and per run the time to the upright set (within 0.1 rad,
slower than 0.5 rad/s, held 2 s), the largest arm excursion, the law's catches / releases and
the versions it adopted. ``--plot`` saves the pendulum's energy over time (true, and for run 2
as the learned model sees it, each relative to its own E*), the pendulum's angle to the upright
and the arm's angle. ``--payload 0.03`` puts 30 g on the pendulum's tip in the sim (not in the
URDF: the analytic model is then wrong).

    python bench/bench_swing_up_online.py [--excite 90] [--swing 15] [--online-swing 30]
                                          [--payload 0.0] [--plot swing_up_online.png]
                                          [--out DIR]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
from typing import Dict, List, Optional

import numpy as np
from node_set import NodeSet, load_text, log, private_domain, provenance

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
URDF = os.path.join(ROOT, 'delan_bringup', 'urdf', 'furuta_pendulum.urdf')
HANGING = [0.0, 0.05]
UPRIGHT = [0.0, float(np.pi)]
HOLD = 2.0  # [s] in the upright set


def _list(values) -> str:
    return '[' + ','.join(str(v) for v in values) + ']'


class Probe:
    """This process's node: records joint states (stamp, q, qd, effort), the learner's status
    and versions and the controller's diagnostics; sets parameters; resets the sim."""

    def __init__(self, ctx):
        import rclpy
        from diagnostic_msgs.msg import DiagnosticArray
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.parameter_client import AsyncParameterClient
        from rclpy.qos import QoSProfile, ReliabilityPolicy
        from sensor_msgs.msg import JointState
        from std_srvs.srv import Trigger

        from delan_common.ros.qos import LATCHED
        from delan_msgs.msg import ModelStatus, ModelUpdate
        from delan_testing.ros import spin_in_thread

        self.node = rclpy.create_node('swing_up_probe', context=ctx)
        self._lock = threading.Lock()
        self.states: List[tuple] = []
        self.status: Optional[ModelStatus] = None
        self.updates: List[ModelUpdate] = []
        self.diags: Dict[str, str] = {}
        qos = QoSProfile(depth=10000, reliability=ReliabilityPolicy.RELIABLE)
        self.node.create_subscription(JointState, 'joint_states', self._on_state, qos)
        self.node.create_subscription(ModelStatus, 'learner/status', self._on_status, 10)
        self.node.create_subscription(
            ModelUpdate, 'learner/model_update', self._on_update, LATCHED
        )
        self.node.create_subscription(DiagnosticArray, '/diagnostics', self._on_diag, 100)
        self.params = {
            name: AsyncParameterClient(self.node, name)
            for name in ('torque_controller', 'learner')
        }
        self.reset_client = self.node.create_client(Trigger, 'sim/reset')
        self._trigger = Trigger
        self.ex = SingleThreadedExecutor(context=ctx)
        self.ex.add_node(self.node)
        spin_in_thread(self.ex)

    def _on_state(self, msg) -> None:
        t = msg.header.stamp.sec + 1e-9 * msg.header.stamp.nanosec
        with self._lock:
            self.states.append((t, tuple(msg.position), tuple(msg.velocity), tuple(msg.effort)))

    def _on_status(self, msg) -> None:
        self.status = msg

    def _on_update(self, msg) -> None:
        self.updates.append(msg)

    def _on_diag(self, msg) -> None:
        for st in msg.status:
            if st.name.endswith('torque_controller'):
                self.diags = {kv.key: kv.value for kv in st.values}

    def sim_time(self) -> float:
        with self._lock:
            return self.states[-1][0] if self.states else -np.inf

    def recorded(self, t_from: float):
        """(t, q, qd, effort) of the states stamped from ``t_from`` on."""
        with self._lock:
            rows = [r for r in self.states if r[0] >= t_from]
        return tuple(np.array([r[k] for r in rows]) for k in range(4))

    def _wait(self, future, what: str, timeout: float = 60.0):
        deadline = time.monotonic() + timeout
        while not future.done():
            if time.monotonic() > deadline:
                raise RuntimeError(f'timed out: {what}')
            time.sleep(0.01)
        return future.result()

    def set(self, node: str, atomically: bool = False, **values) -> None:
        from rclpy.parameter import Parameter

        client = self.params[node]
        if not client.wait_for_services(timeout_sec=30.0):
            raise RuntimeError(f'no parameter services of {node}')
        params = [Parameter(k, value=v) for k, v in values.items()]
        if atomically:
            results = [self._wait(client.set_parameters_atomically(params), str(values)).result]
        else:
            results = self._wait(client.set_parameters(params), str(values)).results
        for r in results:
            if not r.successful:
                raise RuntimeError(f'{node}: {values} refused: {r.reason}')

    def reset_sim(self) -> float:
        """Reset the sim; returns the stamp of its first state from hanging."""
        if not self.reset_client.wait_for_service(timeout_sec=30.0):
            raise RuntimeError('no sim/reset service')
        n = len(self.states)
        self._wait(self.reset_client.call_async(self._trigger.Request()), 'sim reset')
        deadline = time.monotonic() + 30.0
        while True:
            with self._lock:
                hit = [r[0] for r in self.states[n:] if np.allclose(r[1], HANGING)]
            if hit:
                return hit[0]
            if time.monotonic() > deadline:
                raise RuntimeError('no state from hanging after the reset')
            time.sleep(0.01)

    def close(self) -> None:
        self.ex.shutdown(timeout_sec=5.0)
        self.node.destroy_node()


def wait_sim(nodes: NodeSet, probe: Probe, t: float, what: str) -> None:
    nodes.wait(
        what, lambda: probe.sim_time() >= t, timeout=max(120.0, 10.0 * (t - probe.sim_time()))
    )


def swing_run(
    nodes: NodeSet, probe: Probe, seconds: float, geometry, truth, model=None, reset=True
) -> Dict:
    """Record ``seconds`` from a reset to hanging (or, without ``reset``, from now on): the
    run's numbers and time series; ``model``: the learned model whose energy is plotted too."""
    from delan_control.swing_up import first_hold, in_upright_set

    t0 = probe.reset_sim() if reset else probe.sim_time()
    n_updates = len(probe.updates)
    # the law's switch counts in the run (a model switch builds a new law, which catches the
    # pendulum the old one balanced, and releases it at the reset): the diagnostics (1 Hz) of
    # the first second against those after the run
    wait_sim(nodes, probe, t0 + 1.0, 'the swing-up run')
    time.sleep(1.2)
    first = dict(probe.diags)
    wait_sim(nodes, probe, t0 + seconds, 'the swing-up run')
    time.sleep(1.2)
    last = dict(probe.diags)
    t, q, qd, _ = probe.recorded(t0)
    t = t - t0
    passive = qd * (~geometry.actuated)
    T, V = truth.energy(q, passive)
    e_true = np.asarray(T) + np.asarray(V) - float(truth.energy(geometry.upright, 0 * q[0])[1])
    out = {
        't': t,
        'q': q,
        'e_true': e_true,
        't_up': first_hold(t, in_upright_set(geometry, q, qd), HOLD),
        'max_arm': float(np.max(np.abs(q[:, 0]))),
        'switches': f'{int(last["energy_catches"]) - int(first["energy_catches"])} / '
        f'{int(last["energy_releases"]) - int(first["energy_releases"])}',
        'versions': len(probe.updates) - n_updates,
    }
    if model is not None:
        Tm, Vm = model.energy(q, passive)
        e_star = float(np.asarray(model.energy(geometry.upright, 0 * q[0])[1]))
        out['e_model'] = np.asarray(Tm) + np.asarray(Vm) - e_star
    return out


def plot(runs: Dict[str, Dict], path: str) -> None:
    import matplotlib

    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    fig, (ax_e, ax_p, ax_a) = plt.subplots(3, 1, figsize=(8, 7.5), sharex=True)
    for name, run in runs.items():
        (line,) = ax_e.plot(run['t'], run['e_true'], label=f'{name}: true E_p - E*')
        if 'e_model' in run:
            ax_e.plot(
                run['t'],
                run['e_model'],
                color=line.get_color(),
                ls=':',
                label=f"{name}: the model's E_p - E*",
            )
        err = np.abs((run['q'][:, 1] - np.pi + np.pi) % (2 * np.pi) - np.pi)
        ax_p.plot(run['t'], err, color=line.get_color(), label=name)
        ax_a.plot(run['t'], run['q'][:, 0], color=line.get_color(), label=name)
        if run['t_up'] is not None:
            for ax in (ax_e, ax_p, ax_a):
                ax.axvline(run['t_up'], color=line.get_color(), lw=0.8)
    ax_e.axhline(0.0, color='k', lw=0.5)
    ax_e.set_ylabel('pendulum energy\nE_p - E* [J]')
    ax_e.legend(fontsize=7)
    ax_p.set_ylabel('|pendulum - upright|\n[rad]')
    ax_p.axhline(0.1, color='k', lw=0.5, ls='--')
    ax_a.set_ylabel('arm [rad]')
    ax_a.set_xlabel(
        'time since the run began [s]: the switch to law energy (learning on), the reset to '
        'hanging (the others)\nvertical lines: in the upright set from there on'
    )
    ax_a.set_xlim(0.0, min(10.0, max(run['t'][-1] for run in runs.values())))
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--excite', type=float, default=90.0, help='excitation [s of sim time]')
    p.add_argument('--swing', type=float, default=15.0, help='each run from hanging [s]')
    p.add_argument(
        '--online-swing', type=float, default=30.0, help='the run with the learner on [s]'
    )
    p.add_argument('--speed', type=float, default=3.0, help="the reference node's speed")
    p.add_argument('--payload', type=float, default=0.0, help='kg on the pendulum tip (sim)')
    p.add_argument('--plot', default=None, help='figure of the energy over time (PNG)')
    p.add_argument('--out', default=None, help='folder for logs and checkpoints')
    args = p.parse_args(argv)
    private_domain()
    import rclpy
    from rclpy.context import Context

    from delan_common.robot_model import Mismatch, RobotModel
    from delan_common.urdf_joints import RobotDescription
    from delan_control.energy_control import EnergySwingUp
    from delan_control.model_loader import load_dynamics_model

    out = args.out or tempfile.mkdtemp(prefix='swing_up_online_')
    os.makedirs(out, exist_ok=True)
    log(f'{provenance()}; {load_text()}; logs in {out}')
    robot = RobotModel(URDF)
    truth = robot.mismatched(Mismatch(payload_mass=args.payload))
    geometry = EnergySwingUp(robot, ['arm'], UPRIGHT, 0.5)  # the upright set's geometry
    nodes = NodeSet(out, URDF, params_file=None)
    ctx = Context()
    rclpy.init(context=ctx)
    probe = Probe(ctx)
    runs: Dict[str, Dict] = {}
    try:
        nodes.start(
            'delan_control',
            'sim',
            {
                'actuated_joints': '[arm]',
                'initial_position': _list(HANGING),
                'publish_rate': 250.0,
                'lockstep': 'true',
                'lockstep_timeout': 0.25,
                'real_time_factor': 1.0,
                'payload_mass': args.payload,
            },
        )
        nodes.start(
            'delan_control',
            'torque_controller',
            {
                'model': 'pd',
                'actuated_joints': '[arm]',
                'upright_position': _list(UPRIGHT),
                'control_rate': 250.0,
                'kp': '[3.0]',
                'kd': '[0.2]',
                'effort_controller_name': 'sim',
            },
        )
        nodes.start(
            'delan_control',
            'reference',
            {'trajectory': 'excitation', 'speed': args.speed, 'duration': 20.0},
        )
        nodes.start(
            'delan_learning',
            'learner',
            {'checkpoint_dir': os.path.join(out, 'ckpt'), 'resume': 'false', 'seed': 0},
        )
        nodes.wait('joint states', lambda: probe.sim_time() > -np.inf, 120.0)
        t_start, wall = probe.sim_time(), time.monotonic()
        while probe.sim_time() < t_start + args.excite:
            nodes.check_alive()
            time.sleep(5.0)
            st = probe.status
            if st is not None:
                log(
                    f'excitation {probe.sim_time() - t_start:5.1f} s: learner '
                    f'v{st.model_version}, '
                    f'{st.training_steps} steps, {st.samples_in_buffer} samples, validation '
                    f'nMSE {np.round(st.validation_nmse, 4).tolist()}'
                )
        excite_wall = time.monotonic() - wall
        nodes.wait('a version', lambda: bool(probe.updates), 120.0)
        # law energy on the learner's versions as they come, the learner still learning
        at_switch = probe.status
        log(f'law energy on the learner v{probe.updates[-1].model_version} and its next ones')
        probe.set('torque_controller', atomically=True, law='energy', model='delan')
        runs['learned, learning on'] = swing_run(
            nodes, probe, args.online_swing, geometry, truth, reset=False
        )
        # the learner paused (the reset would put a jump into its data), its last version
        probe.set('learner', training_enabled=False)
        nodes.wait(
            'the learner paused',
            lambda: probe.status is not None and probe.status.message == 'training paused',
            60.0,
        )
        st = probe.status
        update = probe.updates[-1]
        nodes.wait(
            'the last version at the controller',
            lambda: probe.diags.get('model_version') == str(update.model_version),
            30.0,
        )
        learned = load_dynamics_model(
            'delan', RobotDescription.load(URDF), checkpoint=update.checkpoint_path
        )
        log(f'learner paused at v{update.model_version}; from hanging on it')
        runs[f'learned v{update.model_version}, from hanging'] = swing_run(
            nodes, probe, args.swing, geometry, truth, learned
        )
        probe.set('torque_controller', model='pinocchio')
        runs['analytic (URDF), from hanging'] = swing_run(
            nodes, probe, args.swing, geometry, truth
        )
    finally:
        nodes.stop_all()
        probe.close()
        rclpy.try_shutdown(context=ctx)

    def learner(status) -> str:
        return (
            f'v{status.model_version}, {status.training_steps} steps on '
            f'{status.samples_in_buffer} samples, validation nMSE '
            f'{np.round(status.validation_nmse, 4).tolist()}'
        )

    e_star = float(np.asarray(learned.energy(np.array(UPRIGHT), np.zeros(2))[1]))
    print(
        '\nonline chain, Furuta pendulum'
        + (f' + {args.payload} kg on the tip (not in the URDF)' if args.payload else '')
        + f': excitation {args.excite:g} s of sim time at {args.speed:g}x '
        f'({excite_wall:.0f} s wall). Learner at the switch to law energy: '
        f'{learner(at_switch)}; paused at {learner(st)}; its E* {e_star:.4f} J (its own V)\n'
    )
    print(
        '| run | time to upright [s] | max arm excursion [rad] | catches / releases | '
        'versions adopted |'
    )
    print('|---|---|---|---|---|')
    for name, run in runs.items():
        t_up = 'never' if run['t_up'] is None else f'{run["t_up"]:.2f}'
        print(
            f'| {name} | {t_up} | {run["max_arm"]:.2f} | {run["switches"]} | {run["versions"]} |'
        )
    if args.plot:
        plot(runs, args.plot)
        print(f'figure: {args.plot}')
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
