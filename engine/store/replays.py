"""The store side of replays: their bookkeeping rows, fidelity checks, and removing the rows
of a replay (or of one run in it) that was cancelled, failed or killed, so nothing
half-written stays behind."""

from __future__ import annotations

import json
import os
import shutil
import socket
from datetime import datetime
from pathlib import Path
from typing import Literal

import duckdb

from florwb_engine import processes
from florwb_engine.journal import replay_journal_name
from florwb_engine.project import journal_dir, store_dir
from florwb_engine.store import verdicts
from florwb_engine.store.db import fetch_one
from florwb_engine.store.schema import loop_columns, quote

# What `replays.status` holds: `running` until the replay ends; `partial` when some runs
# failed and others finished; `interrupted` when its process was killed.
ReplayStatus = Literal[
    "running", "finished", "diverged", "partial", "failed", "cancelled", "interrupted"
]

REL_TOLERANCE = 1e-6
ABS_TOLERANCE = 1e-9


def record_replay(
    con: duckdb.DuckDBPyConnection,
    replay_id: str,
    names: list[str],
    detail,
    started: datetime | None = None,
) -> None:
    """A replay starts (at `started`, by default now); its owner (this process) is kept so
    that a replay whose process was killed can be told from one still going in another
    terminal."""
    pid = os.getpid()
    owner = {"host": socket.gethostname(), "pid": pid, "pid_ticks": processes.start_ticks(pid)}
    con.execute(
        "INSERT OR REPLACE INTO replays VALUES (?, ?, NULL, 'running', ?, ?)",
        [
            replay_id,
            started or datetime.now(),
            ",".join(names),
            json.dumps({**detail, "owner": owner}),
        ],
    )


def abandoned_replays(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Replays still marked running whose process is gone from this host (SIGKILL, a crash,
    a closed terminal). Replays started on another host, or before owners were kept, are
    left alone: nothing here can tell whether they still run."""
    found = []
    rows = con.execute("SELECT replay_id, detail FROM replays WHERE status = 'running'")
    for replay_id, detail in rows.fetchall():
        try:
            owner = json.loads(detail)["owner"]
            host, pid, ticks = owner["host"], int(owner["pid"]), owner.get("pid_ticks")
        except (TypeError, ValueError, KeyError):
            continue
        if host == socket.gethostname() and processes.is_gone(pid, ticks):
            found.append(replay_id)
    return found


def clear_abandoned(con: duckdb.DuckDBPyConnection, project: Path) -> list[str]:
    """Remove what killed replays left (rows for part of their runs would make those runs
    look done to the next plan) and mark them interrupted."""
    found = abandoned_replays(con)
    for replay_id in found:
        remove_results(con, project, replay_id)
        con.execute(
            "UPDATE replays SET ended = ?, status = 'interrupted' WHERE replay_id = ?",
            [datetime.now(), replay_id],
        )
    return found


def remove_results(con: duckdb.DuckDBPyConnection, project: Path, replay_id: str) -> None:
    """Everything a replay left: its journals (ingested or not), rows and work folder."""
    for path in journal_dir(project).glob(replay_journal_name(replay_id, "*")):
        path.unlink(missing_ok=True)
    verdicts.sidecar_path(journal_dir(project), replay_id).unlink(missing_ok=True)
    delete_rows(con, replay_id)
    shutil.rmtree(store_dir(project) / "replays" / replay_id, ignore_errors=True)


def finish_replay(
    con: duckdb.DuckDBPyConnection, replay_id: str, status: ReplayStatus, detail
) -> datetime:
    """The replay ended now (returned: its duration everywhere is `ended - started`)."""
    ended = datetime.now()
    con.execute(
        "UPDATE replays SET ended = ?, status = ?, detail = ? WHERE replay_id = ?",
        [ended, status, json.dumps(detail), replay_id],
    )
    return ended


def delete_rows(con: duckdb.DuckDBPyConnection, replay_id: str, run_id: str | None = None) -> None:
    """Remove what a replay (optionally: one run of it) put into the store, withheld
    rows and verdicts included."""
    source = fetch_one(con, "SELECT source_key FROM sources WHERE source = ?", [replay_id])
    run = fetch_one(con, "SELECT run_key FROM runs WHERE run_id = ?", [run_id]) if run_id else None
    con.execute("BEGIN")
    if source is not None and (run_id is None or run is not None):
        run_filter, params = "", [source[0]]
        if run is not None:
            run_filter = " AND run_key = ?"
            params.append(run[0])
        for table in ("log_rows", "iteration_rows", "loop_entries", "name_stats"):
            con.execute(f"DELETE FROM {table} WHERE source_key = ?{run_filter}", params)
        verdicts.drop_withheld(con, source[0], run[0] if run is not None else None)
    verdicts.forget(con, replay_id, run_id)
    for table in ("journals", "run_issues"):
        if run_id is None:
            con.execute(f"DELETE FROM {table} WHERE source = ?", [replay_id])
        else:
            con.execute(f"DELETE FROM {table} WHERE source = ? AND run_id = ?", [replay_id, run_id])
    con.execute("COMMIT")


def compare_with_recorded(
    con: duckdb.DuckDBPyConnection, replay_id: str, run_id: str
) -> tuple[int, str | None]:
    """(values compared, first mismatch) between a replay and what the run had recorded."""
    coords = loop_columns(con)
    same_place = "".join(f" AND r.{quote(c)} IS NOT DISTINCT FROM p.{quote(c)}" for c in coords)
    joined = (
        "FROM logs p JOIN logs r ON r.run_id = p.run_id AND r.name = p.name "
        f"AND r.source = 'record' AND r.rank = p.rank{same_place} "
        "WHERE p.source = ? AND p.run_id = ?"
    )
    equal = (
        "(r.text IS NOT DISTINCT FROM p.text AND (r.value IS NOT DISTINCT FROM p.value "
        "OR (isnan(r.value) AND isnan(p.value)) OR abs(r.value - p.value) <= "
        f"{REL_TOLERANCE} * greatest(abs(r.value), abs(p.value)) + {ABS_TOLERANCE}))"
    )
    compared = con.execute(f"SELECT count(*) {joined}", [replay_id, run_id]).fetchall()[0][0]
    coord_text = (
        " || ', ' || ".join(
            f"'{c.replace(chr(39), chr(39) * 2)}=' || coalesce(CAST(p.{quote(c)} AS VARCHAR), '-')"
            for c in coords
        )
        or "''"
    )
    mismatch = fetch_one(
        con,
        f"SELECT p.name, {coord_text}, coalesce(CAST(r.value AS VARCHAR), r.text), "
        f"coalesce(CAST(p.value AS VARCHAR), p.text) {joined} AND NOT coalesce({equal}, false) "
        "ORDER BY p.seq LIMIT 1",
        [replay_id, run_id],
    )
    if mismatch is None:
        return int(compared), None
    name, where, recorded, replayed = mismatch
    where = ", ".join(part for part in where.split(", ") if not part.endswith("=-"))
    return int(
        compared
    ), f"{name} at {where or 'top level'}: recorded {recorded}, replayed {replayed}"
