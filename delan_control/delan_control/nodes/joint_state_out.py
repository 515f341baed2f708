"""The sim's outgoing joint state: one message, reused, written in place at every publish."""

from __future__ import annotations

from typing import Callable, Optional, Sequence, Tuple, Union

import numpy as np
from sensor_msgs.msg import JointState

from delan_common.ros.cdr import STAMP

Layout = Optional[Tuple[bytearray, int, Tuple[int, int, int]]]


class JointStateOut:
    """A JointState of fixed ``names`` whose arrays :attr:`position`, :attr:`velocity` and
    :attr:`effort` are numpy views -- of its serialised bytes (``layout(msg)``, see
    ``delan_common.ros.cdr.joint_state_layout``), or of the message's own arrays when the
    middleware's layout is not found (``layout`` gives None) -- so a publish needs no
    per-message lists or field checks. publish() serialises or copies at once, so the next
    write cannot touch one in flight."""

    def __init__(self, names: Sequence[str], layout: Callable[[JointState], Layout]):
        n = len(names)
        self._msg = msg = JointState()
        msg.name = list(names)
        msg.position, msg.velocity, msg.effort = [0.0] * n, [0.0] * n, [0.0] * n
        self._stamp = msg.header.stamp
        found = layout(msg)
        if found is None:
            self.raw: Optional[bytearray] = None
            self._stamp_at = -1
            arrays = [
                np.frombuffer(a, np.float64) for a in (msg.position, msg.velocity, msg.effort)
            ]
        else:
            self.raw, self._stamp_at, offsets = found
            arrays = [np.frombuffer(self.raw, np.float64, n, off) for off in offsets]
        self.position, self.velocity, self.effort = arrays

    def stamped(self, stamp_ns: int) -> Union[JointState, bytes]:
        """What to publish: the state as written, stamped ``stamp_ns`` (ns since the epoch)."""
        sec, nanosec = divmod(stamp_ns, 1_000_000_000)
        if self.raw is None:
            self._stamp.sec, self._stamp.nanosec = sec, nanosec
            return self._msg
        STAMP.pack_into(self.raw, self._stamp_at, sec, nanosec)
        return bytes(self.raw)
