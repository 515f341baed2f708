#!/usr/bin/env python3
"""Where the online learner's memory goes, and whether it plateaus.

The soak (``bench_soak.py``) sees the learner's RSS climb by ~100-200 MB over the first minutes.
This runs the real ``LearnerNode`` in this process -- its executor (status and estimate timers)
and its training thread as in the product -- and hands joint states to its subscription
callback at ``--rate`` Hz in real time (the mismatched 2-link arm of sim_params.yaml, simulated
excitation data, replayed in a loop with a time gap between trajectories so the acceleration
estimator restarts). No DDS: the numbers are the learner's own. Every ``--every`` seconds:

* RSS and its anonymous part (heap; the rest is mapped libraries),
* glibc's heap statistics (``mallinfo2``, all arenas): bytes in use by live allocations, bytes
  free but kept in the heap, bytes in ``mmap``-ed blocks,
* replay-buffer fill (train + validation), optimiser steps, model versions, checkpoint files.

At the end ``malloc_trim(0)`` hands free heap pages back to the OS: what RSS drops then was
freed memory glibc kept (a cache, not a leak; see ``training.tune_allocator``, which raises the
trim threshold to 512 MB on purpose), what stays is live. ``--no-tune-allocator`` runs with
glibc's defaults instead, ``--eval-chunk`` validates in smaller forward passes, for comparison.

Usage: ``python bench/bench_learner_memory.py [--duration 300] [--every 15]``.
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import gc
import os
import shutil
import tempfile
import threading
import time
from typing import Dict, List, Optional

import numpy as np
from node_set import (
    TWO_LINK,
    load_text,
    log,
    node_params,
    private_domain,
    proc_memory,
    provenance,
    sim_mismatch,
)

GAP_S = 0.2  # between replayed trajectories: above the learner's max_gap (0.1 s)


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            'arena',
            'ordblks',
            'smblks',
            'hblks',
            'hblkhd',
            'usmblks',
            'fsmblks',
            'uordblks',
            'fordblks',
            'keepcost',
        )
    ]


_LIBC = ctypes.CDLL('libc.so.6')
_LIBC.mallinfo2.restype = _MallInfo2


def heap_mb() -> Dict[str, float]:
    """glibc heap over all arenas [MB]: ``used`` by live allocations (small blocks in the
    heaps + mmap-ed big blocks), ``free`` kept in the heaps, ``mmap`` part of ``used``."""
    mi = _LIBC.mallinfo2()
    return {
        'used': (mi.uordblks + mi.hblkhd) / 1e6,
        'free': mi.fordblks / 1e6,
        'mmap': mi.hblkhd / 1e6,
    }


def excitation_data(urdf: str, rate: float) -> Dict[str, np.ndarray]:
    """Four 30 s excitation runs of the mismatched arm at ``rate``, with measured-like torques."""
    from delan_control.datagen import generate_dataset

    return generate_dataset(
        urdf, trajectories=4, duration=30.0, rate=rate, seed=3, mismatch=sim_mismatch()
    )


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--duration', type=float, default=300.0, help='seconds of joint states')
    ap.add_argument('--every', type=float, default=15.0, help='seconds per row')
    ap.add_argument('--rate', type=float, default=1000.0, help='joint_states rate [Hz]')
    ap.add_argument('--urdf', default=TWO_LINK)
    ap.add_argument(
        '--no-tune-allocator',
        action='store_true',
        help="glibc's default mmap/trim thresholds (no mallopt)",
    )
    ap.add_argument(
        '--eval-chunk',
        type=int,
        default=None,
        help='samples per forward pass in Trainer.evaluate (default: its own, '
        '16384): the peak of a validation pass sets much of the plateau',
    )
    args = ap.parse_args(argv)
    urdf = os.path.abspath(args.urdf)
    private_domain()
    origin, load0 = provenance(), load_text()
    from delan_learning import training

    if args.no_tune_allocator:
        training._ALLOCATOR_TUNED = True  # tune_allocator() then returns without mallopt
    if args.eval_chunk:
        training.Trainer.evaluate = functools.partialmethod(
            training.Trainer.evaluate, chunk=args.eval_chunk
        )

    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.parameter import Parameter
    from sensor_msgs.msg import JointState

    from delan_learning.nodes.learner import LearnerNode

    log('simulating excitation data')
    data = excitation_data(urdf, args.rate)
    names = [str(x) for x in data['joint_names']]
    starts = np.flatnonzero(np.diff(data['traj'], prepend=-1) != 0)
    tmp = tempfile.mkdtemp(prefix='bench_learner_memory_')
    ckpt = os.path.join(tmp, 'ckpt')
    overrides = {
        **node_params('learner'),
        'checkpoint_dir': ckpt,
        'resume': False,
        'torch_threads': 1,
        'urdf_path': urdf,
    }
    ctx = rclpy.Context()
    rclpy.init(context=ctx)
    node = LearnerNode(
        context=ctx, parameter_overrides=[Parameter(k, value=v) for k, v in overrides.items()]
    )
    ex = SingleThreadedExecutor(context=ctx)
    ex.add_node(node)
    spinner = threading.Thread(target=ex.spin, daemon=True)
    spinner.start()
    pid = os.getpid()
    rows = []
    print(
        f'\nLearner memory: {os.path.relpath(urdf)} at {args.rate:g} Hz for '
        f'{args.duration:g} s, learner parameters of sim_params.yaml '
        f'(buffer_capacity {node.capacity}, batch {node.batch_size} x '
        f'{node.steps_per_round} steps per round), allocator '
        f'{"glibc defaults" if args.no_tune_allocator else "tuned (training.tune_allocator)"}'
        f'{f", evaluate chunk {args.eval_chunk}" if args.eval_chunk else ""}; '
        f'{load0}; {origin}'
    )
    hdr = (
        f'{"t s":>5s} {"RSS":>7s} {"anon":>7s} {"heap used":>9s} {"heap free":>9s} '
        f'{"mmap":>6s} {"train buf":>9s} {"val buf":>7s} {"buf MB":>6s} {"steps":>6s} '
        f'{"ver":>4s} {"ckpts":>5s}'
    )
    print(hdr)
    print('-' * len(hdr), flush=True)
    msg = JointState(name=names)
    period = 1.0 / args.rate
    t_stamp = 1_700_000_000.0
    k, fed = 0, 0
    w0 = time.monotonic()
    next_row = 0.0
    try:
        while True:
            now = time.monotonic() - w0
            if now >= next_row:
                m, h = proc_memory(pid), heap_mb()
                with node._lock:
                    tr, va = node.train_buf.size, node.val_buf.size
                    buf = (node.train_buf.nbytes + node.val_buf.nbytes) / 1e6
                files = len(os.listdir(ckpt)) if os.path.isdir(ckpt) else 0
                row = dict(
                    t=now,
                    **m,
                    **{f'heap_{x}': v for x, v in h.items()},
                    train=tr,
                    val=va,
                    steps=node.training_steps,
                    ver=node.version,
                )
                rows.append(row)
                print(
                    f'{now:5.0f} {m["rss"]:7.1f} {m["anon"]:7.1f} {h["used"]:9.1f} '
                    f'{h["free"]:9.1f} {h["mmap"]:6.1f} {tr:9d} {va:7d} {buf:6.1f} '
                    f'{node.training_steps:6d} {node.version:4d} {files:5d}',
                    flush=True,
                )
                next_row += args.every
                if now >= args.duration:
                    break
            # feed every joint state that is due by now (real time)
            due = int(now * args.rate)
            while fed < due:
                i = k % len(data['t'])
                if i in starts and k:
                    t_stamp += GAP_S
                t_stamp += period
                sec = int(t_stamp)
                msg.header.stamp.sec, msg.header.stamp.nanosec = sec, int((t_stamp - sec) * 1e9)
                msg.position = data['q'][i].tolist()
                msg.velocity = data['qd'][i].tolist()
                msg.effort = data['tau'][i].tolist()
                node._on_joint_state(msg)
                k += 1
                fed += 1
            time.sleep(0.005)
    finally:
        node.close()
        ex.shutdown(timeout_sec=5.0)
        spinner.join(timeout=5.0)
    before = proc_memory(pid)
    heap_before = heap_mb()
    gc.collect()
    _LIBC.malloc_trim(0)
    after = proc_memory(pid)
    import torch

    live = [o for o in gc.get_objects() if torch.is_tensor(o)]
    tensor_mb = sum(o.element_size() * o.nelement() for o in live) / 1e6
    first, last = rows[0], rows[-1]
    half = rows[len(rows) // 2]
    print(
        f'\nAnonymous RSS: {first["anon"]:.1f} MB at the start, {half["anon"]:.1f} at '
        f'{half["t"]:.0f} s, {last["anon"]:.1f} at the end (last half '
        f'{last["anon"] - half["anon"]:+.1f} MB); '
        f'replay buffers preallocated {(node.train_buf.nbytes + node.val_buf.nbytes) / 1e6:.1f} '
        f'MB (pages become resident as they fill)'
    )
    print(
        f'After the training thread stopped: heap in use {heap_before["used"]:.1f} MB, free '
        f'but kept {heap_before["free"]:.1f} MB; malloc_trim(0): RSS {before["rss"]:.1f} -> '
        f'{after["rss"]:.1f} MB, anon {before["anon"]:.1f} -> {after["anon"]:.1f} MB; live '
        f'torch tensors {len(live)} ({tensor_mb:.1f} MB)'
    )
    print(f'{load_text()} at the end')
    node.destroy_node()
    rclpy.try_shutdown(context=ctx)
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
