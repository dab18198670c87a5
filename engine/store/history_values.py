"""The history's values counted once per run and name, recorded or replayed.

A run may hold a name from several sources: recorded, and replays that re-executed the
statement (older replays re-logged names a run already had). The history shows one: the
recorded values when there are any, else the first replay's. So a name only replays ever
produced (hindsight logging's whole point) is offered by metric cycling and shown for the
runs that have it, and nothing is counted twice.

Beside the sparkline sample (averaged buckets) this reads each run's exact last, min and
max over all its values: a spike averaged away in the sparkline still shows in the numbers.
Versions are dated by their first run's start, not by when the store ingested them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import duckdb

from florwb_engine.store import Store
from florwb_engine.store.queries import (
    SAMPLE_ROWS,
    SERIES_POINTS,
    History,
    MetricInfo,
    default_metric,
    read_session,
)
from florwb_engine.store.queries import (
    VersionRow as _VersionRow,
)
from florwb_engine.store.repair import again_if_rebuilt
from florwb_engine.store.runs import list_runs
from florwb_engine.store.schema import LOCAL_SEQ
from florwb_engine.store.values import exact_bounds, exact_bounds_sql, exact_number

# Per run and name, the one source the history reads: recorded (source_key 0) first.
CHOSEN = "SELECT run_key, name_key, min(source_key) AS source_key FROM name_stats GROUP BY ALL"


@dataclass
class SeriesValues:
    """One name's values per run id: sparkline points, and exact last, min and max."""

    series: dict[str, list[float]] = field(default_factory=dict)
    last: dict[str, float] = field(default_factory=dict)
    low: dict[str, float] = field(default_factory=dict)
    high: dict[str, float] = field(default_factory=dict)


def with_values(history: History, values: SeriesValues) -> History:
    """`history` with its metric's values, read apart (load_series_values)."""
    return replace(
        history,
        series=values.series,
        last=values.last,
        low=values.low,
        high=values.high,
        values_pending=False,
    )


@again_if_rebuilt
def load_history_values(store: Store, metric: str | None = None, *, values: bool = True) -> History:
    """Runs, versions (dated by their first run), names from every source, one series.

    `values=False` leaves out the metric's values, the one part that scans the log rows
    (a second or more at ten million rows): the workbench lists the history at once and
    reads them next with load_series_values (the result says `values_pending`)."""
    with read_session(store) as con:
        runs = list_runs(con)
        versions = _versions(con)
        metrics = _metrics(con)
        chosen = metric if any(m.name == metric for m in metrics) else default_metric(metrics)
        read = chosen is not None and values
        series = _series(con, chosen) if read and chosen else SeriesValues()
        finished, having = _coverage(con)
    return History(
        runs,
        versions,
        metrics,
        chosen,
        series.series,
        series.last,
        series.low,
        series.high,
        finished,
        having,
        values_pending=chosen is not None and not values,
    )


@again_if_rebuilt
def refresh_runs(store: Store, history: History, run_ids: set[str]) -> History | None:
    """`history` with only the runs `run_ids` read again: the runs still recording, whose
    journals grew. Their rows (status, counts) and their values of the history's metric
    change; nothing else can while they record (versions, the other runs, the coverage of
    finished runs). None when that does not hold: one of them ended or is unknown, or
    logged a name the history does not list. The metric list's counts are the last full
    reload's (a reload after the run ends brings them up to date)."""
    known = {m.name for m in history.metrics}
    with read_session(store) as con:
        fresh = {}
        for run_id in run_ids:
            found = list_runs(con, run_id)
            if not found or found[0].status != "running":
                return None
            fresh[run_id] = found[0]
        keys = [
            row[0]
            for row in con.execute(
                "SELECT run_key FROM runs WHERE run_id IN (SELECT unnest(?))", [sorted(run_ids)]
            ).fetchall()
        ]
        names = con.execute(
            "SELECT DISTINCT k.name FROM name_stats s JOIN name_keys k USING (name_key) "
            "WHERE s.run_key IN (SELECT unnest(?))",
            [keys],
        ).fetchall()
        if any(name not in known for (name,) in names):
            return None
        values = _series(con, history.metric, run_keys=keys) if history.metric else SeriesValues()
    runs = [fresh.get(run.run_id, run) for run in history.runs]

    def merged(old: dict, new: dict) -> dict:
        return {**{k: v for k, v in old.items() if k not in run_ids}, **new}

    return replace(
        history,
        runs=runs,
        series=merged(history.series, values.series),
        last=merged(history.last, values.last),
        low=merged(history.low, values.low),
        high=merged(history.high, values.high),
    )


def _coverage(con: duckdb.DuckDBPyConnection) -> tuple[dict[str, int], dict[str, dict[str, int]]]:
    """Read in the history's session, so the pending check opens no connection of its own."""
    finished = dict(
        con.execute(
            "SELECT script, count(*) FROM runs WHERE script IS NOT NULL "
            "AND version IS NOT NULL AND status = 'finished' GROUP BY script"
        ).fetchall()
    )
    having: dict[str, dict[str, int]] = {}
    for script, name, n in con.execute(
        """
        SELECT r.script, k.name, count(DISTINCT s.run_key)
        FROM name_stats s JOIN name_keys k ON k.name_key = s.name_key
        JOIN runs r ON r.run_key = s.run_key
        WHERE r.script IS NOT NULL AND r.version IS NOT NULL AND r.status = 'finished'
        GROUP BY ALL
        """
    ).fetchall():
        having.setdefault(script, {})[name] = int(n)
    return {k: int(v) for k, v in finished.items()}, having


@again_if_rebuilt
def load_series_values(store: Store, metric: str) -> SeriesValues:
    """Sparkline points, exact last, min and max per run of one name (any source)."""
    with read_session(store) as con:
        return _series(con, metric)


def _versions(con: duckdb.DuckDBPyConnection) -> list[_VersionRow]:
    rows = con.execute(
        "SELECT v.version, coalesce(r.first_start, v.first_seen), v.n_files, v.n_bytes "
        "FROM versions v LEFT JOIN (SELECT version, min(start_time) AS first_start FROM runs "
        "GROUP BY version) r ON r.version = v.version ORDER BY 2"
    ).fetchall()
    return [_VersionRow(*row) for row in rows]


def _metrics(con: duckdb.DuckDBPyConnection) -> list[MetricInfo]:
    rows = con.execute(
        f"""
        SELECT k.name, sum(s.n), sum(s.n_numeric), count(DISTINCT s.run_key),
               min(CASE WHEN s.path = '' THEN 0
                   ELSE length(s.path) - length(replace(s.path, '/', '')) END)
        FROM name_stats s JOIN ({CHOSEN}) c USING (run_key, name_key, source_key)
        JOIN name_keys k ON k.name_key = s.name_key
        GROUP BY k.name ORDER BY k.name
        """
    ).fetchall()
    return [MetricInfo(r[0], int(r[1]), int(r[2]), int(r[3]), int(r[4])) for r in rows]


def _series(
    con: duckdb.DuckDBPyConnection,
    name: str,
    points: int = SERIES_POINTS,
    run_keys: list[int] | None = None,
) -> SeriesValues:
    """Per run (of `run_keys`, or all), the values of `name` from its chosen source,
    averaged into at most `points` buckets by place in the run's log sequence
    (hash-sampled above SAMPLE_ROWS rows, in the scan itself), plus the exact last, min
    and max."""
    row = con.execute("SELECT name_key FROM name_keys WHERE name = ?", [name]).fetchall()
    if not row:
        return SeriesValues()
    key = row[0][0]
    # integers read from the catalog: the scans skip the other runs' row groups
    only = (
        ""
        if run_keys is None
        else f" AND c.run_key IN ({', '.join(map(str, map(int, run_keys or [-1])))})"
    )
    scan_only = only.replace("c.run_key", "l.run_key")
    stats = con.execute(
        f"""
        SELECT c.run_key, c.source_key,
               (SELECT sum(n) FROM name_stats a
                WHERE a.run_key = c.run_key AND a.source_key = c.source_key)
               -- each rank numbers its own rows (schema.LOCAL_SEQ): a rank's share
               // greatest((SELECT coalesce(max(world_size), 1) FROM runs r
                           WHERE r.run_key = c.run_key), 1),
               (SELECT sum(n) FROM name_stats a WHERE a.run_key = c.run_key
                AND a.source_key = c.source_key AND a.name_key = c.name_key)
        FROM ({CHOSEN}) c WHERE c.name_key = ?{only}
        """,
        [key],
    ).fetchall()
    if not stats:
        return SeriesValues()
    import numpy as np  # not on the way to the history's first frame

    largest = max(int(mine or 0) for *_k, mine in stats)
    modulus = max(largest // SAMPLE_ROWS, 1)
    con.register(
        "florwb_chosen",
        {
            "run_key": np.array([s[0] for s in stats], dtype=np.int64),
            "source_key": np.array([s[1] for s in stats], dtype=np.int64),
            "total": np.array([max(int(s[2] or 0), 1) for s in stats], dtype=np.int64),
            "keep_all": np.array(
                [int(s[3] or 0) < SAMPLE_ROWS * modulus for s in stats], dtype=np.bool_
            ),
            # a run with at most `points` values of the name: one bar each, in order (by
            # place in the whole run, values logged close together would share a bar)
            "few": np.array([int(s[3] or 0) <= points for s in stats], dtype=np.bool_),
        },
    )
    try:
        sample = f" AND (t.keep_all OR hash(l.seq) % {modulus} = 0)" if modulus > 1 else ""
        rows = con.execute(
            f"""
            SELECT l.run_key,
                   least((l.seq & {LOCAL_SEQ}) * {int(points)} // t.total, {int(points) - 1})
                   AS bucket,
                   avg(l.value) FILTER (WHERE isfinite(l.value))
            FROM log_rows l JOIN florwb_chosen t
                 ON t.run_key = l.run_key AND t.source_key = l.source_key
            WHERE l.name_key = ? AND l.vtype <= 2 AND NOT t.few{sample}{scan_only}
            GROUP BY ALL
            UNION ALL
            SELECT run_key, bucket, avg(value) FILTER (WHERE isfinite(value))
            FROM (SELECT l.run_key, l.value,  -- ranks of one launch share a bar
                         dense_rank() OVER (PARTITION BY l.run_key
                                            ORDER BY l.seq & {LOCAL_SEQ}) - 1 AS bucket
                  FROM log_rows l JOIN florwb_chosen t
                       ON t.run_key = l.run_key AND t.source_key = l.source_key
                  WHERE l.name_key = ? AND l.vtype <= 2 AND t.few{scan_only})
            GROUP BY ALL
            """,
            [key, key],
        ).fetchall()
        exact = con.execute(
            f"""
            SELECT l.run_key, arg_max(l.value, l.seq), arg_max_null(l.text, l.seq),
                   {exact_bounds_sql("l.value", "l.text")}
            FROM log_rows l JOIN florwb_chosen t
                 ON t.run_key = l.run_key AND t.source_key = l.source_key
            WHERE l.name_key = ? AND l.vtype <= 2{scan_only}
            GROUP BY l.run_key
            """,
            [key],
        ).fetchall()
    finally:
        con.unregister("florwb_chosen")
    run_ids = dict(con.execute("SELECT run_key, run_id FROM runs").fetchall())
    buckets: dict[str, list[tuple[int, float]]] = {}
    for run_key, bucket, mean in rows:
        run_id = run_ids.get(run_key)
        if run_id is not None:
            buckets.setdefault(run_id, []).append((bucket, _nan(mean)))
    out = SeriesValues(
        series={run_id: [v for _b, v in sorted(pairs)] for run_id, pairs in buckets.items()}
    )
    for run_key, last, digits, *bounds in exact:
        run_id = run_ids.get(run_key)
        if run_id is None:
            continue
        if last is not None:  # an int past 2**53 as its digits say, not rounded
            out.last[run_id] = exact_number(float(last), digits)
        low, high = exact_bounds(*bounds)
        if low is not None:
            out.low[run_id] = low
        if high is not None:
            out.high[run_id] = high
    return out


def _nan(value: float | None) -> float:
    return math.nan if value is None else float(value)


__all__ = [
    "SeriesValues",
    "load_history_values",
    "load_series_values",
    "refresh_runs",
    "with_values",
]
