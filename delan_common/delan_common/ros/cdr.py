"""Joint states and effort commands as serialised bytes: the 1 kHz path without message objects.

A control loop taking ``sensor_msgs/JointState`` as a Python message and publishing a
``std_msgs/Float64MultiArray`` pays ~90 us of conversion per cycle in rclpy; reading the CDR
bytes of a raw subscription with numpy and publishing a pre-serialised command buffer does not
(and a driver -- the sim -- publishes its joint states the same way).
Both sides are checked against the middleware's own (de)serialisation: anything the reader does
not recognise (another encapsulation, a layout it cannot verify) goes the slow, safe way.
"""

from __future__ import annotations

import struct
from typing import NamedTuple, Optional, Sequence, Tuple

import numpy as np
from rclpy.serialization import deserialize_message, serialize_message
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray, Header

_CDR_LE = b'\x00\x01'  # encapsulation: plain CDR (XCDR1), little endian
_U32 = struct.Struct('<I')
STAMP = struct.Struct('<iI')  # builtin_interfaces/Time in little-endian CDR


class CdrError(ValueError):
    """Bytes that are not a little-endian plain-CDR JointState (truncated, absurd lengths)."""


class RawJointState(NamedTuple):
    """The fields of a JointState the control loop uses (duck-types the message for
    :class:`delan_common.joint_state.JointStateMapper`); arrays are read-only views."""

    sec: int
    nanosec: int
    name: Tuple[str, ...]
    position: np.ndarray
    velocity: np.ndarray
    effort: np.ndarray


class JointStateReader:
    """Parses serialised ``sensor_msgs/JointState``; the names of the last message are reused
    when their bytes repeat (they do, on every message of a driver)."""

    def __init__(self):
        self._names_bytes = b''
        self._names: Tuple[str, ...] = ()

    @staticmethod
    def supports(data: bytes) -> bool:
        """Whether ``data`` is plain little-endian CDR, the only encoding :meth:`read` parses."""
        return data[:2] == _CDR_LE

    def read(self, data: bytes) -> RawJointState:
        """Raise :class:`CdrError` for bytes that are not a well-formed CDR_LE JointState."""
        if data[:2] != _CDR_LE:
            raise CdrError(f'encapsulation {data[:2].hex()} is not plain little-endian CDR')
        size = len(data)
        try:
            sec, nanosec = STAMP.unpack_from(data, 4)
            pos = 12
            (n,) = _U32.unpack_from(data, pos)  # frame_id, with its NUL
            pos += 4 + n
            pos += -(pos - 4) % 4
            start = pos
            (count,) = _U32.unpack_from(data, pos)
            if count > size:
                raise CdrError(f'{count} names in {size} bytes')
            pos += 4
            for _ in range(count):
                pos += -(pos - 4) % 4
                (n,) = _U32.unpack_from(data, pos)
                pos += 4 + n
            if pos > size:
                raise CdrError('names run past the end')
            names_bytes = data[start:pos]
            if names_bytes != self._names_bytes:
                self._names = self._decode_names(data, start, count)
                self._names_bytes = names_bytes
            arrays = []
            for field in ('position', 'velocity', 'effort'):
                pos += -(pos - 4) % 4
                (n,) = _U32.unpack_from(data, pos)
                pos += 4
                if n:
                    pos += -(pos - 4) % 8
                if pos + 8 * n > size:
                    raise CdrError(f'{field} ({n} values) runs past the end')
                arrays.append(np.frombuffer(data, '<f8', n, pos))
                pos += 8 * n
        except struct.error as err:
            raise CdrError(f'truncated joint state: {err}') from None
        return RawJointState(sec, nanosec, self._names, *arrays)

    @staticmethod
    def _decode_names(data: bytes, pos: int, count: int) -> Tuple[str, ...]:
        names = []
        pos += 4
        for _ in range(count):
            pos += -(pos - 4) % 4
            (n,) = _U32.unpack_from(data, pos)
            if n == 0 or data[pos + 4 + n - 1] != 0:
                raise CdrError('a joint name is not a NUL-terminated string')
            try:
                names.append(data[pos + 4 : pos + 4 + n - 1].decode('utf-8'))
            except UnicodeDecodeError as err:
                raise CdrError(f'joint name is not UTF-8: {err}') from None
            pos += 4 + n
        return tuple(names)


def locate_float64_runs(buf: bytes, runs: Sequence[np.ndarray]) -> Optional[Tuple[int, ...]]:
    """Byte offsets of the marker arrays ``runs`` in a serialised message (None if one is not
    found exactly once): where a pre-serialised buffer's values sit."""
    data = bytes(buf)
    offsets = []
    for run in runs:
        raw = np.asarray(run, '<f8').tobytes()
        at = data.find(raw)
        if at < 0 or data.find(raw, at + 1) >= 0:
            return None
        offsets.append(at)
    return tuple(offsets)


def joint_state_layout(msg: JointState) -> Optional[Tuple[bytearray, int, Tuple[int, int, int]]]:
    """``(buffer, stamp offset, (position, velocity, effort) offsets)`` of ``msg`` serialised by
    the middleware, or None if the layout cannot be found (publish messages there).

    Names and frame id never change, so the stamp and the three arrays sit at fixed byte offsets:
    they are found by serialising the message with marker values, and checked by writing other
    values there and deserialising. Publishing these bytes costs about half of publishing the
    message (rclpy then skips converting the Python message, ~3 us per joint state).
    """
    n = len(msg.position)
    probe = JointState(name=list(msg.name), header=Header(frame_id=msg.header.frame_id))
    markers = [np.arange(n) + 1000.25 * (k + 1) + 0.123456789 for k in range(3)]
    probe.position, probe.velocity, probe.effort = (m.tolist() for m in markers)
    probe.header.stamp.sec, probe.header.stamp.nanosec = 0x5A5A5A5A, 0x3C3C3C3C
    try:
        buf = bytearray(serialize_message(probe))
    except Exception:  # noqa: BLE001 -- a middleware without serialisation: publish messages
        return None
    stamp = STAMP.pack(0x5A5A5A5A, 0x3C3C3C3C)
    found = locate_float64_runs(buf, markers)
    stamp_at = bytes(buf).find(stamp)
    if found is None or stamp_at < 0:
        return None
    # the check: other values written at those offsets must come back out of the middleware
    rng = np.random.default_rng(0)
    values = [rng.normal(size=n) for _ in range(3)]
    for off, v in zip(found, values):
        np.frombuffer(buf, np.float64, n, off)[:] = v
    STAMP.pack_into(buf, stamp_at, 12345, 678)
    try:
        back = deserialize_message(bytes(buf), JointState)
    except Exception:  # noqa: BLE001
        return None
    if not (
        list(back.name) == list(msg.name)
        and back.header.frame_id == msg.header.frame_id
        and (back.header.stamp.sec, back.header.stamp.nanosec) == (12345, 678)
        and all(
            np.array_equal(np.asarray(a), v)
            for a, v in zip((back.position, back.velocity, back.effort), values)
        )
    ):
        return None
    return buf, stamp_at, tuple(found)


class CommandBytes:
    """A pre-serialised ``std_msgs/Float64MultiArray`` of ``n`` values (the ros2_control
    JointGroupEffortController command): :meth:`pack` writes the values in place and returns the
    bytes to publish. ``CommandBytes.create(n)`` is None where the layout cannot be verified
    (publish messages there)."""

    def __init__(self, buf: bytearray, offset: int, n: int):
        self._buf = buf
        self._values = np.frombuffer(buf, '<f8', n, offset)

    @classmethod
    def create(cls, n: int) -> Optional['CommandBytes']:
        """A template for ``n`` values, or None where serialisation is missing or the layout cannot
        be verified (a round trip of known values through the middleware)."""
        marker = np.arange(n) + 7777.125 + 0.987654321
        try:
            buf = bytearray(serialize_message(Float64MultiArray(data=marker.tolist())))
        except Exception:  # noqa: BLE001 -- a middleware without serialisation
            return None
        found = locate_float64_runs(buf, [marker])
        if found is None:
            return None
        out = cls(buf, found[0], n)
        check = np.random.default_rng(1).normal(size=n)
        try:
            back = deserialize_message(out.pack(check), Float64MultiArray)
        except Exception:  # noqa: BLE001
            return None
        if not np.array_equal(np.asarray(back.data), check) or back.layout.dim:
            return None
        return out

    def pack(self, values: np.ndarray) -> bytes:
        """The serialised message carrying ``values`` ``(n,)`` (written into the template in place;
        the returned bytes are a copy)."""
        self._values[:] = values
        return bytes(self._buf)
