#!/usr/bin/env python3
"""Where the compiled controller's 1 kHz cycle spends its time: DDS, scheduling or the model.

Set-up as ``bench_control_loop.py`` (``node_set.py``): the sim (the parameter file's mismatched
arm, joint states at ``--rate`` Hz in real time, not lockstep), the excitation reference and,
with ``--learner on``, the learner training beside (a version every 5 s, any quality let
through); the 7-DoF arm by default. Each configuration starts its controller afresh in the
torque controller's place and reads its diagnostics for ``--duration`` seconds:

* ``rt``: ``torque_controller_rt`` (``delan_control_rt``) with each of ``--models``; its
  diagnostics break every command down (``delan_control_rt/src/loop_timing.h``): DDS + wake-up
  (the state's source stamp -> the loop's ``rcl_wait`` returned), take (``rcl_take``,
  deserialise), compute (map, gate, reference, model, law), publish (serialise, DDS write);
  these four are the latency. Beside them the loop's wait in ``rcl_wait`` (idle), its CPU time
  per cycle and its involuntary context switches, and the slowest 1 % of each second's commands
  (latency at or above that second's p99) attributed part by part: what the p99 is made of.
* ``echo``: ``loop_echo_rt``, the same loop answering each state with zeros, no model: the
  floor (the DDS round trip of this set-up); its arm, given zero torque, lies at its limits.
* ``python``: the Python ``torque_controller``; its diagnostics carry the latency only (no
  breakdown).

``--priorities 0,50`` repeats everything with the controller and the sim under SCHED_FIFO
(their ``realtime_priority``; the sim restarted); ``--learner on,off`` with and without the
learner (``delan`` then keeps the last version the learner published). The load average is
printed beside every row: the machine may be shared.

Usage: ``python bench/bench_rt_breakdown.py [--duration 20] [--nodes echo,rt,python]
[--models pd,delan] [--learner on,off] [--priorities 0,50] [--urdf ...]``. Prints tables;
exit code 1 only if a node dies or a configuration cannot be measured.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from typing import Dict, List, Optional, Tuple

import numpy as np
from bench_control_loop import rt_controller_params
from loop_probe import Probe
from node_set import (
    ROOT,
    NodeSet,
    cpu_s,
    finish,
    load_text,
    log,
    node_params,
    pd_gains,
    private_domain,
    provenance,
    realtime_sim,
)

SEVEN_DOF = os.path.join(ROOT, 'delan_bringup', 'urdf', 'seven_dof_arm.urdf')
#: the parts that make a command's latency, then those timed beside it (loop_timing.h)
LATENCY_PARTS = ('latency_dds', 'take', 'compute', 'publish')
PARTS = LATENCY_PARTS + ('wait', 'cycle_cpu')
#: the breakdown's histogram bins: 1 us up to FINE_US, 10 us up to COARSE_US, an overflow bin
FINE_US, COARSE_US = 1000, 20000
N_TIMING_BINS = FINE_US + (COARSE_US - FINE_US) // 10 + 1
#: (package, executable) of each node kind; the executable is also its node name
EXECUTABLES = {
    'echo': ('delan_control_rt', 'loop_echo_rt'),
    'rt': ('delan_control_rt', 'torque_controller_rt'),
    'python': ('delan_control', 'torque_controller'),
}


class BreakdownProbe(Probe):
    """The latency probe without the 1 kHz stamps, hearing the echo's diagnostics too."""

    def _on_diag(self, msg) -> None:
        for st in msg.status:
            if 'loop_echo_rt' in st.name:
                values = {kv.key: kv.value for kv in st.values}
                with self._lock:
                    self.diag = values
                    self.diag_seq += 1
                    self.diag_log.append((self.diag_seq, values))
                    del self.diag_log[:-600]
                return
        super()._on_diag(msg)


def parse_bins(text: str, n: int) -> np.ndarray:
    """``'bin:count,...'`` (a cumulative histogram of the diagnostics) as ``n`` counts."""
    hist = np.zeros(n, dtype=np.int64)
    for item in filter(None, text.split(',')):
        i, c = item.split(':')
        hist[int(i)] = int(c)
    return hist


def timing_edges() -> np.ndarray:
    """Upper edge [us] of each bin of the breakdown's histograms (inf: the overflow bin)."""
    k = np.arange(N_TIMING_BINS, dtype=float)
    edges = np.where(k < FINE_US, k + 1.0, FINE_US + (k - FINE_US + 1.0) * 10.0)
    edges[-1] = np.inf
    return edges


def percentile(hist: np.ndarray, edges: np.ndarray, q: float) -> float:
    """Upper bin edge [us] holding the ``q``-th percentile; NaN when empty."""
    total = int(hist.sum())
    if total == 0:
        return float('nan')
    return float(edges[int(np.searchsorted(np.cumsum(hist), q / 100.0 * total))])


def window(log_: Dict[int, Dict[str, str]], first: int, last: int, seconds: float) -> Dict:
    """The node's timing between its diagnostics ``first`` and ``last``: latency percentiles
    from the cumulative histograms, means from the cumulative sums, maxima of the periods in
    between; the breakdown where the node reports one."""
    from delan_control.loop_stats import N_BINS, parse_histogram

    a, b = log_[first], log_[last]
    periods = [v for seq, v in log_.items() if first < seq <= last]

    def diff(key: str) -> float:
        return float(b[key]) - float(a[key])

    hist = parse_histogram(b['latency_histogram_10us']) - parse_histogram(
        a['latency_histogram_10us']
    )
    edges10 = np.append((np.arange(N_BINS) + 1.0) * 10.0, np.inf)
    states = int(diff('joint_states_received'))
    out: Dict = {
        'states': states,
        'commands': int(diff('commands_sent')),
        'missed': int(diff('missed_cycles')),
        'missed_pct': 100.0 * diff('missed_cycles') / max(states, 1),
        'p50': percentile(hist, edges10, 50),
        'p99': percentile(hist, edges10, 99),
        'max': max(float(v['loop_latency_max_us']) for v in periods),
        'breakdown': 'breakdown_cycles' in b,
    }
    if not out['breakdown']:
        return out
    cycles = max(diff('breakdown_cycles'), 1.0)
    tail = max(diff('tail_cycles'), 1.0)
    out['mean'] = diff('loop_latency_sum_us') / cycles
    out['tail_latency'] = diff('tail_loop_latency_sum_us') / tail
    out['tail_waiting_pct'] = 100.0 * diff('tail_states_while_waiting') / tail
    out['waiting_pct'] = 100.0 * diff('states_while_waiting') / cycles
    edges = timing_edges()
    for p in PARTS:
        h = parse_bins(b[f'{p}_histogram'], N_TIMING_BINS) - parse_bins(
            a[f'{p}_histogram'], N_TIMING_BINS
        )
        out[p] = {
            'p50': percentile(h, edges, 50),
            'p99': percentile(h, edges, 99),
            'mean': diff(f'{p}_sum_us') / cycles,
            'max': max(float(v[f'{p}_max_us']) for v in periods),
            'tail': diff(f'tail_{p}_sum_us') / tail,
        }
    out['idle_pct'] = float(np.nanmean([float(v['loop_idle_percent']) for v in periods]))
    out['switches_per_s'] = diff('involuntary_switches') / seconds
    return out


def controller_params(
    kind: str,
    model: str,
    urdf: str,
    rate: float,
    checkpoint: str,
    tmp: str,
    priority: int,
    law: str,
) -> Dict:
    """The parameters of a node of ``kind`` with ``model`` (the gains, limits and law of
    ``bench_control_loop.py``'s nodes)."""
    if kind == 'echo':
        return {'realtime_priority': priority}
    if kind == 'rt':
        return rt_controller_params(urdf, rate, model, checkpoint, tmp, priority, '', law)
    return {
        'model': model,
        'law': law,
        **pd_gains(urdf, rate),
        'realtime_priority': priority,
        **({'delan_checkpoint': checkpoint} if model == 'delan' else {}),
    }


def measure(
    nodes: NodeSet, probe: BreakdownProbe, args, urdf: str, law: str, tmp: str, setting: Dict
) -> Dict:
    """One configuration (``setting``: kind, model, prio, learner): its controller started,
    settled, timed for ``args.duration`` seconds; the row."""
    kind, model, prio = setting['kind'], setting['model'], setting['prio']
    if model == 'delan' and not probe.last_checkpoint:
        nodes.wait('a learned model', lambda: probe.updates > 0, args.model_wait)
    package, exe = EXECUTABLES[kind]
    params = controller_params(kind, model, urdf, args.rate, probe.last_checkpoint, tmp, prio, law)
    probe.diag = {}
    nodes.start(package, exe, params)
    nodes.wait(f'{exe} commanding', lambda: int(probe.diag.get('commands_sent', 0)) > 100, 90.0)
    time.sleep(args.settle)
    log(f'measuring {kind} {model} (priority {prio}, learner {setting["learner"]})')
    pid = nodes.procs[exe].pid
    fifo = {'controller': fifo_threads(pid), 'sim': fifo_threads(nodes.procs['sim'].pid)}
    load0 = os.getloadavg()[0]
    first = probe.next_diag()
    c0, w0 = cpu_s(pid), time.monotonic()
    time.sleep(args.duration)
    last = probe.next_diag()
    wall = time.monotonic() - w0
    cpu = cpu_s(pid) - c0
    with probe._lock:
        log_ = {s: v for s, v in probe.diag_log if first <= s <= last}
    row = window(log_, first, last, wall)
    if row['states'] < 2:
        raise RuntimeError(f'no joint states reached {exe}')
    row.update(
        setting,
        load=(load0, os.getloadavg()[0]),
        ctl_us=cpu * 1e6 / max(row['commands'], 1),
        fifo=fifo,
    )
    log(
        f'{kind} {model}: p50 {row["p50"]:.0f} us, p99 {row["p99"]:.0f} us, '
        f'missed {row["missed"]} of {row["states"]}'
    )
    return row


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--duration', type=float, default=20.0, help='seconds per configuration')
    ap.add_argument('--nodes', default='echo,rt,python', help='of echo, rt, python')
    ap.add_argument('--models', default='pd,delan', help='of pd, pinocchio, delan (rt, python)')
    ap.add_argument('--learner', default='on,off', help='on, off or both (in that order)')
    ap.add_argument(
        '--priorities',
        default='0',
        help='realtime_priority of the controller and the sim, comma-separated: 0 normal '
        'scheduling, e.g. 50 SCHED_FIFO',
    )
    ap.add_argument('--rate', type=float, default=1000.0, help='joint_states rate [Hz]')
    ap.add_argument('--urdf', default=SEVEN_DOF, help='robot (default: the 7-DoF arm)')
    ap.add_argument('--settle', type=float, default=3.0, help='seconds after a start')
    ap.add_argument(
        '--model-wait',
        type=float,
        default=600.0,
        help="seconds to wait for the learner's first version (model delan)",
    )
    ap.add_argument('--keep', action='store_true', help='keep the temporary folder (logs)')
    args = ap.parse_args(argv)
    kinds = [k.strip() for k in args.nodes.split(',') if k.strip()]
    models = [m.strip() for m in args.models.split(',') if m.strip()]
    phases = [p.strip() for p in args.learner.split(',') if p.strip()]
    priorities = [int(p) for p in args.priorities.split(',') if p.strip()]
    if not set(kinds) <= set(EXECUTABLES) or not set(phases) <= {'on', 'off'}:
        ap.error('--nodes: echo, rt, python; --learner: on, off')
    if not set(models) <= {'pd', 'pinocchio', 'delan'}:
        ap.error('--models: pd, pinocchio, delan')
    if 'delan' in models and phases[0] != 'on':
        ap.error('model delan needs the learner on first (its versions): --learner on,off')
    urdf = os.path.abspath(args.urdf)
    prefix = os.environ.get('COLCON_PREFIX_PATH', '').split(os.pathsep)[0] or 'install'
    for kind in kinds:
        package, exe = EXECUTABLES[kind]
        if not os.path.exists(os.path.join(prefix, package, 'lib', package, exe)):
            ap.error(f'{exe} is not built; make setup builds it')
    law = node_params('torque_controller').get('law', 'computed_torque')
    private_domain()

    import rclpy

    tmp = tempfile.mkdtemp(prefix='bench_rt_breakdown_')
    nodes = NodeSet(tmp, urdf)
    rclpy.init()
    probe = BreakdownProbe(stamps=False)
    rows: List[Dict] = []
    code = 0
    configs: List[Tuple[str, str]] = [
        (k, m) for k in kinds for m in (['-'] if k == 'echo' else models)
    ]
    try:
        for prio in priorities:
            nodes.start(
                'delan_control', 'sim', {**realtime_sim(args.rate), 'realtime_priority': prio}
            )
            nodes.start(
                'delan_control', 'reference', {'trajectory': 'excitation', 'repeat': 'true'}
            )
            for phase in phases:
                if phase == 'on' and 'learner' not in nodes.procs:
                    nodes.start_learner({'publish_period': 5.0, 'publish_max_nmse': 1e9})
                    nodes.wait('the learner', lambda: probe.status is not None, 90.0)
                elif phase == 'off' and 'learner' in nodes.procs:
                    nodes.stop('learner')
                    del nodes.procs['learner']
                for kind, model in configs:
                    setting = dict(kind=kind, model=model, prio=prio, learner=phase)
                    try:
                        rows.append(measure(nodes, probe, args, urdf, law, tmp, setting))
                    except RuntimeError as err:  # this configuration; the others go on
                        log(f'FAILED: {kind} {model} (priority {prio}, learner {phase}): {err}')
                        code = 1
                    finally:
                        exe = EXECUTABLES[kind][1]
                        if exe in nodes.procs:
                            nodes.stop(exe)
                            del nodes.procs[exe]
            nodes.stop_all()
            nodes.procs.clear()
    except RuntimeError as err:
        log(f'FAILED: {err}')
        code = 1
    finally:
        nodes.stop_all()
        probe.close()
        rclpy.try_shutdown()
    report(rows, args, urdf, law)
    return finish(tmp, args.keep, code)


def fifo_threads(pid: int) -> str:
    """``'k/n'``: how many of the process's n threads run under SCHED_FIFO (read from the
    kernel, whatever the node said)."""
    reset_on_fork = getattr(os, 'SCHED_RESET_ON_FORK', 0)  # ORed into the policy read back
    fifo = total = 0
    try:
        tids = os.listdir(f'/proc/{pid}/task')
    except OSError:
        return '?'
    for tid in tids:
        try:
            fifo += (os.sched_getscheduler(int(tid)) & ~reset_on_fork) == os.SCHED_FIFO
            total += 1
        except OSError:
            continue  # a thread that ended meanwhile
    return f'{fifo}/{total}'


def report(rows: List[Dict], args, urdf: str, law: str) -> None:
    """The tables: latency per configuration, its breakdown, the slowest 1 % part by part."""
    print(
        f'\nControl-loop breakdown: {os.path.relpath(urdf, ROOT)}; joint_states at '
        f'{args.rate:g} Hz (sim, real time) -> controller -> effort commands; law {law}; '
        f'{args.duration:g} s per row; {load_text()} (at the end); {provenance()}'
    )
    print(
        'latency = command published - source stamp of the state it answers [us]; missed = '
        'states published before the answer to the previous one; load = 1-min load average '
        'at the start -> end of the row; prio = realtime_priority of the controller and the '
        'sim; FIFO = their threads under SCHED_FIFO (read from /proc), controller / sim.\n'
    )
    hdr = (
        f'{"prio":>5s} {"learner":>7s} {"node":>6s} {"model":>6s} {"load":>11s} {"states":>6s} '
        f'{"missed%":>7s} {"p50":>5s} {"p99":>6s} {"max":>6s} {"mean":>6s} {"cpu/cmd":>7s} '
        f'{"idle%":>5s} {"invol/s":>7s} {"FIFO ctl/sim":>12s}'
    )
    print(hdr)
    print('-' * len(hdr))
    nan = float('nan')
    for r in rows:
        fifo = f'{r["fifo"]["controller"]} {r["fifo"]["sim"]}'
        print(
            f'{r["prio"]:>5d} {r["learner"]:>7s} {r["kind"]:>6s} {r["model"]:>6s} '
            f'{r["load"][0]:5.2f}>{r["load"][1]:5.2f} {r["states"]:6d} {r["missed_pct"]:7.2f} '
            f'{r["p50"]:5.0f} {r["p99"]:6.0f} {r["max"]:6.0f} {r.get("mean", nan):6.0f} '
            f'{r["ctl_us"]:7.0f} {r.get("idle_pct", nan):5.1f} '
            f'{r.get("switches_per_s", nan):7.1f} {fifo:>12s}'
        )
    broken = [r for r in rows if r['breakdown']]
    if not broken:
        return
    print(
        '\nbreakdown per command, p50 / p99 / mean [us] (DDS = source stamp -> the loop woke: '
        'transport, delivery, wake-up or the wait for a busy loop; take = rcl_take + '
        'deserialise; compute = map, gate, reference, model, law; publish = serialise + DDS '
        'write; the four make the latency); wait = the loop idle in rcl_wait before it; cpu = '
        "the loop thread's CPU time from wake to publish"
    )
    hdr = f'{"prio":>5s} {"learner":>7s} {"node":>6s} {"model":>6s} ' + ' '.join(
        f'{p.replace("latency_", "").replace("cycle_", ""):>17s}' for p in PARTS
    )
    print(hdr)
    print('-' * len(hdr))
    for r in broken:
        cells = ' '.join(
            f'{r[p]["p50"]:5.0f}/{r[p]["p99"]:5.0f}/{r[p]["mean"]:5.1f}' for p in PARTS
        )
        print(f'{r["prio"]:>5d} {r["learner"]:>7s} {r["kind"]:>6s} {r["model"]:>6s} {cells}')
    print(
        "\nthe slowest 1 % of each second's commands (latency >= that second's p99), mean [us] "
        'part by part (they add up to the latency); waiting% = of them, states published while '
        'the loop sat idle in rcl_wait (delayed by their delivery, not by a busy loop)'
    )
    hdr = (
        f'{"prio":>5s} {"learner":>7s} {"node":>6s} {"model":>6s} {"latency":>8s} {"DDS":>7s} '
        f'{"take":>6s} {"compute":>7s} {"publish":>7s} {"waiting%":>8s} {"cpu":>6s}'
    )
    print(hdr)
    print('-' * len(hdr))
    for r in broken:
        print(
            f'{r["prio"]:>5d} {r["learner"]:>7s} {r["kind"]:>6s} {r["model"]:>6s} '
            f'{r["tail_latency"]:8.0f} {r["latency_dds"]["tail"]:7.0f} '
            f'{r["take"]["tail"]:6.1f} {r["compute"]["tail"]:7.1f} '
            f'{r["publish"]["tail"]:7.1f} {r["tail_waiting_pct"]:8.1f} '
            f'{r["cycle_cpu"]["tail"]:6.1f}'
        )
    print()
    for r in broken:
        if r['kind'] != 'rt':
            continue
        floor = next(
            (
                e
                for e in broken
                if e['kind'] == 'echo' and e['prio'] == r['prio'] and e['learner'] == r['learner']
            ),
            None,
        )
        dds, compute = r['latency_dds']['tail'], r['compute']['tail']
        print(
            f'rt {r["model"]} (priority {r["prio"]}, learner {r["learner"]}, load '
            f'{r["load"][0]:.1f}-{r["load"][1]:.1f}): p99 {r["p99"] / 1000:.2f} ms; its slowest '
            f'1 % average {r["tail_latency"]:.0f} us, of which DDS + wake-up {dds:.0f} us '
            f'({100 * dds / r["tail_latency"]:.0f} %), the model and law {compute:.1f} '
            f'us, take + publish {r["take"]["tail"] + r["publish"]["tail"]:.1f} us'
            + (
                f'; echo floor p99 {floor["p99"] / 1000:.2f} ms (slowest 1 %: '
                f'{floor["tail_latency"]:.0f} us)'
                if floor
                else ''
            )
        )


if __name__ == '__main__':
    raise SystemExit(main())
