"""data_logger as a real process over real DDS: every message published before SIGINT/SIGTERM is
in the bag, splits lose nothing, a SIGKILL keeps everything older than the flush period, and
malformed input is recorded but counted. Plus in-process checks of the queue overflow path."""

from __future__ import annotations

import signal
import subprocess
import time
import warnings
from pathlib import Path

import pytest
import rclpy
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.parameter import Parameter
from rclpy.qos import QoSProfile, ReliabilityPolicy
from rosbags.rosbag2 import Reader
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray

from delan_learning.bags import (
    BagWarning,
    iter_bag_messages,
    read_bag_arrays,
    recover_bag,
    ros2_typestore,
)
from delan_testing.ros import make_executor, node_process, ros_context, spin_until

N = 200
STORE = ros2_typestore()


class Rig:
    """Publishers of joint states and commands, and a /diagnostics listener, in this process."""

    def __init__(self, ctx):
        self.node = rclpy.create_node('logger_test_rig', context=ctx)
        qos = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE)
        self.js = self.node.create_publisher(JointState, 'joint_states', qos)
        self.cmd = self.node.create_publisher(Float64MultiArray, 'effort_controller/commands', qos)
        self.diag = {}
        self.node.create_subscription(DiagnosticArray, '/diagnostics', self._on_diag, 10)
        self.ex = make_executor(ctx, [self.node])

    def _on_diag(self, msg):
        for s in msg.status:
            if s.name.startswith('data_logger'):
                self.diag = {kv.key: kv.value for kv in s.values}
                self.diag['_level'] = s.level

    def joint_state(self, i, frame='data', position=None, names=('j1', 'j2')):
        m = JointState()
        m.header.stamp = self.node.get_clock().now().to_msg()
        m.header.frame_id = frame
        m.name = list(names)
        m.position = list(position) if position is not None else [float(i), -float(i)]
        m.velocity = [0.1 * i, 0.2] if position is None else [0.0] * len(m.position)
        m.effort = [1.0, 2.0] if position is None else [0.0] * len(m.position)
        return m

    def command(self, i):
        return Float64MultiArray(data=[float(i), 0.5])

    def wait_recording(self, proc, timeout=30.0):
        """Publish warm-up messages until the logger reports receiving both topics."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert proc.poll() is None, proc.stdout.read()
            self.js.publish(self.joint_state(-1, frame='warmup'))
            self.cmd.publish(self.command(-1))
            if spin_until(
                self.ex,
                lambda: (
                    int(self.diag.get('received /joint_states', 0)) > 0
                    and int(self.diag.get('received /effort_controller/commands', 0)) > 0
                ),
                0.1,
            ):
                return
        raise AssertionError('logger never received the warm-up messages')

    def publish_data(self, n=N, period=0.001):
        for i in range(n):
            self.js.publish(self.joint_state(i))
            self.cmd.publish(self.command(i))
            time.sleep(period)

    def close(self):
        self.ex.shutdown()
        self.node.destroy_node()


def start_logger(tmp_path, *params):
    args = ['-p', f'bag_dir:={tmp_path / "bags"}', '-p', 'diagnostics_period_s:=0.1']
    for p in params:
        args += ['-p', p]
    return node_process(
        'delan_learning',
        'data_logger',
        args,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=tmp_path,
    )


def stop(proc, sig, timeout=30.0):
    if proc.poll() is None:
        proc.send_signal(sig)
    try:
        proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.stdout.read()


def data_indices(messages):
    """Indices of 'data' joint states and of commands (warm-up excluded), from raw bag messages."""
    js, cmd = [], []
    for topic, msgtype, _, raw in messages:
        msg = STORE.deserialize_cdr(raw, msgtype)
        if topic == '/joint_states' and msg.header.frame_id == 'data':
            js.append(int(round(msg.position[0])))
        elif topic == '/effort_controller/commands' and msg.data[0] >= 0:
            cmd.append(int(round(msg.data[0])))
    return js, cmd


def read_bag_dir(path: Path):
    out = []
    with Reader(path) as r:
        for conn, ts, raw in r.messages():
            out.append((conn.topic, conn.msgtype, ts, raw))
    return out


@pytest.mark.parametrize(
    'sig,storage',
    [(signal.SIGINT, 'mcap'), (signal.SIGTERM, 'mcap'), (signal.SIGTERM, 'sqlite3')],
    ids=['SIGINT-mcap', 'SIGTERM-mcap', 'SIGTERM-sqlite3'],
)
def test_every_message_in_bag_after_signal(tmp_path, sig, storage):
    with ros_context() as ctx:
        rig = Rig(ctx)
        proc = start_logger(tmp_path, f'storage:={storage}', 'flush_period_s:=5.0')
        try:
            rig.wait_recording(proc)
            rig.publish_data()
            # malformed input is recorded anyway but counted
            rig.js.publish(rig.joint_state(0, frame='bad', position=[float('nan'), 0.0]))
            rig.js.publish(rig.joint_state(0, frame='bad', position=[1.0]))
            assert spin_until(rig.ex, lambda: int(rig.diag.get('malformed', 0)) >= 2, 10.0), (
                rig.diag
            )
            assert rig.diag['malformed non_finite'] == '1'
            assert rig.diag['malformed length_mismatch'] == '1'
            assert rig.diag['dropped'] == '0'
            time.sleep(0.15)  # > 100 ms before the signal
            out = stop(proc, sig)
        finally:
            if proc.poll() is None:
                proc.kill()
            rig.close()
    assert proc.returncode == 0, out
    assert 'Traceback' not in out, out
    bags = sorted((tmp_path / 'bags').iterdir())
    assert len(bags) == 1 and bags[0].name.startswith('delan_') and bags[0].name.endswith('_000')
    assert (bags[0] / 'metadata.yaml').is_file()
    assert any(bags[0].glob('*.mcap' if storage == 'mcap' else '*.db3'))
    messages = read_bag_dir(bags[0])
    assert {m[0] for m in messages} == {'/joint_states', '/effort_controller/commands'}
    js, cmd = data_indices(messages)
    assert sorted(js) == list(range(N)) and sorted(cmd) == list(range(N))
    frames = [
        STORE.deserialize_cdr(m[3], m[1]).header.frame_id
        for m in messages
        if m[0] == '/joint_states'
    ]
    assert frames.count('bad') == 2  # recorded, not filtered
    stamps = [m[2] for m in messages]
    assert stamps == sorted(stamps) and stamps[0] > 1.6e18  # receive time, ns since epoch


def test_split_by_size_loses_nothing(tmp_path):
    with ros_context() as ctx:
        rig = Rig(ctx)
        proc = start_logger(tmp_path, 'max_bag_size_mb:=0.01')
        try:
            rig.wait_recording(proc)
            rig.publish_data()
            time.sleep(0.3)
            out = stop(proc, signal.SIGINT)
        finally:
            if proc.poll() is None:
                proc.kill()
            rig.close()
    assert proc.returncode == 0, out
    bags = sorted((tmp_path / 'bags').iterdir())
    assert len(bags) >= 3, bags
    session = bags[0].name[:-4]
    assert [b.name for b in bags] == [f'{session}_{i:03d}' for i in range(len(bags))]
    everything = []
    for b in bags:
        part = read_bag_dir(b)  # each split is a complete bag
        assert part
        everything += part
    js, cmd = data_indices(everything)
    assert sorted(js) == list(range(N)) and sorted(cmd) == list(range(N))  # no loss, no dupes
    res = read_bag_arrays(
        tmp_path / 'bags',
        joint_names=['j1', 'j2'],
        complete=False,
        gap_factor=1e9,
        min_traj_samples=1,
    )  # all splits read together
    assert len(res['q']) >= N


def test_sigkill_keeps_what_was_flushed(tmp_path):
    with ros_context() as ctx:
        rig = Rig(ctx)
        proc = start_logger(tmp_path, 'flush_period_s:=0.2')
        try:
            rig.wait_recording(proc)
            rig.publish_data()
            # wait until everything is on disk (flushed chunks only), however loaded the machine
            deadline = time.monotonic() + 20.0
            while time.monotonic() < deadline:
                time.sleep(0.5)
                found = [p for p in (tmp_path / 'bags').glob('*') if p.is_dir()]
                if found:
                    with warnings.catch_warnings():
                        warnings.simplefilter('ignore')
                        js, cmd = data_indices(list(iter_bag_messages(found[0], notes=[])))
                    if len(set(js)) == N and len(set(cmd)) == N:
                        break
            time.sleep(0.5)  # > flush period
            stop(proc, signal.SIGKILL)
        finally:
            if proc.poll() is None:
                proc.kill()
            rig.close()
    bags = sorted((tmp_path / 'bags').iterdir())
    assert len(bags) == 1
    assert not (bags[0] / 'metadata.yaml').exists()  # never closed
    notes = []
    js, cmd = data_indices(list(iter_bag_messages(bags[0], notes=notes)))
    assert any('no metadata.yaml' in n for n in notes) and any('truncated' in n for n in notes)
    assert sorted(js) == list(range(N)) and sorted(cmd) == list(range(N))
    with pytest.warns(BagWarning):
        # no splitting at gaps: a stall of the publisher on a loaded machine would cut out a
        # fragment too short to be a trajectory (the indices above prove every message is there)
        arrays = read_bag_arrays(bags[0], ['j1', 'j2'], complete=False, gap_factor=1e9)
        assert len(arrays['q']) >= N
    assert sorted(js) == list(range(N)) and sorted(cmd) == list(range(N))
    recover_bag(bags[0])
    js, cmd = data_indices(read_bag_dir(bags[0]))
    assert sorted(js) == list(range(N)) and sorted(cmd) == list(range(N))


def test_queue_overflow_is_counted_not_silent(tmp_path):
    """In-process: a stalled writer overflows the bounded queue; the callback never blocks and
    every drop is counted; close() writes what was queued."""
    from delan_learning.nodes.data_logger import DataLoggerNode

    with ros_context() as ctx:
        node = DataLoggerNode(
            context=ctx,
            parameter_overrides=[
                Parameter('bag_dir', value=str(tmp_path / 'bags')),
                Parameter('queue_size', value=10),
                Parameter('record_commands', value=False),
            ],
        )
        try:
            bags = node._bags
            real_write = bags.write

            def slow_write(*a):
                time.sleep(0.02)
                real_write(*a)

            bags.write = slow_write
            raw = rclpy.serialization.serialize_message(
                JointState(name=['a'], position=[1.0], velocity=[0.0], effort=[0.0])
            )
            callback = node._make_callback(0)
            t0 = time.monotonic()
            for _ in range(100):
                callback(raw)
            assert time.monotonic() - t0 < 0.5  # never waited for the disk
            s = node.stats()
            assert s['received'] == {'/joint_states': 100}
            assert 80 <= s['dropped'] <= 90
            assert not node.set_parameters([Parameter('storage', value='sqlite3')])[0].successful
            assert node.set_parameters([Parameter('max_bag_size_mb', value=5.0)])[0].successful
            assert node.max_bag_size_mb == 5.0
            r = node.set_parameters([Parameter('max_bag_size_mb', value=-1.0)])
            assert not r[0].successful
        finally:
            node.close()
            node.close()  # idempotent
            node.destroy_node()
    written = node.stats()['written']['/joint_states']
    assert written + node.stats()['dropped'] == 100
    messages = read_bag_dir(sorted((tmp_path / 'bags').iterdir())[0])
    assert len(messages) == written


@pytest.mark.parametrize(
    'params,expected',
    [
        (['storage:=rosbag1'], 'storage'),
        (['max_bag_size_mb:=1'], 'max_bag_size_mb'),  # an int for a double parameter
        (['bag_dir:={blocker}/bags'], 'cannot write bags'),  # a file where the directory goes
    ],
    ids=['choice', 'type', 'unwritable'],
)
def test_bad_parameters_fail_start_up_with_exit_2(tmp_path, params, expected):
    blocker = tmp_path / 'file'
    blocker.write_text('')
    args = ['-p', f'bag_dir:={tmp_path / "bags"}']
    for p in params:
        args += ['-p', p.format(blocker=blocker)]
    proc = node_process(
        'delan_learning',
        'data_logger',
        args,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 2 and expected in out and 'Traceback' not in out, out
