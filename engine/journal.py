"""The append-only journal a run writes and readers ingest.

The journal, not the database, is the source of truth until ingested: a training process
never waits on DuckDB's single-writer lock, and a killed process leaves every complete chunk
readable. A chunk is `length, crc32, marshal(payload)`; marshal is fast, C-level and cannot
execute code when read back. A torn last chunk (the writer died mid-write) fails its length
or checksum and is left for a later read, so ingestion never sees half a batch.

Payload: a tuple `(logs, timings, events)`, in column blocks:
  logs      see pack_logs, or None
  timings   (ctx_ids, wait_s, iter_s) packed arrays, or None; one row per loop iteration
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


def pack_logs(flat: list) -> tuple | None:
    """Columns of the flat `[name, value, ctx_id, name, value, ctx_id, ...]` log buffer.

    Slicing transposes in C. Names use marshal's reference sharing (the same few string
    objects repeat); values and ctx_ids use version 2, which skips the per-object reference
    bookkeeping that makes version 4 slow for numbers.
    """
    if not flat:
        return None
    return (
        marshal.dumps(flat[0::3], 4),
        marshal.dumps(flat[1::3], 2),
        marshal.dumps(flat[2::3], 2),
    )


def unpack_logs(block: tuple) -> tuple[list, list, list]:
    """(names, values, ctx_ids) of one pack_logs block."""
    return marshal.loads(block[0]), marshal.loads(block[1]), marshal.loads(block[2])


def pack_timings(flat: list) -> tuple | None:
    """Columns of the flat `[ctx_id, wait_s, iter_s, ...]` timing buffer, as packed arrays."""
    if not flat:
        return None
    return (
        array("q", flat[0::3]).tobytes(),
        array("d", flat[1::3]).tobytes(),
        array("d", flat[2::3]).tobytes(),
    )


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
