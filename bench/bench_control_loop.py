#!/usr/bin/env python3
"""Control-loop latency at 1 kHz over DDS, with the online learner training in parallel.

Set-up (``node_set.py``): real processes from the installed console scripts with the parameter
file of the launch files and the demo -- ``sim`` (the mismatched arm of
delan_bringup/config/sim_params.yaml: 0.6 kg payload, friction x2, sensor noise; joint states at
``--rate`` Hz, *not* lockstep, real time), ``torque_controller`` (PD gains from the URDF
inertia, as in ``make demo``), ``reference`` (excitation, repeating) and ``learner`` (training
continually on the same joint states, publishing a model version every 5 s) -- plus a probe
node in this process (``loop_probe.py``). ``--urdf`` selects the robot for all of them (and for
the identification below): ``delan_bringup/urdf/seven_dof_arm.urdf`` is the 7-DoF arm.

For each model (pd, pinocchio, identified, delan; switched at runtime with a parameter set, as
``ros2 param set`` does) the controller's own timing is read for ``--duration`` seconds from
its diagnostics (``delan_control.loop_stats``: the loop takes each joint state with its DDS
*source* timestamp, stamped by the sim when it published):

* latency = command published - state published: transport sim -> controller, waiting to be
  scheduled, the cycle and the publish, for the state each command answers.
* missed cycle = a state published before the command answering the previous one went out
  (the controller had not kept up with the 1 kHz driver).

``--probe`` adds the external measurement of ``loop_probe.py`` (a node in this process records
the source stamps of every state and command and matches them; it costs about half a core,
which on two cores perturbs what it measures). ``--realtime-priority N`` runs the controller and
the sim (standing for the robot's driver) under SCHED_FIFO (their ``realtime_priority``
parameter), as on a real arm.

``identified`` uses parameters identified (``sysid``) from simulated excitation data of the
same mismatched arm, made at start-up; ``delan`` takes the learner's latest model version and
every new one it publishes during the run (``delan_checkpoint`` empty) -- the product set-up.
RSS of every process is read from /proc at the start of the first and the end of the last run.

``--controller rt`` adds the compiled controller (``delan_control_rt``'s
``torque_controller_rt``) to the same run, in the same table: after the Python node's windows,
the Python node is stopped and the compiled one started in its place -- same sim, reference,
learner and probe -- once per model, each a fresh start. Its gains and limits are the Python
node's (``rt_params``: the parameter file's control rate and the demo's PD gains);
``pinocchio`` and ``identified`` are the rigid-body models the Python node holds, exported
(``rt_params.model_files``: the URDF's, the identified parameters above; every model gets the
URDF's, which the URDF-feedback laws feed back through); ``delan`` is the learner's latest
version at that moment, exported from its checkpoint (``c_export``). It tracks the same
excitation reference as the Python node.

``--law`` sets both nodes' control law (default: the parameter file's, ``computed_torque``),
e.g. ``feedforward_urdf_pd``, the demo's.

Usage: ``python bench/bench_control_loop.py [--duration 60] [--models pd,delan] [--rate 1000]
[--urdf seven_dof_arm.urdf] [--controller rt] [--law feedforward_urdf_pd]`` (``--duration 20``
for a quick run). Prints a table; exit code 1 only if a node dies.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from typing import Dict, List, Optional

from loop_probe import TARGET, Probe, analyse, target_met
from node_set import (
    ROOT,
    TWO_LINK,
    NodeSet,
    cpu_s,
    finish,
    identified_params,
    load_text,
    log,
    node_params,
    pd_gains,
    private_domain,
    provenance,
    realtime_sim,
    rss_mb,
)

from delan_control.control_laws import LAWS

MODELS = ('pd', 'pinocchio', 'identified', 'delan')


def _param_text(v) -> str:
    """A ``-p name:=value`` value both rclpy and rcl's YAML parser read as the same type
    (floats always with a point, so a list never mixes integers and doubles)."""
    if isinstance(v, (list, tuple)):
        return '[' + ','.join(_param_text(x) for x in v) + ']'
    if isinstance(v, float):
        return f'{v:.17e}'
    if isinstance(v, str):
        return "'" + v + "'" if v == '' or ',' in v else v
    return str(v)


def rt_controller_params(
    urdf: str,
    rate: float,
    model: str,
    checkpoint: str,
    tmp: str,
    priority: int,
    ident: str,
    law: str,
) -> Dict[str, str]:
    """The compiled node's parameters for the set-up the Python node runs in: ``law``, the
    parameter file's watchdog / control rate (its section is keyed ``torque_controller``, which
    the node named ``torque_controller_rt`` does not match), the demo's PD gains, the sim's
    joint order; the URDF's exported rigid-body model (and for ``identified`` that of
    ``ident``), for ``delan`` the weights exported from ``checkpoint``."""
    from node_set import PARAMS_FILE, node_params

    from delan_control.rt_params import controller_node, model_files

    ctl = node_params('torque_controller')
    _, _, params = controller_node('rt', urdf, PARAMS_FILE)
    gains = {
        k: [float(x) for x in v.strip('[]').split(',')] for k, v in pd_gains(urdf, rate).items()
    }
    params.update(gains)
    params.update(
        {
            'law': law,
            'watchdog_timeout': float(ctl.get('watchdog_timeout', 0.1)),
            'switch_blend_time': float(ctl.get('switch_blend_time', 0.2)),
            'command_joints': list(params['joint_names']),
            'model': model,
            'realtime_priority': priority,
        }
    )
    params.update(
        model_files(
            model, urdf, identified_params=ident if model == 'identified' else '', folder=tmp
        )
    )
    if model == 'delan':
        from delan_learning.c_export import export_delan
        from delan_learning.checkpoint import load_model

        weights = os.path.join(tmp, 'rt_delan.cw')
        # the model as the checkpoint holds it, as the Python node loads it
        export_delan(load_model(checkpoint)[0], weights, params['joint_names'])
        params['delan_weights'] = weights
    return {k: _param_text(v) for k, v in params.items()}


def callback_cost(
    urdf: str,
    models: List[str],
    ident: str,
    checkpoint: str,
    n: int = 3000,
    law: str = 'computed_torque',
) -> Dict:
    """CPU time of the controller's joint-state callback alone [us per call] with ``law``: in
    this process, called directly (no executor, no DDS receive), following an excitation
    reference."""
    import rclpy
    from rclpy.parameter import Parameter
    from sensor_msgs.msg import JointState

    from delan_common.urdf_joints import RobotDescription
    from delan_control.nodes.reference import to_msg
    from delan_control.nodes.torque_controller import TorqueControllerNode
    from delan_control.trajectories import make_reference

    rclpy.logging.set_logger_level('torque_controller', rclpy.logging.LoggingSeverity.WARN)
    robot = RobotDescription.load(urdf)
    t, q, qd, qdd = make_reference(
        'excitation', robot.lower, robot.upper, robot.velocity_limits, None, duration=30.0
    )
    t0 = 1_000_000_000_000
    ref = to_msg(robot.joint_names, t0, t, q, qd, qdd)
    out = {}
    ctx = rclpy.Context()
    rclpy.init(context=ctx)
    try:
        for model in models:
            if model == 'delan' and not checkpoint:
                continue
            node = TorqueControllerNode(
                context=ctx,
                parameter_overrides=[
                    Parameter('urdf_path', value=urdf),
                    Parameter('model', value=model),
                    Parameter('law', value=law),
                    Parameter('identified_params', value=ident if model == 'identified' else ''),
                    Parameter('delan_checkpoint', value=checkpoint if model == 'delan' else ''),
                    Parameter('watchdog_timeout', value=10.0),
                    Parameter('command_joints', value=list(robot.joint_names)),
                ],
            )
            try:
                node._on_reference(ref)
                msgs = []
                for k in range(n):
                    i = (k * 7) % len(t)
                    m = JointState(
                        name=robot.joint_names,
                        position=q[i].tolist(),
                        velocity=qd[i].tolist(),
                        effort=[0.0] * len(q[i]),
                    )
                    m.header.stamp.sec, m.header.stamp.nanosec = divmod(
                        t0 + int(2e9) + k * 1_000_000, 1_000_000_000
                    )
                    msgs.append(m)
                for m in msgs[:200]:
                    node._on_joint_state(m)
                c0 = time.thread_time()
                for m in msgs[200:]:
                    node._on_joint_state(m)
                out[model] = (time.thread_time() - c0) / (n - 200) * 1e6
            finally:
                node.destroy_node()
    finally:
        rclpy.try_shutdown(context=ctx)
    return out


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--duration', type=float, default=60.0, help='seconds measured per model')
    ap.add_argument('--models', default=','.join(MODELS), help='comma-separated subset')
    ap.add_argument('--rate', type=float, default=1000.0, help='joint_states rate [Hz]')
    ap.add_argument(
        '--urdf',
        default=TWO_LINK,
        help='robot (e.g. seven_dof_arm.urdf); '
        'sim, controller, learner and the identification all use it',
    )
    ap.add_argument('--settle', type=float, default=3.0, help='seconds after a switch')
    ap.add_argument('--no-learner', action='store_true', help='without the learner')
    ap.add_argument(
        '--model-wait',
        type=float,
        default=600.0,
        help="seconds to wait for the learner's first version (model=delan)",
    )
    ap.add_argument(
        '--publish-max-nmse',
        type=float,
        default=None,
        help="the learner's quality gate (default: the parameter file's / node's, "
        '0.25); 1e9 lets any version through -- the latency of model=delan '
        'does not depend on how good the model is, and a 7-DoF learner starved '
        'of CPU may not pass the gate for many minutes',
    )
    ap.add_argument(
        '--realtime-priority',
        type=int,
        default=0,
        help="realtime_priority of the controller and of the sim (the robot's "
        'driver): SCHED_FIFO; 0 = normal scheduling',
    )
    ap.add_argument(
        '--learner-param',
        action='append',
        default=[],
        metavar='NAME=VALUE',
        help='a learner parameter (repeatable), e.g. shift_factor=10',
    )
    ap.add_argument(
        '--probe',
        action='store_true',
        help='also measure externally from DDS source stamps (loop_probe.py)',
    )
    ap.add_argument(
        '--controller',
        default='python',
        choices=['python', 'rt'],
        help='rt: also the compiled torque_controller_rt (delan_control_rt), after '
        'the Python node, in the same run and table (same models)',
    )
    ap.add_argument(
        '--law',
        default=None,
        choices=LAWS,
        help="both controllers' law (default: the parameter file's); the URDF-feedback laws "
        "feed back through the URDF's mass matrix",
    )
    ap.add_argument('--keep', action='store_true', help='keep the temporary folder (logs)')
    args = ap.parse_args(argv)
    law = args.law or node_params('torque_controller').get('law', 'computed_torque')
    models = [m.strip() for m in args.models.split(',') if m.strip()]
    bad = [m for m in models if m not in MODELS]
    if bad:
        ap.error(f'unknown models {bad}; choose from {MODELS}')
    urdf = os.path.abspath(args.urdf)
    if not os.path.isfile(urdf):
        ap.error(f'no such URDF: {args.urdf}')
    rt_models = models if args.controller == 'rt' else []
    if args.controller == 'rt':
        prefix = os.environ.get('COLCON_PREFIX_PATH', '').split(os.pathsep)[0] or 'install'
        exe = os.path.join(
            prefix, 'delan_control_rt', 'lib', 'delan_control_rt', 'torque_controller_rt'
        )
        if not os.path.exists(exe):
            ap.error(
                f'--controller rt: the compiled node is not built ({exe}); make setup builds it'
            )
    private_domain()

    import rclpy

    tmp = tempfile.mkdtemp(prefix='bench_control_loop_')
    ident = os.path.join(tmp, 'identified.json')
    if 'identified' in models:
        t0 = time.monotonic()
        identified_params(urdf, ident)
        log(f'identified parameters in {time.monotonic() - t0:.1f} s -> {ident}')
    nodes = NodeSet(tmp, urdf)
    procs = nodes.procs
    wait = nodes.wait

    rclpy.init()
    probe = None
    rows, rss = [], {}
    code = 0
    try:
        nodes.start(
            'delan_control',
            'sim',
            {**realtime_sim(args.rate), 'realtime_priority': args.realtime_priority},
        )
        nodes.start(
            'delan_control',
            'torque_controller',
            {
                'model': 'pd',
                'law': law,
                **pd_gains(urdf, args.rate),
                'realtime_priority': args.realtime_priority,
                **({'identified_params': ident} if 'identified' in models else {}),
            },
        )
        nodes.start('delan_control', 'reference', {'trajectory': 'excitation', 'repeat': 'true'})
        if not args.no_learner:
            nodes.start_learner(
                {
                    'publish_period': 5.0,
                    **(
                        {'publish_max_nmse': args.publish_max_nmse}
                        if args.publish_max_nmse is not None
                        else {}
                    ),
                    **dict(kv.split('=', 1) for kv in args.learner_param),
                },
            )
        probe = Probe(stamps=args.probe)
        wait(
            'the controller commanding',
            lambda: int(probe.diag.get('commands_sent', 0)) > 100,
            60.0,
        )
        if not args.no_learner:
            wait('the learner', lambda: probe.status is not None, 90.0)
        log(f'nodes up (ROS_DOMAIN_ID {os.environ["ROS_DOMAIN_ID"]}, logs in {tmp})')
        controller = 'torque_controller'
        runs = [('python', m) for m in models] + [('rt', m) for m in rt_models]
        for i, (impl, model) in enumerate(runs):
            if model == 'delan':
                if args.no_learner:
                    raise RuntimeError('model=delan needs the learner (drop --no-learner)')
                try:
                    wait('a learned model', lambda: probe.updates > 0, args.model_wait)
                except RuntimeError as err:  # say why: the learner's quality gate, ...
                    st = probe.status
                    raise RuntimeError(
                        f'{err} (learner: {st.message!r}, validation nMSE '
                        f'{[round(x, 4) for x in st.validation_nmse]}, '
                        f'{st.training_steps} steps)'
                    ) from None
            if impl == 'python':
                probe.set_model(model)
            else:
                # the compiled node in the Python node's place (a fresh start per model)
                if controller in rss:
                    rss[controller][1] = rss_mb(procs[controller].pid)
                nodes.stop(controller)
                del procs[controller]
                probe.diag = {}
                controller = 'torque_controller_rt'
                nodes.start(
                    'delan_control_rt',
                    controller,
                    rt_controller_params(
                        urdf,
                        args.rate,
                        model,
                        probe.last_checkpoint,
                        tmp,
                        args.realtime_priority,
                        ident,
                        law,
                    ),
                )
                wait(
                    f'the compiled controller commanding (model={model})',
                    lambda: int(probe.diag.get('commands_sent', 0)) > 100,
                    60.0,
                )
                if model == 'delan' and probe.diag.get('model_loads') != '1':
                    raise RuntimeError('torque_controller_rt did not load the DeLaN weights')
            time.sleep(args.settle)
            if i == 0:
                rss = {name: [rss_mb(p.pid), float('nan')] for name, p in procs.items()}
                rss['bench (probe)'] = [rss_mb(os.getpid()), float('nan')]
            if controller not in rss:
                rss[controller] = [rss_mb(procs[controller].pid), float('nan')]
            diag0, st0, up0 = dict(probe.diag), probe.status, probe.updates
            row: Dict = {}
            log(f'measuring {impl} model={model} for {args.duration:.0f} s')
            # the controller under one name, whichever node it is
            pids = {
                ('controller' if name == controller else name): p.pid for name, p in procs.items()
            }
            pids['bench'] = os.getpid()
            cpu0 = {name: cpu_s(pid) for name, pid in pids.items()}
            first = probe.next_diag()
            w0 = time.monotonic()
            if args.probe:
                states, commands, t0, t1 = probe.record(args.duration)
            else:
                time.sleep(args.duration)
            last = probe.next_diag()
            wall = time.monotonic() - w0
            row['cpu'] = {
                name: 100.0 * (cpu_s(pid) - cpu0[name]) / wall for name, pid in pids.items()
            }
            row.update(probe.loop_window(first, last))
            if row['states'] < 2:
                raise RuntimeError(f'no joint states reached the controller with model={model}')
            if args.probe:
                row['probe'] = analyse(states, commands, t0, t1)
            row['model'], row['impl'] = model, impl
            # CPU time of the controller per command it sent (callback + executor + DDS)
            row['ctl_us'] = row['cpu']['controller'] * 1e4 * wall / max(row['commands'], 1)
            d1 = probe.diag
            row['trips'] = int(d1.get('watchdog_trips', 0)) - int(diag0.get('watchdog_trips', 0))
            row['fallbacks'] = int(d1.get('fallbacks', 0)) - int(diag0.get('fallbacks', 0))
            row['updates'] = probe.updates - up0
            st1 = probe.status
            if st0 is not None and st1 is not None:
                row['learner_steps'] = int(st1.training_steps - st0.training_steps)
                span = (st1.header.stamp.sec + 1e-9 * st1.header.stamp.nanosec) - (
                    st0.header.stamp.sec + 1e-9 * st0.header.stamp.nanosec
                )
                # NaN: no status in the whole window (a learner starved of CPU)
                row['learner_hz'] = (
                    (st1.samples_seen - st0.samples_seen) / span if span > 0 else float('nan')
                )
            rows.append(row)
            log(
                f'{impl} {model}: p50 {row["p50"]:.0f} us, p99 {row["p99"]:.0f} us, max '
                f'{row["max"]:.0f} us, missed {row["missed"]} of {row["states"]}'
            )
        for name, p in procs.items():
            if name in rss:
                rss[name][1] = rss_mb(p.pid)
        rss['bench (probe)'][1] = rss_mb(os.getpid())
    except RuntimeError as err:
        log(f'FAILED: {err}')
        code = 1
    finally:
        nodes.stop_all()
        if probe is not None:
            probe.close()
        rclpy.try_shutdown()

    gate = (
        ''
        if args.publish_max_nmse is None
        else f' (quality gate publish_max_nmse {args.publish_max_nmse:g})'
    )
    print(
        f'\nControl loop: {os.path.relpath(urdf, ROOT)}; joint_states at {args.rate:g} Hz '
        f'(sim, real time, not lockstep) -> torque_controller -> effort commands; learner '
        f'{"training in parallel" if not args.no_learner else "off"}{gate}; '
        f'{args.duration:g} s per '
        f'model; {load_text()}; {provenance()}'
    )
    print(
        f'law {law}; controller and sim realtime_priority {args.realtime_priority} '
        f'({"SCHED_FIFO" if args.realtime_priority else "normal scheduling"}). The '
        "controller's own timing: latency = command published - source stamp of the state it "
        'answers; missed = states published before the answer to the previous one '
        '(histogram resolution 10 us; Hz = states per diagnostics period).\n'
    )
    hdr = (
        f'{"node":>6s} {"model":>10s} {"states":>7s} {"Hz":>7s} {"p50 us":>7s} {"p99 us":>8s} '
        f'{"max us":>8s} {"missed":>7s} {"missed%":>7s} {"extra":>6s} {"trips":>5s} '
        f'{"fallbk":>6s} {"updates":>7s} {"learner steps":>13s} {"learner Hz":>10s}'
    )
    print(hdr)
    print('-' * len(hdr))
    for r in rows:
        print(
            f'{r["impl"]:>6s} {r["model"]:>10s} {r["states"]:7d} {r["rate_hz"]:7.1f} '
            f'{r["p50"]:7.0f} {r["p99"]:8.0f} {r["max"]:8.0f} {r["missed"]:7d} '
            f'{r["missed_pct"]:7.2f} '
            f'{r["extra"]:6d} {r["trips"]:5d} {r["fallbacks"]:6d} {r["updates"]:7d} '
            f'{r.get("learner_steps", 0):13d} {r.get("learner_hz", float("nan")):10.0f}'
        )
    if args.probe and rows:
        print(
            '\nexternal probe (DDS source stamps; a command is matched to the state published '
            'just before it, so with a backlog latencies are lower bounds):'
        )
        for r in rows:
            e = r['probe']
            print(
                f'{r["impl"]:>6s} {r["model"]:>10s} {e["states"]:7d} {e["rate_hz"]:7.1f} '
                f'{e["p50"]:7.0f} '
                f'{e["p99"]:8.0f} {e["max"]:8.0f} {e["missed"]:7d} {e["missed_pct"]:7.2f} '
                f'{e["extra"]:6d}'
            )
    if rows:
        names = list(rows[0]['cpu'])
        print('\nCPU use during each run [% of one core]; controller CPU per command [us]')
        print(
            f'{"node":>6s} {"model":>10s} '
            + ' '.join(f'{n[:17]:>17s}' for n in names)
            + f' {"ctl us/cmd":>10s}'
        )
        for r in rows:
            print(
                f'{r["impl"]:>6s} {r["model"]:>10s} '
                + ' '.join(f'{r["cpu"].get(n, float("nan")):17.0f}' for n in names)
                + f' {r["ctl_us"]:10.0f}'
            )
    if rss:
        print(f'\n{"process":>20s} {"RSS start MB":>12s} {"RSS end MB":>10s}')
        for name, (a, b) in rss.items():
            print(f'{name:>20s} {a:12.1f} {b:10.1f}')
    if probe is not None and not code:
        cost = callback_cost(urdf, models, ident, probe.last_checkpoint, law=law)
        print(
            '\ncontroller joint-state callback alone (called in-process: no executor, no DDS; '
            'the machine is quieter now) [us CPU per call]'
        )
        print('  ' + ', '.join(f'{m} {c:.0f}' for m, c in cost.items()))
    for r in rows:
        if r['model'] == 'delan':
            print(
                f'\ntarget ({r["impl"]} node, delan: {TARGET}): '
                f'{"met" if target_met(r) else "NOT met"} '
                f'(p99 {r["p99"]:.0f} us, {r["missed"]} missed)'
            )
    return finish(tmp, args.keep, code)


if __name__ == '__main__':
    raise SystemExit(main())
