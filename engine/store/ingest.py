"""Idempotent ingestion of run journals into the catalog.

Each journal's ingested byte offset is stored in the same transaction as the rows it
produced, so an interrupted or repeated ingestion never duplicates or loses rows. Readers
call `ingest_pending` before every query: the user never runs an import step, and a run
that just ended (or was killed) is visible to the next command. Rows go in as whole
numpy columns; nothing here loops over log rows in Python unless a batch holds strings.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
import stat
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from itertools import chain
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb

from florwb_engine import journal, processes
from florwb_engine import journal_events as ev
from florwb_engine.journal import VTYPES
from florwb_engine.store import console, run_context, run_ranks, system_metrics
from florwb_engine.store.db import StoreError, fetch_one
from florwb_engine.store.schema import RECORDED, ensure_loop_columns, quote

if TYPE_CHECKING:  # numpy is imported where rows are ingested: a session with nothing new
    import numpy as np  # to ingest (planning's queries) does without it

_NUMERIC = (float, int, bool)
_FLOATS = frozenset({float})
_NUMBERS = frozenset({float, int, bool})
_VTYPE_CODE = {v: i for i, v in enumerate(VTYPES)}
_TYPE_CODE = {float: 0, int: 1, bool: 2, str: 3, type(None): 4}


@dataclass
class IngestReport:
    rows: int = 0
    journals: int = 0
    errors: list[str] = field(default_factory=list)  # failures retried on the next read
    # What this ingestion found and kept track of (damage, values stored as text, journals
    # unreadable from some chunk on): each is found once, so said once, in one line.
    warnings: list[str] = field(default_factory=list)


# What a journal's content can raise when it is not what this florwb wrote: the journal is
# then unreadable from that chunk on, with the reason; every other journal still ingests.
_SHAPE_ERRORS = (
    ValueError,
    TypeError,
    KeyError,
    AttributeError,
    IndexError,
    EOFError,
    OverflowError,
    UnicodeError,
    # a field of another type than its column (not a failing database: that is retried)
    duckdb.ConversionException,
    duckdb.InvalidInputException,
    duckdb.TypeMismatchException,
    duckdb.OutOfRangeException,
)


@dataclass(frozen=True)
class _State:
    """What the catalog knows of one journal (a row of `journals`)."""

    run_id: str | None = None
    source: str = RECORDED
    offset: int = 0
    next_seq: int = 0
    done: bool = False
    next_chunk: int = 0  # chunks numbered below this were ingested already
    error: str | None = None
    rank: int | None = None  # the rank that wrote it (multi-process runs; run_ranks.py)
    head: int | None = None  # its first chunk's header checksum (journal.head_of)


def ingest_pending(con: duckdb.DuckDBPyConnection, journal_dir: Path) -> IngestReport:
    report = IngestReport()
    if not journal_dir.is_dir():
        return report
    files = sorted(journal_dir.glob(f"*{journal.SUFFIX}"))
    if not files:
        return report
    # Rows carry their own order (seq); letting DuckDB write them in parallel is faster.
    con.execute("SET SESSION preserve_insertion_order = false")
    states = {
        row[0]: _State(
            row[1], row[2], row[3], row[4], bool(row[5]), row[6] or 0, row[7], row[8], row[9]
        )
        for row in con.execute(
            'SELECT file, run_id, source, "offset", next_seq, done, next_chunk, error, rank, '
            "head FROM journals"
        ).fetchall()
    }
    for path in files:
        state = states.get(path.name)
        if state is not None and (state.done or state.offset) and _written_anew(path, state):
            state = _reopen(con, path, state, report)
        if state is not None and state.done:
            continue
        if state is None and (open_to := writable_by_others(path)):  # said when first read
            report.warnings.append(open_to)
        try:
            # What a live run appends while this reader ingests is the next reader's: chasing
            # it would hold the catalog for as long as the run writes faster than we ingest.
            # One pass past what was there at the start (it finds a run that died meanwhile,
            # its id known from the first pass), then it stops.
            size, passes = _size(path), 0
            while state is None or not state.done:  # until nothing new (a live run) or done
                rows, new_state = _ingest_one(con, path, state, report)
                if new_state == state:
                    break
                report.rows += rows
                state = new_state
                passes += 1
                if state is not None and state.offset >= size and passes >= 2:
                    break
            report.journals += 1
        except duckdb.Error as exc:  # the database failed: nothing of it kept, tried next read
            _rollback(con)
            full = disk_full(exc)
            if full is not None:  # every journal would fail alike; the reader must not
                # serve the catalog as if it were up to date
                raise CatalogDiskFull(
                    f"the catalog cannot be brought up to date: {full} where "
                    f"{journal_dir.parent} is; free some space and run it again "
                    "(nothing is lost: the journals still hold every value)"
                ) from None
            report.errors.append(f"{path.name}: {str(exc).splitlines()[0]}")
    con.execute("SET SESSION preserve_insertion_order = true")
    return report


def _written_anew(path: Path, state: _State) -> bool:
    """The journal read before was deleted and a new one written at its path (a script that
    removed it mid-run, a launch that reuses its run id): its first chunk is another."""
    if state.head is None:
        return False
    if state.done and _size(path) == state.offset:  # the usual case, without reading it
        return False
    head = journal.head_of(path)
    return head is not None and head[1] != state.head


def _reopen(con, path: Path, state: _State, report: IngestReport) -> _State:
    """Read a journal written anew from its start: its chunks are numbered apart from the
    ones read before, its rows go on after theirs (nothing collides, nothing is skipped);
    said once."""
    new = _State(state.run_id, state.source, 0, state.next_seq, False, 0, None, state.rank)
    con.execute("BEGIN")
    _save_state(con, path.name, new)
    if state.run_id is not None:
        detail = f"journal {path.name} written anew after it was read"
        _add_issue(con, state.run_id, state.source, "restarted", detail, 1)
    con.execute("COMMIT")
    report.warnings.append(
        f"run {state.run_id}: journal {path.name} was deleted and written anew since it was "
        "read; what it holds now is added to what was read before"
    )
    return new


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:  # removed since listed: read_chunks finds nothing new
        return 0


def writable_by_others(path: Path) -> str | None:
    """The warning for a journal every user may write (what it says a run logged could
    have been written by anyone on the machine); None otherwise."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return None
    if not mode & stat.S_IWOTH:
        return None
    return (
        f"journal {path.name} is writable by every user (mode {stat.filemode(mode)}): "
        f"anyone could have changed what it holds; `chmod o-w` it"
    )


class CatalogDiskFull(StoreError):
    """Ingestion could not write the catalog: its disk is full (or a quota or file size
    limit was reached). One line for the user; a reader stops instead of serving stale rows."""


_FULL = tuple(os.strerror(e) for e in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG))


def disk_full(exc: BaseException) -> str | None:
    """The reason, in the system's words, when `exc` is the catalog's disk being full."""
    text = str(exc)
    return next((reason for reason in _FULL if reason in text), None)


def _rollback(con: duckdb.DuckDBPyConnection) -> None:
    with contextlib.suppress(duckdb.Error):  # no transaction was open
        con.execute("ROLLBACK")


@dataclass
class RunKeys:
    run_id: str | None
    source: str
    run_key: int = 0
    source_key: int = 0
    rank: int | None = None
    issues: list[tuple[str, str, int]] = field(default_factory=list)  # kind, detail, n
    found: dict[str, int] = field(default_factory=dict)  # replaced here (not by the writer)
    # Of a journal written anew (`_reopen`): the values read from the one deleted, which
    # the writer counts as lost with the deletion though the catalog holds them.
    read_before: int = 0


def _ingest_one(
    con: duckdb.DuckDBPyConnection, path: Path, state: _State | None, report: IngestReport
) -> tuple[int, _State | None]:
    """Ingest what is new in one journal; returns (rows, new state)."""
    old = state or _State()
    # Checked before reading: a process found dead now wrote its last bytes already.
    dead = old.run_id is not None and _is_dead(con, path, old.run_id, old.rank, old.source)
    scan = journal.read_chunks(path, old.offset)
    chunks, next_chunk = _new_chunks(scan.chunks, old.next_chunk)
    if old.offset == 0 and not scan.chunks and scan.bad_tail:  # overwritten, or not a journal
        why = f"no readable chunk in its {scan.size} bytes (overwritten, or not a florwb journal)"
        return 0, _mark_unreadable(con, path, old, 0, why, report)
    if scan.end_offset == old.offset and scan.error is None and not dead:
        return 0, state  # nothing new: a live run between flushes
    try:
        rows, new = _apply(con, path, old, chunks, scan, next_chunk, dead, report)
    except _SHAPE_ERRORS as exc:
        _rollback(con)
        return _apply_chunk_by_chunk(con, path, old, chunks, scan, dead, report, _reason(exc))
    if scan.error is not None:
        new = _mark_unreadable(con, path, new, scan.end_offset, scan.error, report)
    return rows, new


def _new_chunks(chunks: list[journal.Chunk], next_chunk: int) -> tuple[list, int]:
    """The chunks not ingested before: a chunk whose bytes appear twice counts once."""
    new = []
    for chunk in chunks:
        if chunk.seq is not None:
            if chunk.seq < next_chunk:
                continue
            next_chunk = chunk.seq + 1
        new.append(chunk)
    return new, next_chunk


def _apply_chunk_by_chunk(con, path, old, chunks, scan, dead, report, reason) -> tuple[int, _State]:
    """A batch that failed on its content: keep every chunk before the one that fails."""
    total = 0
    state = old
    for chunk in chunks:
        part = journal.JournalScan(
            end_offset=chunk.end,
            size=scan.size,
            chunks=[chunk],
            damaged=[d for d in scan.damaged if state.offset <= d[0] < chunk.offset],
        )
        try:
            seq = None if chunk.seq is None else chunk.seq + 1
            rows, state = _apply(con, path, state, [chunk], part, seq, False, report)
        except _SHAPE_ERRORS as exc:
            _rollback(con)
            where = f"chunk at byte {chunk.offset}: {_reason(exc)}"
            return total, _mark_unreadable(con, path, state, chunk.offset, where, report)
        total += rows
    if scan.error is not None:  # each chunk went in alone; the batch failed on: `reason`
        state = _mark_unreadable(con, path, state, scan.end_offset, scan.error, report)
    return total, state


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}"[:300] if text else type(exc).__name__


def _apply(
    con, path: Path, old: _State, chunks: list, scan, next_chunk, dead: bool, report
) -> tuple[int, _State]:
    """One transaction: the chunks' rows and events, the damage skipped, the new offset."""
    batch = journal.merge(chunks, scan.end_offset)
    con.execute("BEGIN")
    keys = RunKeys(old.run_id, old.source, rank=old.rank)
    if old.offset == 0 and old.next_seq:  # reopened: rows of the deleted journal are stored
        keys.read_before = max(0, old.next_seq - run_ranks.first_seq(0, old.rank))
    gathered = Gathered()
    unknown: dict[str, int] = {}  # event kinds this florwb does not know -> how many
    warnings = []
    events = [ev.decode(_clean_event(e, keys.found)) for e in batch.events]
    if keys.run_id is None and chunks and not any(type(e) is ev.Start for e in events):
        warnings.append(_start_lost(con, path, keys))
    for event in events:
        handler = HANDLERS.get(type(event))
        if handler is None:  # a newer writer's event: skipped, but never silently
            name = clean_text(str(event.name if type(event) is ev.Unknown else event.kind))[:40]
            unknown[name] = unknown.get(name, 0) + 1
            continue
        handler(con, keys, event, gathered)
    done = gathered.done
    entries, lines = gathered.entries, gathered.lines
    if keys.run_id is None:
        if chunks or scan.error is None:
            raise ValueError("journal has no start event")
        con.execute("COMMIT")  # nothing readable yet: the caller marks it unreadable
        return 0, old
    resolve_keys(con, keys)
    shared = _insert_loop_entries(con, keys, entries)
    _insert_iterations(con, keys, batch.timings)
    rows = insert_logs(con, keys, batch.logs, run_ranks.first_seq(old.next_seq, keys.rank))
    console.insert(con, keys.run_key, keys.source_key, lines, run_ranks.first_seq(0, keys.rank))
    if dead and not done and keys.rank is not None:
        run_ranks.mark_killed(con, keys.run_id, keys.rank, _last_write(path))
    elif dead and not done:
        con.execute(
            "UPDATE runs SET status = 'killed' WHERE run_id = ? AND status = 'running'",
            [keys.run_id],
        )
        done = not chunks  # the process is gone: once nothing new is left, nothing will come
    for loop_path, column in shared.items():
        detail = f"loop {loop_path!r} nests loops that share the column {column!r}"
        keys.issues.append(("ambiguous", detail, 1))
        warnings.append(
            f"run {keys.run_id}: {detail} (loop names differ only in case, or repeat): "
            "the inner loop's coordinates hide the outer's; give the loops distinct names"
        )
    for kind, n in unknown.items():
        keys.issues.append(("skipped", f"events of unknown kind {kind!r}", n))
    if unknown:
        kinds = ", ".join(f"{kind!r} ({n})" for kind, n in unknown.items())
        warnings.append(
            f"run {keys.run_id}: skipped events of a kind this florwb does not know: {kinds}"
        )
    damaged = list(scan.damaged)
    if done and scan.error is None and scan.size > scan.end_offset:
        damaged.append((scan.end_offset, scan.size))  # bytes after the last chunk: never one
    for start, end in damaged:
        keys.issues.append(("damaged", f"journal bytes {start}-{end}", end - start))
        warnings.append(
            f"run {keys.run_id}: journal {path.name} bytes {start}-{end} are damaged, skipped"
        )
    for kind, detail, n in keys.issues:
        _add_issue(con, keys.run_id, keys.source, kind, detail, n)
    for detail, n in keys.found.items():
        _add_issue(con, keys.run_id, keys.source, "replaced", detail, n)
    if keys.found:
        n = sum(keys.found.values())
        why = "; ".join(f"{detail} ({k})" for detail, k in keys.found.items())
        warnings.append(f"run {keys.run_id}: {n} value(s) or name(s) kept as text: {why}")
    new = _State(
        keys.run_id,
        keys.source,
        batch.end_offset,
        run_ranks.first_seq(old.next_seq, keys.rank) + rows,
        done,
        next_chunk if next_chunk is not None else old.next_chunk,
        None,
        keys.rank,
        old.head if old.head is not None or old.offset else _head(path),
    )
    _save_state(con, path.name, new)
    con.execute("COMMIT")
    report.warnings.extend(warnings)
    return rows, new


def _head(path: Path) -> int | None:
    head = journal.head_of(path)
    return None if head is None else head[1]


START_LOST = "start lost"  # run_issues kind: the run is shown from what is left of its journal


def _start_lost(con, path: Path, keys: RunKeys) -> str:
    """The journal's first chunk (the run's start: script, command line, start time, host
    and process) is gone: the run is created from the journal's name so what is left is
    shown under it; the line that says so."""
    named = journal.recorded_run_of(path.name)
    if named is None:  # a replay's journal does not name the run it replays
        raise ValueError("its start event is lost (the run it replays is unknown)")
    keys.run_id, keys.rank = named
    con.execute(
        "INSERT OR IGNORE INTO runs (run_id, run_key, status) "
        "SELECT ?, coalesce(max(run_key), 0) + 1, 'running' FROM runs",
        [keys.run_id],
    )
    if keys.rank is not None:
        con.execute(
            "INSERT OR IGNORE INTO run_ranks (run_id, rank, status) VALUES (?, ?, 'running')",
            [keys.run_id, keys.rank],
        )
    missing = "its script, command line, start time and process are unknown"
    keys.issues.append((START_LOST, f"{path.name}: {missing}", 1))
    return (
        f"run {keys.run_id}: journal {path.name} lost its start: shown from what is left; {missing}"
    )


def _mark_unreadable(con, path: Path, state: _State, offset: int, reason: str, report) -> _State:
    """The journal cannot be read from `offset` on: keep what came before, say why once."""
    run_id = state.run_id
    source = state.source
    con.execute("BEGIN")
    if run_id is None:  # not even its start could be read: the run is known by its file
        run_id = clean_text(path.name[: -len(journal.SUFFIX)])
        if not path.name.startswith("replay-"):
            con.execute(
                "INSERT OR IGNORE INTO runs (run_id, run_key, status, message) "
                "SELECT ?, coalesce(max(run_key), 0) + 1, 'unreadable', ? FROM runs",
                [run_id, reason],
            )
    if source == RECORDED:
        con.execute(
            "UPDATE runs SET status = 'unreadable', message = ? "
            "WHERE run_id = ? AND status IN ('running', 'killed')",
            [reason, run_id],
        )
    _add_issue(con, run_id, source, "unreadable", reason, 1)
    new = _State(
        run_id,
        source,
        offset,
        state.next_seq,
        True,
        state.next_chunk,
        reason,
        state.rank,
        state.head,
    )
    _save_state(con, path.name, new)
    con.execute("COMMIT")
    report.warnings.append(f"run {run_id}: journal {path.name} unreadable from here on: {reason}")
    return new


def _add_issue(con, run_id: str, source: str, kind: str, detail: str, n: int) -> None:
    con.execute(
        "INSERT INTO run_issues VALUES (?, ?, ?, ?, ?) "
        "ON CONFLICT DO UPDATE SET n = n + excluded.n",
        [run_id, source, kind, clean_text(detail)[:500], int(n)],
    )


def clean_text(text: object) -> str:
    """A string DuckDB accepts (valid UTF-8): lone surrogates become escapes."""
    if type(text) is not str:
        text = _safe_str(text)
    if text.isascii():
        return text
    try:
        text.encode()
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode()
    return text


def _safe_str(value: object) -> str:
    if type(value) is int:
        return _int_text(value)
    try:
        return str(value)
    except Exception:  # a value that cannot say what it is: its type says what it was
        return f"<{type(value).__name__}>"


def _int_text(value: int) -> str:
    """Exact digits, also past Python's 4,300-digit limit on int -> str."""
    try:
        return str(value)
    except ValueError:
        return str(Decimal(value))


def _clean_event(event: dict, found: dict[str, int]) -> dict:
    """Event fields as DuckDB takes them: string keys, valid UTF-8 text."""
    clean = {}
    for key, value in event.items():
        if type(value) is str and not value.isascii():
            text = clean_text(value)
            if text != value:
                why = f"{event.get('kind')} event text with lone surrogates"
                found[why] = found.get(why, 0) + 1
            value = text
        elif key == "names" and isinstance(value, (list, tuple)):
            value = tuple(clean_text(v) for v in value)
        clean[key if type(key) is str else clean_text(key)] = value
    return clean


def _save_state(con, file: str, state: _State) -> None:
    con.execute(
        'INSERT OR REPLACE INTO journals (file, run_id, source, "offset", next_seq, done, '
        "next_chunk, error, rank, head) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            file,
            state.run_id,
            state.source,
            state.offset,
            state.next_seq,
            state.done,
            state.next_chunk,
            state.error,
            state.rank,
            state.head,
        ],
    )


def resolve_keys(con, keys: RunKeys) -> None:
    row = fetch_one(con, "SELECT run_key FROM runs WHERE run_id = ?", [keys.run_id])
    if row is None:
        raise ValueError(f"run {keys.run_id} is unknown")
    keys.run_key = row[0]
    found = fetch_one(con, "SELECT source_key FROM sources WHERE source = ?", [keys.source])
    if found is None:
        found = fetch_one(
            con,
            "INSERT INTO sources SELECT coalesce(max(source_key), 0) + 1, ? FROM sources "
            "RETURNING source_key",
            [keys.source],
        )
    keys.source_key = found[0]


def _ts(seconds: float | None) -> datetime | None:
    return None if seconds is None else datetime.fromtimestamp(seconds)


@dataclass
class Gathered:
    """What one batch's events leave for the rows inserted after them (in one transaction):
    loop entries and printed lines go in as whole columns, and an end event closes the
    journal."""

    entries: list[ev.Loop] = field(default_factory=list)
    lines: list[ev.Console] = field(default_factory=list)
    done: bool = False


def _on_start(con, keys: RunKeys, e: ev.Start, gathered: Gathered) -> None:
    keys.run_id = str(e.run_id)
    keys.source = str(e.source)
    if isinstance(e.rank, dict):
        keys.rank = int(e.rank["rank"])
    if keys.source != RECORDED:  # a replay's journal: the run is the recorded one
        return
    con.execute(
        "INSERT OR IGNORE INTO runs (run_id, run_key, script, argv, cwd, host, pid, "
        "pid_ticks, python, start_time, status) SELECT ?, coalesce(max(run_key), 0) + 1, "
        "?, ?, ?, ?, ?, ?, ?, ?, 'running' FROM runs",
        [
            keys.run_id,
            e.script,
            json.dumps(e.argv),
            e.cwd,
            e.host,
            e.pid,
            e.pid_ticks,
            e.python,
            _ts(e.time),
        ],
    )
    run_context.apply(con, keys.run_id, e.context, keys.rank)
    if isinstance(e.rank, dict):
        run_ranks.on_start(con, keys.run_id, e, _ts(e.time))


def _on_version(con, keys: RunKeys, e: ev.Version, gathered: Gathered) -> None:
    con.execute(
        "INSERT OR IGNORE INTO versions VALUES (?, now()::TIMESTAMP, ?, ?, ?)",
        [e.version, e.n_files, e.n_bytes, json.dumps(e.skipped)],
    )
    con.execute(
        "UPDATE runs SET version = ?, git_head = ?, git_branch = ?, git_dirty = ? WHERE run_id = ?",
        [e.version, e.git_head, e.git_branch, e.git_dirty, keys.run_id],
    )
    for path, size, mtime_ns, blob in e.inputs:
        con.execute(
            "INSERT OR REPLACE INTO run_inputs VALUES (?, ?, ?, ?, ?)",
            [keys.run_id, path, size, mtime_ns, blob],
        )


def _on_version_error(con, keys: RunKeys, e: ev.VersionError, gathered: Gathered) -> None:
    con.execute("UPDATE runs SET message = ? WHERE run_id = ?", [e.error, keys.run_id])


def _on_arg(con, keys: RunKeys, e: ev.Arg, gathered: Gathered) -> None:
    value, text, vtype = _arg_value(e.value)
    con.execute(
        "INSERT OR REPLACE INTO args VALUES (?, ?, ?, ?, ?)",
        [keys.run_id, clean_text(e.name), value, text, vtype],
    )


def _on_issues(con, keys: RunKeys, e: ev.Issues, gathered: Gathered) -> None:
    """What the recording process replaced, dropped or could not write."""
    for issue_kind, detail, n in e.counts:
        if issue_kind == "lost" and detail == ev.JOURNAL_DELETED:
            n, keys.read_before = max(0, int(n) - keys.read_before), 0
            if not n:
                continue
        keys.issues.append((clean_text(issue_kind), clean_text(detail), int(n)))


def _on_files(con, keys: RunKeys, e: ev.Files, gathered: Gathered) -> None:
    """First accesses of project files (record/file_access.py)."""
    for path, access, size, mtime_ns in e.paths:
        con.execute(
            "INSERT OR IGNORE INTO run_files VALUES (?, ?, ?, ?, ?)",
            [keys.run_id, clean_text(path), access, size, mtime_ns],
        )
    if e.dropped:
        keys.issues.append(("files", "project files past the first 10,000 not noted", 1))


def _on_lineage(con, keys: RunKeys, e: ev.Lineage, gathered: Gathered) -> None:
    if keys.source != RECORDED:
        return
    con.execute(
        "INSERT OR IGNORE INTO run_lineage VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            keys.run_id,
            e.name or "",
            int(e.call),
            e.parent,
            e.checkpoint,
            e.checkpoint_kind,
            e.loop,
            e.iteration,
            e.path,
        ],
    )


def _on_system(con, keys: RunKeys, e: ev.System, gathered: Gathered) -> None:
    system_metrics.apply(con, keys, e)  # CPU, memory, GPU sampled while recording


def _on_checkpoint(con, keys: RunKeys, e: ev.Checkpoint, gathered: Gathered) -> None:
    con.execute(
        "INSERT INTO checkpoints VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            keys.run_id,
            e.loop,
            e.iteration,
            e.ctx_id,
            e.path,
            e.bytes,
            e.snapshot_s,
            e.write_s,
            _ts(e.time),
        ],
    )


def _on_loop(con, keys: RunKeys, e: ev.Loop, gathered: Gathered) -> None:
    gathered.entries.append(e)


def _on_console(con, keys: RunKeys, e: ev.Console, gathered: Gathered) -> None:
    gathered.lines.append(e)


def _on_end(con, keys: RunKeys, e: ev.End, gathered: Gathered) -> None:
    """The journal ends here; a recorded run (or rank) ended so."""
    gathered.done = True
    if keys.source != RECORDED:
        return
    if keys.rank is not None:
        run_ranks.on_end(con, keys.run_id, keys.rank, e, _end_time(con, keys, e))
    else:
        con.execute(
            "UPDATE runs SET end_time = ?, status = ?, exception = ?, "
            "message = coalesce(?, message) WHERE run_id = ?",
            [_end_time(con, keys, e), e.status, e.exception, e.message, keys.run_id],
        )
    run_context.apply(con, keys.run_id, e.context, keys.rank)


# Each event type's handler, called in journal order inside the batch's transaction; a
# journal event without one here is skipped and counted like a newer writer's kind
# (tests/test_journal_events.py checks that every type in journal_events has one).
HANDLERS: dict[type[ev.Event], Callable[[Any, RunKeys, Any, Gathered], None]] = {
    ev.Start: _on_start,
    ev.Version: _on_version,
    ev.VersionError: _on_version_error,
    ev.Arg: _on_arg,
    ev.Issues: _on_issues,
    ev.Files: _on_files,
    ev.Lineage: _on_lineage,
    ev.System: _on_system,
    ev.Checkpoint: _on_checkpoint,
    ev.Loop: _on_loop,
    ev.Console: _on_console,
    ev.End: _on_end,
}


def _end_time(con, keys: RunKeys, e: ev.End) -> datetime | None:
    """When the run (or rank) ended: its start plus the time it ran on the monotonic clock
    (`elapsed_s`), so a wall clock stepped back meanwhile gives no negative duration; the
    end's own wall-clock time for journals without it, or a run whose start is lost."""
    elapsed = e.elapsed_s
    if type(elapsed) is float and elapsed >= 0:
        if keys.rank is not None:
            sql, params = (
                "SELECT start_time FROM run_ranks WHERE run_id = ? AND rank = ?",
                [
                    keys.run_id,
                    keys.rank,
                ],
            )
        else:
            sql, params = "SELECT start_time FROM runs WHERE run_id = ?", [keys.run_id]
        row = fetch_one(con, sql, params)
        if row is not None and row[0] is not None:
            return row[0] + timedelta(seconds=elapsed)
    return _ts(e.time)


def _last_write(path: Path) -> datetime | None:
    """When a journal was last written (its modification time)."""
    try:
        return _ts(path.stat().st_mtime)
    except OSError:
        return None


def _arg_value(v) -> tuple[float | None, str | None, str]:
    """An arg as stored: an int a float cannot hold exactly (10**100) keeps its digits as
    text beside the nearest float (None beyond float range); readers decode the text."""
    if type(v) is int and abs(v) > FLOAT_EXACT:
        try:
            approx: float | None = float(v)
        except OverflowError:
            approx = None
        return approx, _int_text(v), "int"  # its digits, also past 4,300 of them
    return _one_value(v)


def _one_value(v) -> tuple[float | None, str | None, str]:
    if type(v) is tuple and len(v) == 2 and v[0] in _VTYPE_CODE and type(v[1]) is str:
        return None, clean_text(v[1]), v[0]
    if type(v) in _NUMERIC:
        try:
            return float(v), None, VTYPES[_TYPE_CODE[type(v)]]
        except OverflowError:  # an int beyond float range keeps its digits
            return None, _int_text(v), "int"
    if type(v) is str:
        return None, clean_text(v), "str"
    if v is None:
        return None, None, "none"
    return None, _object_text(v), "object"


def _object_text(v: object) -> str:
    """What a value of a type the store has no column for looks like, with its type."""
    text = clean_text(repr(v) if type(v) is not int else _int_text(v))
    text = text if len(text) <= 1000 else text[:997] + "..."
    return f"{type(v).__name__}: {text}"


def _is_dead(con, path: Path, run_id: str, rank: int | None = None, source: str = RECORDED) -> bool:
    """A run with no end event whose process is gone from this host was killed. Of a run
    whose start is lost the process is unknown: its journal's writer lock says instead."""
    if rank is not None:
        if source != RECORDED:
            return False
        row = fetch_one(
            con,
            "SELECT host, pid, status FROM run_ranks WHERE run_id = ? AND rank = ?",
            [run_id, rank],
        )
        if row is not None and row[2] == "running" and row[0] is None and row[1] is None:
            return not journal.writer_alive(path)
        return run_ranks.is_dead(con, run_id, rank, path)
    row = fetch_one(con, "SELECT host, pid, pid_ticks, status FROM runs WHERE run_id = ?", [run_id])
    if row is None or row[3] != "running":
        return False
    if row[0] is None and row[1] is None and source == RECORDED:  # its start is lost
        return not journal.writer_alive(path)
    if row[0] != socket.gethostname():
        return False
    _host, pid, ticks, _status = row
    return pid is not None and processes.is_gone(pid, ticks)


def _insert_loop_entries(con, keys: RunKeys, entries: list[ev.Loop]) -> dict[str, str]:
    """One row per loop entry, holding the outer loops' coordinates for its iterations.
    Returns the loop paths whose loops share a column (`epoch` in `Epoch`), by column:
    their coordinates cannot be told apart, which the caller says."""
    import numpy as np

    shared: dict[str, str] = {}
    if entries:  # a journal written anew starts with the loops it is in again
        stored = {
            r[0]
            for r in con.execute(
                "SELECT entry_id FROM loop_entries WHERE run_key = ? AND source_key = ? "
                "AND entry_id IN (SELECT unnest(?))",
                [keys.run_key, keys.source_key, [e.entry for e in entries]],
            ).fetchall()
        }
        entries = [e for e in entries if e.entry not in stored]
    if not entries:
        return shared
    mapping = ensure_loop_columns(con, {n for e in entries for n in e.names})
    groups: dict[tuple, list[ev.Loop]] = defaultdict(list)
    for e in entries:
        groups[tuple(e.names)].append(e)
    for names, group in groups.items():
        outer_cols = [mapping[n] for n in names[:-1]]
        columns = [c.lower() for c in (*outer_cols, mapping[names[-1]])]
        if len(set(columns)) < len(columns):
            shared["/".join(names)] = next(c for c in columns if columns.count(c) > 1)
        frame = {  # numpy columns, not pandas: importing pandas costs every reader ~0.3 s
            "entry_id": np.array([e.entry for e in group], dtype=np.int64),
            "total": np.array([_or_minus_one(e.total) for e in group], dtype=np.int64),
            **{
                f"c{d}": np.array([e.outer[d] for e in group], dtype=np.int64)
                for d in range(len(outer_cols))
            },
        }
        con.register("florwb_entries", frame)
        con.execute(
            f"INSERT INTO loop_entries (run_key, source_key, entry_id, loop, path, depth, total, "
            f"own_column, rank{''.join(', ' + quote(c) for c in outer_cols)}) SELECT ?, ?, "
            f"entry_id, ?, ?, ?, NULLIF(total, -1), ?, ?"
            f"{''.join(f', c{d}' for d in range(len(outer_cols)))} FROM florwb_entries",
            [
                keys.run_key,
                keys.source_key,
                names[-1],
                "/".join(names),
                len(names) - 1,
                mapping[names[-1]],
                keys.rank or 0,
            ],
        )
        con.unregister("florwb_entries")
    return shared


_ENTRY_OF = (
    "LEFT JOIN loop_entries e ON e.run_key = ? AND e.source_key = ? AND "
    f"e.entry_id = {{ctx}} >> {journal.ENTRY_SHIFT}"
)


def _repeats(name_keys: np.ndarray, ctx_ids: np.ndarray) -> dict[str, np.ndarray]:
    """(name_key, ctx_id, n): values logged again in an iteration of the same name.

    Sorting by name keeps each name's rows in log order, so a repeat is the same ctx_id
    twice in a row; numpy does it in a few ms per million rows, DuckDB's DISTINCT count
    took a third of the ingestion time."""
    import numpy as np

    order = np.argsort(name_keys, kind="stable")
    keys, ctxs = name_keys[order], ctx_ids[order]
    again = np.flatnonzero((keys[1:] == keys[:-1]) & (ctxs[1:] == ctxs[:-1])) + 1
    if not len(again):
        empty = np.empty(0, dtype=np.int64)
        return {"name_key": empty, "ctx_id": empty, "n": empty}
    pairs, counts = np.unique(
        np.stack([keys[again].astype(np.int64), ctxs[again]]), axis=1, return_counts=True
    )
    return {"name_key": pairs[0], "ctx_id": pairs[1], "n": counts.astype(np.int64)}


def _or_minus_one(total: int | None) -> int:
    return -1 if total is None else total


def _insert_iterations(con, keys: RunKeys, blocks: list) -> None:
    import numpy as np

    if not blocks:
        return
    frame = {
        name: np.concatenate([np.frombuffer(b[i], dtype=dtype) for b in blocks])
        for i, (name, dtype) in enumerate(
            (("ctx_id", np.int64), ("wait_s", np.float64), ("iter_s", np.float64))
        )
    }
    con.register("florwb_iterations", frame)
    con.execute(
        "INSERT INTO iteration_rows SELECT ?, ?, ctx_id, wait_s, iter_s FROM florwb_iterations",
        [keys.run_key, keys.source_key],
    )
    con.unregister("florwb_iterations")


# Every int up to 2**53 is a float exactly; a larger one (a step counter, a token count, a
# seed, a hash) keeps its digits as text, or it would come back rounded.
FLOAT_EXACT = 2**53


def split_values(
    values: list, found: dict[str, int] | None = None
) -> tuple[np.ndarray, list | None, np.ndarray]:
    """(numbers, texts or None, vtype codes) for one block of logged values.

    All-float blocks (the usual case) convert in C; strings, None and JSON need a pass in
    Python. Ints a float would round (past 2**53) keep their exact digits as text. A value the store
    cannot hold exactly (a string with lone surrogates, a complex number, anything a
    journal from elsewhere holds) is stored as text with its type, and counted in `found`
    by reason: one odd value never keeps the others out.
    """
    import numpy as np

    types = set(map(type, values))
    if types <= _FLOATS:
        return np.array(values, dtype=np.float64), None, np.zeros(len(values), np.uint8)
    if types <= _NUMBERS:
        with contextlib.suppress(OverflowError):  # ints beyond float: the pass below keeps digits
            number = np.array(values, dtype=np.float64)
            if int in types and (np.abs(number) >= FLOAT_EXACT).any():
                raise OverflowError  # an int there may have been rounded: the pass below
            codes = np.fromiter(map(_TYPE_CODE.__getitem__, map(type, values)), np.uint8)
            return number, None, codes
    found = {} if found is None else found
    n = len(values)
    number = np.full(n, np.nan)
    text: list = [None] * n
    codes = np.zeros(n, np.uint8)
    for i, v in enumerate(values):
        t = type(v)
        if t in _NUMERIC:
            codes[i] = _TYPE_CODE[t]
            try:
                number[i] = v
            except OverflowError:  # an int beyond float range: its exact digits as text
                text[i] = _int_text(v)
                continue
            if t is int and not -FLOAT_EXACT <= v <= FLOAT_EXACT:
                text[i] = _int_text(v)  # a float would round it: its digits are the value
            continue
        if t is str:
            codes[i] = _TYPE_CODE[str]
            clean = clean_text(v)
            if clean != v:
                codes[i] = _VTYPE_CODE["object"]
                clean = f"str: {clean}"
                why = "string with lone surrogates"
                found[why] = found.get(why, 0) + 1
            text[i] = clean
        elif v is None:
            codes[i] = _TYPE_CODE[t]
        elif t is tuple and len(v) == 2 and v[0] in _VTYPE_CODE and type(v[1]) is str:
            codes[i] = _VTYPE_CODE[v[0]]
            text[i] = clean_text(v[1])
        else:
            codes[i] = _VTYPE_CODE["object"]
            text[i] = _object_text(v)
            why = f"{t.__name__} value"
            found[why] = found.get(why, 0) + 1
    return number, text, codes


def _log_columns(values_blocks: list[list], found: dict[str, int]) -> dict:
    import numpy as np

    values, texts, vtypes = [], [], []
    for block in values_blocks:
        number, text, code = split_values(block, found)
        values.append(number)
        texts.append(text)
        vtypes.append(code)
    value = np.concatenate(values)
    vtype = np.concatenate(vtypes)
    text = None
    if any(t is not None for t in texts):
        text = list(
            chain.from_iterable(
                t if t is not None else [None] * len(v) for t, v in zip(texts, values)
            )
        )
    nan = np.isnan(value) & (vtype <= 2)
    return {"value": value, "vtype": vtype, "text": text, "nan": nan if nan.any() else None}


def _clean_names(names: list, found: dict[str, int]) -> list[str]:
    """Log names as strings DuckDB takes; a name of another type becomes its str()."""
    if set(map(type, names)) == {str} and all(n.isascii() for n in set(names)):
        return names
    clean = []
    for name in names:
        text = clean_text(name)
        if text != name:
            why = f"log name of type {type(name).__name__}"
            if type(name) is str:
                why = "log name with lone surrogates"
            found[why] = found.get(why, 0) + 1
        clean.append(text)
    return clean


def _name_keys(con, names: set[str]) -> dict[str, int]:
    listed = sorted(names)
    found = dict(
        con.execute(
            "SELECT name, name_key FROM name_keys WHERE name IN (SELECT unnest(?))", [listed]
        ).fetchall()
    )
    missing = [n for n in listed if n not in found]
    if missing:
        start = con.execute("SELECT coalesce(max(name_key), 0) + 1 FROM name_keys").fetchall()[0][0]
        new = {n: start + i for i, n in enumerate(missing)}
        con.executemany("INSERT INTO name_keys VALUES (?, ?)", [[k, n] for n, k in new.items()])
        found.update(new)
    return found


def insert_logs(con, keys: RunKeys, blocks: list, first_seq: int) -> int:
    import numpy as np

    if not blocks:
        return 0
    unpacked = [journal.unpack_logs(b) for b in blocks]
    names = list(chain.from_iterable(u[0] for u in unpacked))
    n = len(names)
    if any(len(u[0]) != len(u[1]) or len(u[0]) != len(u[2]) for u in unpacked):
        raise ValueError("log columns of different lengths")
    names = _clean_names(names, keys.found)
    index = _name_keys(con, set(names))
    cols = _log_columns([u[1] for u in unpacked], keys.found)
    frame = {
        "seq": np.arange(first_seq, first_seq + n, dtype=np.int64),
        "name_key": np.fromiter(map(index.__getitem__, names), dtype=np.int32, count=n),
        "value": cols["value"],
        "ctx_id": np.fromiter(chain.from_iterable(u[2] for u in unpacked), np.int64, n),
    }
    vtype_sql = "0::UTINYINT"  # all floats, the usual case: a constant, not a column to copy
    if cols["vtype"].any():
        frame["vtype"] = cols["vtype"]
        vtype_sql = "b.vtype"
    value_sql = "b.value"
    if cols["nan"] is not None:  # numpy NaN means NULL to DuckDB: keep logged NaNs apart
        frame["nan"] = cols["nan"]
        value_sql = "CASE WHEN b.nan THEN 'NaN'::DOUBLE ELSE b.value END"
    text_sql = "NULL"
    if cols["text"] is not None:
        frame["text"] = np.array(cols["text"], dtype=object)
        text_sql = "b.text"
    # an int a float cannot hold keeps its digits as text: the pivot reads the name as text
    # (its digits), not as a number column where it would be NULL
    exact = f"{text_sql} IS NULL"
    con.register("florwb_logs", frame)
    con.execute(
        f"INSERT INTO log_rows SELECT ?, ?, b.seq, b.name_key, {value_sql}, {text_sql}, "
        f"{vtype_sql}, b.ctx_id FROM florwb_logs b",
        [keys.run_key, keys.source_key],
    )
    # n_repeat counts values logged again in an iteration that already had one of that
    # name: while it is 0, the pivot may take any value of an iteration instead of the
    # last one (faster). A name's iterations only grow (ctx ids increase along a loop
    # path), so an iteration split across two batches shows as first_ctx = last_ctx.
    con.register("florwb_repeats", _repeats(frame["name_key"], frame["ctx_id"]))
    con.execute(
        "INSERT INTO name_stats SELECT ?, ?, g.name_key, g.path, g.n, g.n_numeric, g.n_int, "
        "coalesce(r.n, 0) + coalesce((g.first_ctx = s.last_ctx)::INT, 0), g.last_ctx FROM ("
        "SELECT b.name_key, coalesce(e.path, '') AS path, count(*) AS n, "
        f"sum(({vtype_sql} <= 2 AND {exact})::INT) AS n_numeric, "
        f"sum(({vtype_sql} IN (1, 2) AND {exact})::INT) AS n_int, "
        "min(b.ctx_id) AS first_ctx, max(b.ctx_id) AS last_ctx FROM florwb_logs b "
        f"{_ENTRY_OF.format(ctx='b.ctx_id')} GROUP BY ALL) g "
        "LEFT JOIN (SELECT r.name_key, coalesce(e.path, '') AS path, sum(r.n) AS n "
        f"FROM florwb_repeats r {_ENTRY_OF.format(ctx='r.ctx_id')} GROUP BY ALL) r "
        "ON r.name_key = g.name_key AND r.path = g.path "
        "LEFT JOIN name_stats s ON s.run_key = ? AND s.source_key = ? AND "
        "s.name_key = g.name_key AND s.path = g.path ON CONFLICT DO UPDATE "
        "SET n = n + excluded.n, n_numeric = n_numeric + excluded.n_numeric, "
        "n_int = n_int + excluded.n_int, n_repeat = n_repeat + excluded.n_repeat, "
        "last_ctx = greatest(last_ctx, excluded.last_ctx)",
        [keys.run_key, keys.source_key] * 4,
    )
    con.unregister("florwb_repeats")
    con.unregister("florwb_logs")
    return n
