"""The online learner on a recorded bag, reproducibly: joint states fed through the real
``LearnerNode`` (intake, acceleration estimate, buffers, rounds, validation, publication) in stamp
order, with optimiser steps paced by the stamps at a chosen rate instead of by the CPU, so a run
does not depend on the machine's load (``bench/bench_learner_replay.py``,
``delan_control.learning_curves``)."""

from __future__ import annotations

import glob
import os
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np
import rclpy
import torch
import yaml
from rclpy.context import Context

#: learner parameters that belong to the run, not to what it learned: where it writes, its seed
#: and threads, what it publishes for people; the replay sets or leaves these itself. Every other
#: parameter the learner declares is carried over from the demo's file, so one added later that
#: shapes learning is replayed as the run had it
RUN_OWN = frozenset(
    (
        'urdf_path',
        'robot_description',
        'robot_description_timeout',
        'seed',
        'training_enabled',
        'checkpoint_dir',
        'keep_versions',
        'resume',
        'status_rate',
        'estimate_publish_rate',
        'estimate_rate',
        'torch_threads',
        'training_niceness',
    )
)


def learner_params() -> Tuple[Any, ...]:
    """Every parameter the learner node declares (``Param``): the robot's, then its own."""
    from delan_common.param_table import robot_table
    from delan_learning.params.learner import TABLE

    return robot_table() + TABLE


def carried() -> Tuple[str, ...]:
    """The learner parameters a replay takes over from a demo's parameter file."""
    return tuple(p.name for p in learner_params() if p.name not in RUN_OWN)


def joint_states(bag_dir: str) -> List[Any]:
    """The bag's JointState messages in bag order (rosbags' deserialised dataclasses)."""
    from rosbags.highlevel import AnyReader

    paths = [
        Path(p) for p in sorted(glob.glob(os.path.join(bag_dir, '*'))) if os.path.isdir(p)
    ] or [Path(bag_dir)]
    with AnyReader(paths) as reader:
        conns = [c for c in reader.connections if c.msgtype == 'sensor_msgs/msg/JointState']
        if not conns:
            raise SystemExit(f'no sensor_msgs/JointState in {bag_dir}')
        return [
            reader.deserialize(raw, c.msgtype) for c, _, raw in reader.messages(connections=conns)
        ]


def learner_overrides(params_file: str) -> Dict[str, Any]:
    """The learner parameters of a demo's parameter file that shape its learning."""
    with open(params_file) as f:
        doc = yaml.safe_load(f) or {}
    section = (doc.get('/**/learner') or {}).get('ros__parameters', {})
    keep = carried()
    # an empty list has no parameter type to override with: it is the node's default anyway
    return {k: v for k, v in section.items() if k in keep and v != []}


def replay_learner(
    msgs,
    urdf: str,
    overrides: dict,
    rate: float,
    until: float,
    seed: int,
    checkpoint_dir: str,
    threads: int,
    on_publish: Optional[Callable[[Any, float], None]] = None,
    say: Callable[[str], None] = print,
) -> Tuple[int, str, float]:
    """Feed ``msgs`` through a LearnerNode, ``rate`` optimiser steps per second of stamps;
    returns (training steps, last published checkpoint or '', wall seconds). ``on_publish(node,
    seconds of stamps since the first state)`` is called after each round that published a
    version; ``say`` reports the learner's last words."""
    from rclpy.parameter import Parameter
    from sensor_msgs.msg import JointState

    from delan_learning.nodes.learner import LearnerNode

    values = {
        **overrides,
        'urdf_path': urdf,
        'checkpoint_dir': checkpoint_dir,
        'training_enabled': False,
        'torch_threads': threads,
        'seed': seed,
        'resume': False,
    }
    wall = time.perf_counter()
    ctx = Context()
    rclpy.init(context=ctx)
    try:
        node = LearnerNode(
            context=ctx, parameter_overrides=[Parameter(k, value=v) for k, v in values.items()]
        )
        try:
            torch.set_num_threads(threads)
            rng = np.random.default_rng(seed)
            steps_due, t_first, t_prev = 0.0, None, None
            for m in msgs:
                t = m.header.stamp.sec + 1e-9 * m.header.stamp.nanosec
                if t == 0.0:
                    continue  # the sim's first state: stamped by its clock, which is not here
                if t_first is None:
                    t_first = t
                if until and t - t_first > until:
                    break
                js = JointState(
                    name=list(m.name),
                    position=list(m.position),
                    velocity=list(m.velocity),
                    effort=list(m.effort),
                )
                js.header.stamp.sec, js.header.stamp.nanosec = (
                    m.header.stamp.sec,
                    m.header.stamp.nanosec,
                )
                node._on_joint_state(js)
                ready = node.learning.ready(*node.buffers.sizes())
                if ready and t_prev is not None:
                    steps_due += rate * (t - t_prev)
                t_prev = t
                while steps_due >= node.steps_per_round:
                    steps_due -= node.steps_per_round
                    version = node.version
                    node.train_once(rng, now=t)
                    if on_publish is not None and node.version != version:
                        on_publish(node, t - t_first)
            say(
                f'seed {seed}: learner says {node.message!r}; v{node.version} published; '
                f'validation nMSE {np.round(node.val_nmse, 4).tolist()}, last good '
                f'{np.round(node.policy.good_nmse, 4).tolist()}'
            )
            return node.training_steps, node.checkpoint_path or '', time.perf_counter() - wall
        finally:
            node.close()
            node.destroy_node()
    finally:
        rclpy.try_shutdown(context=ctx)
