"""Training arrays from a joint-state bag: :func:`read_bag_arrays` and its steps (read the
messages, choose the joint set, map the states, attach torques, time base and trajectories,
derivatives and result)."""

from __future__ import annotations

import math
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from delan_common.command_order import CommandOrder, CommandOrderError
from delan_common.joint_state import JointStateError, JointStateMapper
from delan_learning.bags.errors import BagError, BagWarning
from delan_learning.bags.sources import Source, list_bags, open_sources
from delan_learning.bags.types import (
    COMMAND_TOPIC_SUFFIX,
    COMMAND_TYPE,
    JOINT_STATE_TYPE,
    PathLike,
    deserialize_cdr,
    ros2_typestore,
)
from delan_learning.data import complete_derivatives, split_at_gaps

# npz keys of a training set (joint_types only when known)
ARRAY_KEYS = ('q', 'qd', 'qdd', 'tau', 'traj', 't', 'joint_names', 'joint_types')


def read_bag_arrays(
    path: PathLike,
    joint_names: Optional[Sequence[str]] = None,
    joint_state_topic: Optional[str] = None,
    command_topic: Optional[str] = None,
    gap_factor: float = 5.0,
    *,
    joint_types: Optional[Sequence[str]] = None,
    tau_source: str = 'auto',
    strict: bool = False,
    complete: bool = True,
    match_torque: bool = True,
    min_traj_samples: int = 5,
    command_joints: Optional[Sequence[str]] = None,
) -> dict:
    """Training arrays from a joint-state bag (this logger's or ``ros2 bag record``'s).

    Args:
        path: bag directory, ``.mcap``/``.db3`` file, or a directory of bags (read together).
        joint_names: joints to extract, in this order. None: ``command_joints`` when given, else
            the joints of the bag's messages (in the first message's order); an error when
            messages name different joint sets (several robots on one topic) -- the error lists
            the sets found.
        joint_state_topic: sensor_msgs/JointState topic; default: the only one, else
            ``/joint_states``.
        command_topic: std_msgs/Float64MultiArray torque commands (data in ``command_joints``
            order); default: the only one ending in ``effort_controller/commands``. Used for tau
            when the joint states carry no effort (or ``tau_source='command'``): each state takes
            the latest command received before it (both by bag receive time).
        gap_factor: a time step above ``gap_factor`` x median step starts a new trajectory.
        joint_types: optional per-joint types ('revolute'/'prismatic'); absent when None.
        tau_source: 'auto' (effort if the states carry it, else commands), 'effort', 'command'.
        strict: raise BagError on a damaged bag instead of reading what is readable.
        complete: fill qdd (and qd when the states carry no velocity) with
            ``delan_learning.data.complete_derivatives``.
        match_torque: with ``complete``, return ``tau`` averaged with the kernel of the
            acceleration estimate, the torque that the estimated ``qdd`` answers to (what training
            wants); False returns the recorded torque. ``info['tau_matched']`` says which.
        min_traj_samples: trajectories with fewer samples are dropped (``rejected
            ['short_trajectory']``); the differentiator needs a few samples per trajectory.
        command_joints: the joint order of the recorded commands (a ros2_control
            forward_command_controller's ``joints``, see
            :func:`delan_common.command_order.command_joints_from_controllers_yaml`), which need
            not be ``joint_names`` order: commands carry no names. None: ``joint_names`` order.
            Commands of another length are dropped (``rejected['command_length']``).

    Returns:
        dict with ``q``, ``qd``, ``qdd``, ``tau`` (N x n float64), ``traj`` (N,) int64, ``t`` (N,)
        float64 seconds since the first sample (header stamps; bag receive times when any stamp
        is zero), ``joint_names`` (n,) str, ``joint_types`` only when given, plus
        ``rejected`` (dict reason -> count of dropped messages) and ``info`` (dict: topics, time
        and torque sources, t0_ns, bags, ``recovered`` notes on damaged input).

    Raises:
        BagError: missing path, unreadable bag, no joint-state topic, no effort and no commands,
            ambiguous joint sets, ``command_joints`` not the joints read, no valid sample.
    """
    _check_options(gap_factor, min_traj_samples, tau_source)
    bags = list_bags(path)
    msgs = _read_messages(path, bags, joint_state_topic, command_topic, strict)
    for note in msgs.notes:
        warnings.warn(note, BagWarning, stacklevel=2)
    joints = _choose_joints(msgs, joint_names, command_joints, joint_types)
    samples = _map_states(msgs, joints)
    torque_from = _attach_torques(samples, msgs, joints, tau_source, gap_factor)
    series = _time_series(samples, msgs, gap_factor, min_traj_samples)
    arrays = _arrays(series, joints, samples.with_qd, joint_types, complete, match_torque)
    result: Dict[str, Any] = dict(arrays)
    result['rejected'] = dict(msgs.rejected)
    result['info'] = {
        'bags': [str(b) for b in bags],
        'joint_state_topic': msgs.js_topic,
        'command_topic': msgs.cmd_topic,
        'tau_source': torque_from,
        'tau_matched': bool(complete and match_torque),
        'qd_source': f'{msgs.js_topic}.velocity' if samples.with_qd else 'estimated from q',
        'time_source': series.time_source,
        't0_ns': series.t0,
        'messages': len(msgs.states),
        'samples': int(len(arrays['t'])),
        'trajectories': int(arrays['traj'].max() + 1),
        'recovered': msgs.notes,
    }
    return result


def _check_options(gap_factor: float, min_traj_samples: int, tau_source: str) -> None:
    if gap_factor <= 1.0 or not math.isfinite(gap_factor):
        raise ValueError(f'gap_factor must be > 1, not {gap_factor}')
    if min_traj_samples < 1:
        raise ValueError(f'min_traj_samples must be >= 1, not {min_traj_samples}')
    if tau_source not in ('auto', 'effort', 'command'):
        raise ValueError(f"tau_source must be 'auto', 'effort' or 'command', not {tau_source!r}")


# -- step 1: the messages of the joint-state and command topics, decoded
@dataclass
class _Messages:
    topics: Dict[str, str]  # every topic of the bags -> its type
    js_topic: str
    cmd_topic: Optional[str]
    cmd_error: Optional[BagError]  # several command topics: an error only if commands are needed
    states: List[Tuple[int, Any]] = field(default_factory=list)  # (receive ns, JointState)
    commands: List[Tuple[int, np.ndarray]] = field(default_factory=list)  # (receive ns, data)
    notes: List[str] = field(default_factory=list)  # damage met while reading
    rejected: Counter[str] = field(default_factory=Counter)  # dropped messages by reason


def _read_messages(
    path: PathLike,
    bags: List[Path],
    joint_state_topic: Optional[str],
    command_topic: Optional[str],
    strict: bool,
) -> _Messages:
    """Open every bag, pick the topics and decode their messages (undecodable ones counted)."""
    notes: List[str] = []
    sources: List[Source] = []
    try:
        for bag in bags:
            sources.extend(open_sources(bag, notes, strict))
        topics: Dict[str, str] = {}
        for src in sources:
            for name, t in src.topics.items():
                topics.setdefault(name, t.msgtype)
        js_topic, cmd_topic, cmd_error = _pick_topics(
            path, topics, joint_state_topic, command_topic
        )
        msgs = _Messages(topics, js_topic, cmd_topic, cmd_error, notes=notes)
        store = ros2_typestore()
        wanted = [msgs.js_topic] + ([msgs.cmd_topic] if msgs.cmd_topic else [])
        for src in sources:
            for topic, ts, data in src.iter(wanted):
                try:
                    msg = deserialize_cdr(store, data, topics[topic])
                except Exception:  # noqa: BLE001 - any garbage in the payload
                    is_state = topic == msgs.js_topic
                    msgs.rejected['undecodable' if is_state else 'undecodable_command'] += 1
                    continue
                if topic == msgs.js_topic:
                    msgs.states.append((ts, msg))
                else:
                    msgs.commands.append((ts, np.asarray(msg.data, dtype=np.float64)))
    finally:
        for src in sources:
            src.close()
    if not msgs.states:
        raise BagError(f'{msgs.js_topic} has no readable messages in {path}')
    return msgs


def _pick_topics(
    path: PathLike,
    topics: Dict[str, str],
    joint_state_topic: Optional[str],
    command_topic: Optional[str],
) -> Tuple[str, Optional[str], Optional[BagError]]:
    """The joint-state topic (required), the command topic (None when there is none) and why
    there is none when several command topics make the choice ambiguous."""
    js_topic = _pick_topic(
        topics, JOINT_STATE_TYPE, joint_state_topic, 'joint state', '/joint_states'
    )
    if js_topic is None:
        raise BagError(f'no {JOINT_STATE_TYPE} topic in {path} (topics: {_fmt_topics(topics)})')
    cmd_error: Optional[BagError] = None
    try:
        cmd_topic = _pick_topic(
            {
                t: ty
                for t, ty in topics.items()
                if command_topic is not None or t.endswith(COMMAND_TOPIC_SUFFIX)
            },
            COMMAND_TYPE,
            command_topic,
            'command',
            COMMAND_TOPIC_SUFFIX,
        )
    except BagError as exc:
        if command_topic is not None:
            raise
        cmd_topic, cmd_error = None, exc
    return js_topic, cmd_topic, cmd_error


def _pick_topic(
    topics: Dict[str, str], msgtype: str, wanted: Optional[str], what: str, preferred: str
) -> Optional[str]:
    """A topic of ``msgtype``: ``wanted`` (must exist), else the only one, else ``preferred``."""
    if wanted is not None:
        name = wanted if wanted.startswith('/') else '/' + wanted
        if name not in topics:
            raise BagError(
                f'{what} topic {name} is not in the bag (topics: {_fmt_topics(topics)})'
            )
        if topics[name] != msgtype:
            raise BagError(f'{what} topic {name} has type {topics[name]}, expected {msgtype}')
        return name
    cands = sorted(t for t, ty in topics.items() if ty == msgtype)
    if len(cands) == 1:
        return cands[0]
    pref = [t for t in cands if t == preferred or t.endswith(preferred.lstrip('/'))]
    if len(pref) == 1:
        return pref[0]
    if len(cands) > 1:
        raise BagError(
            f'several {msgtype} topics {cands}: choose one with the {what} topic argument'
        )
    return None


def _fmt_topics(topics: Dict[str, str]) -> str:
    return ', '.join(f'{t} [{ty}]' for t, ty in sorted(topics.items())) or 'none'


# -- step 2: the joints to extract, and the order the commands name them in
@dataclass
class _Joints:
    names: List[str]
    command_order: CommandOrder
    mapper: JointStateMapper


def _choose_joints(
    msgs: _Messages,
    joint_names: Optional[Sequence[str]],
    command_joints: Optional[Sequence[str]],
    joint_types: Optional[Sequence[str]],
) -> _Joints:
    """``joint_names``, else ``command_joints`` (a gripper is left out), else the one joint set
    the messages name (several sets: several robots on one topic, an error listing them)."""
    if joint_names is None and command_joints is not None:
        joint_names = command_joints
    if joint_names is None:
        joint_names = _joint_set_of_messages(msgs)
    names = [str(n) for n in joint_names]
    try:
        command_order = CommandOrder(
            names, names if command_joints is None else [str(j) for j in command_joints]
        )
    except CommandOrderError as err:
        raise BagError(f'command_joints: {err}') from None
    mapper = JointStateMapper(names, allow_extra=True, require_velocity=False)
    if joint_types is not None and len(joint_types) != len(names):
        raise ValueError(f'{len(joint_types)} joint_types for {len(names)} joints')
    return _Joints(names, command_order, mapper)


def _joint_set_of_messages(msgs: _Messages) -> List[str]:
    sets: Dict[frozenset, list] = {}
    for _, msg in msgs.states:
        names = list(msg.name)
        if names and len(set(names)) == len(names):
            entry = sets.setdefault(frozenset(names), [names, 0])
            entry[1] += 1
    if not sets:
        raise BagError(f'no message on {msgs.js_topic} names its joints')
    if len(sets) > 1:
        listing = '; '.join(
            f'{names} ({n} messages)' for names, n in sorted(sets.values(), key=lambda e: -e[1])
        )
        raise BagError(
            f'{msgs.js_topic} carries several joint sets '
            '(several robots on one topic?): '
            f'{listing}. Pass joint_names to pick one.'
        )
    return next(iter(sets.values()))[0]


# -- step 3: joint states in model order, with what each carries
@dataclass
class _Samples:
    recv: np.ndarray  # (N,) int64 receive time, ns
    stamp: np.ndarray  # (N,) int64 header stamp, ns
    q: np.ndarray
    qd: np.ndarray
    tau: np.ndarray  # effort, NaN where the state has none
    has_e: np.ndarray  # (N,) bool: the state carries effort
    keep: np.ndarray  # (N,) bool: still usable
    with_qd: bool  # the states carry velocity (else it is estimated from q)


def _map_states(msgs: _Messages, joints: _Joints) -> _Samples:
    """Map every state to the model's joints (rejects counted by reason); the velocity is used
    when all states carry it, estimated when none does, and states without it are dropped when
    only some do."""
    n = len(joints.names)
    recv, stamp, q, qd, tau, has_v, has_e = [], [], [], [], [], [], []
    for ts, msg in msgs.states:
        try:
            m = joints.mapper.map(msg)
        except JointStateError as err:
            msgs.rejected[err.reason] += 1
            continue
        recv.append(ts)
        stamp.append(_stamp_ns(msg))
        q.append(m.position)
        qd.append(m.velocity)
        has_v.append(len(msg.velocity) > 0)
        has_e.append(m.effort is not None)
        tau.append(m.effort if m.effort is not None else np.full(n, np.nan))
    if not recv:
        raise BagError(
            f'no valid joint state for joints {joints.names} on {msgs.js_topic} '
            f'(rejected: {dict(msgs.rejected)})'
        )
    v = np.asarray(has_v)
    keep = np.ones(len(recv), dtype=bool)
    with_qd = bool(v.any())
    if with_qd and not v.all():
        msgs.rejected['no_velocity'] += int((~v).sum())
        keep &= v
    return _Samples(
        recv=np.asarray(recv, dtype=np.int64),
        stamp=np.asarray(stamp, dtype=np.int64),
        q=np.asarray(q),
        qd=np.asarray(qd),
        tau=np.asarray(tau),
        has_e=np.asarray(has_e),
        keep=keep,
        with_qd=with_qd,
    )


def _stamp_ns(msg: Any) -> int:
    return int(msg.header.stamp.sec) * 1_000_000_000 + int(msg.header.stamp.nanosec)


# -- step 4: torques, from the states' effort or from the latest command before each state
def _attach_torques(
    samples: _Samples, msgs: _Messages, joints: _Joints, tau_source: str, gap_factor: float
) -> str:
    """Fill ``samples.tau`` (states without a torque are dropped); returns where it came from."""
    has_e = samples.has_e
    if tau_source == 'effort' or (tau_source == 'auto' and has_e.any()):
        if not has_e.any():
            raise BagError(f'{msgs.js_topic} carries no effort (tau_source=effort)')
        if not has_e.all():
            msgs.rejected['no_effort'] += int((samples.keep & ~has_e).sum())
            samples.keep &= has_e
        return f'{msgs.js_topic}.effort'
    return _torques_from_commands(samples, msgs, joints.command_order, gap_factor)


def _torques_from_commands(
    samples: _Samples, msgs: _Messages, order: CommandOrder, gap_factor: float
) -> str:
    """Each state takes the latest command received before it, unless that is missing, of
    another length, not finite, or older than ``gap_factor`` x the median command step."""
    if msgs.cmd_error is not None:
        raise BagError(f'{msgs.js_topic} carries no effort: {msgs.cmd_error}')
    if msgs.cmd_topic is None:
        raise BagError(
            f'{msgs.js_topic} carries no effort and the bag has no torque command topic '
            f'({COMMAND_TYPE} ending in {COMMAND_TOPIC_SUFFIX}; topics: '
            f'{_fmt_topics(msgs.topics)}); pass command_topic'
        )
    commands = sorted(msgs.commands, key=lambda c: c[0])
    if not commands:
        raise BagError(f'command topic {msgs.cmd_topic} has no readable messages')
    c_t = np.asarray([c[0] for c in commands], dtype=np.int64)
    idx = np.searchsorted(c_t, samples.recv, side='right') - 1
    c_dt = np.diff(c_t)
    c_dt = c_dt[c_dt > 0]
    stale_ns = gap_factor * float(np.median(c_dt)) if c_dt.size else math.inf
    n, keep, rejected = len(order.joints), samples.keep, msgs.rejected
    for i in range(len(samples.recv)):
        if not keep[i]:
            continue
        j = idx[i]
        if j < 0:
            reason: Optional[str] = 'no_command_yet'
        else:
            cmd = commands[j][1]
            if cmd.shape != (n,):
                reason = 'command_length'
            elif not np.all(np.isfinite(cmd)):
                reason = 'non_finite_command'
            elif samples.recv[i] - c_t[j] > stale_ns:
                reason = 'stale_command'
            else:
                reason = None
                samples.tau[i] = order.to_model(cmd)
        if reason is not None:
            rejected[reason] += 1
            keep[i] = False
    torque_from = f'{msgs.cmd_topic} (latest before each state)'
    if not order.is_model_order:
        torque_from += f', joint order {list(order.joints)}'
    return torque_from


# -- step 5: time base, duplicates and trajectories
@dataclass
class _Series:
    t: np.ndarray  # (N,) s since t0
    q: np.ndarray
    qd: np.ndarray
    tau: np.ndarray
    traj: np.ndarray  # (N,) int64 trajectory index from 0
    t0: int  # ns
    time_source: str


def _time_series(
    samples: _Samples, msgs: _Messages, gap_factor: float, min_traj_samples: int
) -> _Series:
    """The kept samples in time order (header stamps unless some are zero, then receive time for
    all), duplicates dropped, split into trajectories at gaps above ``gap_factor`` x the median
    step; trajectories too short to differentiate are dropped."""
    keep, rejected, js_topic = samples.keep, msgs.rejected, msgs.js_topic
    recv, stamp = samples.recv[keep], samples.stamp[keep]
    q, qd, tau = samples.q[keep], samples.qd[keep], samples.tau[keep]
    if recv.size == 0:
        raise BagError(f'no usable sample on {js_topic} (rejected: {dict(rejected)})')
    if np.all(stamp > 0):
        t_ns, time_source = stamp, 'header.stamp'
    else:
        t_ns, time_source = recv, 'bag receive time (header stamps are zero)'
    order = np.argsort(t_ns, kind='stable')
    t_ns, q, qd, tau = t_ns[order], q[order], qd[order], tau[order]
    dup = np.concatenate([[False], np.diff(t_ns) == 0])
    if dup.any():
        rejected['duplicate_stamp'] += int(dup.sum())
        t_ns, q, qd, tau = t_ns[~dup], q[~dup], qd[~dup], tau[~dup]
    t0 = int(t_ns[0])
    t = (t_ns - t0).astype(np.float64) * 1e-9
    traj = split_at_gaps(t, gap_factor=gap_factor)

    ids, counts = np.unique(traj, return_counts=True)
    short = ids[counts < min_traj_samples]
    if short.size:
        drop = np.isin(traj, short)
        rejected['short_trajectory'] += int(drop.sum())
        t, q, qd, tau, traj = t[~drop], q[~drop], qd[~drop], tau[~drop], traj[~drop]
        if t.size == 0:
            raise BagError(
                f'no trajectory of at least {min_traj_samples} samples on {js_topic} '
                f'(gap_factor={gap_factor}; rejected: {dict(rejected)})'
            )
        traj = np.unique(traj, return_inverse=True)[1].astype(np.int64).reshape(-1)
        t0 += int(round(t[0] * 1e9))
        t = t - t[0]
    return _Series(t, q, qd, tau, traj, t0, time_source)


# -- step 6: the training arrays, with derivatives
def _arrays(
    series: _Series,
    joints: _Joints,
    with_qd: bool,
    joint_types: Optional[Sequence[str]],
    complete: bool,
    match_torque: bool,
) -> Dict[str, np.ndarray]:
    """The npz arrays; with ``complete``, qdd (and qd when not recorded) estimated, and tau
    matched to the estimate when ``match_torque``."""
    arrays: Dict[str, np.ndarray] = {
        'q': series.q,
        'tau': series.tau,
        't': series.t,
        'traj': series.traj,
        'joint_names': np.asarray(joints.names, dtype=str),
    }
    if with_qd:
        arrays['qd'] = series.qd
    if joint_types is not None:
        arrays['joint_types'] = np.asarray([str(x) for x in joint_types], dtype=str)
    if complete:
        try:
            arrays = dict(complete_derivatives(arrays, match_torque=match_torque))
        except ValueError as exc:
            raise BagError(f'cannot estimate derivatives: {exc}') from exc
        if joint_types is None:
            arrays.pop('joint_types', None)  # unknown: let the trainer's default apply
    return arrays
