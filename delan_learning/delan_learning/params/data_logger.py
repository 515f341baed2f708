"""Parameters of the ``data_logger`` node."""

from __future__ import annotations

import re
from typing import Any, Optional

from delan_common.param_table import Param, ParamContext, non_empty
from delan_learning.bags import STORAGES, parse_topic_entry


def plain_file_name(value: Any, ctx: ParamContext) -> Optional[str]:
    """A bag name prefix: no folders, nothing a shell or a file system reads specially."""
    if not re.fullmatch(r'[A-Za-z0-9_.\-]+', value or ''):
        return f'{ctx.name}={value!r} must be a plain file name (letters, digits, "_", "-", ".")'
    return None


def topic_entries(value: Any, ctx: ParamContext) -> Optional[str]:
    """Every entry ``name`` or ``name:pkg/msg/Type`` (``bags.parse_topic_entry``)."""
    for entry in value:
        try:
            parse_topic_entry(entry)
        except ValueError as err:
            return f'{ctx.name}: {err}'
    return None


TABLE = (
    Param(
        'bag_dir',
        'bags',
        'Directory the bags are written under (created if missing)',
        read_only=True,
        check=non_empty,
    ),
    Param(
        'prefix',
        'delan',
        'Bag name prefix: <bag_dir>/<prefix>_<stamp>_<NNN>/',
        read_only=True,
        check=plain_file_name,
    ),
    Param('storage', 'mcap', 'rosbag2 storage plugin', choices=STORAGES, read_only=True),
    Param(
        'record_commands',
        True,
        'Also record the torque commands on effort_controller/commands',
        read_only=True,
    ),
    Param(
        'topics',
        [],
        'More topics to record: name (type from the graph, once a '
        'publisher appears) or name:pkg/msg/Type, e.g. '
        '/torque_controller/controller_state',
        read_only=True,
        check=topic_entries,
        items=str,
    ),
    Param(
        'max_bag_size_mb',
        0.0,
        'Start a new bag before one exceeds this size [MB, 1e6 bytes of messages]; 0 = no limit',
        min=0.0,
        max=1e7,
    ),
    Param(
        'max_bag_duration_s',
        0.0,
        'Start a new bag after this much recording time [s]; 0 = no limit',
        min=0.0,
        max=1e7,
    ),
    Param(
        'flush_period_s',
        1.0,
        'Make the bag crash-safe this often [s]: a SIGKILL loses '
        'at most the messages of the last period',
        min=0.01,
        max=3600.0,
    ),
    Param(
        'queue_size',
        100000,
        'Messages buffered for the writer thread; overflow is dropped and counted',
        min=10,
        max=10_000_000,
        read_only=True,
    ),
    Param('qos_depth', 1000, 'Subscription history depth', min=1, max=1_000_000, read_only=True),
    Param(
        'qos_reliability',
        'reliable',
        "Subscription reliability; 'best_effort' also hears best-effort (sensor-data) publishers",
        choices=('reliable', 'best_effort'),
        read_only=True,
    ),
    Param(
        'diagnostics_period_s',
        1.0,
        'Period of the /diagnostics status [s]',
        min=0.01,
        max=3600.0,
        read_only=True,
    ),
)
