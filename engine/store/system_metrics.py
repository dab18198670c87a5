"""The `system_rows` table: CPU, memory and GPU of each recording process over time.

Written from the `system` events record/system.py samples (one row per figure, with the
rank that sampled it); read by the run detail (the latest sample of each rank, live while
the run records) and by the chart, where each figure is a metric named `system/<name>`
beside the logged ones. SQL reads it directly too:
`SELECT time, value FROM system_rows WHERE run_id = ? AND name = 'gpu0_util_percent'`.
A sampler that failed leaves a run issue saying why, not a silent gap.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

import duckdb

if TYPE_CHECKING:  # imported where series are built: ingestion reaches this module
    import numpy as np

from florwb_engine.journal_events import System

PREFIX = "system/"  # a system figure's name among the chart's metrics


@dataclass
class SystemSample:
    """One rank's latest sample: figure name -> value, and when it was taken."""

    rank: int | None
    time: datetime
    values: dict[str, float] = field(default_factory=dict)


def apply(con: duckdb.DuckDBPyConnection, keys: Any, event: System) -> None:
    """Store one `system` event (ingest.py calls this inside its batch's transaction with
    its RunKeys as `keys`: ingest imports this module, so the type is not named here)."""
    if event.error:
        keys.issues.append(("system", f"system metrics stopped: {event.error}"[:300], 1))
        return
    values = event.values
    if not isinstance(values, dict) or not values:
        return
    when = datetime.fromtimestamp(float(event.time))  # type: ignore[arg-type]
    rank = event.rank
    rank = int(rank) if isinstance(rank, int) else keys.rank
    con.executemany(
        "INSERT INTO system_rows VALUES (?, ?, ?, ?, ?)",
        [
            [keys.run_id, rank, when, str(name), float(value)]
            for name, value in values.items()
            if isinstance(value, (int, float))
        ],
    )


def latest(con: duckdb.DuckDBPyConnection, run_id: str) -> list[SystemSample]:
    """Each rank's most recent sample, rank order."""
    rows = con.execute(
        """
        SELECT rank, time, name, value FROM system_rows s
        WHERE run_id = ? AND time = (SELECT max(time) FROM system_rows t
                                     WHERE t.run_id = s.run_id
                                       AND t.rank IS NOT DISTINCT FROM s.rank)
        ORDER BY rank NULLS FIRST, name
        """,
        [run_id],
    ).fetchall()
    out: dict[int | None, SystemSample] = {}
    for rank, when, name, value in rows:
        out.setdefault(rank, SystemSample(rank, when)).values[name] = value
    return list(out.values())


def names(con: duckdb.DuckDBPyConnection, run_ids: list[str]) -> list[str]:
    """The figures sampled for these runs, as chart metric names (`system/...`)."""
    rows = con.execute(
        "SELECT DISTINCT name FROM system_rows WHERE run_id IN (SELECT unnest(?)) ORDER BY 1",
        [run_ids],
    ).fetchall()
    return [PREFIX + r[0] for r in rows]


def series(
    con: duckdb.DuckDBPyConnection, run_ids: list[str], metric: str
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """run id -> (seconds since the run started, value) of one figure, lowest rank only
    (rank 0 of a launch: the other ranks' figures are in system_rows)."""
    import numpy as np

    name = metric.removeprefix(PREFIX)
    rows = con.execute(
        """
        SELECT s.run_id, epoch(s.time) - epoch(r.start_time), s.value
        FROM system_rows s JOIN runs r USING (run_id)
        WHERE s.run_id IN (SELECT unnest(?)) AND s.name = ?
          AND coalesce(s.rank, 0) = (SELECT min(coalesce(rank, 0)) FROM system_rows t
                                     WHERE t.run_id = s.run_id AND t.name = s.name)
        ORDER BY s.run_id, s.time
        """,
        [run_ids, name],
    ).fetchall()
    out: dict[str, tuple[list[float], list[float]]] = {}
    for run_id, seconds, value in rows:
        xs, ys = out.setdefault(run_id, ([], []))
        xs.append(float(seconds))
        ys.append(float(value))
    return {r: (np.array(xs), np.array(ys)) for r, (xs, ys) in out.items()}
