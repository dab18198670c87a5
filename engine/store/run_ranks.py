"""The ranks of a multi-process run (torchrun, mp.spawn) in the catalog.

Every rank writes its own journal into the same run (record/ranks.py). Ingestion keeps one
`run_ranks` row per rank (its process, how it ended) and derives the run's status from
them: `finished` only once every rank of the world finished; a killed, failed or
interrupted rank marks the run so at once, and the values every rank wrote are kept. When
one rank dies its launcher stops the others (SIGTERM: their ends say `stopped`), so the run
names the rank that failed first, by end time: a killed rank, which leaves no end, by its
journal's last write.

A rank is stored once per journal, not per row: log rows carry it in their seq's high bits
(`seq >> RANK_SHIFT`, each rank journal numbers from `rank << RANK_SHIFT`), loop entries in
a `rank` column, and iteration timings through their loop entry.
"""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import duckdb

from florwb_engine import processes
from florwb_engine.journal_events import End, Start
from florwb_engine.store import pull_answers, run_context
from florwb_engine.store.db import fetch_one
from florwb_engine.store.runs import RunStatus
from florwb_engine.store.schema import RANK_SHIFT

# The ends of a rank that failed (the run shows how the first of them ended).
_FAILED: tuple[RunStatus, ...] = ("killed", "failed", "interrupted", "unreadable")
# A rank that ended by a signal it caught (SIGTERM): stopped from outside, not failing.
STOPPED = "stopped"


def first_seq(next_seq: int, rank: int | None) -> int:
    """Where the next rows of a journal are numbered from (see the module doc)."""
    return max(next_seq, (rank or 0) << RANK_SHIFT)


def on_start(con: duckdb.DuckDBPyConnection, run_id: str | None, event: Start, started) -> None:
    """A rank's start event: its row, the run's world size and launcher; rank 0's process
    is the run's (what `runs.pid` says)."""
    info = event.rank
    assert isinstance(info, dict)  # ingest calls this for a ranked start only
    rank = int(info["rank"])
    con.execute(
        "INSERT OR IGNORE INTO run_ranks VALUES (?, ?, ?, ?, ?, ?, ?, ?, NULL, 'running', "
        "NULL, NULL)",
        [
            run_id,
            rank,
            info.get("world_size"),
            info.get("local_rank"),
            event.host,
            event.pid,
            event.pid_ticks,
            started,
        ],
    )
    launcher = {
        "launcher": info.get("launcher"),
        "nnodes": info.get("nnodes", 1),
        "argv": info.get("launcher_argv") or [],
    }
    before = fetch_one(con, "SELECT launcher FROM runs WHERE run_id = ?", [run_id])
    # the launch is up once its slowest rank is: the most any rank measured (ranks.py)
    starts = [info.get("launch_s")]
    if before is not None and before[0]:
        starts.append(json.loads(before[0]).get("start_s"))
    measured = [float(s) for s in starts if isinstance(s, (int, float))]
    if measured:
        launcher["start_s"] = max(measured)
    con.execute(
        "UPDATE runs SET world_size = greatest(coalesce(world_size, 0), ?), launcher = ? "
        "WHERE run_id = ?",
        [info.get("world_size") or 0, json.dumps(launcher), run_id],
    )
    if rank == 0:  # the run is rank 0's: its process, and where and how it was started
        con.execute(
            "UPDATE runs SET host = ?, pid = ?, pid_ticks = ?, start_time = ?, "
            "script = coalesce(?, script), argv = coalesce(?, argv), cwd = coalesce(?, cwd) "
            "WHERE run_id = ?",
            [
                event.host,
                event.pid,
                event.pid_ticks,
                started,
                event.script,
                json.dumps(event.argv) if event.argv else None,
                event.cwd,
                run_id,
            ],
        )


def on_end(
    con: duckdb.DuckDBPyConnection,
    run_id: str | None,
    rank: int,
    event: End,
    ended: datetime | None,
) -> None:
    """A rank ended: its row, then the run's status and end from all of its ranks. A rank
    that ended by a signal it caught (record/runtime.py's SIGTERM end) was `stopped`."""
    con.execute(
        "UPDATE run_ranks SET end_time = ?, status = ?, exception = ?, message = ?, "
        "world_size = coalesce(?, world_size) WHERE run_id = ? AND rank = ?",
        [
            ended,
            STOPPED if event.signal else event.status,
            event.exception,
            event.message,
            event.world_size,
            run_id,
            rank,
        ],
    )
    if event.world_size:
        con.execute(
            "UPDATE runs SET world_size = greatest(coalesce(world_size, 0), ?) WHERE run_id = ?",
            [event.world_size, run_id],
        )
    _combine(con, run_id)


def mark_killed(
    con: duckdb.DuckDBPyConnection, run_id: str, rank: int, last_write: datetime | None
) -> None:
    """A rank whose process is gone without an end: it died no later than its journal's
    last write (`last_write`, its modification time), which stands as its end."""
    con.execute(
        "UPDATE run_ranks SET status = 'killed', end_time = coalesce(end_time, ?) "
        "WHERE run_id = ? AND rank = ? AND status = 'running'",
        [last_write, run_id, rank],
    )
    _combine(con, run_id)


def is_dead(con: duckdb.DuckDBPyConnection, run_id: str, rank: int, journal: Path) -> bool:
    """A rank with no end whose process is gone was killed: on this host its process says;
    a rank of another host, pulled from it, is dead once that host answered a pull that no
    process writes its journal any more (store/pull_answers.py)."""
    row = fetch_one(
        con,
        "SELECT host, pid, pid_ticks, status FROM run_ranks WHERE run_id = ? AND rank = ?",
        [run_id, rank],
    )
    if row is None or row[3] != "running":
        return False
    if row[0] != socket.gethostname():
        return pull_answers.writer_gone(journal, row[0])
    return row[1] is not None and processes.is_gone(row[1], row[2])


def _combine(con: duckdb.DuckDBPyConnection, run_id: str | None) -> None:
    rows = con.execute(
        "SELECT rank, status, end_time, exception, message FROM run_ranks WHERE run_id = ? "
        "ORDER BY rank",
        [run_id],
    ).fetchall()
    world = fetch_one(con, "SELECT world_size FROM runs WHERE run_id = ?", [run_id])
    expected = max((world[0] if world else 0) or 0, len(rows))
    statuses = [r[1] for r in rows]
    first = first_failed(rows)
    stopped = [str(r[0]) for r in rows if r[1] == STOPPED]
    if first is not None:
        status: str = first[1]  # how the rank that failed first ended
    elif stopped:
        status = "killed"  # stopped from outside, every rank that had not finished
    elif len(rows) == expected and all(s == "finished" for s in statuses):
        status = "finished"
    else:
        status = "running"
    ends = [r[2] for r in rows if r[2] is not None]
    end_time = max(ends) if status != "running" and ends else None
    exception = first[3] if first is not None else None
    message = None
    if first is not None:
        failures = [r for r in rows if r[1] in _FAILED]
        then = [str(r[0]) for r in failures if r is not first]
        message = _how(first) + (" first" if then or stopped else "")
        if then:
            message += f"; then rank{'s' * (len(then) > 1)} {', '.join(then)}"
        if stopped:
            message += f"; rank{'s' * (len(stopped) > 1)} {', '.join(stopped)} stopped"
            message += " by the launcher"
    elif stopped:
        signame = next((r[4] for r in rows if r[1] == STOPPED and r[4]), "stopped")
        message = f"rank{'s' * (len(stopped) > 1)} {', '.join(stopped)} {signame}"
    con.execute(
        "UPDATE runs SET status = ?, end_time = ?, exception = ?, "
        "message = coalesce(?, message) WHERE run_id = ?",
        [status, end_time, exception, message, run_id],
    )


def first_failed(rows: list) -> tuple | None:
    """The rank that failed first among (rank, status, end_time, ...) rows: of those that
    failed or were killed (not `stopped`: a launcher stops the others once one failed),
    the one that ended first; a killed rank's end is its journal's last write, no later
    than its death. None when no rank failed."""
    failures = [r for r in rows if r[1] in _FAILED]
    if not failures:
        return None
    return min(failures, key=lambda r: (r[2] is None, r[2] or datetime.min, r[0]))


def _how(row: tuple) -> str:
    rank, status, _end, exception, message = row[:5]
    if status == "killed":
        return f"rank {rank} was killed"
    if status == "failed" and (exception or message):
        return f"rank {rank} failed: " + ": ".join(x for x in (exception, message) if x)
    return f"rank {rank} {status}"


def first_failures(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """run_id -> the rank that failed first, for every multi-process run with a failure."""
    rows = con.execute(
        "SELECT run_id, rank, status, end_time FROM run_ranks WHERE status IN "
        f"({', '.join(repr(s) for s in _FAILED)}) ORDER BY run_id"
    ).fetchall()
    by_run: dict[str, list] = {}
    for run_id, rank, status, end in rows:
        by_run.setdefault(run_id, []).append((rank, status, end))
    found = {}
    for run_id, ranks in by_run.items():
        first = first_failed(ranks)
        if first is not None:
            found[run_id] = int(first[0])
    return found


@dataclass
class RankRow:
    """One rank of a multi-process run as the run detail shows it."""

    rank: int
    host: str | None
    pid: int | None
    status: str  # running, finished, failed, interrupted, killed, stopped (by a signal)
    start_time: datetime | None
    end_time: datetime | None  # a killed rank's: its journal's last write
    exception: str | None
    message: str | None
    failed_first: bool = False
    context: dict[str, Any] | None = None  # its run_context row (store/run_context.py)


def rank_rows(con: duckdb.DuckDBPyConnection, run_id: str) -> list[RankRow]:
    """Every rank of a run with how it ended and its own context; [] for one process."""
    rows = con.execute(
        "SELECT rank, host, pid, status, start_time, end_time, exception, message "
        "FROM run_ranks WHERE run_id = ? ORDER BY rank",
        [run_id],
    ).fetchall()
    contexts = run_context.rank_contexts(con, run_id)
    first = first_failed([(r[0], r[3], r[5]) for r in rows])
    return [
        RankRow(
            rank,
            host,
            pid,
            status,
            started,
            ended,
            exception,
            message,
            failed_first=first is not None and first[0] == rank,
            context=contexts.get(rank),
        )
        for rank, host, pid, status, started, ended, exception, message in rows
    ]


def any_ranked(con: duckdb.DuckDBPyConnection) -> bool:
    """True once the store holds a run of more than one process."""
    return fetch_one(con, "SELECT 1 FROM runs WHERE world_size > 1 LIMIT 1") is not None
