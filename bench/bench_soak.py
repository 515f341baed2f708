#!/usr/bin/env python3
"""Soak: the whole suite at 1 kHz for ten minutes -- does anything grow, slow down or get lost?

Set-up (``node_set.py``, as ``bench_control_loop.py``): real processes from the installed console
scripts with delan_bringup/config/sim_params.yaml -- ``sim`` (the mismatched arm: 0.6 kg payload,
friction x2, sensor noise; joint states at ``--rate`` Hz in real time, not lockstep),
``reference`` (excitation, repeating), ``learner`` (training continually, publishing model
versions), ``data_logger`` (an mcap bag of joint_states + commands) and ``torque_controller``
with model=delan on the learner's live versions (the soak's clock starts with the first one that
passes the learner's quality gate, or after ``--model-wait`` s with PD until one comes; rows say
which model ran) -- plus the probe node of ``loop_probe.py`` in this process.

Every ``--window`` seconds (default one minute) a row: RSS of every process, control latency
p50/p99/max and missed cycles of that window (source timestamps, see ``loop_probe.py``), bag
size on disk, the learner's model version, validation nMSE and replay-buffer fill. At the end:

* memory: RSS at the start, end and max per process, and the growth over the last half against
  a bound. Why that bound: after warm-up every node is designed to run in constant memory
  (preallocated replay buffer that fills in the first ~4 minutes at 1 kHz, bounded logger
  queue, checkpoint files pruned to ``keep_versions``), so what remains is a per-message leak.
  The smallest object a leak can keep per message is a Python float in a list (24 + 8 bytes);
  kept for each joint state of the last half that is ``32 B x rate x duration / 2`` = 9.6 MB at
  1 kHz for 10 minutes. Below that the allocators' own steps (1 MiB pymalloc arenas, glibc
  heap growth) dominate, hence a floor of 4 MB for short runs.
* the bag: linear fit of its size against time (R^2 > 0.99: written at a constant rate, no
  stalls or bursts) and the bytes per message; after the logger stopped (SIGINT: the bag is
  closed) it is read back with ``rosbags``: every message deserialised, joint-state header
  stamps checked for gaps (the sim stamps them exactly 1/rate apart), counts compared with the
  logger's own counters.
* missed cycles and latency against the control-loop benchmark's bound for model=delan.

Usage: ``python bench/bench_soak.py [--duration 600] [--window 60]`` (``--duration 60
--window 10`` for a quick run). Prints the tables; exit code 1 only if a node dies or the bag
cannot be read, never for a missed bound (numbers, not a test).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
from typing import Dict, List, Optional, Tuple

import numpy as np
from loop_probe import TARGET, Probe, analyse, target_met
from node_set import (
    ROOT,
    TWO_LINK,
    NodeSet,
    dir_bytes,
    finish,
    load_text,
    log,
    pd_gains,
    private_domain,
    proc_memory,
    provenance,
    realtime_sim,
)

SHORT = {
    'sim': 'sim',
    'reference': 'ref',
    'learner': 'learner',
    'data_logger': 'logger',
    'torque_controller': 'ctl',
    'bench': 'bench',
}
LEAK_BYTES_PER_MSG = 32  # a float kept in a list: the smallest leak per message
MIN_BOUND_MB = 4.0  # allocator steps (1 MiB arenas, heap growth) below this


def memory_bound_mb(rate: float, duration: float) -> float:
    """RSS growth over the last half that a per-message leak would exceed (see the module
    doc)."""
    return max(MIN_BOUND_MB, LEAK_BYTES_PER_MSG * rate * duration / 2 / 1e6)


def linear_fit(t: np.ndarray, y: np.ndarray) -> Tuple[float, float, float]:
    """Slope, intercept and R^2 of a least-squares line."""
    slope, icept = np.polyfit(t, y, 1)
    res = y - (slope * t + icept)
    ss = float(np.sum((y - y.mean()) ** 2))
    return float(slope), float(icept), 1.0 - float(np.sum(res**2)) / ss if ss > 0 else math.nan


def verify_bag(bag_root: str, rate: float) -> Dict:
    """Read every bag under ``bag_root`` with rosbags, deserialising every message; joint-state
    header stamps must be ``1/rate`` apart (the sim's sim-time stamps), so a gap is a lost
    message."""
    from rosbags.rosbag2 import Reader

    from delan_learning.bags import ros2_typestore
    from delan_learning.bags.types import register_installed_type

    store = ros2_typestore()
    counts: Dict[str, int] = {}
    metadata_counts: Dict[str, int] = {}
    bad, stamps, bags = 0, [], 0
    first_ns, last_ns = None, None
    for path in sorted(
        p for p in os.listdir(bag_root) if os.path.isdir(os.path.join(bag_root, p))
    ):
        bags += 1
        with Reader(os.path.join(bag_root, path)) as reader:
            for conn in reader.connections:
                metadata_counts[conn.topic] = metadata_counts.get(conn.topic, 0) + conn.msgcount
                if conn.msgtype not in store.fielddefs:  # the suite's own (ControllerState)
                    register_installed_type(conn.msgtype)
            for conn, t, raw in reader.messages():
                msg = store.deserialize_cdr(raw, conn.msgtype)
                counts[conn.topic] = counts.get(conn.topic, 0) + 1
                first_ns = t if first_ns is None else min(first_ns, t)
                last_ns = t if last_ns is None else max(last_ns, t)
                if conn.msgtype == 'sensor_msgs/msg/JointState':
                    stamps.append(msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec)
                    if not (
                        len(msg.position)
                        == len(msg.velocity)
                        == len(msg.effort)
                        == len(msg.name)
                        > 0
                        and np.all(np.isfinite(msg.position))
                    ):
                        bad += 1
                elif conn.msgtype == 'std_msgs/msg/Float64MultiArray':
                    if not (len(msg.data) and np.all(np.isfinite(msg.data))):
                        bad += 1
                elif conn.msgtype == 'delan_msgs/msg/ControllerState':
                    if not (len(msg.command) and np.all(np.isfinite(msg.command))):
                        bad += 1
    st = np.sort(np.asarray(stamps, dtype=np.int64))
    period = 1e9 / rate
    steps = np.round(np.diff(st) / period).astype(np.int64) if len(st) > 1 else np.zeros(0)
    expected = int(steps.sum()) + 1 if len(st) else 0
    return {
        'bags': bags,
        'counts': counts,
        'metadata_counts': metadata_counts,
        'bad': bad,
        'states_expected': expected,
        'state_gaps': int(np.count_nonzero(steps > 1)),
        'states_missing': expected - len(st),
        'duplicates': int(np.count_nonzero(steps == 0)),
        'span_s': (last_ns - first_ns) * 1e-9 if first_ns is not None else 0.0,
    }


def fmt(x: float, spec: str = '.0f') -> str:
    return format(x, spec) if isinstance(x, (int, float)) and math.isfinite(x) else '-'


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--duration', type=float, default=600.0, help='soak length [s]')
    ap.add_argument('--window', type=float, default=60.0, help='seconds per row')
    ap.add_argument('--rate', type=float, default=1000.0, help='joint_states rate [Hz]')
    ap.add_argument('--urdf', default=TWO_LINK, help='robot (all nodes)')
    ap.add_argument(
        '--model-wait',
        type=float,
        default=300.0,
        help="seconds to wait for the learner's first version before the soak",
    )
    ap.add_argument('--keep', action='store_true', help='keep the folder (logs, bag, models)')
    args = ap.parse_args(argv)
    urdf = os.path.abspath(args.urdf)
    windows = max(1, int(round(args.duration / args.window)))
    private_domain()
    origin = provenance()
    load_start = load_text()

    import rclpy

    tmp = tempfile.mkdtemp(prefix='bench_soak_')
    bag_root = os.path.join(tmp, 'bags')
    nodes = NodeSet(tmp, urdf)
    rclpy.init()
    probe: Optional[Probe] = None
    rows: List[Dict] = []
    sizes: List[Tuple[float, int]] = []  # (s since the soak started, bag bytes)
    mem: List[Dict[str, Dict[str, float]]] = []  # per row, per process
    mem0: Dict[str, Dict[str, float]] = {}
    code, bag, logger_final, final_bytes = 0, None, {}, 0
    counts0 = counts1 = (0, 0)
    diag0, diag1, soak_s = {}, {}, 0.0
    try:
        nodes.start('delan_control', 'sim', realtime_sim(args.rate))
        nodes.start(
            'delan_control', 'torque_controller', {'model': 'pd', **pd_gains(urdf, args.rate)}
        )
        nodes.start('delan_control', 'reference', {'trajectory': 'excitation', 'repeat': 'true'})
        nodes.start_learner()
        nodes.start('delan_learning', 'data_logger', {'bag_dir': bag_root})
        probe = Probe()
        nodes.wait('joint states', lambda: probe.state_count > 100, 60.0)
        nodes.wait('the controller', lambda: bool(probe.diag), 60.0)
        nodes.wait('the data logger', lambda: bool(probe.logger_diag), 60.0)
        nodes.wait('the learner', lambda: probe.status is not None, 90.0)
        model = 'pd'  # until the learner publishes its first version (its quality gate)
        try:
            nodes.wait('a learned model', lambda: probe.updates > 0, args.model_wait)
            probe.set_model('delan')
            model = 'delan'
            time.sleep(3.0)
        except RuntimeError as err:
            if 'timed out' not in str(err):
                raise
            log(
                f'no model version after {args.model_wait:g} s: soaking with pd until one '
                f'comes (learner: {probe.status.message!r})'
            )
        log(
            f'soaking {windows} x {args.window:g} s with model={model} (ROS_DOMAIN_ID '
            f'{os.environ["ROS_DOMAIN_ID"]}, logs in {tmp})'
        )
        pids = nodes.pids()
        pids['bench'] = os.getpid()
        mem0 = {name: proc_memory(pid) for name, pid in pids.items()}
        diag0 = dict(probe.diag)
        counts0 = (probe.state_count, probe.command_count)
        w_start = time.monotonic()
        t0 = time.time_ns()
        sizes.append((0.0, dir_bytes(bag_root)))
        print(
            f'\nSoak: {os.path.relpath(urdf, ROOT)}, joint_states at {args.rate:g} Hz, '
            f"model=delan on the learner's live versions (pd until the first one); "
            f'{load_start} at the start; '
            f'{origin}'
        )
        print(
            "RSS [MB] per process, the learner's anonymous part (l.anon); latency [us] and "
            'missed cycles of the window, joint-state rate the probe saw; bag [MB] on disk; '
            'learner: model version, validation nMSE per joint, replay buffer fill'
        )
        names = list(pids)
        hdr = (
            f'{"min":>4s} '
            + ' '.join(f'{SHORT.get(n, n)[:7]:>7s}' for n in names)
            + f' {"l.anon":>7s} {"model":>8s} {"p50":>5s} {"p99":>6s} {"max":>6s} '
            f'{"missed":>6s} {"Hz":>6s} '
            f'{"bag MB":>7s} {"ver":>4s} {"val nMSE":>15s} {"buffer":>7s} {"load1":>5s}'
        )
        print(hdr)
        print('-' * len(hdr), flush=True)
        for w in range(windows):
            t1 = t0 + int(args.window * 1e9)
            model_at_start = model
            while time.time_ns() < t1:
                nodes.check_alive()
                if model == 'pd' and probe.updates > 0:
                    probe.set_model('delan')
                    model = 'delan'
                    log(f'model=delan (learner v{probe.last_update.model_version})')
                time.sleep(min(5.0, max(0.0, (t1 - time.time_ns()) * 1e-9)))
                sizes.append((time.monotonic() - w_start, dir_bytes(bag_root)))
            caught_up = probe.wait_past(t1)
            states, commands = probe.stamps()
            row = analyse(states, commands, t0, t1)
            probe.discard_before(t1 - 1_000_000_000)
            t0 = t1
            m = {name: proc_memory(pid) for name, pid in pids.items()}
            mem.append(m)
            st = probe.status
            row.update(
                minute=(w + 1) * args.window / 60.0,
                caught_up=caught_up,
                model=model if model == model_at_start else f'{model_at_start}>{model}',
                bag_mb=sizes[-1][1] / 1e6,
                load1=os.getloadavg()[0],
                version=int(st.model_version) if st else 0,
                nmse=list(st.validation_nmse) if st else [],
                buffer=int(st.samples_in_buffer) if st else 0,
                steps=int(st.training_steps) if st else 0,
                learner_message=st.message if st else '',
            )
            rows.append(row)
            nmse = '/'.join(f'{x:.4f}' for x in row['nmse'][:3]) or '-'
            print(
                f'{row["minute"]:4.1f} '
                + ' '.join(f'{m[n]["rss"]:7.1f}' for n in names)
                + f' {m["learner"]["anon"]:7.1f} {row["model"]:>8s} {fmt(row["p50"]):>5s} '
                f'{fmt(row["p99"]):>6s} {fmt(row["max"]):>6s} {row["missed"]:6d} '
                f'{row["rate_hz"]:6.1f} {row["bag_mb"]:7.2f} '
                f'{row["version"]:4d} {nmse:>15s} {row["buffer"]:7d} {row["load1"]:5.2f}'
                + ('' if caught_up else ' (probe behind)'),
                flush=True,
            )
        soak_s = time.monotonic() - w_start
        counts1 = (probe.state_count, probe.command_count)
        diag1 = dict(probe.diag)
        time.sleep(1.1)  # the logger's counters of (nearly) the end
        logger_final = dict(probe.logger_diag)
        log('stopping the data logger (SIGINT: it closes the bag)')
        rc = nodes.stop('data_logger', timeout=60.0)
        if rc != 0:
            raise RuntimeError(f'data_logger exited with {rc} on SIGINT')
        final_bytes = dir_bytes(bag_root)
        log('reading the bag back with rosbags')
        r0 = time.monotonic()
        bag = verify_bag(bag_root, args.rate)
        bag['read_s'] = time.monotonic() - r0
    except RuntimeError as err:
        log(f'FAILED: {err}')
        code = 1
        if rows and not soak_s:  # a node died mid-soak: summarise what there is
            soak_s = time.monotonic() - w_start
            counts1, diag1 = (probe.state_count, probe.command_count), dict(probe.diag)
    finally:
        nodes.stop_all()
        if probe is not None:
            probe.close()
        rclpy.try_shutdown()

    if rows:
        passed = summarise(
            args,
            rows,
            mem0,
            mem,
            sizes,
            bag,
            final_bytes,
            logger_final,
            counts1[0] - counts0[0],
            counts1[1] - counts0[1],
            soak_s,
            diag0,
            diag1,
        )
        print(f'\n{load_text()} at the end; {provenance()}')
        if not passed:
            print('soak FAILED: see the verdicts', file=sys.stderr)
            code = code or 1
    return finish(tmp, args.keep, code)


def summarise(
    args,
    rows: List[Dict],
    mem0: Dict,
    mem: List[Dict],
    sizes: List[Tuple[float, int]],
    bag: Optional[Dict],
    final_bytes: int,
    logger: Dict[str, str],
    n_states: int,
    n_commands: int,
    soak_s: float,
    diag0: Dict,
    diag1: Dict,
) -> bool:
    """The summary tables and one verdict line per criterion; True when every one passed."""
    verdicts = []
    # ---------------------------------------------------------------- memory
    bound = memory_bound_mb(args.rate, len(rows) * args.window)
    half = mem[(len(mem) - 1) // 2]  # the row at (or just before) the middle of the soak
    print(
        f'\nMemory [MB]: RSS at the start of the soak, at the end and the max over the rows; '
        f'growth over the last half (end - row {(len(mem) - 1) // 2 + 1}) of RSS and of its '
        f'anonymous part (heap; the rest is mapped libraries); bound {bound:.1f} MB'
    )
    print(
        f'{"process":>18s} {"start":>7s} {"end":>7s} {"max":>7s} {"anon start":>10s} '
        f'{"anon end":>8s} {"last half":>9s} {"anon half":>9s}  verdict'
    )
    grew = []
    for name in mem0:
        series = [m[name]['rss'] for m in mem]
        d = mem[-1][name]['rss'] - half[name]['rss']
        da = mem[-1][name]['anon'] - half[name]['anon']
        ok = d < bound
        if not ok:
            grew.append(name)
        print(
            f'{name:>18s} {mem0[name]["rss"]:7.1f} {mem[-1][name]["rss"]:7.1f} '
            f'{max(series):7.1f} {mem0[name]["anon"]:10.1f} {mem[-1][name]["anon"]:8.1f} '
            f'{d:+9.1f} {da:+9.1f}  {"bounded" if ok else "GROWING"}'
        )
    filling = rows[-1]['buffer'] > rows[(len(rows) - 1) // 2]['buffer']
    note = (
        "; the learner's replay buffer was still filling in the last half (not yet its "
        'steady state: run longer)'
        if filling
        else ''
    )
    verdicts.append(
        (
            f'memory bounded (RSS growth over the last half < {bound:.1f} MB for every process)',
            not grew,
            ('growing: ' + ', '.join(grew) if grew else 'all processes') + note,
        )
    )
    # ---------------------------------------------------------------- bag
    t = np.array([s[0] for s in sizes])
    y = np.array([s[1] for s in sizes], dtype=float)
    slope, _, r2 = linear_fit(t, y) if len(t) > 2 else (math.nan, math.nan, math.nan)
    msg_rate = (n_states + n_commands) / soak_s if soak_s > 0 else math.nan
    print(
        f'\nBag size vs time ({len(t)} samples every <= 5 s): slope {slope / 1e6 * 60:.2f} '
        f"MB/min, R^2 {r2:.5f}; {slope / msg_rate:.1f} bytes per message at the probe's "
        f'{msg_rate:.0f} msgs/s (joint states + commands)'
    )
    verdicts.append(('bag grows linearly (R^2 > 0.99)', r2 > 0.99, f'R^2 {r2:.5f}'))
    if bag is not None:
        c = bag['counts']
        total = sum(c.values())
        print(
            f'Bag read back with rosbags in {bag["read_s"]:.1f} s: {bag["bags"]} bag(s), '
            f'{final_bytes / 1e6:.2f} MB, {total} messages deserialised '
            f'({final_bytes / max(total, 1):.1f} bytes/message on disk), span '
            f'{bag["span_s"]:.1f} s, malformed {bag["bad"]}'
        )
        for topic, n in sorted(c.items()):
            print(
                f'  {topic}: {n} read, {bag["metadata_counts"].get(topic, 0)} in the metadata, '
                f'logger counters {logger.get(f"received {topic}", "?")} received / '
                f'{logger.get(f"written {topic}", "?")} written (1 s before the stop)'
            )
        print(
            f'  joint-state header stamps: {bag["states_expected"]} expected from the first '
            f'to the last at {args.rate:g} Hz, {bag["states_missing"]} missing in '
            f'{bag["state_gaps"]} gaps, {bag["duplicates"]} duplicates; logger dropped '
            f'{logger.get("dropped", "?")}, dds_lost {logger.get("dds_lost", "?")}, '
            f'write errors {logger.get("write_errors", "?")}'
        )
        n_js = c.get('/joint_states', 0)
        ok = (
            bag['bad'] == 0
            and n_js > 0
            and bag['states_missing'] <= 0.001 * n_js
            and all(c.get(k, 0) == v for k, v in bag['metadata_counts'].items())
        )
        verdicts.append(
            (
                'bag complete and readable (every message deserialised, metadata '
                'counts match, < 0.1 % joint states missing)',
                ok,
                f'{n_js} joint states, {bag["states_missing"]} missing',
            )
        )
    else:
        verdicts.append(('bag complete and readable', False, 'not read (see the log)'))
    # ---------------------------------------------------------------- control loop
    missed = sum(r['missed'] for r in rows)
    states = sum(r['states'] - 1 for r in rows)
    worst_p99 = max((r['p99'] for r in rows if math.isfinite(r['p99'])), default=math.nan)
    worst = max((r['max'] for r in rows if math.isfinite(r['max'])), default=math.nan)
    trips = int(diag1.get('watchdog_trips', 0)) - int(diag0.get('watchdog_trips', 0))
    fallbacks = int(diag1.get('fallbacks', 0)) - int(diag0.get('fallbacks', 0))
    print(
        f'\nControl loop over the soak: {missed} missed cycles of {states} '
        f'({100.0 * missed / max(states, 1):.2f} %), {sum(r["extra"] for r in rows)} late '
        f'extra commands, worst window p99 {fmt(worst_p99)} us, max {fmt(worst)} us; '
        f'watchdog trips {trips}, fallbacks to PD {fallbacks}; learner '
        f'v{rows[-1]["version"]}, {rows[-1]["steps"]} optimiser steps, its last status '
        f'{rows[-1]["learner_message"]!r}'
    )
    delan = [r for r in rows if r['model'] == 'delan']
    d_missed = sum(r['missed'] for r in delan)
    d_p99 = max((r['p99'] for r in delan if math.isfinite(r['p99'])), default=math.nan)
    verdicts.append(
        (
            f'control loop within the benchmark bound for model=delan ({TARGET}, every window)',
            bool(delan) and all(target_met(r) for r in delan),
            f'{len(delan)} of {len(rows)} windows with delan throughout: {d_missed} '
            f'missed, worst p99 {fmt(d_p99)} us'
            if delan
            else "no window with model=delan throughout (no version passed the learner's "
            'quality gate in time)',
        )
    )
    print('\nVerdicts:')
    for what, ok, detail in verdicts:
        print(f'  {"PASS" if ok else "FAIL"}  {what}: {detail}')
    return all(ok for _, ok, _ in verdicts)


if __name__ == '__main__':
    raise SystemExit(main())
