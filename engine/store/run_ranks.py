"""The ranks of a multi-process run (torchrun, mp.spawn) in the catalog.

Every rank writes its own journal into the same run (record/ranks.py). Ingestion keeps one
`run_ranks` row per rank (its process, how it ended) and derives the run's status from
them: `finished` only once every rank of the world finished; a killed, failed or
interrupted rank marks the run so at once, and the values every rank wrote are kept.

A rank is stored once per journal, not per row: log rows carry it in their seq's high bits
(`seq >> RANK_SHIFT`, each rank journal numbers from `rank << RANK_SHIFT`), loop entries in
a `rank` column, and iteration timings through their loop entry.
"""

from __future__ import annotations

import json
import socket
from datetime import datetime

import duckdb

from florwb_engine import processes
from florwb_engine.journal_events import End, Start
from florwb_engine.store.db import fetch_one
from florwb_engine.store.runs import RunStatus
from florwb_engine.store.schema import RANK_SHIFT

# A rank's end, worst first: the run shows the worst of its ranks' ends.
_WORST_FIRST: tuple[RunStatus, ...] = ("killed", "failed", "interrupted", "unreadable")


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
    con.execute(
        "UPDATE runs SET world_size = greatest(coalesce(world_size, 0), ?), launcher = ? "
        "WHERE run_id = ?",
        [info.get("world_size") or 0, json.dumps(launcher), run_id],
    )
    if rank == 0:
        con.execute(
            "UPDATE runs SET host = ?, pid = ?, pid_ticks = ?, start_time = ? WHERE run_id = ?",
            [event.host, event.pid, event.pid_ticks, started, run_id],
        )


def on_end(
    con: duckdb.DuckDBPyConnection,
    run_id: str | None,
    rank: int,
    event: End,
    ended: datetime | None,
) -> None:
    """A rank ended: its row, then the run's status and end from all of its ranks."""
    con.execute(
        "UPDATE run_ranks SET end_time = ?, status = ?, exception = ?, message = ?, "
        "world_size = coalesce(?, world_size) WHERE run_id = ? AND rank = ?",
        [
            ended,
            event.status,
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


def mark_killed(con: duckdb.DuckDBPyConnection, run_id: str, rank: int) -> None:
    con.execute(
        "UPDATE run_ranks SET status = 'killed' WHERE run_id = ? AND rank = ? "
        "AND status = 'running'",
        [run_id, rank],
    )
    _combine(con, run_id)


def is_dead(con: duckdb.DuckDBPyConnection, run_id: str, rank: int) -> bool:
    """A rank with no end whose process is gone from this host was killed."""
    row = fetch_one(
        con,
        "SELECT host, pid, pid_ticks, status FROM run_ranks WHERE run_id = ? AND rank = ?",
        [run_id, rank],
    )
    if row is None or row[3] != "running" or row[0] != socket.gethostname():
        return False
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
    worst = next((s for s in _WORST_FIRST if s in statuses), None)
    if worst is not None:
        status = worst
    elif len(rows) == expected and all(s == "finished" for s in statuses):
        status = "finished"
    else:
        status = "running"
    bad = next((r for r in rows if r[1] == worst), None) if worst else None
    ends = [r[2] for r in rows if r[2] is not None]
    end_time = max(ends) if status != "running" and ends else None
    exception = bad[3] if bad else None
    message = f"rank {bad[0]}: {bad[4]}" if bad and bad[4] else None
    if bad and worst == "killed":
        # A launcher stops the other ranks once one dies, and a killed rank leaves no end
        # time: which one died first is not known, so every killed rank is named.
        killed = [str(r[0]) for r in rows if r[1] == "killed"]
        message = (
            f"rank {killed[0]} was killed"
            if len(killed) == 1
            else f"ranks {', '.join(killed)} were killed"
        )
    con.execute(
        "UPDATE runs SET status = ?, end_time = ?, exception = ?, "
        "message = coalesce(?, message) WHERE run_id = ?",
        [status, end_time, exception, message, run_id],
    )


def any_ranked(con: duckdb.DuckDBPyConnection) -> bool:
    """True once the store holds a run of more than one process."""
    return fetch_one(con, "SELECT 1 FROM runs WHERE world_size > 1 LIMIT 1") is not None
