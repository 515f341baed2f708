"""Real-time scheduling for a node's control path, as ros2_control's controller manager does.

Under SCHED_FIFO a node's threads run as soon as a message arrives, ahead of every normal
process (the learner's training, a logger, a compiler): on a loaded machine that is the
difference between answering each 1 kHz joint state within the cycle or not.
"""

from __future__ import annotations

import os
import threading
from typing import Optional


def set_realtime_priority(
    priority: int, logger=None, exclude: Optional[set] = None
) -> Optional[str]:
    """Put every thread of this process (the executor, the middleware's receive threads) under
    SCHED_FIFO at ``priority`` (1-98), except the Python threads in ``exclude`` (their
    ``native_id``: e.g. a model loader, which must not compete with the loop). Threads started
    later inherit the policy of the thread that starts them; child processes do not
    (SCHED_RESET_ON_FORK). It is process-wide: a node built in someone else's process (a test,
    a container) makes that whole process real-time.

    Returns None on success, else why not (no privilege: run as root, with CAP_SYS_NICE, or with
    an ``rtprio`` limit in /etc/security/limits.conf); the reason is also logged as a warning.
    """
    if priority <= 0:
        return None
    if not hasattr(os, 'sched_setscheduler') or not os.path.isdir('/proc/self/task'):
        reason = 'SCHED_FIFO is not available on this system'
    else:
        exclude = set(exclude or ())
        reason = None
        param = os.sched_param(priority)
        policy = os.SCHED_FIFO | getattr(os, 'SCHED_RESET_ON_FORK', 0)
        for tid in sorted(int(t) for t in os.listdir('/proc/self/task')):
            if tid in exclude:
                continue
            try:
                os.sched_setscheduler(tid, policy, param)
            except ProcessLookupError:
                continue  # a thread that ended meanwhile
            except PermissionError as err:
                reason = (
                    f'no permission for SCHED_FIFO priority {priority} ({err}); run with '
                    'CAP_SYS_NICE or an rtprio limit (/etc/security/limits.conf)'
                )
                break
    if logger is not None:
        if reason:
            logger.warning(f'real-time priority not set: {reason}')
        else:
            logger.info(f'threads run under SCHED_FIFO priority {priority}')
    return reason


def python_thread_ids(*threads: threading.Thread) -> set:
    """``native_id`` of the given (started) threads."""
    return {t.native_id for t in threads if t.native_id is not None}
