"""The append-only journal a run writes and readers ingest.

The journal, not the database, is the source of truth until ingested: a training process
never waits on DuckDB's single-writer lock, and a killed process leaves every complete chunk
readable. A chunk is `length, crc32, meta length` followed by marshal'd meta and the column
parts; marshal is fast, C-level and cannot execute code when read back. A torn last chunk
(the writer died mid-write) fails its length or checksum and is left for a later read, so
ingestion never sees half a batch.

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

_HEADER = struct.Struct("<III")  # body length, crc32 of body, length of its meta part
ENTRY_SHIFT = 32
ITERATION_MASK = (1 << ENTRY_SHIFT) - 1
SUFFIX = ".journal"


def replay_journal_name(replay_id: str, segment: int | str) -> str:
    """A replay worker's journal; `segment="*"` gives the glob for all of a replay's."""
    if isinstance(segment, int):
        segment = f"{segment:03d}"
    return f"replay-{replay_id}-{segment}{SUFFIX}"


VTYPES = ("float", "int", "bool", "str", "none", "json", "object")


def pack_logs(flat: list, n: int | None = None) -> tuple | None:
    """Columns of the first n items of the flat `[name, value, ctx_id, ...]` log buffer.

    Slicing transposes in C. Names and ctx_ids use marshal's reference sharing: the same
    few name strings repeat, and all values logged in one loop iteration share one ctx_id
    object, which as a reference is 5 bytes instead of a 64-bit long's digits (3x faster to
    write and to read). Values use version 2, which skips the per-object reference
    bookkeeping that only slows distinct numbers down.
    """
    n = len(flat) if n is None else n
    if not n:
        return None
    return (
        marshal.dumps(flat[0:n:3], 4),
        marshal.dumps(flat[1:n:3], 2),
        marshal.dumps(flat[2:n:3], 3),
    )


def unpack_logs(block: tuple) -> tuple[list, list, list]:
    """(names, values, ctx_ids) of one pack_logs block."""
    return marshal.loads(block[0]), marshal.loads(block[1]), marshal.loads(block[2])


def pack_timings(flat: list, n: int | None = None) -> tuple | None:
    """Columns of the flat `[ctx_id, wait_s, iter_s, ...]` timing buffer, as packed arrays."""
    n = len(flat) if n is None else n
    if not n:
        return None
    return (
        array("q", flat[0:n:3]).tobytes(),
        array("d", flat[1:n:3]).tobytes(),
        array("d", flat[2:n:3]).tobytes(),
    )


def encode_chunk(payload: tuple) -> list[bytes]:
    """Buffers of one chunk: header, marshalled (part lengths, events), then the column
    parts as they are, so large blocks are never copied into one bytes object."""
    logs, timings, events = payload
    parts = [*(logs or ()), *(timings or ())]
    meta = marshal.dumps(
        (
            [len(p) for p in logs] if logs else None,
            [len(p) for p in timings] if timings else None,
            events,
        ),
        4,
    )
    crc = zlib.crc32(meta)
    for part in parts:
        crc = zlib.crc32(part, crc)
    body_length = len(meta) + sum(map(len, parts))
    return [_HEADER.pack(body_length, crc, len(meta)), meta, *parts]


class JournalWriter:
    """Appends whole chunks; one writer per journal, so readers never see interleaved bytes."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def append(self, payload: tuple) -> None:
        buffers = encode_chunk(payload)
        total = sum(map(len, buffers))
        written = os.writev(self._fd, buffers)
        if written < total:  # rare short write: finish the rest from one buffer
            view = memoryview(b"".join(buffers))[written:]
            while view:
                view = view[os.write(self._fd, view) :]

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
    for (logs, timings, events), size in _chunks(data):
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
        length, crc, meta_length = _HEADER.unpack_from(data, pos)
        start = pos + _HEADER.size
        end = start + length
        if end > len(data) or zlib.crc32(view[start:end]) != crc:
            return
        log_lengths, timing_lengths, events = marshal.loads(view[start : start + meta_length])
        cursor = start + meta_length
        blocks = []
        for lengths in (log_lengths, timing_lengths):
            if lengths is None:
                blocks.append(None)
                continue
            block = []
            for n in lengths:
                block.append(view[cursor : cursor + n])
                cursor += n
            blocks.append(tuple(block))
        yield (blocks[0], blocks[1], events), end - pos
        pos = end
