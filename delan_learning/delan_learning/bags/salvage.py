"""Salvage of damaged storage files, message by message, without trusting metadata.yaml:
an mcap file cut off by a crash (no summary or footer, a record cut in half) or with damaged
chunks, and a sqlite3 file with the hot journal of an interrupted transaction."""

from __future__ import annotations

import shutil
import sqlite3
import struct
import tempfile
from pathlib import Path
from typing import IO, BinaryIO, Dict, Iterable, List, Optional, Tuple, cast

from mcap.exceptions import EndOfFile, McapError
from mcap.opcode import Opcode
from mcap.records import Channel, Chunk, DataEnd, Footer, McapRecord, Message, Schema
from mcap.stream_reader import StreamReader, breakup_chunk
from rosbags.interfaces import MessageDefinition, MessageDefinitionFormat

from delan_learning.bags.errors import BagError
from delan_learning.bags.types import BagTopic, PathLike

MCAP_MAGIC = b'\x89MCAP0\r\n'
RECORD_HEADER = 9  # opcode (1 byte) + content length (8 bytes)
# the records of the messages and their definitions: reading stops at a damaged one
_DATA_RECORDS = (Opcode.SCHEMA, Opcode.CHANNEL, Opcode.MESSAGE, Opcode.CHUNK)

# (topics, messages as (topic, timestamp, cdr bytes), notes on the damage)
Salvaged = Tuple[Dict[str, BagTopic], List[Tuple[str, int, bytes]], List[str]]


class _RecordReads:
    """A file from offset ``start`` as :class:`StreamReader` reads it, checked against the record
    lengths: a read past the end of the file raises EndOfFile (the library would take the short
    read for the data), a read past the end of the record being read raises McapError (a damaged
    field; the library would read on out of step with the records). The reader reads a record's
    opcode (1 byte), its length (8 bytes), then its content."""

    def __init__(self, f: BinaryIO, size: int, start: int):
        self._f = f
        self.size = size
        self.pos = start
        self.boundary = start  # where the record being read starts: the last complete one's end
        self.end = start  # where it ends (its header's end until its length is read)
        self.opcode = -1
        self._in_header = False
        self._hit_eof = False

    @property
    def cut(self) -> bool:
        """The record being read is cut off by the end of the file."""
        return self._hit_eof or self.end > self.size

    def read(self, n: int) -> bytes:
        if n < 0:
            raise McapError(f'record at offset {self.boundary} shorter than its fields')
        starts = n == 1 and self.pos == self.end and not self._in_header
        if starts:
            self.boundary, self.end, self._in_header = self.pos, self.pos + RECORD_HEADER, True
        if self.pos + n > self.end and self.end <= self.size:
            raise McapError(f'record at offset {self.boundary} runs past its length')
        if self.pos + n > self.size:
            self._hit_eof = True
            raise EndOfFile(f'{n} bytes wanted at offset {self.pos}')
        data = self._f.read(n)
        self.pos += n
        if starts:
            self.opcode = data[0]
        elif self._in_header and self.pos == self.end:
            self.end += struct.unpack('<Q', data)[0]
            self._in_header = False
        return data


class _McapContent:
    """The schemas, channels and messages of the records read so far."""

    def __init__(self) -> None:
        self.schemas: Dict[int, Tuple[str, str, str]] = {}  # id -> (name, encoding, text)
        self.channels: Dict[int, Tuple[str, int]] = {}  # id -> (topic, schema id)
        self.raw: List[Tuple[int, int, bytes]] = []  # (log_time, channel, data)

    def add(self, records: Iterable[McapRecord]) -> None:
        for rec in records:
            if isinstance(rec, Schema):
                self.schemas[rec.id] = (rec.name, rec.encoding, rec.data.decode('utf-8'))
            elif isinstance(rec, Channel):
                self.channels[rec.id] = (rec.topic, rec.schema_id)
            elif isinstance(rec, Message):
                self.raw.append((rec.log_time, rec.channel_id, rec.data))

    def result(self, name: str, notes: List[str]) -> Salvaged:
        topics: Dict[str, BagTopic] = {}
        for _cid, (topic, sid) in sorted(self.channels.items()):
            msgtype, encoding, text = self.schemas.get(sid, ('', '', ''))
            if not msgtype or topic in topics:
                continue
            fmt = (
                MessageDefinitionFormat.IDL
                if encoding == 'ros2idl'
                else MessageDefinitionFormat.MSG
            )
            topics[topic] = BagTopic(topic, msgtype, MessageDefinition(fmt, text))
        messages = [
            (self.channels[cid][0], ts, data)
            for ts, cid, data in sorted(self.raw, key=lambda r: r[0])
            if cid in self.channels and self.channels[cid][0] in topics
        ]
        lost = len(self.raw) - len(messages)
        if lost:
            notes.append(f'{name}: {lost} messages of unknown channels skipped')
        return topics, messages, notes


def salvage_mcap(path: PathLike) -> Salvaged:
    """Read every complete message of an mcap file, also one without summary/footer (SIGKILL,
    full disk, copy cut short). Returns (topics, messages as (topic, log_time, data) in time order,
    notes on what was damaged). Raises BagError when not even the header is readable.

    The ``mcap`` library reads the file record by record; each chunk is decompressed and checked
    (CRC) on its own, so a damaged chunk is skipped and reading goes on with the next record. The
    data section ends at the data-end record (or footer); a file that ends before it is read up
    to its last complete record."""
    path = Path(path)
    notes: List[str] = []
    size = path.stat().st_size
    if size < len(MCAP_MAGIC) + RECORD_HEADER:
        raise BagError(f'{path}: not an mcap file or cut off in its header ({size} bytes)')
    content = _McapContent()
    with path.open('rb') as f:
        if f.read(len(MCAP_MAGIC)) != MCAP_MAGIC:
            raise BagError(f'{path}: not an mcap file (bad magic)')
        start: Optional[int] = len(MCAP_MAGIC)
        while start is not None:
            start = _read_mcap_records(f, size, start, content, notes, path.name)
    return content.result(path.name, notes)


def _read_mcap_records(
    f: BinaryIO, size: int, start: int, content: _McapContent, notes: List[str], name: str
) -> Optional[int]:
    """Read the records from offset ``start`` into ``content`` up to the end of the data
    section, a cut, or damage. Returns where to go on: after a damaged record of an index,
    metadata or unknown kind (the messages do not need it); None when reading is done."""
    f.seek(start)
    stream = _RecordReads(f, size, start)
    reader = StreamReader(
        cast(IO[bytes], stream), skip_magic=True, emit_chunks=True, record_size_limit=None
    )
    try:
        for record in reader.records:
            if isinstance(record, (DataEnd, Footer)):  # all data records seen
                return None
            if isinstance(record, Chunk):
                try:
                    content.add(breakup_chunk(record, validate_crc=True))
                except Exception as exc:  # noqa: BLE001 - any damage: skip this chunk
                    notes.append(f'{name}: skipped a damaged chunk ({_reason(exc)})')
            else:
                content.add([record])
    except (McapError, struct.error, ValueError) as exc:
        if stream.cut or stream.opcode in _DATA_RECORDS:
            notes.append(_stop_note(name, exc, stream.cut, size - stream.boundary))
        elif stream.opcode not in (Opcode.DATA_END, Opcode.FOOTER):
            return stream.end
    return None


def _stop_note(name: str, exc: BaseException, cut: bool, left: int) -> str:
    """Why reading stopped before the data-end record, given whether a read ran into the end of
    the file and how many bytes were ``left`` after the last complete record."""
    if not cut:
        return f'{name}: malformed record ({_reason(exc)}); stopped reading there'
    if left == 0:
        return f'{name}: truncated (no data-end record or footer): read all complete records'
    what = 'record header cut off' if left < RECORD_HEADER else 'record cut off'
    return f'{name}: truncated ({what} at the end): read up to the last complete record'


def _reason(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


def salvage_sqlite(path: PathLike) -> Salvaged:
    """Read a rosbag2 ``.db3`` without trusting metadata.yaml, on a private copy so a hot journal
    left by a crash is rolled back (only committed messages are returned) without touching the
    original."""
    path = Path(path)
    notes: List[str] = []
    with tempfile.TemporaryDirectory(prefix='delan_bag_') as tmp:
        copy = Path(tmp) / path.name
        shutil.copyfile(path, copy)
        for suffix in ('-journal', '-wal', '-shm'):
            side = path.with_name(path.name + suffix)
            if side.exists():
                shutil.copyfile(side, copy.with_name(copy.name + suffix))
                notes.append(
                    f'{path.name}: found {side.name} (interrupted write); '
                    'uncommitted messages rolled back'
                )
        try:
            con = sqlite3.connect(str(copy))
            try:
                cols = {r[1] for r in con.execute('PRAGMA table_info(topics)')}
                if not {'id', 'name', 'type'} <= cols:
                    raise BagError(f'{path}: not a rosbag2 sqlite3 file (no topics table)')
                topics_rows = con.execute(
                    'SELECT id, name, type FROM topics ORDER BY id'
                ).fetchall()
                defs: Dict[str, Tuple[str, str]] = {}
                if con.execute(
                    "SELECT name FROM sqlite_master WHERE type='table' AND "
                    "name='message_definitions'"
                ).fetchone():
                    for ttype, enc, text in con.execute(
                        'SELECT topic_type, encoding, encoded_message_definition '
                        'FROM message_definitions'
                    ):
                        defs[ttype] = (enc, text)
                rows = con.execute(
                    'SELECT topic_id, timestamp, data FROM messages ORDER BY timestamp, id'
                ).fetchall()
            finally:
                con.close()
        except sqlite3.DatabaseError as exc:
            raise BagError(f'{path}: unreadable sqlite3 bag ({exc})') from exc
    topics: Dict[str, BagTopic] = {}
    by_id: Dict[int, str] = {}
    for tid, name, ttype in topics_rows:
        by_id[tid] = name
        if name not in topics:
            enc, text = defs.get(ttype, ('', ''))
            fmt = MessageDefinitionFormat.IDL if enc == 'ros2idl' else MessageDefinitionFormat.MSG
            topics[name] = BagTopic(name, ttype, MessageDefinition(fmt, text) if text else None)
    messages = [(by_id[tid], ts, bytes(data)) for tid, ts, data in rows if tid in by_id]
    return topics, messages, notes
