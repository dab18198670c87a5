"""The append-only journal a run writes and readers ingest.

The journal, not the database, is the source of truth until ingested: a training process
never waits on DuckDB's single-writer lock, and a killed process leaves every complete chunk
readable. A chunk is `length, crc32, marshal(payload)`; marshal is fast, C-level and cannot
execute code when read back. A torn last chunk (the writer died mid-write) fails its length
or checksum and is left for a later read, so ingestion never sees half a batch.

Payload: a tuple `(logs, timings, events)`, column blocks so reading needs no per-row work:
  logs      (names, values, vtypes, ctx_ids) or None    see pack_logs
  timings   (ctx_ids, wait_s, iter_s) or None           one row per finished loop iteration
  events    [dict, ...]                                  run start/end, args, loop entries...

A ctx_id is `entry_id << 32 | iteration`: the loop entry (one `loop` event each time a
flor.loop starts) plus the iteration within it, so the hot path never writes coordinates;
ingestion derives them from the entry. ctx_id 0 means outside any loop.
"""

from __future__ import annotations

import marshal
import os
import struct
import zlib
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

_HEADER = struct.Struct("<II")
ENTRY_SHIFT = 32
ITERATION_MASK = (1 << ENTRY_SHIFT) - 1
SUFFIX = ".journal"


VTYPES = ("float", "int", "bool", "str", "none", "json", "object")
_VTYPE_CODE = {float: 0, int: 1, bool: 2, str: 3, type(None): 4}
_NUMERIC = frozenset({float, int, bool})


def pack_logs(logs: list) -> tuple | None:
    """Columns of `(name, value, ctx_id)` tuples: numbers as packed doubles when possible.

    values is `bytes` of float64 (vtypes: None = all float, else one code byte per row) or,
    for batches holding strings/None/objects, the plain list of values (vtypes None).
    """
    if not logs:
        return None
    names, values, ctxs = zip(*logs)
    types = set(map(type, values))
    vtypes = None
    packed: bytes | list = list(values)
    if types <= _NUMERIC:
        try:
            packed = array("d", values).tobytes()
            if types != {float}:
                vtypes = bytes(map(_VTYPE_CODE.__getitem__, map(type, values)))
        except OverflowError:  # an int beyond float range: keep it exact as text later
            packed = list(values)
    return names, packed, vtypes, array("q", ctxs).tobytes()


def pack_timings(timings: list) -> tuple | None:
    if not timings:
        return None
    ctxs, waits, iters = zip(*timings)
    return array("q", ctxs).tobytes(), array("d", waits).tobytes(), array("d", iters).tobytes()


def encode_chunk(payload: tuple) -> bytes:
    body = marshal.dumps(payload, 4)
    return _HEADER.pack(len(body), zlib.crc32(body)) + body


class JournalWriter:
    """Appends chunks with single `write` calls so readers never see interleaved bytes."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def append(self, payload: tuple) -> None:
        data = encode_chunk(payload)
        view = memoryview(data)
        while view:
            written = os.write(self._fd, view)
            view = view[written:]

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


@dataclass
class JournalBatch:
    """Everything new in one journal since a byte offset, merged across chunks."""

    end_offset: int
    logs: list = field(default_factory=list)  # pack_logs blocks
    timings: list = field(default_factory=list)
    events: list = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.logs or self.timings or self.events)


def read_from(path: Path, offset: int) -> JournalBatch:
    """Read complete chunks after `offset`; stops before a torn or corrupt tail."""
    batch = JournalBatch(end_offset=offset)
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read()
    except FileNotFoundError:
        return batch
    pos = 0
    for payload, size in _chunks(data):
        logs, timings, events = payload
        if logs is not None:
            batch.logs.append(logs)
        if timings is not None:
            batch.timings.append(timings)
        batch.events.extend(events)
        pos += size
    batch.end_offset = offset + pos
    return batch


def _chunks(data: bytes) -> Iterator[tuple[tuple, int]]:
    pos = 0
    view = memoryview(data)
    while pos + _HEADER.size <= len(data):
        length, crc = _HEADER.unpack_from(data, pos)
        start = pos + _HEADER.size
        end = start + length
        if end > len(data) or zlib.crc32(view[start:end]) != crc:
            return
        yield marshal.loads(view[start:end]), end - pos
        pos = end
