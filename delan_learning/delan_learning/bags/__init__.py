"""rosbag2 files in and out, free of ROS: the data logger's split writer, crash recovery, and
reading joint-state bags into training arrays.

Everything goes through the pure-Python ``rosbags`` library, so bags are written and read the
same way with or without a ROS installation. Bags written here are ordinary rosbag2 directories
(``metadata.yaml`` + one ``.mcap`` or ``.db3`` file, CDR payloads, ROS 2 message definitions and
RIHS01 type hashes from the ROS 2 typestore), which ``ros2 bag info`` / ``ros2 bag play`` read.

Writing (:class:`SplitBagWriter`)
    One recording session is a series of complete bag directories
    ``<bag_dir>/<prefix>_<YYYY_MM_DD-HH_MM_SS>_<NNN>/`` (``NNN`` = split index from 000; the
    storage file inside is ``<that name>.mcap`` / ``.db3``). A new split starts before a message
    would push the current one past ``max_bag_size_mb`` (payload + per-record overhead; the index
    and summary are not counted) or when a message arrives ``max_bag_duration_s`` or more after the
    split's first message (bag = receive time). ``rosbags`` cannot split files inside one bag, so
    every split is its own readable bag; :func:`read_bag_arrays` on ``<bag_dir>`` reads them all.

    :meth:`SplitBagWriter.flush` makes everything written so far durable: for mcap it closes the
    pending chunk (with its message indexes) and fsyncs, for sqlite3 it commits. A bag cut off
    by SIGKILL or power loss then keeps every message written before the last flush; it has no
    ``metadata.yaml`` (and an mcap without summary/footer), which :func:`recover_bag` repairs and
    :func:`read_bag_arrays` salvages on the fly.

Reading (:func:`read_bag_arrays`)
    Accepts a bag directory (this logger's or ``ros2 bag record``'s, mcap or sqlite3, split into
    several files or not), a single ``.mcap`` / ``.db3`` file, or a directory whose subdirectories
    are bags (a logger session's splits). Truncated mcap files are read up to the last complete
    record; that, and a missing ``metadata.yaml``, is reported in ``result['info']['recovered']``
    (``strict=True`` raises :class:`BagError` instead). Damaged mcap files are salvaged with
    the ``mcap`` library, chunk by chunk: a damaged chunk is skipped and noted.

The modules:

- :mod:`.types`: the typestore, message type names, QoS records, CDR decoding, constants;
- :mod:`.errors`: :class:`BagError`, :class:`BagWarning`;
- :mod:`.writer`: :class:`TopicSpec`, :class:`SplitBagWriter`;
- :mod:`.recorder`: :class:`BagRecorder`, the data logger's queue and writer thread around it;
- :mod:`.checks`: :class:`MessageChecker`, the logger's check of each joint-state message;
- :mod:`.sources`: finding bags (:func:`list_bags`) and reading their messages
  (:func:`iter_bag_messages`);
- :mod:`.salvage`: the messages of damaged mcap (through the ``mcap`` library) and sqlite3 files;
- :mod:`.recovery`: :func:`recover_bag`;
- :mod:`.arrays`: :func:`read_bag_arrays`.
"""

from delan_learning.bags.arrays import ARRAY_KEYS, read_bag_arrays
from delan_learning.bags.checks import MessageChecker
from delan_learning.bags.errors import BagError, BagWarning
from delan_learning.bags.recorder import BagRecorder
from delan_learning.bags.recovery import recover_bag
from delan_learning.bags.salvage import salvage_mcap, salvage_sqlite
from delan_learning.bags.sources import iter_bag_messages, list_bags
from delan_learning.bags.types import (
    COMMAND_TYPE,
    JOINT_STATE_TYPE,
    STORAGES,
    deserialize_cdr,
    installed_interface_file,
    normalize_msgtype,
    parse_topic_entry,
    qos_profile,
    register_installed_type,
    ros2_typestore,
    type_definition,
)
from delan_learning.bags.writer import SplitBagWriter, TopicSpec

__all__ = [
    'BagError',
    'BagWarning',
    'TopicSpec',
    'SplitBagWriter',
    'BagRecorder',
    'MessageChecker',
    'read_bag_arrays',
    'recover_bag',
    'list_bags',
    'iter_bag_messages',
    'salvage_mcap',
    'salvage_sqlite',
    'ros2_typestore',
    'type_definition',
    'qos_profile',
    'normalize_msgtype',
    'parse_topic_entry',
    'register_installed_type',
    'installed_interface_file',
    'deserialize_cdr',
    'JOINT_STATE_TYPE',
    'COMMAND_TYPE',
    'STORAGES',
    'ARRAY_KEYS',
]
