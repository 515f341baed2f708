"""Data logger throughput: bag writing (rosbags, mcap / sqlite3), the executor-side cost of a
message, and end to end over DDS (publisher in this process -> data_logger process -> bag).

Prints a table of msgs/s and bytes/msg for 7-joint sensor_msgs/JointState messages.
Run: ``source env.sh && python bench/bench_logger.py`` (about 40 s).
"""

from __future__ import annotations

import os
import signal
import sys
import tempfile
import time
from pathlib import Path

import node_set  # noqa: F401  (puts the test-only delan_testing on sys.path)
import numpy as np

from delan_learning.bags import (
    JOINT_STATE_TYPE,
    SplitBagWriter,
    TopicSpec,
    qos_profile,
    ros2_typestore,
)

JOINTS = [f'joint_{i}' for i in range(1, 8)]


def payload(store, i):
    js = store.types[JOINT_STATE_TYPE]
    hdr = store.types['std_msgs/msg/Header']
    tm = store.types['builtin_interfaces/msg/Time']
    msg = js(
        header=hdr(
            stamp=tm(sec=1_700_000_000 + i // 1000, nanosec=(i % 1000) * 1_000_000), frame_id=''
        ),
        name=JOINTS,
        position=np.random.rand(7),
        velocity=np.random.rand(7),
        effort=np.random.rand(7),
    )
    return bytes(store.serialize_cdr(msg, JOINT_STATE_TYPE))


def bench_writer(storage: str, n: int = 50_000, flush_every: int = 1000):
    store = ros2_typestore()
    data = [payload(store, i) for i in range(100)]
    with tempfile.TemporaryDirectory() as tmp:
        w = SplitBagWriter(
            tmp, [TopicSpec('/joint_states', JOINT_STATE_TYPE, (qos_profile(),))], storage=storage
        )
        w.open()
        t0 = time.perf_counter()
        ts = time.time_ns()
        for i in range(n):
            w.write('/joint_states', ts + i * 1_000_000, data[i % 100])
            if (i + 1) % flush_every == 0:
                w.flush()
        w.close()
        dt = time.perf_counter() - t0
        size = sum(f.stat().st_size for p in w.paths for f in p.iterdir())
    return n / dt, size / n, len(data[0])


def bench_callback(n: int = 20_000):
    """Executor-side cost: the raw subscription callback (stamp + enqueue), in process."""
    import rclpy
    from rclpy.parameter import Parameter
    from rclpy.serialization import serialize_message
    from sensor_msgs.msg import JointState

    from delan_learning.nodes.data_logger import DataLoggerNode
    from delan_testing.ros import ros_context

    with ros_context() as ctx, tempfile.TemporaryDirectory() as tmp:
        node = DataLoggerNode(
            context=ctx,
            parameter_overrides=[
                Parameter('bag_dir', value=tmp),
                Parameter('record_commands', value=False),
            ],
        )
        raw = serialize_message(
            JointState(name=JOINTS, position=[0.0] * 7, velocity=[0.0] * 7, effort=[0.0] * 7)
        )
        cb = node._make_callback(0)
        t0 = time.perf_counter()
        for _ in range(n):
            cb(raw)
        per_msg = (time.perf_counter() - t0) / n
        node.close()  # drains: writer thread incl. validation
        total = time.perf_counter() - t0
        written = node.stats()['written'].get('/joint_states', 0)
        node.destroy_node()
        del rclpy
    return per_msg, written / total


def bench_end_to_end(n: int = 5000, rate: float = 2000.0):
    """Publisher here -> data_logger process over Fast DDS (loopback) -> mcap bag."""
    import rclpy
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from rosbags.rosbag2 import Reader
    from sensor_msgs.msg import JointState

    from delan_testing.ros import node_process, ros_context

    os.environ.setdefault('ROS_DOMAIN_ID', str(80 + os.getpid() % 20))  # not the default 0
    with tempfile.TemporaryDirectory() as tmp, ros_context() as ctx:
        node = rclpy.create_node('bench_pub', context=ctx)
        pub = node.create_publisher(
            JointState,
            'joint_states',
            QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE),
        )
        proc = node_process(
            'delan_learning',
            'data_logger',
            ['-p', f'bag_dir:={tmp}', '-p', 'record_commands:=false'],
        )
        try:
            deadline = time.monotonic() + 30
            while pub.get_subscription_count() < 1 and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(0.5)
            msg = JointState(name=JOINTS, position=[0.0] * 7, velocity=[0.0] * 7, effort=[0.0] * 7)
            t0 = time.perf_counter()
            period = 1.0 / rate
            for i in range(n):
                msg.position[0] = float(i)
                pub.publish(msg)
                target = t0 + (i + 1) * period
                while time.perf_counter() < target:
                    pass
            sent_rate = n / (time.perf_counter() - t0)
            time.sleep(0.5)
        finally:
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=60)
            node.destroy_node()
        count = 0
        for bag in Path(tmp).iterdir():
            with Reader(bag) as r:
                count += r.message_count
    return sent_rate, count, n


def main() -> int:
    print('| stage | storage | msgs/s | bytes/msg on disk (payload) |')
    print('|---|---|---|---|')
    for storage in ('mcap', 'sqlite3'):
        rate, per, pl = bench_writer(storage)
        print(
            f'| SplitBagWriter.write (+flush every 1000) | {storage} | {rate:,.0f} | '
            f'{per:.0f} ({pl}) |'
        )
    per_msg, drain = bench_callback()
    print(
        f'| subscription callback (executor side) | - | {1 / per_msg:,.0f} '
        f'({per_msg * 1e6:.1f} us/msg) | - |'
    )
    print(f'| writer thread (validate + write) | mcap | {drain:,.0f} | - |')
    for rate in (1000.0, 5000.0):
        sent, got, n = bench_end_to_end(n=int(rate * 3), rate=rate)
        print(
            f'| end to end over DDS, {sent:,.0f} msgs/s offered for 3 s | mcap | '
            f'{got}/{n} recorded | - |'
        )
    return 0


if __name__ == '__main__':
    sys.exit(main())
