"""Reads for the workbench (history, run detail, replays, live progress, query pages).

Runs are listed by runs.list_runs, the one listing the CLI uses too. The workbench shows
1,000 runs and tens of millions of log rows without waiting, so these
queries read the integer-keyed tables (`log_rows`, `name_stats`, `iteration_rows`) instead
of the string views, downsample metric series in DuckDB rather than in Python, and page
query results instead of materialising them. Everything returns plain dataclasses of
built-in types: the app never sees a DuckDB object, and this module never sees a screen.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

import duckdb

from florwb_engine.journal import ENTRY_SHIFT
from florwb_engine.store import console as console_lines
from florwb_engine.store import system_metrics
from florwb_engine.store.catalog import Store, check_read_only
from florwb_engine.store.console import ConsoleLine
from florwb_engine.store.db import StoreError, no_progress_bar
from florwb_engine.store.repair import again_if_rebuilt
from florwb_engine.store.run_ranks import RankRow, rank_rows
from florwb_engine.store.runs import RunRow, list_runs
from florwb_engine.store.schema import LOCAL_SEQ, literal, quote
from florwb_engine.store.system_metrics import SystemSample
from florwb_engine.store.values import exact_bounds, exact_bounds_sql, exact_number
from florwb_engine.store.verdicts import Withheld, withheld

if TYPE_CHECKING:  # duckdb.sqltypes is duckdb 2's home of the type; only annotations use it
    from duckdb.sqltypes import DuckDBPyType

    from florwb_engine.store.replays import ReplayStatus

SERIES_POINTS = 24
SAMPLE_ROWS = 400  # per run: enough for a smooth sparkline of SERIES_POINTS points
DETAIL_POINTS = 40
PAGE_ROWS = 1000
_NUMERIC_TYPES = frozenset(
    {
        "TINYINT",
        "SMALLINT",
        "INTEGER",
        "BIGINT",
        "HUGEINT",
        "UTINYINT",
        "USMALLINT",
        "UINTEGER",
        "UBIGINT",
        "UHUGEINT",
        "FLOAT",
        "DOUBLE",
        "BOOLEAN",
    }
)


@dataclass
class VersionRow:
    version: str
    first_seen: datetime | None
    n_files: int | None
    n_bytes: int | None


@dataclass
class MetricInfo:
    """A logged name: how many values, in how many runs, and at which loop depth."""

    name: str
    n: int
    n_numeric: int
    n_runs: int
    depth: int

    @property
    def numeric(self) -> bool:
        return self.n > 0 and self.n_numeric == self.n


@dataclass
class History:
    """Everything the version history needs for its first frame, read in one session
    (store/history_values.py): the metrics and series include replayed values, with exact
    ranges."""

    runs: list[RunRow]
    versions: list[VersionRow]
    metrics: list[MetricInfo]
    metric: str | None
    series: dict[str, list[float]]
    last: dict[str, float]
    low: dict[str, float] = field(default_factory=dict)
    high: dict[str, float] = field(default_factory=dict)
    # per script: how many finished, versioned runs it has, and how many of them have each
    # name from any source (florwb_engine.store.name_coverage reads them)
    finished: dict[str, int] = field(default_factory=dict)
    having: dict[str, dict[str, int]] = field(default_factory=dict)
    # True when read with `values=False` (history_values.load_history_values): `series`,
    # `last`, `low` and `high` are empty because they were not read yet, not because no
    # run has the metric
    values_pending: bool = False


@dataclass
class MetricSeries:
    name: str
    source: str
    n: int
    last: float | None
    low: float | None
    high: float | None
    points: list[float]
    text: str | None = None  # the last value, for names that are not numeric
    rechecked: int = 0  # replays that logged this name again (to check it), not shown apart


@dataclass
class CheckpointRow:
    loop: str
    iteration: int
    path: str
    bytes: int | None
    time: datetime | None


@dataclass
class ReplayRow:
    replay_id: str
    started: datetime | None
    ended: datetime | None
    status: ReplayStatus | None
    names: str | None
    detail: dict[str, Any]
    rows: int = 0
    # for one run (the run detail): its verdict in this replay (store/verdicts.py), the
    # first differing value, and how many values were withheld
    verdict: str | None = None
    divergence: str | None = None
    withheld: int = 0
    missing: str | None = None  # recorded main-loop iterations it did not replay


@dataclass
class LoopWait:
    """Time one loop (by its path, `epoch/step`) spent waiting on its data iterator."""

    path: str
    wait_s: float
    loop_s: float

    @property
    def share(self) -> float | None:
        return self.wait_s / self.loop_s if self.loop_s else None


@dataclass
class RunDetail:
    run: RunRow
    metrics: list[MetricSeries]
    checkpoints: list[CheckpointRow]
    replays: list[ReplayRow]
    loop_total: int | None
    loop_done: int
    loop_name: str | None
    loop_waits: list[LoopWait] = field(default_factory=list)
    console: list[ConsoleLine] = field(default_factory=list)  # the last lines printed
    console_total: int = 0
    withheld: Withheld = field(default_factory=Withheld)  # values of diverged replays
    system: list[SystemSample] = field(default_factory=list)  # each rank's latest sample
    # each rank of a multi-process run: how it ended (which failed first), its own context
    ranks: list[RankRow] = field(default_factory=list)


@dataclass
class LiveRun:
    """Progress of a run that is still recording: its outer loop, done of total."""

    run_id: str
    loop: str | None
    done: int
    total: int | None
    elapsed_s: float
    mean_iter_s: float | None

    @property
    def eta_s(self) -> float | None:
        if self.total is None or self.mean_iter_s is None:
            return None
        return max(self.total - self.done, 0) * self.mean_iter_s


_OPENING = threading.Lock()


@contextmanager
def read_session(store: Store) -> Iterator[duckdb.DuckDBPyConnection]:
    """`store.session()`, opened one thread at a time: on a catalog that does not exist yet,
    two threads creating the schema at once hit DuckDB's write-write conflict. Queries
    still run concurrently once the sessions are open. No progress bar (see below)."""
    with ExitStack() as stack:
        with _OPENING:
            con = stack.enter_context(store.session())
        # DuckDB draws a progress bar on stdout for queries over 2 s: on a full-screen
        # terminal app that would scribble over the screen
        no_progress_bar(con)
        yield con


# --- version history ---------------------------------------------------------------------


def default_metric(metrics: list[MetricInfo]) -> str | None:
    """The metric a history shows first: numeric, logged by the most runs, preferring the
    outer loop (one value per epoch reads better as a sparkline than per-step noise)."""
    numeric = [m for m in metrics if m.numeric]
    if not numeric:
        return None
    return min(numeric, key=lambda m: (-m.n_runs, m.depth != 0, m.name)).name


def example_query(metric: str | None) -> str:
    """The Query tab's first SQL: each run's recorded values of `metric` (a name the project
    has, the history's), in the order logged, drawn as a sparkline per run. `source =
    'record'`: a replay re-executes recorded statements too, and would add copies."""
    if metric is None:
        return "SELECT run_id, status, start_time, end_time FROM runs ORDER BY start_time DESC"
    return (
        f"SELECT run_id, list(value ORDER BY seq) AS {quote(metric)}\n"
        f"FROM logs WHERE name = {literal(metric)} AND source = 'record'\n"
        "GROUP BY run_id ORDER BY run_id"
    )


def _name_key(con: duckdb.DuckDBPyConnection, name: str) -> int | None:
    row = con.execute("SELECT name_key FROM name_keys WHERE name = ?", [name]).fetchall()
    return row[0][0] if row else None


def _nan(value: float | None) -> float:
    return math.nan if value is None else float(value)


# --- run detail ----------------------------------------------------------------------------


CONSOLE_TAIL = 40


@again_if_rebuilt
def load_run_detail(store: Store, run_id: str, points: int = DETAIL_POINTS) -> RunDetail:
    """Args, metrics with sparklines (recorded and replayed), checkpoints, replays, the
    data wait per loop and the last lines the run printed."""
    with read_session(store) as con:
        found = list_runs(con, run_id)
        if not found:
            raise StoreError(f"unknown run {run_id!r}")
        run = found[0]
        run_key = con.execute("SELECT run_key FROM runs WHERE run_id = ?", [run_id]).fetchall()[0][
            0
        ]
        metrics = _run_metrics(con, run_key, points, run.verdicts)
        checkpoints = [
            CheckpointRow(*row)
            for row in con.execute(
                "SELECT loop, iteration, path, bytes, time FROM checkpoints WHERE run_id = ? "
                "ORDER BY time, iteration",
                [run_id],
            ).fetchall()
        ]
        replays = _run_replays(con, run_key)
        withheld_values = withheld(con, run_ids=[run_id])
        loop = con.execute(
            f"""
            SELECT e.loop, e.total,
                   (SELECT count(*) FROM iteration_rows i WHERE i.run_key = e.run_key
                      AND i.source_key = 0 AND i.ctx_id >> {ENTRY_SHIFT} = e.entry_id)
            FROM loop_entries e WHERE e.run_key = ? AND e.source_key = 0 AND e.depth = 0
            ORDER BY e.entry_id LIMIT 1
            """,
            [run_key],
        ).fetchall()
        waits = [
            LoopWait(path, float(wait or 0.0), float(spent or 0.0))
            for path, wait, spent in con.execute(
                f"""
                SELECT e.path, sum(i.wait_s), sum(i.wait_s + i.iter_s)
                FROM iteration_rows i JOIN loop_entries e ON e.run_key = i.run_key
                     AND e.source_key = i.source_key AND e.entry_id = i.ctx_id >> {ENTRY_SHIFT}
                WHERE i.run_key = ? AND i.source_key = 0
                GROUP BY e.path ORDER BY min(e.depth), e.path
                """,
                [run_key],
            ).fetchall()
        ]
        tail, n_lines = console_lines.tail(con, run_id, CONSOLE_TAIL)
        system = system_metrics.latest(con, run_id)
        ranks = rank_rows(con, run_id)
    name, total, done = loop[0] if loop else (None, None, 0)
    return RunDetail(
        run,
        metrics,
        checkpoints,
        replays,
        total,
        int(done),
        name,
        waits,
        tail,
        n_lines,
        withheld_values,
        system,
        ranks,
    )


def _run_metrics(
    con: duckdb.DuckDBPyConnection, run_key: int, points: int, verdicts: list[dict[str, Any]]
) -> list[MetricSeries]:
    rows = con.execute(
        f"""
        WITH v AS (SELECT source_key, name_key, seq & {LOCAL_SEQ} AS seq, value,
                          text, vtype FROM log_rows WHERE run_key = ?),
             b AS (SELECT source_key, name_key, min(seq) AS lo, max(seq) AS hi, count(*) AS n,
                          count(*) FILTER (WHERE vtype <= 2) AS n_num,
                          arg_max(value, seq) AS last, arg_max(text, seq) AS last_text,
                          arg_max_null(text, seq) AS last_digits,
                          {exact_bounds_sql()}
                   FROM v GROUP BY ALL),
             g AS (SELECT v.source_key, v.name_key,
                          CAST((v.seq - b.lo) * least(b.n, {int(points)}) // (b.hi - b.lo + 1)
                               AS INTEGER) AS bucket,
                          avg(v.value) FILTER (WHERE isfinite(v.value)) AS value
                   FROM v JOIN b USING (source_key, name_key) WHERE v.vtype <= 2 GROUP BY ALL)
        SELECT k.name, s.source, b.n, b.n_num, b.last, b.last_text, b.last_digits,
               b.plain_low, b.plain_high, b.big_low, b.big_high,
               (SELECT list(g.value ORDER BY g.bucket) FROM g
                 WHERE g.source_key = b.source_key AND g.name_key = b.name_key)
        FROM b JOIN name_keys k ON k.name_key = b.name_key
             JOIN sources s ON s.source_key = b.source_key
        ORDER BY b.source_key != 0, k.name, b.source_key
        """,
        [run_key],
    ).fetchall()
    # Each name once: recorded values when the run has them, else the first replay's (as
    # the history reads them, history_values.CHOSEN); other sources only re-checked it,
    # and a check counts (✓) only where its replay verified the run (older replays kept
    # no verdict; a diverged one's rows are withheld and never reach this table).
    verdict_of = {v["replay_id"]: v["verdict"] for v in verdicts}
    chosen: dict[str, MetricSeries] = {}
    for name, source, n, n_num, last, last_text, last_digits, *bounds, points_ in rows:
        if name in chosen:
            if source != console_lines.EXTRACT_SOURCE and verdict_of.get(source) in (
                None,
                "verified",
            ):
                chosen[name].rechecked += 1
            continue
        numeric = n_num == n
        low, high = exact_bounds(*bounds)
        chosen[name] = MetricSeries(
            name=name,
            source=source,
            n=int(n),
            last=exact_number(last, last_digits) if numeric else None,
            low=low if numeric else None,
            high=high if numeric else None,
            points=[_nan(v) for v in (points_ or [])] if numeric else [],
            text=None if numeric else last_text,
        )
    return list(chosen.values())


def _run_replays(con: duckdb.DuckDBPyConnection, run_key: int) -> list[ReplayRow]:
    """The replays that logged values for the run, served or withheld, with its verdict."""
    rows = con.execute(
        """
        WITH n AS (SELECT source_key, n, false AS held FROM name_stats WHERE run_key = $1
                   UNION ALL
                   SELECT source_key, n, true FROM withheld_name_stats WHERE run_key = $1)
        SELECT s.source, p.started, p.ended, p.status, p.names, p.detail,
               sum(n.n) FILTER (WHERE NOT n.held), v.verdict, v.divergence,
               sum(n.n) FILTER (WHERE n.held), v.missing
        FROM n JOIN sources s ON s.source_key = n.source_key
        LEFT JOIN replays p ON p.replay_id = s.source
        LEFT JOIN replay_runs v ON v.replay_id = s.source
             AND v.run_id = (SELECT run_id FROM runs WHERE run_key = $1)
        WHERE n.source_key != 0 AND s.source != 'extract'
        GROUP BY ALL ORDER BY p.started NULLS LAST, s.source
        """,
        [run_key],
    ).fetchall()
    return [
        ReplayRow(
            r[0],
            r[1],
            r[2],
            r[3],
            r[4],
            _json_object(r[5]),
            int(r[6] or 0),
            r[7],
            r[8],
            int(r[9] or 0),
            r[10],
        )
        for r in rows
    ]


def _json_object(text: str | None) -> dict[str, Any]:
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {"detail": value}


# --- replays and live progress ----------------------------------------------------------


@again_if_rebuilt
def load_replays(store: Store, limit: int = 50) -> list[ReplayRow]:
    """The latest replays with how many rows each produced."""
    with read_session(store) as con:
        rows = con.execute(
            """
            SELECT p.replay_id, p.started, p.ended, p.status, p.names, p.detail,
                   coalesce((SELECT sum(n.n) FROM name_stats n JOIN sources s
                             ON s.source_key = n.source_key WHERE s.source = p.replay_id), 0)
            FROM replays p ORDER BY p.started DESC NULLS LAST LIMIT ?
            """,
            [limit],
        ).fetchall()
    return [
        ReplayRow(r[0], r[1], r[2], r[3], r[4], _json_object(r[5]), int(r[6] or 0)) for r in rows
    ]


@again_if_rebuilt
def replayed_names(store: Store) -> dict[str, set[str]]:
    """Per code version, the log names that replays filled in for its runs."""
    with read_session(store) as con:
        rows = con.execute(
            "SELECT DISTINCT r.version, k.name FROM name_stats s "
            "JOIN runs r ON r.run_key = s.run_key JOIN name_keys k ON k.name_key = s.name_key "
            "WHERE s.source_key != 0 AND r.version IS NOT NULL"
        ).fetchall()
    out: dict[str, set[str]] = {}
    for version, name in rows:
        out.setdefault(version, set()).add(name)
    return out


@again_if_rebuilt
def load_live(store: Store) -> list[LiveRun]:
    """Runs still recording: iterations of their outer loop done, of its total."""
    with read_session(store) as con:
        rows = con.execute(
            f"""
            SELECT r.run_id, e.loop, e.total, r.start_time,
                   (SELECT count(*) FROM iteration_rows i WHERE i.run_key = r.run_key
                      AND i.source_key = 0 AND i.ctx_id >> {ENTRY_SHIFT} = e.entry_id),
                   (SELECT avg(i.wait_s + i.iter_s) FROM iteration_rows i
                     WHERE i.run_key = r.run_key AND i.source_key = 0
                       AND i.ctx_id >> {ENTRY_SHIFT} = e.entry_id)
            FROM runs r LEFT JOIN loop_entries e ON e.run_key = r.run_key AND e.source_key = 0
                 AND e.depth = 0
            WHERE r.status = 'running'
            QUALIFY row_number() OVER (PARTITION BY r.run_id ORDER BY e.entry_id DESC) = 1
            ORDER BY r.start_time
            """
        ).fetchall()
    now = datetime.now()
    return [
        LiveRun(
            run_id=r[0],
            loop=r[1],
            done=int(r[4] or 0),
            total=int(r[2]) if r[2] is not None else None,
            elapsed_s=(now - r[3]).total_seconds() if r[3] else 0.0,
            mean_iter_s=r[5],
        )
        for r in rows
    ]


# --- ad-hoc queries -------------------------------------------------------------------------


def series_columns(types: list[DuckDBPyType]) -> list[int]:
    """The columns of a result that hold lists of numbers: the Query tab draws them as
    sparklines (the first page's and a streamed result's alike)."""
    return [i for i, kind in enumerate(types) if _is_numeric_list(kind)]


def _is_numeric_list(kind: DuckDBPyType) -> bool:
    if kind.id not in ("list", "array"):
        return False
    child = dict(kind.children)["child"]
    return str(child) in _NUMERIC_TYPES or str(child).startswith("DECIMAL")


__all__ = [
    "series_columns",
    "CheckpointRow",
    "History",
    "LiveRun",
    "MetricInfo",
    "MetricSeries",
    "ReplayRow",
    "RunDetail",
    "RunRow",
    "VersionRow",
    "check_read_only",
    "default_metric",
    "example_query",
    "load_live",
    "load_replays",
    "load_run_detail",
    "replayed_names",
]
