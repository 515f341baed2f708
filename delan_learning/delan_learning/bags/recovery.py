"""Crash recovery: a bag cut off by SIGKILL or power loss rewritten as a complete bag."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Dict, List, Tuple

from rosbags.interfaces import Connection
from rosbags.rosbag2 import Reader, StoragePlugin, Writer

from delan_learning.bags.errors import BagError
from delan_learning.bags.sources import list_bags, open_file, storage_files
from delan_learning.bags.types import BagTopic, PathLike, ros2_typestore


def _bag_is_intact(bag: Path) -> bool:
    if not (bag / 'metadata.yaml').is_file():
        return False
    if any(bag.glob('*.db3-journal')) or any(bag.glob('*.db3-wal')):
        return False
    try:
        with Reader(bag) as reader:
            for _ in reader.messages():
                pass
        return True
    except Exception:  # noqa: BLE001 - any failure means "needs recovery"
        return False


def recover_bag(path: PathLike, keep_original: bool = True) -> Path:
    """Make a bag cut off by a crash (SIGKILL, power loss) a complete, readable bag again.

    ``path`` is a bag directory (or a directory of them: each is recovered). A bag that already
    reads cleanly is left alone. Otherwise every complete message (see :func:`salvage_mcap`,
    :func:`salvage_sqlite`) is rewritten into a fresh bag of the same storage, with summary and
    ``metadata.yaml``, at the same path; the damaged files move to ``<path>/recovered_from/``
    (deleted when ``keep_original`` is False). Returns ``path``.
    """
    p = Path(path).expanduser()
    if not p.is_dir():
        raise BagError(f'bag directory {p} does not exist')
    bags = list_bags(p)
    if bags != [p]:
        for b in bags:
            recover_bag(b, keep_original)
        return p
    if _bag_is_intact(p):
        return p
    files = storage_files(p)
    if not files:
        raise BagError(f'{p}: nothing to recover (no .mcap or .db3 file)')
    storage = 'mcap' if files[0].suffix == '.mcap' else 'sqlite3'
    topics: Dict[str, BagTopic] = {}
    messages: List[Tuple[str, int, bytes]] = []
    notes: List[str] = []
    for f in files:
        src = open_file(f, notes, strict=False)
        try:
            for name, t in src.topics.items():
                topics.setdefault(name, t)
            messages.extend(src.iter())
        finally:
            src.close()
    messages.sort(key=lambda m: m[1])
    store = ros2_typestore()
    tmp = Path(tempfile.mkdtemp(prefix=f'.{p.name}.recover-', dir=p.parent))
    new = tmp / p.name
    try:
        writer = Writer(
            new,
            version=Writer.VERSION_LATEST,
            storage_plugin=StoragePlugin.MCAP if storage == 'mcap' else StoragePlugin.SQLITE3,
        )
        writer.open()
        conns: Dict[str, Connection] = {}
        for name, t in topics.items():
            try:
                conns[name] = writer.add_connection(
                    name, t.msgtype, typestore=store, offered_qos_profiles=t.qos
                )
            except Exception:  # noqa: BLE001 - type unknown to the typestore: use the bag's own
                if t.msgdef is None or not t.msgdef.data:
                    notes.append(f'topic {name}: type {t.msgtype} unknown, messages dropped')
                    continue
                conns[name] = writer.add_connection(
                    name,
                    t.msgtype,
                    msgdef=t.msgdef.data,
                    rihs01=t.digest or 'RIHS01_' + '0' * 64,
                    offered_qos_profiles=t.qos,
                )
        for name, ts, data in messages:
            if name in conns:
                writer.write(conns[name], ts, data)
        writer.set_custom_data('delan.recovered', '; '.join(notes)[:2000] or 'yes')
        writer.close()
        os.replace(p, tmp / 'orig')
        if keep_original:
            os.replace(tmp / 'orig', new / 'recovered_from')
        os.replace(new, p)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return p
