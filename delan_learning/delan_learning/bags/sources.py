"""Finding bags and reading their messages: bag directories (this logger's splits,
``ros2 bag record``'s, several storage files or one), single storage files, directories of bags;
an intact bag is read lazily through ``rosbags``, a damaged one is salvaged (:mod:`.salvage`)."""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

from rosbags.rosbag2 import Reader, ReaderError

from delan_learning.bags.errors import BagError
from delan_learning.bags.salvage import salvage_mcap, salvage_sqlite
from delan_learning.bags.types import BagTopic, PathLike


@dataclass
class Source:
    """The messages of one storage unit (a readable bag directory or one storage file)."""

    path: Path
    storage: str
    topics: Dict[str, BagTopic]
    reader: Optional[Reader] = None  # intact: read lazily through rosbags
    messages: Optional[List[Tuple[str, int, bytes]]] = None  # salvaged: materialised

    def iter(self, topics: Optional[Sequence[str]] = None) -> Iterator[Tuple[str, int, bytes]]:
        """``(topic, timestamp [ns], serialised data)`` of each message (of ``topics`` only, when
        given); BagError when an intact-looking bag turns out damaged while reading."""
        wanted = None if topics is None else set(topics)
        if self.reader is not None:
            conns = [c for c in self.reader.connections if wanted is None or c.topic in wanted]
            if not conns:
                return
            try:
                for conn, timestamp, data in self.reader.messages(connections=conns):
                    yield conn.topic, timestamp, data
            except (ReaderError, OSError, struct.error) as exc:
                raise BagError(
                    f'{self.path}: damaged data ({exc}); recover_bag() rewrites what is readable'
                ) from exc
        else:
            for topic, timestamp, data in self.messages or ():
                if wanted is None or topic in wanted:
                    yield topic, timestamp, data

    def close(self) -> None:
        """Close the rosbags reader, if any (a salvaged source holds none)."""
        if self.reader is not None and self.reader.is_open:
            self.reader.close()


def storage_files(bag: Path) -> List[Path]:
    """The ``.mcap`` / ``.db3`` files of a bag directory in split order (``<name>_<N>``
    by ``N``, not by text)."""
    files = [p for p in bag.iterdir() if p.is_file() and p.suffix in ('.mcap', '.db3')]

    def key(p: Path) -> Tuple[str, int, str]:
        m = re.search(r'_(\d+)$', p.stem)
        return (p.stem[: m.start()] if m else p.stem, int(m.group(1)) if m else -1, p.name)

    return sorted(files, key=key)


def _is_bag_dir(path: Path) -> bool:
    return path.is_dir() and ((path / 'metadata.yaml').is_file() or bool(storage_files(path)))


def list_bags(path: PathLike) -> List[Path]:
    """The bags under ``path``: itself if it is a bag directory or storage file, else its
    subdirectories that are bags (e.g. a logger session's splits), sorted by name."""
    p = Path(path).expanduser()
    if not p.exists():
        raise BagError(f'bag path {p} does not exist')
    if p.is_file():
        if p.suffix not in ('.mcap', '.db3'):
            raise BagError(f'{p} is not a bag: expected a directory, or a .mcap or .db3 file')
        return [p]
    if _is_bag_dir(p):
        return [p]
    subs = sorted(d for d in p.iterdir() if _is_bag_dir(d))
    if not subs:
        raise BagError(
            f'{p} is not a bag directory: no metadata.yaml, no .mcap/.db3 file and no '
            'bag subdirectories'
        )
    return subs


def _topics_of_reader(reader: Reader) -> Dict[str, BagTopic]:
    topics: Dict[str, BagTopic] = {}
    for c in reader.connections:
        if c.topic not in topics:
            qos = list(getattr(c.ext, 'offered_qos_profiles', []) or [])
            topics[c.topic] = BagTopic(c.topic, c.msgtype, c.msgdef, c.digest or '', qos)
    return topics


def _open_reader(path: Path, storage: str) -> Source:
    reader = Reader(path)
    reader.open()
    try:
        return Source(path, storage, _topics_of_reader(reader), reader=reader)
    except BaseException:
        reader.close()
        raise


def open_file(path: Path, notes: List[str], strict: bool) -> Source:
    """One storage file: through ``rosbags`` when it opens, else salvaged (the damage is
    appended to ``notes``; ``strict`` raises BagError instead)."""
    storage = 'mcap' if path.suffix == '.mcap' else 'sqlite3'
    if storage == 'sqlite3':
        damaged = any(path.with_name(path.name + s).exists() for s in ('-journal', '-wal'))
        if not damaged:
            try:
                return _open_reader(path, storage)
            except (ReaderError, OSError) as exc:
                notes.append(f'{path.name}: rosbags could not open it ({exc}); salvaging')
        topics, msgs, more = salvage_sqlite(path)
    else:
        try:
            return _open_reader(path, storage)
        except Exception as exc:  # noqa: BLE001 - any failure to open: salvage record by record
            more_first = f'{path.name}: {exc}'
        topics, msgs, more = salvage_mcap(path)
        more = [more_first] + more
    notes.extend(more)
    if strict and more:
        raise BagError('damaged bag (strict=True): ' + '; '.join(more))
    return Source(path, storage, topics, messages=msgs)


def open_sources(bag: Path, notes: List[str], strict: bool) -> List[Source]:
    """The readable storage units of one bag (directory or file)."""
    if bag.is_file():
        return [open_file(bag, notes, strict)]
    if (bag / 'metadata.yaml').is_file():
        try:
            storage = 'mcap' if any(bag.glob('*.mcap*')) else 'sqlite3'
            return [_open_reader(bag, storage)]
        except Exception as exc:  # noqa: BLE001 - bad metadata or a damaged file: per file
            msg = f'{bag.name}: cannot be read as a whole ({exc}); reading its files one by one'
            if strict:
                raise BagError(msg + ' (strict=True)') from exc
            notes.append(msg)
    else:
        msg = f'{bag.name}: no metadata.yaml (recording cut off?); reading its storage files'
        if strict:
            raise BagError(
                msg.replace('; reading its storage files', '') + ' (strict=True); '
                'run recover_bag() first'
            )
        notes.append(msg)
    files = storage_files(bag)
    if not files:
        raise BagError(f'{bag}: no readable storage (.mcap or .db3) file')
    return [open_file(f, notes, strict) for f in files]


def iter_bag_messages(
    path: PathLike, topics: Optional[Sequence[str]] = None, notes: Optional[List[str]] = None
) -> Iterator[Tuple[str, str, int, bytes]]:
    """(topic, msgtype, timestamp, cdr bytes) of every message under ``path`` (see
    :func:`list_bags`), bag by bag; damaged bags are salvaged and noted in ``notes``."""
    notes = [] if notes is None else notes
    for bag in list_bags(path):
        sources = open_sources(bag, notes, strict=False)
        try:
            for src in sources:
                for topic, ts, data in src.iter(topics):
                    yield topic, src.topics[topic].msgtype, ts, data
        finally:
            for src in sources:
                src.close()
