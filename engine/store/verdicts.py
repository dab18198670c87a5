"""Each replayed run's verdict, and the one place that decides which replayed values are
served.

A replay re-logs values the run had recorded; comparing them gives its verdict: `verified`
(k recorded values re-logged, all equal), `unchecked` (nothing recorded to compare with),
`diverged` (the first differing value named). A value florwb cannot vouch for must never
be read as a plain value, so a diverged run's rows are moved out of `log_rows` and
`name_stats` into `withheld_rows` / `withheld_name_stats`: every reader of the catalog
(the `logs` view, the dataframe, the history, the run detail, the chart, compare, what
planning counts as present) leaves them out without a filter of its own, at no cost on
the hot tables. `logs_all` and the readers' opt-ins read them back, marked; `withheld`
counts them for each reader's one-line note.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import duckdb

from florwb_engine.atomic import write_atomic

Verdict = Literal["verified", "unchecked", "diverged"]
VERDICTS: tuple[Verdict, ...] = ("verified", "unchecked", "diverged")


def verdict_of(compared: int, divergence: str | None) -> Verdict:
    if divergence:
        return "diverged"
    return "verified" if compared else "unchecked"


def record(
    con: duckdb.DuckDBPyConnection,
    replay_id: str,
    run_id: str,
    verdict: Verdict,
    *,
    compared: int = 0,
    rows: int = 0,
    divergence: str | None = None,
    missing: str | None = None,
    strict: bool = False,
) -> None:
    """Store a run's verdict; a diverged run's rows are withheld in the same call."""
    con.execute(
        "INSERT OR REPLACE INTO replay_runs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [replay_id, run_id, verdict, compared, rows, divergence, missing, strict, datetime.now()],
    )
    if verdict == "diverged":
        withhold(con, replay_id, run_id)


def _keys(con: duckdb.DuckDBPyConnection, replay_id: str, run_id: str) -> list[int] | None:
    rows = con.execute(
        "SELECT s.source_key, r.run_key FROM sources s, runs r WHERE s.source = ? AND r.run_id = ?",
        [replay_id, run_id],
    ).fetchall()
    return [int(rows[0][0]), int(rows[0][1])] if rows else None


def withhold(con: duckdb.DuckDBPyConnection, replay_id: str, run_id: str) -> int:
    """Move one run's rows of a replay out of what readers serve; the values moved."""
    keys = _keys(con, replay_id, run_id)
    if keys is None:
        return 0
    con.execute("BEGIN")
    n = _move(con, keys)
    con.execute("COMMIT")
    return n


def _move(con: duckdb.DuckDBPyConnection, keys: list[int]) -> int:
    where = "WHERE source_key = ? AND run_key = ?"
    moved = con.execute(f"INSERT INTO withheld_rows SELECT * FROM log_rows {where}", keys)
    n = int(moved.fetchall()[0][0])
    con.execute(
        f"INSERT OR REPLACE INTO withheld_name_stats SELECT * FROM name_stats {where}", keys
    )
    con.execute(f"DELETE FROM log_rows {where}", keys)
    con.execute(f"DELETE FROM name_stats {where}", keys)
    return n


def drop_withheld(
    con: duckdb.DuckDBPyConnection, source_key: int, run_key: int | None = None
) -> None:
    """Remove withheld rows of a replay (or of one run in it): part of removing a replay's
    rows, inside the caller's transaction."""
    where, params = "WHERE source_key = ?", [source_key]
    if run_key is not None:
        where, params = where + " AND run_key = ?", [source_key, run_key]
    for table in ("withheld_rows", "withheld_name_stats"):
        con.execute(f"DELETE FROM {table} {where}", params)


def forget(con: duckdb.DuckDBPyConnection, replay_id: str, run_id: str | None = None) -> None:
    """Remove the verdicts of a replay (or of one run in it) whose rows are removed."""
    if run_id is None:
        con.execute("DELETE FROM replay_runs WHERE replay_id = ?", [replay_id])
    else:
        con.execute(
            "DELETE FROM replay_runs WHERE replay_id = ? AND run_id = ?", [replay_id, run_id]
        )


@dataclass
class Withheld:
    """Values of diverged replays a reader left out, for its one-line note."""

    values: int = 0
    replays: set[str] = field(default_factory=set)
    runs: set[str] = field(default_factory=set)

    def __bool__(self) -> bool:
        return self.values > 0

    def note(self, how: str) -> str:
        """`3 values of 1 diverged replay left out; HOW shows them`."""
        if not self.values:
            return ""
        values = f"{self.values:,} value" + ("s" if self.values != 1 else "")
        replays = f"{len(self.replays)} diverged replay" + ("s" if len(self.replays) != 1 else "")
        return f"{values} of {replays} left out; {how} shows them"


def withheld(
    con: duckdb.DuckDBPyConnection,
    names: Sequence[str] | None = None,
    run_ids: Sequence[str] | None = None,
) -> Withheld:
    """What is withheld of `names` (all when None) for `run_ids` (all when None)."""
    where, params = [], []
    if names is not None:
        where.append("k.name IN (SELECT unnest(?))")
        params.append(list(names))
    if run_ids is not None:
        where.append("r.run_id IN (SELECT unnest(?))")
        params.append(list(run_ids))
    rows = con.execute(
        "SELECT s.source, r.run_id, sum(w.n) FROM withheld_name_stats w "
        "JOIN sources s ON s.source_key = w.source_key JOIN runs r ON r.run_key = w.run_key "
        "JOIN name_keys k ON k.name_key = w.name_key "
        + ("WHERE " + " AND ".join(where) if where else "")
        + " GROUP BY ALL",
        params,
    ).fetchall()
    found = Withheld()
    for source, run_id, n in rows:
        found.values += int(n or 0)
        found.replays.add(source)
        found.runs.add(run_id)
    return found


def withheld_names(con: duckdb.DuckDBPyConnection, names: Sequence[str]) -> set[str]:
    """Of `names`, those some diverged replay logged (served or not elsewhere)."""
    rows = con.execute(
        "SELECT DISTINCT k.name FROM withheld_name_stats w JOIN name_keys k USING (name_key) "
        "WHERE k.name IN (SELECT unnest(?))",
        [list(names)],
    ).fetchall()
    return {r[0] for r in rows}


def run_verdicts(
    con: duckdb.DuckDBPyConnection, run_id: str | None = None
) -> dict[str, list[dict[str, Any]]]:
    """Per run, its replays' verdicts, oldest first (what `florwb runs --json` lists)."""
    only = "WHERE v.run_id = ? " if run_id is not None else ""
    out: dict[str, list[dict[str, Any]]] = {}
    for rid, replay_id, verdict, compared, rows, divergence, missing, strict, names in con.execute(
        "SELECT v.run_id, v.replay_id, v.verdict, v.compared, v.rows, v.divergence, v.missing, "
        "v.strict, p.names FROM replay_runs v LEFT JOIN replays p USING (replay_id) "
        f"{only}ORDER BY v.run_id, coalesce(p.started, v.time), v.replay_id",
        [run_id] if run_id is not None else [],
    ).fetchall():
        out.setdefault(rid, []).append(
            {
                "replay_id": replay_id,
                "names": names.split(",") if names else [],
                "verdict": verdict,
                "compared": int(compared or 0),
                "rows": int(rows or 0),
                "divergence": divergence,
                "missing": missing,
                "strict": bool(strict),
            }
        )
    return out


def latest_verdict(verdicts: Sequence[dict[str, Any]]) -> Verdict | None:
    """The verdict a run reads as: its latest replay's (a later replay re-tries a diverged
    one, so an older divergence a newer replay verified no longer stands)."""
    return verdicts[-1]["verdict"] if verdicts else None


# Beside a replay's journals: its verdicts, so a catalog rebuilt from the journals
# (store/repair.py) withholds what diverged again instead of serving it.
SIDECAR = ".verdicts.json"


def sidecar_path(journal_dir: Path, replay_id: str) -> Path:
    return journal_dir / f"replay-{replay_id}{SIDECAR}"


def write_sidecar(journal_dir: Path, replay_id: str, verdicts: dict[str, dict[str, Any]]) -> None:
    """`verdicts`: run id -> verdict, compared, rows, divergence, strict."""
    data = json.dumps(verdicts).encode()
    write_atomic(sidecar_path(journal_dir, replay_id), lambda f: f.write(data), durable=True)


def apply_sidecars(con: duckdb.DuckDBPyConnection, journal_dir: Path) -> None:
    """Verdicts the catalog lacks (it was rebuilt from the journals) taken from the files
    beside the journals; a diverged run's rows are withheld again."""
    known = set(con.execute("SELECT replay_id || '/' || run_id FROM replay_runs").fetchall())
    for path in journal_dir.glob(f"replay-*{SIDECAR}"):
        replay_id = path.name[len("replay-") : -len(SIDECAR)]
        try:
            found = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        for run_id, v in found.items() if isinstance(found, dict) else ():
            if (f"{replay_id}/{run_id}",) in known or not isinstance(v, dict):
                continue
            record(
                con,
                replay_id,
                run_id,
                v.get("verdict", "diverged"),
                compared=int(v.get("compared") or 0),
                rows=int(v.get("rows") or 0),
                divergence=v.get("divergence"),
                strict=bool(v.get("strict")),
            )


def withhold_recorded_divergences(con: duckdb.DuckDBPyConnection) -> None:
    """For a catalog written before verdicts were kept: the runs its replays' own results
    called diverged get their verdict and their rows withheld (inside the migration's
    transaction, so `withhold`'s own is not used)."""
    rows = con.execute("SELECT replay_id, detail FROM replays WHERE status = 'diverged'").fetchall()
    for replay_id, detail in rows:
        try:
            results = json.loads(detail).get("results", [])
        except (TypeError, ValueError, AttributeError):
            continue
        for result in results:
            if not isinstance(result, dict) or result.get("status") != "diverged":
                continue
            run_id = str(result.get("run_id"))
            con.execute(
                "INSERT OR REPLACE INTO replay_runs VALUES (?, ?, 'diverged', ?, ?, ?, NULL, "
                "false, NULL)",
                [
                    replay_id,
                    run_id,
                    result.get("compared", 0),
                    result.get("rows", 0),
                    result.get("divergence"),
                ],
            )
            keys = _keys(con, replay_id, run_id)
            if keys is not None:
                _move(con, keys)
