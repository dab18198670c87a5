"""The append-only journal a run writes and readers ingest.

The journal, not the database, is the source of truth until ingested: a training process
never waits on DuckDB's single-writer lock, and a killed process leaves every complete chunk
readable. A chunk is a framed header (magic, format, sequence number, lengths, checksums: see
"chunk framing" below) followed by marshal'd meta and the column parts; marshal is fast,
C-level and cannot execute code when read back. A torn last chunk (the writer died
mid-write) fails its length or checksum and is left for a later read, so ingestion never
sees half a batch; damage in the middle (zeros, garbage, a torn chunk followed by more) is
skipped by scanning for the next valid header, and reported as a byte range.

Payload: a tuple `(logs, timings, events)`, in column blocks:
  logs      see pack_logs, or None
  timings   (ctx_ids, wait_s, iter_s) packed arrays, or None; one row per loop iteration
  events    [dict, ...]                                  run start/end, args, loop entries...

A ctx_id is `entry_id << 32 | iteration`: the loop entry (one `loop` event each time a
flor.loop starts) plus the iteration within it, so the hot path never writes coordinates;
ingestion derives them from the entry. ctx_id 0 means outside any loop.
"""

from __future__ import annotations

import contextlib
import fcntl
import marshal
import os
import struct
import zlib
from array import array
from dataclasses import dataclass, field
from pathlib import Path

ENTRY_SHIFT = 32
ITERATION_MASK = (1 << ENTRY_SHIFT) - 1
SUFFIX = ".journal"


def replay_journal_name(replay_id: str, segment: int | str) -> str:
    """A replay worker's journal; `segment="*"` gives the glob for all of a replay's."""
    if isinstance(segment, int):
        segment = f"{segment:03d}"
    return f"replay-{replay_id}-{segment}{SUFFIX}"


def recorded_run_of(name: str) -> tuple[str, int | None] | None:
    """(run id, rank) a recording's journal is named after (`<run>.journal`,
    `<run>.rank<r>.journal`, record/ranks.py); None for a replay's journal, whose name does
    not say which run it replays. What is left of a journal whose start event is lost is
    shown under this name."""
    if not name.endswith(SUFFIX) or name.startswith("replay-"):
        return None
    stem = name[: -len(SUFFIX)]
    run, dot, rank = stem.rpartition(".rank")
    if dot and run and rank.isdigit():
        return run, int(rank)
    return (stem, None) if stem else None


VTYPES = ("float", "int", "bool", "str", "none", "json", "object")


def pack_logs(flat: list, n: int | None = None, names: list | None = None) -> tuple | None:
    """Columns of the first n items of the flat `[name, value, ctx_id, ...]` log buffer.

    Slicing transposes in C. Names and ctx_ids use marshal's reference sharing: the same
    few name strings repeat, and all values logged in one loop iteration share one ctx_id
    object, which as a reference is 5 bytes instead of a 64-bit long's digits (3x faster to
    write and to read). Values use version 2, which skips the per-object reference
    bookkeeping that only slows distinct numbers down. `names`: the names slice, when the
    caller made it already.
    """
    n = len(flat) if n is None else n
    if not n:
        return None
    return (
        marshal.dumps(flat[0:n:3] if names is None else names, 4),
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


# --- chunk framing ---------------------------------------------------------------------
#
# Format 2 frames every chunk with a header a reader can find again after damage:
#   magic "FWJ\x02", chunk format (1 byte), 3 pad bytes, sequence number (u64),
#   body length, crc32 of the body, length of the meta part (u32 each),
#   crc32 of the 28 bytes before it.
# The header's own checksum makes a length field that was overwritten harmless: a reader that
# meets damage scans forward for the next magic whose header and body both check out. The
# sequence number (per journal, from 0) lets ingestion skip a chunk it has already stored
# when the same bytes appear twice. Journals written before format 2 (a bare `length, crc,
# meta length` header) are still read, without resynchronisation.

MAGIC = b"FWJ\x02"
CHUNK_FORMAT = 1
_FRAME = struct.Struct("<4sBxxxQIII")
_FRAME_CRC = struct.Struct("<I")
HEADER_SIZE = _FRAME.size + _FRAME_CRC.size
_MAX_BODY = 1 << 31


def encode_chunk(payload: tuple, seq: int = 0) -> list[bytes]:
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
    head = _FRAME.pack(MAGIC, CHUNK_FORMAT, seq, body_length, crc, len(meta))
    return [head + _FRAME_CRC.pack(zlib.crc32(head)), meta, *parts]


class JournalWriter:
    """Appends whole chunks; one writer per journal, so readers never see interleaved bytes.

    The file is opened on the first append, so a folder that cannot be written does not stop
    the run from starting. A failed append (disk full, file too large, read-only folder) is
    undone by truncating back to the end of the last whole chunk and raises OSError: the
    caller keeps the payload and retries, and no partial chunk stays in front of the retry.
    If the truncation fails too, readers resynchronise past the partial bytes.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.seq = 0  # the next chunk's sequence number
        self._fd = -1
        self._good = 0  # end of the last whole chunk

    def _open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        # Held while the process lives: a reader that cannot tell from the journal which
        # process writes it (its start chunk is lost) asks the lock instead (writer_alive).
        with contextlib.suppress(OSError):  # a file system without locks: nothing to ask
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        self._good = os.fstat(fd).st_size
        if self._good:  # appending to a journal someone wrote before: continue its numbering
            scan = read_chunks(self.path, 0)
            seqs = [c.seq for c in scan.chunks if c.seq is not None]
            self.seq = max(seqs) + 1 if seqs else 0
        self._fd = fd

    def gone(self) -> bool:
        """The open journal was deleted (its folder removed by the script, a cleanup job):
        what is appended would go to a file no reader can open."""
        if self._fd < 0:
            return False
        try:
            return os.fstat(self._fd).st_nlink == 0
        except OSError:
            return False

    def restart(self) -> None:
        """Let go of a deleted journal: the next append creates a new one at `path`. Its
        chunks go on with this journal's numbering, so a catalog that read the deleted one
        sees the new file as a new one (`head_of`) and skips none of its chunks."""
        self.close()
        self._good = 0

    def append(self, payload: tuple) -> None:
        if self._fd < 0:
            self._open()
        buffers = encode_chunk(payload, self.seq)
        total = sum(map(len, buffers))
        try:
            written = os.writev(self._fd, buffers)
            if written < total:  # rare short write: finish the rest from one buffer
                view = memoryview(b"".join(buffers))[written:]
                while view:
                    view = view[os.write(self._fd, view) :]
        except OSError:
            self._undo()
            raise
        self._good += total
        self.seq += 1

    def _undo(self) -> None:
        with contextlib.suppress(OSError):  # cannot truncate: readers skip the partial chunk
            os.ftruncate(self._fd, self._good)

    def sync(self) -> None:
        """Make what was appended durable (a power cut after commit keeps it)."""
        if self._fd >= 0:
            os.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def writer_alive(path: Path) -> bool:
    """Whether a process on this host still has `path` open to write it (the writer holds a
    shared lock on it while it lives); False once it is gone, or the file is."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:  # no locks here: nothing says a writer is alive
        return False
    finally:
        os.close(fd)  # also lets go of the lock this took
    return False


def head_of(path: Path) -> tuple[int, int] | None:
    """(sequence number, header checksum) of the journal's first chunk, when its header is
    whole: the checksum covers the chunk's body checksum, so a journal deleted and written
    anew at the same path has another head. None for a journal without a readable one."""
    try:
        with open(path, "rb") as f:
            head = f.read(HEADER_SIZE)
    except OSError:
        return None
    if len(head) < HEADER_SIZE or head[:4] != MAGIC:
        return None
    (crc,) = _FRAME_CRC.unpack_from(head, _FRAME.size)
    if zlib.crc32(head[: _FRAME.size]) != crc:
        return None
    return _FRAME.unpack_from(head)[2], crc


@dataclass
class Chunk:
    offset: int  # where its header starts in the file
    end: int
    seq: int | None  # None in journals written before format 2
    logs: tuple | None
    timings: tuple | None
    events: list


@dataclass
class JournalScan:
    """The whole chunks after an offset, the damage between them, and where reading stopped.

    `end_offset` is where the next read starts: after the last whole chunk, before a tail that
    may still be being written. `error` says why reading stopped at a chunk this florwb
    cannot read (a newer format, another shape): the journal is unreadable from there on.
    """

    end_offset: int
    size: int = 0
    chunks: list[Chunk] = field(default_factory=list)
    damaged: list[tuple[int, int]] = field(default_factory=list)
    error: str | None = None
    # Reading stopped at bytes that cannot be the start of a chunk still being written (the
    # magic or a checksum is wrong), with no whole chunk after them: damage, not a torn tail.
    bad_tail: bool = False


@dataclass
class JournalBatch:
    """Everything new in one journal since a byte offset, merged across chunks."""

    end_offset: int
    logs: list = field(default_factory=list)  # pack_logs blocks
    timings: list = field(default_factory=list)
    events: list = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.logs or self.timings or self.events)


def merge(chunks: list[Chunk], end_offset: int) -> JournalBatch:
    batch = JournalBatch(end_offset=end_offset)
    for chunk in chunks:
        if chunk.logs is not None:
            batch.logs.append(chunk.logs)
        if chunk.timings is not None:
            batch.timings.append(chunk.timings)
        batch.events.extend(chunk.events)
    return batch


def read_from(path: Path, offset: int) -> JournalBatch:
    """Read the whole chunks after `offset`, skipping damage; stops before a torn tail."""
    scan = read_chunks(path, offset)
    return merge(scan.chunks, scan.end_offset)


def read_chunks(path: Path, offset: int) -> JournalScan:
    try:
        with open(path, "rb") as f:
            head = f.read(4)
            f.seek(offset)
            data = f.read()
    except FileNotFoundError:
        return JournalScan(end_offset=offset, size=offset)
    scan = JournalScan(end_offset=offset, size=offset + len(data))
    if head != MAGIC and _legacy(data, offset, scan):
        # no chunk of either format from its first byte, and not the start of one being
        # written (a recording writes the magic first): overwritten, or not a journal
        scan.bad_tail = offset == 0 and not scan.chunks and not MAGIC.startswith(head)
        return scan
    _scan(data, offset, scan)
    return scan


class ChunkError(ValueError):
    """A chunk whose checksums hold but whose content this florwb cannot read."""


def _frame_at(data: bytes, view: memoryview, pos: int) -> tuple[str, object]:
    """("ok", Chunk) | ("short", None): incomplete | ("bad", None) | ("newer", reason)."""
    n = len(data)
    if pos + HEADER_SIZE > n:
        return ("short", None) if MAGIC.startswith(data[pos : pos + 4]) else ("bad", None)
    magic, fmt, seq, length, crc, meta_length = _FRAME.unpack_from(data, pos)
    if magic != MAGIC:
        return "bad", None
    (head_crc,) = _FRAME_CRC.unpack_from(data, pos + _FRAME.size)
    if zlib.crc32(view[pos : pos + _FRAME.size]) != head_crc:
        return "bad", None
    start = pos + HEADER_SIZE
    end = start + length
    if end > n:
        return "short", None
    if zlib.crc32(view[start:end]) != crc:
        return "bad", None
    if fmt != CHUNK_FORMAT:
        return "newer", f"chunk format {fmt} at byte {{offset}} is not one this florwb reads"
    try:
        chunk = _decode(view, start, end, meta_length, pos, seq)
    except (ChunkError, ValueError, TypeError, EOFError) as exc:
        return "newer", f"chunk at byte {{offset}} has another shape: {exc}"
    return "ok", chunk


def _decode(view: memoryview, start: int, end: int, meta_length: int, pos: int, seq) -> Chunk:
    if meta_length > end - start:
        raise ChunkError("meta part longer than the chunk")
    meta = marshal.loads(view[start : start + meta_length])
    if not (isinstance(meta, tuple) and len(meta) == 3):
        raise ChunkError("meta is not (logs, timings, events)")
    log_lengths, timing_lengths, events = meta
    if not isinstance(events, list) or not all(isinstance(e, dict) for e in events):
        raise ChunkError("events are not a list of dicts")
    cursor = start + meta_length
    blocks: list = []
    for lengths, width in ((log_lengths, 3), (timing_lengths, 3)):
        if lengths is None:
            blocks.append(None)
            continue
        if not (
            isinstance(lengths, list)
            and len(lengths) == width
            and all(type(x) is int and x >= 0 for x in lengths)
        ):
            raise ChunkError("column part lengths are not three sizes")
        block = []
        for length in lengths:
            block.append(view[cursor : cursor + length])
            cursor += length
        blocks.append(tuple(block))
    if cursor != end:
        raise ChunkError("column parts do not fill the chunk")
    return Chunk(pos, end, seq, blocks[0], blocks[1], events)


def _next_frame(data: bytes, view: memoryview, start: int) -> tuple[int, str, object] | None:
    """The next position at or after `start` where a whole chunk (readable or not) begins."""
    q = data.find(MAGIC, start)
    while q >= 0:
        kind, value = _frame_at(data, view, q)
        if kind in ("ok", "newer"):
            return q, kind, value
        q = data.find(MAGIC, q + 1)
    return None


def _scan(data: bytes, base: int, scan: JournalScan) -> None:
    view = memoryview(data)
    pos = 0
    while pos < len(data):
        kind, value = _frame_at(data, view, pos)
        if kind in ("short", "bad"):
            # A tail being written, or damage: damage only when a whole chunk follows it.
            found = _next_frame(data, view, pos + 1)
            if found is None:
                scan.bad_tail = kind == "bad"
                break
            scan.damaged.append((base + pos, base + found[0]))
            pos, kind, value = found
        if kind == "newer":
            scan.error = str(value).format(offset=base + pos)
            break
        assert isinstance(value, Chunk)
        value.offset += base
        value.end += base
        scan.chunks.append(value)
        pos = value.end - base
    scan.end_offset = base + pos


_LEGACY_HEADER = struct.Struct("<III")  # format 1: body length, crc32 of body, meta length


def _legacy(data: bytes, base: int, scan: JournalScan) -> bool:
    """Read a journal written before format 2; False if `data` is not one (damaged start)."""
    view = memoryview(data)
    pos = 0
    while pos + _LEGACY_HEADER.size <= len(data):
        length, crc, meta_length = _LEGACY_HEADER.unpack_from(data, pos)
        start = pos + _LEGACY_HEADER.size
        end = start + length
        if length == 0 or end > len(data) or zlib.crc32(view[start:end]) != crc:
            break
        try:
            chunk = _decode(view, start, end, meta_length, base + pos, None)
        except (ChunkError, ValueError, TypeError, EOFError) as exc:
            scan.error = f"chunk at byte {base + pos} has another shape: {exc}"
            break
        chunk.end = base + end
        scan.chunks.append(chunk)
        pos = end
    if not scan.chunks and not scan.error and MAGIC in data:
        return False
    scan.end_offset = base + pos
    return True
