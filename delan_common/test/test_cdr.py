"""The byte-level joint-state reader and command writer agree with the middleware's own
(de)serialisation on every layout (name and frame-id lengths move the alignment of the arrays)."""

import numpy as np
import pytest
from rclpy.serialization import deserialize_message, serialize_message
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray

from delan_common.ros.cdr import CdrError, CommandBytes, JointStateReader, locate_float64_runs


def _random_state(rng) -> JointState:
    n = int(rng.integers(0, 9))
    letters = list('abcxyzé_0123456789') + ['ü', '関']
    names = [''.join(rng.choice(letters, size=int(rng.integers(1, 12)))) for _ in range(n)]
    msg = JointState(name=names)
    msg.header.frame_id = ''.join(rng.choice(letters, size=int(rng.integers(0, 8))))
    msg.header.stamp.sec = int(rng.integers(-(2**31), 2**31))
    msg.header.stamp.nanosec = int(rng.integers(0, 10**9))
    for field in ('position', 'velocity', 'effort'):
        k = int(rng.choice([0, n, n + 1, max(n - 1, 0)]))
        v = rng.normal(size=k)
        if k and rng.random() < 0.3:
            v[int(rng.integers(k))] = rng.choice([np.nan, np.inf, -np.inf])
        setattr(msg, field, v.tolist())
    return msg


def test_reader_equals_deserialisation_on_random_messages():
    rng = np.random.default_rng(0)
    reader = JointStateReader()
    for _ in range(500):
        msg = _random_state(rng)
        data = serialize_message(msg)
        assert reader.supports(data)
        got = reader.read(data)
        ref = deserialize_message(data, JointState)
        assert (got.sec, got.nanosec) == (ref.header.stamp.sec, ref.header.stamp.nanosec)
        assert list(got.name) == list(ref.name)
        for field in ('position', 'velocity', 'effort'):
            np.testing.assert_array_equal(getattr(got, field), np.asarray(getattr(ref, field)))


def test_names_are_reread_when_they_change():
    reader = JointStateReader()
    a = JointState(name=['a', 'b'], position=[1.0, 2.0])
    b = JointState(name=['b', 'a'], position=[1.0, 2.0])
    assert reader.read(serialize_message(a)).name == ('a', 'b')
    assert reader.read(serialize_message(b)).name == ('b', 'a')
    assert reader.read(serialize_message(a)).name == ('a', 'b')


def test_truncated_and_foreign_bytes_are_errors_not_crashes():
    msg = JointState(
        name=['shoulder', 'elbow'], position=[0.1, 0.2], velocity=[0.0, 0.0], effort=[1.0, 2.0]
    )
    data = serialize_message(msg)
    reader = JointStateReader()
    for k in range(4, len(data)):
        with pytest.raises(CdrError):
            reader.read(data[:k])
    with pytest.raises(CdrError):  # big-endian / other encapsulations: not ours
        reader.read(b'\x00\x00' + data[2:])
    assert not reader.supports(b'\x00\x00' + data[2:])
    # a name count that cannot fit, a sequence length running past the end
    with pytest.raises(CdrError):
        reader.read(data[:12] + b'\xff\xff\xff\x7f' + data[16:])
    bad = bytearray(data)
    at = locate_float64_runs(data, [np.array([1.0, 2.0])])[0]  # the efforts
    count_at = next(k for k in (at - 4, at - 8) if data[k : k + 4] == (2).to_bytes(4, 'little'))
    bad[count_at : count_at + 4] = (1000).to_bytes(4, 'little')
    with pytest.raises(CdrError):
        reader.read(bytes(bad))


@pytest.mark.parametrize('n', [1, 2, 7, 12])
def test_command_bytes_deserialise_to_the_values(n):
    cmd = CommandBytes.create(n)
    assert cmd is not None
    rng = np.random.default_rng(n)
    for _ in range(5):
        v = rng.normal(size=n)
        back = deserialize_message(cmd.pack(v), Float64MultiArray)
        np.testing.assert_array_equal(np.asarray(back.data), v)
        assert not back.layout.dim and back.layout.data_offset == 0


def test_locate_refuses_ambiguous_markers():
    run = np.array([1.5, 2.5])
    buf = np.concatenate([run, [0.0], run]).tobytes()
    assert locate_float64_runs(buf, [run]) is None
    buf = np.concatenate([run, [0.123456789], run]).tobytes()
    assert locate_float64_runs(buf, [np.array([0.123456789])]) == (16,)
