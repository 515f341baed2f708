"""delan_learning.bags and delan-bag2npz on real bag files written with ``rosbags``: the
``ros2 bag record`` layout (mcap and sqlite3), this logger's split layout, and bags damaged the
way crashes damage them (truncated mcap, damaged chunks, missing metadata.yaml, uncommitted
sqlite3 transaction)."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import warnings
import zlib
from pathlib import Path

import numpy as np
import pytest
from rosbags.rosbag2 import Reader, StoragePlugin, Writer

from delan_common.command_order import command_joints_from_controllers_yaml
from delan_learning.bags import (
    COMMAND_TYPE,
    JOINT_STATE_TYPE,
    BagError,
    BagWarning,
    SplitBagWriter,
    TopicSpec,
    iter_bag_messages,
    list_bags,
    qos_profile,
    read_bag_arrays,
    recover_bag,
    ros2_typestore,
)

STORE = ros2_typestore()
JointState = STORE.types[JOINT_STATE_TYPE]
Float64MultiArray = STORE.types[COMMAND_TYPE]
MultiArrayLayout = STORE.types['std_msgs/msg/MultiArrayLayout']
Header = STORE.types['std_msgs/msg/Header']
Time = STORE.types['builtin_interfaces/msg/Time']

T0 = 1_700_000_000_000_000_000  # a plausible epoch in ns
W = np.array([2 * np.pi * 0.5, 2 * np.pi * 0.3])
AMP = np.array([0.8, 0.5])


def motion(t):
    """q, qd, qdd of the two test joints at times t [s] (relative)."""
    t = np.asarray(t, dtype=np.float64)[:, None]
    return AMP * np.sin(W * t), AMP * W * np.cos(W * t), -AMP * W**2 * np.sin(W * t)


def matched(tau, arrays):
    """``tau`` averaged per trajectory with the kernel of the reader's acceleration estimate
    (from the states' velocities), as ``read_bag_arrays`` returns it by default."""
    from delan_learning.data import savgol_matched_torque, trajectory_slices

    out = np.array(tau, dtype=np.float64)
    for idx in trajectory_slices(np.asarray(arrays['traj'])):
        out[idx] = savgol_matched_torque(out[idx], np.asarray(arrays['t'])[idx], 1, 0.05, 3)
    return out


def js_cdr(stamp_ns, names, position, velocity=(), effort=(), frame_id=''):
    msg = JointState(
        header=Header(
            stamp=Time(sec=int(stamp_ns // 1_000_000_000), nanosec=int(stamp_ns % 1_000_000_000)),
            frame_id=frame_id,
        ),
        name=list(names),
        position=np.asarray(position, dtype=np.float64),
        velocity=np.asarray(velocity, dtype=np.float64),
        effort=np.asarray(effort, dtype=np.float64),
    )
    return bytes(STORE.serialize_cdr(msg, JOINT_STATE_TYPE))


def cmd_cdr(values):
    msg = Float64MultiArray(
        layout=MultiArrayLayout(dim=[], data_offset=0), data=np.asarray(values, dtype=np.float64)
    )
    return bytes(STORE.serialize_cdr(msg, COMMAND_TYPE))


def write_ros2_bag(path: Path, storage: str, messages):
    """A bag laid out like ``ros2 bag record`` writes it: <path>/metadata.yaml + <name>_0.<ext>.
    ``messages``: (topic, msgtype, receive time ns, cdr bytes)."""
    with Writer(
        path,
        version=9,
        storage_plugin=StoragePlugin.MCAP if storage == 'mcap' else StoragePlugin.SQLITE3,
    ) as w:
        conns = {}
        for topic, msgtype, ts, data in messages:
            if topic not in conns:
                conns[topic] = w.add_connection(topic, msgtype, typestore=STORE)
            w.write(conns[topic], ts, data)
    ext = '.mcap' if storage == 'mcap' else '.db3'
    old, new = path / f'{path.name}{ext}', path / f'{path.name}_0{ext}'
    old.rename(new)
    meta = path / 'metadata.yaml'
    meta.write_text(meta.read_text().replace(old.name, new.name))
    return path


def arm_messages(
    rate=100.0,
    segments=((0.0, 2.0), (3.0, 5.0)),
    with_effort=True,
    reorder=True,
    extra_joint=True,
    stamp_zero=False,
    rng=None,
):
    """JointStates of joints j1, j2 (+ a gripper) over time segments (a gap between them); the
    name order flips on every other message (with ``rng``: a random order per message, as
    joint_state_broadcaster may publish). effort = 10*q + 1 (an arbitrary known map)."""
    out, truth = [], []
    for a, b in segments:
        for t in np.arange(a, b, 1.0 / rate):
            q, qd, _ = (x[0] for x in motion([t]))
            names, pos, vel, eff = ['j1', 'j2'], list(q), list(qd), list(10 * q + 1)
            if extra_joint:
                names, pos, vel, eff = names + ['gripper'], pos + [0.01], vel + [0.0], eff + [0.0]
            k = len(out)
            if rng is not None:
                p = rng.permutation(len(names))
                names, pos, vel, eff = ([x[i] for i in p] for x in (names, pos, vel, eff))
            elif reorder and k % 2:
                names, pos, vel, eff = names[::-1], pos[::-1], vel[::-1], eff[::-1]
            stamp = 0 if stamp_zero else T0 + int(round(t * 1e9))
            recv = T0 + int(round(t * 1e9)) + 2_000_000  # received 2 ms after the stamp
            out.append(
                (
                    '/joint_states',
                    JOINT_STATE_TYPE,
                    recv,
                    js_cdr(stamp, names, pos, vel, eff if with_effort else ()),
                )
            )
            truth.append(t)
    return out, np.array(truth)


# --------------------------------------------------------------------------------- ros2 layout
@pytest.mark.parametrize('storage', ['mcap', 'sqlite3'])
def test_ros2_layout_reordered_names_gap_two_trajectories(tmp_path, storage):
    msgs, t_true = arm_messages()
    bag = write_ros2_bag(tmp_path / 'rec', storage, msgs)
    assert any(bag.glob('rec_0.*'))
    res = read_bag_arrays(bag, joint_names=['j1', 'j2'])
    assert list(res['joint_names']) == ['j1', 'j2']
    assert 'joint_types' not in res
    assert res['rejected'] == {}
    assert res['info']['recovered'] == []
    assert res['info']['time_source'] == 'header.stamp'
    N = len(t_true)
    assert res['q'].shape == res['qd'].shape == res['qdd'].shape == res['tau'].shape == (N, 2)
    assert res['t'].dtype == np.float64 and res['traj'].dtype == np.int64
    np.testing.assert_allclose(res['t'], t_true - t_true[0], atol=1e-9)
    q, qd, qdd = motion(t_true)
    np.testing.assert_allclose(res['q'], q, atol=1e-12)  # reordering undone
    np.testing.assert_allclose(res['qd'], qd, atol=1e-12)
    assert res['info']['tau_matched']
    np.testing.assert_allclose(res['tau'], matched(10 * q + 1, res), atol=1e-12)
    raw = read_bag_arrays(bag, joint_names=['j1', 'j2'], match_torque=False)
    assert not raw['info']['tau_matched']
    np.testing.assert_allclose(raw['tau'], 10 * q + 1, atol=1e-12)
    np.testing.assert_array_equal(raw['qdd'], res['qdd'])
    assert sorted(set(res['traj'])) == [0, 1]
    assert (res['traj'] == (t_true >= 3.0)).all()  # split exactly at the gap
    inner = np.concatenate([np.arange(5, 195), np.arange(205, 395)])
    np.testing.assert_allclose(res['qdd'][inner], qdd[inner], atol=0.02 * np.abs(qdd).max())
    # without joint_names: every joint of the messages, in the first message's order
    res_all = read_bag_arrays(bag)
    assert list(res_all['joint_names']) == ['j1', 'j2', 'gripper']
    np.testing.assert_allclose(res_all['q'][:, 2], 0.01)


def test_storage_file_directly_and_unknown_extension(tmp_path):
    msgs, t_true = arm_messages(segments=((0.0, 1.0),))
    bag = write_ros2_bag(tmp_path / 'rec', 'mcap', msgs)
    res = read_bag_arrays(bag / 'rec_0.mcap', joint_names=['j1', 'j2'])
    assert len(res['t']) == len(t_true)
    (tmp_path / 'x.bag').write_text('ros1?')
    with pytest.raises(BagError, match='not a bag'):
        read_bag_arrays(tmp_path / 'x.bag')


@pytest.mark.parametrize('storage', ['mcap', 'sqlite3'])
def test_tau_from_commands_when_effort_missing(tmp_path, storage):
    msgs, t_true = arm_messages(with_effort=False, segments=((0.0, 2.0),))
    cmds = []
    for i, (_, _, recv, _) in enumerate(msgs):
        if i < 3:
            continue  # the first 3 states have no command before them
        cmds.append(
            (
                '/effort_controller/commands',
                COMMAND_TYPE,
                recv - 1_000_000,
                cmd_cdr([float(i), -float(i)]),
            )
        )
    every = sorted(msgs + cmds, key=lambda m: m[2])
    bag = write_ros2_bag(tmp_path / 'rec', storage, every)
    res = read_bag_arrays(bag, joint_names=['j1', 'j2'], match_torque=False)
    assert res['info']['command_topic'] == '/effort_controller/commands'
    assert res['rejected'] == {'no_command_yet': 3}
    k = np.arange(3, len(t_true))
    np.testing.assert_allclose(res['tau'], np.stack([k, -k], 1).astype(float))
    np.testing.assert_allclose(res['t'], t_true[3:] - t_true[3], atol=1e-9)
    # effort present but commands forced
    msgs2, _ = arm_messages(segments=((0.0, 1.0),))
    cmds2 = [
        ('/effort_controller/commands', COMMAND_TYPE, m[2] - 1_000_000, cmd_cdr([7.0, 8.0]))
        for m in msgs2
    ]
    bag2 = write_ros2_bag(tmp_path / 'rec2', storage, sorted(msgs2 + cmds2, key=lambda m: m[2]))
    assert np.all(read_bag_arrays(bag2, ['j1', 'j2'])['tau'][:, 0] != 7.0)
    forced = read_bag_arrays(bag2, ['j1', 'j2'], tau_source='command')
    np.testing.assert_allclose(forced['tau'], np.tile([7.0, 8.0], (len(forced['t']), 1)))


def true_torque(t):
    """A torque per model joint [j1, j2] at times t: j1's always positive, j2's negative, so
    values read into the wrong joint show."""
    q, _, _ = motion(t)
    return np.stack([2.0 + q[:, 0], -2.0 + q[:, 1]], 1)


def ros2_control_bag(path: Path, command_joints, storage='mcap', bad_length=()):
    """A ``ros2 bag record`` of a ros2_control robot: joint_state_broadcaster's joint_states
    (every joint, the gripper too, in a random order per message, no effort) and the
    forward_command_controller's commands in its ``joints`` order, 1 ms before each state
    (messages whose index is in ``bad_length`` get one value too many). Returns the states'
    times and the torques in model order."""
    msgs, t = arm_messages(with_effort=False, segments=((0.0, 2.0),), rng=np.random.default_rng(4))
    tau = true_torque(t)
    col = [['j1', 'j2'].index(j) for j in command_joints]
    cmds = [
        (
            '/effort_controller/commands',
            COMMAND_TYPE,
            m[2] - 1_000_000,
            cmd_cdr(list(tau[i, col]) + ([0.0] if i in bad_length else [])),
        )
        for i, m in enumerate(msgs)
    ]
    write_ros2_bag(path, storage, sorted(msgs + cmds, key=lambda m: m[2]))
    return t, tau


CONTROLLERS_YAML = """controller_manager:
  ros__parameters:
    effort_controller:
      type: forward_command_controller/ForwardCommandController
effort_controller:
  ros__parameters:
    interface_name: effort
    joints: [j2, j1]
"""


@pytest.mark.parametrize('storage', ['mcap', 'sqlite3'])
def test_commands_in_the_controllers_joint_order(tmp_path, storage):
    t, tau = ros2_control_bag(tmp_path / 'rec', ['j2', 'j1'], storage)
    res = read_bag_arrays(
        tmp_path / 'rec', ['j1', 'j2'], command_joints=['j2', 'j1'], match_torque=False
    )
    assert res['rejected'] == {} and len(res['t']) == len(t)
    np.testing.assert_array_equal(res['tau'], tau)  # exact, per joint
    np.testing.assert_allclose(res['q'], motion(t)[0], atol=1e-12)
    assert "joint order ['j2', 'j1']" in res['info']['tau_source']
    # the order from the controllers yaml; without joint_names, the commanded joints in their
    # order (the gripper, which no command drives, is left out)
    yaml_file = tmp_path / 'controllers.yaml'
    yaml_file.write_text(CONTROLLERS_YAML)
    joints = command_joints_from_controllers_yaml(yaml_file)
    assert joints == ['j2', 'j1']
    res_yaml = read_bag_arrays(tmp_path / 'rec', command_joints=joints, match_torque=False)
    assert list(res_yaml['joint_names']) == ['j2', 'j1']
    np.testing.assert_array_equal(res_yaml['tau'], tau[:, ::-1])
    # read as if in model order, every torque lands on the other joint
    wrong = read_bag_arrays(tmp_path / 'rec', ['j1', 'j2'], match_torque=False)
    assert np.all(wrong['tau'][:, 0] < 0) and np.all(tau[:, 0] > 0)


def test_command_joints_not_the_joints_read_is_a_clear_error(tmp_path):
    ros2_control_bag(tmp_path / 'rec', ['j2', 'j1'])
    with pytest.raises(BagError, match=r"missing \['j2'\], extra \['gripper'\]"):
        read_bag_arrays(tmp_path / 'rec', ['j1', 'j2'], command_joints=['gripper', 'j1'])
    with pytest.raises(BagError, match=r"missing \['j1'\]"):
        read_bag_arrays(tmp_path / 'rec', ['j1', 'j2'], command_joints=['j2'])
    with pytest.raises(BagError, match=r"repeated \['j2'\]"):
        read_bag_arrays(tmp_path / 'rec', ['j1', 'j2'], command_joints=['j2', 'j2', 'j1'])


def test_command_of_another_length_than_command_joints_rejected(tmp_path):
    t, tau = ros2_control_bag(tmp_path / 'rec', ['j2', 'j1'], bad_length=range(50, 60))
    res = read_bag_arrays(
        tmp_path / 'rec', ['j1', 'j2'], command_joints=['j2', 'j1'], match_torque=False
    )
    assert res['rejected'] == {'command_length': 10}
    keep = np.r_[0:50, 60 : len(t)]
    np.testing.assert_array_equal(res['tau'], tau[keep])


def test_controllers_yaml_without_the_controller_is_a_clear_error(tmp_path):
    yaml_file = tmp_path / 'controllers.yaml'
    yaml_file.write_text(CONTROLLERS_YAML.replace('joints: [j2, j1]', 'joint: j2'))
    with pytest.raises(ValueError, match='effort_controller.ros__parameters.joints'):
        command_joints_from_controllers_yaml(yaml_file)
    with pytest.raises(ValueError, match="no entry for controller 'arm_controller'"):
        command_joints_from_controllers_yaml(yaml_file, 'arm_controller')
    with pytest.raises(ValueError, match='cannot read'):
        command_joints_from_controllers_yaml(tmp_path / 'missing.yaml')


def test_no_effort_and_no_commands_is_a_clear_error(tmp_path):
    msgs, _ = arm_messages(with_effort=False, segments=((0.0, 1.0),))
    bag = write_ros2_bag(tmp_path / 'rec', 'mcap', msgs)
    with pytest.raises(BagError, match='no effort.*no torque command topic'):
        read_bag_arrays(bag, ['j1', 'j2'])


def test_stale_and_wrong_length_commands_rejected(tmp_path):
    msgs, _ = arm_messages(with_effort=False, segments=((0.0, 1.0),))
    cmds = [
        (
            '/effort_controller/commands',
            COMMAND_TYPE,
            m[2] - 1_000_000,
            cmd_cdr([1.0, 2.0] if i < 60 else [1.0, 2.0, 3.0]),
        )
        for i, m in enumerate(msgs)
        if i < 50 or i >= 60
    ]
    bag = write_ros2_bag(tmp_path / 'rec', 'mcap', sorted(msgs + cmds, key=lambda m: m[2]))
    res = read_bag_arrays(bag, ['j1', 'j2'], min_traj_samples=1)
    assert res['rejected']['command_length'] == 40
    assert res['rejected'].get('stale_command', 0) >= 5  # states 55..59: command 50 ms old


def test_zero_header_stamps_fall_back_to_receive_time(tmp_path):
    msgs, t_true = arm_messages(stamp_zero=True, segments=((0.0, 1.0),))
    bag = write_ros2_bag(tmp_path / 'rec', 'sqlite3', msgs)
    res = read_bag_arrays(bag, ['j1', 'j2'])
    assert res['info']['time_source'].startswith('bag receive time')
    np.testing.assert_allclose(res['t'], t_true - t_true[0], atol=1e-9)
    assert res['info']['t0_ns'] == T0 + 2_000_000


def test_invalid_messages_dropped_and_counted(tmp_path):
    msgs, t_true = arm_messages(segments=((0.0, 1.0),), reorder=False, extra_joint=False)
    bad = [
        js_cdr(T0 + 5, ['j1', 'j2'], [np.nan, 0.0], [0, 0], [0, 0]),
        js_cdr(T0 + 6, ['j1', 'j2'], [0.0], [0, 0], [0, 0]),  # 1 position
        js_cdr(T0 + 7, ['j1', 'j1'], [0.0, 0.0], [0, 0], [0, 0]),  # duplicate
        js_cdr(T0 + 8, ['j1'], [0.0], [0], [0]),
    ]  # missing j2
    every = msgs + [
        ('/joint_states', JOINT_STATE_TYPE, T0 + 9_000_000_000 + i, b) for i, b in enumerate(bad)
    ]
    bag = write_ros2_bag(tmp_path / 'rec', 'mcap', every)
    res = read_bag_arrays(bag, ['j1', 'j2'])
    assert res['rejected'] == {
        'non_finite': 1,
        'length_mismatch': 1,
        'duplicate_names': 1,
        'missing_joints': 1,
    }
    assert len(res['t']) == len(t_true)


def test_several_robots_on_one_topic(tmp_path):
    a, _ = arm_messages(segments=((0.0, 1.0),), extra_joint=False)
    b = [
        (
            '/joint_states',
            JOINT_STATE_TYPE,
            m[2] + 500_000,
            js_cdr(
                T0 + (m[2] - T0) + 500_000,
                ['r2_a', 'r2_b', 'r2_c'],
                [1, 2, 3],
                [0, 0, 0],
                [4, 5, 6],
            ),
        )
        for m in a
    ]
    bag = write_ros2_bag(tmp_path / 'rec', 'mcap', sorted(a + b, key=lambda m: m[2]))
    with pytest.raises(BagError, match=r'several joint sets.*j1.*r2_a.*joint_names'):
        read_bag_arrays(bag)
    res = read_bag_arrays(bag, joint_names=['r2_c', 'r2_a'])
    assert res['rejected'] == {'missing_joints': len(a)}
    np.testing.assert_allclose(res['q'], np.tile([3.0, 1.0], (len(b), 1)))
    np.testing.assert_allclose(res['tau'], np.tile([6.0, 4.0], (len(b), 1)))
    with pytest.raises(BagError, match='no valid joint state'):
        read_bag_arrays(bag, joint_names=['nope'])


def test_missing_directory_and_no_joint_states(tmp_path):
    with pytest.raises(BagError, match='does not exist'):
        read_bag_arrays(tmp_path / 'nothing')
    (tmp_path / 'empty').mkdir()
    with pytest.raises(BagError, match='not a bag directory'):
        read_bag_arrays(tmp_path / 'empty')
    bag = write_ros2_bag(
        tmp_path / 'cmds',
        'mcap',
        [('/effort_controller/commands', COMMAND_TYPE, T0, cmd_cdr([1.0]))],
    )
    with pytest.raises(BagError, match='no sensor_msgs/msg/JointState topic'):
        read_bag_arrays(bag)
    msgs, _ = arm_messages(segments=((0.0, 1.0),))
    bag = write_ros2_bag(tmp_path / 'rec', 'mcap', msgs)
    with pytest.raises(BagError, match='/robot/joint_states is not in the bag'):
        read_bag_arrays(bag, joint_state_topic='/robot/joint_states')


# ------------------------------------------------------------------------------ damaged bags
def _logger_bag(tmp_path, storage='mcap', n=300, flush_every=50, close=True):
    w = SplitBagWriter(
        tmp_path / 'bags',
        [TopicSpec('/joint_states', JOINT_STATE_TYPE, (qos_profile(),))],
        storage=storage,
    )
    for i in range(n):
        t = i * 0.01
        q, qd, _ = (x[0] for x in motion([t]))
        w.write(
            '/joint_states',
            T0 + int(t * 1e9) + 1000,
            js_cdr(T0 + int(round(t * 1e9)), ['j1', 'j2'], q, qd, [1.0, 2.0]),
        )
        if (i + 1) % flush_every == 0:
            w.flush()
    if close:
        w.close()
    return w


@pytest.mark.parametrize('storage', ['mcap', 'sqlite3'])
def test_missing_metadata_yaml_read_and_recovered(tmp_path, storage):
    w = _logger_bag(tmp_path, storage)
    bag = w.paths[0]
    (bag / 'metadata.yaml').unlink()
    with pytest.warns(BagWarning, match='no metadata.yaml'):
        res = read_bag_arrays(bag)
    assert len(res['t']) == 300 and res['info']['recovered']
    with pytest.raises(BagError, match='strict'):
        read_bag_arrays(bag, strict=True)
    assert recover_bag(bag) == bag
    with Reader(bag) as r:
        assert r.message_count == 300
        assert [c.topic for c in r.connections] == ['/joint_states']
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        assert read_bag_arrays(bag)['info']['recovered'] == []
    assert recover_bag(bag) == bag  # intact now: left alone


def test_truncated_mcap_reads_complete_chunks(tmp_path):
    w = _logger_bag(tmp_path, 'mcap', n=300, flush_every=50)
    bag = w.paths[0]
    f = bag / f'{bag.name}.mcap'
    data = f.read_bytes()
    # cut inside the summary: all 6 flushed chunks survive
    f.write_bytes(data[: len(data) - 100])
    with pytest.warns(BagWarning, match='truncated|end magic'):
        assert len(read_bag_arrays(bag)['t']) == 300
    # cut in the middle: the complete chunks before the cut survive, nothing raises
    f.write_bytes(data[: len(data) // 2])
    with pytest.warns(BagWarning):
        res = read_bag_arrays(bag)
    assert 50 <= len(res['t']) < 300 and len(res['t']) % 50 == 0
    assert any('truncated' in n for n in res['info']['recovered'])
    with pytest.raises(BagError, match='strict'):
        read_bag_arrays(bag, strict=True)
    recover_bag(bag)
    with Reader(bag) as r:
        assert r.message_count == len(res['t'])
    assert (bag / 'recovered_from' / f.name).stat().st_size == len(data) // 2
    # cut inside the header: nothing readable
    f2 = tmp_path / 'tiny.mcap'
    f2.write_bytes(data[:12])
    with pytest.raises(BagError, match='header'):
        read_bag_arrays(f2)


def _with_chunk_crcs(data):
    """``data`` (an mcap file of uncompressed chunks) with every chunk's CRC set, as the C++
    writer sets it, and the (CRC field, records start, records end) offsets of each chunk."""
    buf, chunks, pos = bytearray(data), [], 8
    while pos + 9 <= len(buf) and buf[pos] != 0x0F:  # up to the data-end record
        (length,) = struct.unpack_from('<Q', buf, pos + 1)
        if buf[pos] == 0x06:
            crc_at = pos + 9 + 24
            (n_comp,) = struct.unpack_from('<I', buf, crc_at + 4)
            (n_recs,) = struct.unpack_from('<Q', buf, crc_at + 8 + n_comp)
            start = crc_at + 16 + n_comp
            struct.pack_into('<I', buf, crc_at, zlib.crc32(buf[start : start + n_recs]))
            chunks.append((crc_at, start, start + n_recs))
        pos += 9 + length
    return buf, chunks


def test_damaged_chunk_skipped_and_later_chunks_read(tmp_path):
    w = _logger_bag(tmp_path, 'mcap', n=300, flush_every=50)  # 6 chunks of 50 states
    bag = w.paths[0]
    f = bag / f'{bag.name}.mcap'
    buf, chunks = _with_chunk_crcs(f.read_bytes())
    assert len(chunks) == 6
    _, start, end = chunks[2]
    buf[end - 3] ^= 0xFF  # a byte of the last state in the third chunk
    f.write_bytes(bytes(buf[: len(buf) - 100]))  # and the summary cut: salvaged record by record
    with pytest.warns(BagWarning) as caught:
        res = read_bag_arrays(bag)
    assert any('skipped a damaged chunk' in str(w.message) for w in caught)
    assert len(res['t']) == 250 and res['info']['trajectories'] == 2
    assert res['t'][-1] == pytest.approx(2.99)  # the chunks after the damaged one are read
    recover_bag(bag)
    with Reader(bag) as r:
        assert r.message_count == 250


@pytest.mark.parametrize('storage', ['mcap', 'sqlite3'])
def test_unclosed_bag_keeps_everything_flushed(tmp_path, storage):
    """What a SIGKILL leaves: the writer is never closed; all flushed messages are readable."""
    w = _logger_bag(tmp_path, storage, n=275, flush_every=50, close=False)  # 250 flushed
    bag = w.paths[0]
    snap = tmp_path / 'snapshot'
    shutil.copytree(bag, snap / bag.name)  # the files as a kill would leave them
    w.abort()
    with pytest.warns(BagWarning):
        res = read_bag_arrays(snap / bag.name)
    assert len(res['t']) == 250
    recover_bag(snap)
    with Reader(snap / bag.name) as r:
        assert r.message_count == 250


# ------------------------------------------------------------------------------ split writer
def test_split_writer_size_and_duration(tmp_path):
    spec = [TopicSpec('/joint_states', JOINT_STATE_TYPE), TopicSpec('/c', COMMAND_TYPE)]
    w = SplitBagWriter(tmp_path / 's', spec, prefix='run', max_bag_size_mb=0.01)
    payload = js_cdr(T0, ['j1', 'j2'], [0, 0], [0, 0], [0, 0])
    for i in range(400):
        w.write(
            '/joint_states' if i % 4 else '/c',
            T0 + i * 1_000_000,
            payload if i % 4 else cmd_cdr([i]),
        )
    w.close()
    assert len(w.paths) >= 4
    assert [p.name for p in w.paths] == [f'{w.session}_{i:03d}' for i in range(len(w.paths))]
    assert w.session.startswith('run_')
    total = 0
    for p in w.paths:
        with Reader(p) as r:
            total += r.message_count
            assert {c.topic for c in r.connections} == {'/joint_states', '/c'}
        assert sum(f.stat().st_size for f in p.iterdir()) < 0.01e6 + 8000
    assert total == 400
    assert list_bags(tmp_path / 's') == w.paths
    assert sum(1 for _ in iter_bag_messages(tmp_path / 's')) == 400

    w = SplitBagWriter(tmp_path / 'd', spec, max_bag_duration_s=0.25)
    for i in range(100):  # 1 s at 100 Hz
        w.write('/joint_states', T0 + i * 10_000_000, payload)
    w.close()
    counts = []
    for p in w.paths:
        with Reader(p) as r:
            counts.append(r.message_count)
    assert counts == [25, 25, 25, 25]
    with pytest.raises(ValueError, match='prefix'):
        SplitBagWriter(tmp_path / 'x', spec, prefix='a/b')
    with pytest.raises(ValueError, match='storage'):
        SplitBagWriter(tmp_path / 'x', spec, storage='rosbag1')


def test_directory_of_split_bags_reads_as_one_dataset(tmp_path):
    w = SplitBagWriter(
        tmp_path / 'bags', [TopicSpec('/joint_states', JOINT_STATE_TYPE)], max_bag_duration_s=0.5
    )
    t = np.arange(0, 2.0, 0.01)
    q, qd, _ = motion(t)
    for k, tk in enumerate(t):
        stamp = T0 + int(round(tk * 1e9))
        w.write('/joint_states', stamp + 1000, js_cdr(stamp, ['j1', 'j2'], q[k], qd[k], [0, 1]))
    w.close()
    assert len(w.paths) == 4
    res = read_bag_arrays(tmp_path / 'bags')
    assert len(res['t']) == len(t) and set(res['traj']) == {0}  # no gap at the splits
    np.testing.assert_allclose(res['q'], q)


# ------------------------------------------------------------------------------ delan-bag2npz
def _cli():
    prefix = os.environ.get('COLCON_PREFIX_PATH', '').split(os.pathsep)[0] or 'install'
    exe = os.path.join(prefix, 'delan_learning', 'lib', 'delan_learning', 'delan-bag2npz')
    if not os.path.exists(exe):
        pytest.skip(f'{exe} not installed; run make setup')
    return exe


def test_bag2npz_cli(tmp_path):
    exe = _cli()
    msgs, t_true = arm_messages()
    bag = write_ros2_bag(tmp_path / 'rec', 'mcap', msgs)
    out = tmp_path / 'out' / 'data.npz'
    r = subprocess.run(
        [
            exe,
            '--bag',
            str(bag),
            '--out',
            str(out),
            '--joints',
            'j2,j1',
            '--topic',
            '/joint_states',
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    assert '2 trajectories' in r.stdout
    with np.load(out, allow_pickle=False) as f:
        assert set(f.files) == {'q', 'qd', 'qdd', 'tau', 'traj', 't', 'joint_names'}
        assert list(f['joint_names']) == ['j2', 'j1']
        q, qd, _ = motion(t_true)
        np.testing.assert_allclose(f['q'], q[:, ::-1], atol=1e-12)
        tau = (10 * q + 1)[:, ::-1]
        np.testing.assert_allclose(f['tau'], matched(tau, f), atol=1e-12)
        assert f['traj'].dtype == np.int64 and f['t'].dtype == np.float64
        assert f['qdd'].shape == (len(t_true), 2) and np.all(np.isfinite(f['qdd']))
        assert set(f['traj']) == {0, 1}
    # the trainer's loader accepts it
    from delan_learning.data import load_npz

    ds = load_npz(str(out))
    assert ds.n_dof == 2 and len(ds) == len(t_true)

    from delan_learning.bag_cli import main  # same entry point, in-process

    out2 = tmp_path / 'typed.npz'
    assert (
        main(
            [
                '--bag',
                str(bag),
                '--out',
                str(out2),
                '--joints',
                'j1,j2',
                '--joint-types',
                'revolute,prismatic',
            ]
        )
        == 0
    )
    with np.load(out2) as f:
        assert list(f['joint_types']) == ['revolute', 'prismatic']


def test_bag2npz_cli_command_order(tmp_path):
    exe = _cli()
    t, tau = ros2_control_bag(tmp_path / 'rec', ['j2', 'j1'])
    yaml_file = tmp_path / 'controllers.yaml'
    yaml_file.write_text(CONTROLLERS_YAML)
    for option in (['--controllers-yaml', str(yaml_file)], ['--command-joints', 'j2,j1']):
        out = tmp_path / 'data.npz'
        r = subprocess.run(
            [exe, '--bag', str(tmp_path / 'rec'), '--out', str(out), '--joints', 'j1,j2', *option],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.returncode == 0, r.stderr
        with np.load(out) as f:
            np.testing.assert_allclose(f['tau'], matched(tau, f), atol=1e-12)
    r = subprocess.run(
        [
            exe,
            '--bag',
            str(tmp_path / 'rec'),
            '--out',
            str(out),
            '--command-joints',
            'j2,j1',
            '--controllers-yaml',
            str(yaml_file),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and 'not allowed with' in r.stderr
    r = subprocess.run(
        [
            exe,
            '--bag',
            str(tmp_path / 'rec'),
            '--out',
            str(tmp_path / 'x.npz'),
            '--joints',
            'j1,j2',
            '--command-joints',
            'j1,gripper',
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and "missing ['j2']" in r.stderr and 'Traceback' not in r.stderr


def test_bag2npz_cli_bad_input_exit_2(tmp_path):
    exe = _cli()
    out = tmp_path / 'x.npz'
    r = subprocess.run(
        [exe, '--bag', str(tmp_path / 'missing'), '--out', str(out)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and 'does not exist' in r.stderr and 'Traceback' not in r.stderr
    msgs, _ = arm_messages(with_effort=False, segments=((0.0, 1.0),))
    bag = write_ros2_bag(tmp_path / 'rec', 'sqlite3', msgs)
    r = subprocess.run(
        [exe, '--bag', str(bag), '--out', str(out)], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 2 and 'no effort' in r.stderr and 'Traceback' not in r.stderr
    r = subprocess.run(
        [exe, '--bag', str(bag), '--out', str(out), '--joints', 'j1,j2', '--gap-factor', '0.5'],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and 'gap_factor' in r.stderr
    r = subprocess.run([exe, '--bag', str(bag)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and '--out' in r.stderr
    assert not out.exists()
