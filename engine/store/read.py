"""What readers ask of the catalog: runs, ad-hoc SQL, and the flordb-style dataframe.

Every read first ingests pending journals, inside the same short connection, so results
include runs that are still going or were just killed.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb

from florwb_engine import project as projects
from florwb_engine.store import run_context
from florwb_engine.store.db import StoreError, connect
from florwb_engine.store.ingest import IngestReport, ingest_pending
from florwb_engine.store.replays import clear_abandoned

if TYPE_CHECKING:  # pandas loads only when a DataFrame is made: it slows every start-up
    import pandas as pd

from florwb_engine.store.schema import (
    coordinates_sql,
    ensure_schema,
    entry_join,
    loop_column,
    loop_columns,
    quote,
)

_INGEST_LOCK = threading.Lock()
READ_ONLY_STATEMENTS = {"SELECT", "EXPLAIN", "PRAGMA"}
# Recorded values win over replayed ones at the same coordinates; then the latest logged.
_RECORDED_FIRST = "(CASE WHEN source_key = 0 THEN 4611686018427387904 ELSE 0 END + seq)"


class Store:
    """The catalog of one project (`<project>/.florwb/florwb.duckdb`)."""

    def __init__(self, project: Path | str) -> None:
        self.project = Path(project)
        self.dir = projects.store_dir(self.project)
        self.last_ingest = IngestReport()

    @contextmanager
    def session(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A connection with the schema in place and every journal ingested; what killed
        replays left is removed first, so no reader sees their partial results."""
        with connect(self.dir) as con:
            with _INGEST_LOCK:  # threads of one process share one DuckDB instance
                ensure_schema(con)
                clear_abandoned(con, self.project)
                self.last_ingest = ingest_pending(con, projects.journal_dir(self.project))
            yield con

    def ingest(self) -> IngestReport:
        with self.session():
            return self.last_ingest

    def query(self, sql: str) -> pd.DataFrame:
        """Run read-only SQL; bad SQL raises StoreError with DuckDB's one-line reason."""
        check_read_only(sql)
        with self.session() as con:
            try:
                result = con.execute(sql)
                if result.description:
                    return result.df()
                import pandas as pd

                return pd.DataFrame()
            except duckdb.Error as exc:
                raise StoreError(first_line(exc)) from None

    def runs(self) -> list[dict]:
        with self.session() as con:
            rows = con.execute(
                f"""
                SELECT r.run_id, r.version, r.script, r.start_time, r.end_time, r.status,
                       r.exception, r.message, r.host, r.argv, r.git_head, r.git_branch,
                       r.git_dirty,
                       (SELECT coalesce(sum(n), 0) FROM name_stats n
                          WHERE n.run_key = r.run_key AND n.source_key = 0) AS n_logs,
                       (SELECT count(*) FROM checkpoints c WHERE c.run_id = r.run_id),
                       w.wait_s, w.loop_s
                FROM runs r LEFT JOIN (
                    SELECT i.run_key, sum(i.wait_s) AS wait_s,
                           sum(i.wait_s + i.iter_s) FILTER (WHERE e.depth = 0) AS loop_s
                    FROM iteration_rows i {entry_join("i", "e")}
                    WHERE i.source_key = 0 GROUP BY i.run_key
                ) w ON w.run_key = r.run_key
                ORDER BY r.start_time, r.run_id
                """
            ).fetchall()
            args: dict[str, dict] = {}
            for run_id, name, value, text, vtype in con.execute(
                "SELECT run_id, name, value, text, vtype FROM args ORDER BY run_id, name"
            ).fetchall():
                args.setdefault(run_id, {})[name] = _typed(value, text, vtype)
            contexts = run_context.contexts(con)
        out = []
        for r in rows:
            wait_s, loop_s = r[15], r[16]
            out.append(
                {
                    "run_id": r[0],
                    "version": r[1],
                    "script": r[2],
                    "start_time": r[3].isoformat() if r[3] else None,
                    "end_time": r[4].isoformat() if r[4] else None,
                    "duration_s": (r[4] - r[3]).total_seconds() if r[3] and r[4] else None,
                    "status": r[5],
                    "exception": r[6],
                    "message": r[7],
                    "host": r[8],
                    "argv": json.loads(r[9]) if r[9] else [],
                    "git_head": r[10],
                    "git_branch": r[11],
                    "git_dirty": r[12],
                    "args": args.get(r[0], {}),
                    "n_logs": int(r[13]),
                    "n_checkpoints": int(r[14]),
                    "data_wait_s": wait_s,
                    "data_wait_share": (wait_s / loop_s) if wait_s is not None and loop_s else None,
                    "context": contexts.get(r[0]),
                }
            )
        return out

    def names(self) -> list[str]:
        with self.session() as con:
            return _logged_names(con)

    def dataframe(self, *names: str) -> pd.DataFrame:
        """One row per run x loop coordinates, one column per name (logs or args)."""
        if not names:
            raise StoreError("dataframe needs at least one log name")
        with self.session() as con:
            return _pivot(con, list(dict.fromkeys(names)))


def _logged_names(con: duckdb.DuckDBPyConnection) -> list[str]:
    return [
        r[0]
        for r in con.execute(
            "SELECT DISTINCT k.name FROM name_stats s JOIN name_keys k USING (name_key) ORDER BY 1"
        ).fetchall()
    ]


def _pivot(con: duckdb.DuckDBPyConnection, names: list[str]) -> pd.DataFrame:
    """Conditional aggregation over integer name keys: one pass over the selected rows."""
    logged = {
        r[0]: r[1:]
        for r in con.execute(
            "SELECT k.name, k.name_key, string_agg(DISTINCT s.path, '|'), sum(s.n), "
            "sum(s.n_numeric), sum(s.n_int), coalesce(sum(s.n_repeat) = 0, false) "
            "FROM name_stats s JOIN name_keys k USING (name_key) "
            "WHERE k.name IN (SELECT unnest(?)) GROUP BY ALL",
            [names],
        ).fetchall()
    }
    arg_names = {
        r[0]
        for r in con.execute(
            "SELECT DISTINCT name FROM args WHERE name IN (SELECT unnest(?))", [names]
        ).fetchall()
    }
    unknown = [n for n in names if n not in logged and n not in arg_names]
    if unknown:
        known = _logged_names(con)
        hint = (", ".join(known[:20]) + (" ..." if len(known) > 20 else "")) or "none yet"
        raise StoreError(f"unknown log name {', '.join(map(repr, unknown))} (logged names: {hint})")
    existing = {c.lower(): c for c in loop_columns(con)}
    loops_used: list[str] = []
    for name in logged:
        for path in (logged[name][1] or "").split("|"):
            for loop_name in filter(None, path.split("/")):
                column = existing.get(loop_column(loop_name).lower())
                if column and column not in loops_used:
                    loops_used.append(column)
    taken = {"run_id", "version", "start_time", *(c.lower() for c in loops_used)}
    aliases: dict[str, str] = {}
    aggregates: dict[str, str] = {}  # output column -> aggregate over log_rows
    casts = {}
    for name in names:
        alias = name if name.lower() not in taken else f"{name}_value"
        taken.add(alias.lower())
        aliases[name] = alias
        if name not in logged:
            continue
        key, _paths, n, n_numeric, n_int, once = logged[name]
        value = "value" if n_numeric == n else "coalesce(text, CAST(value AS VARCHAR))"
        # Logged more than once in an iteration: the last value counts. Once (the usual
        # case, known from ingestion): any aggregate gives it, and max is 1.5x faster.
        last = f"max({value})" if once else f"arg_max({value}, seq)"
        aggregates[alias] = f"{last} FILTER (WHERE name_key = {int(key)})"
        if n_numeric == n and n_int == n:
            casts[alias] = "Int64"
    keys = [int(v[0]) for v in logged.values()]
    frame = _aggregate(con, keys, loops_used, aggregates).astype(casts)
    arg_only = [n for n in names if n not in logged]
    if arg_only:
        values: dict[tuple, object] = {
            (run_id, name): _typed(value, text, vtype)
            for run_id, name, value, text, vtype in con.execute(
                "SELECT run_id, name, value, text, vtype FROM args "
                "WHERE name IN (SELECT unnest(?))",
                [arg_only],
            ).fetchall()
        }
        for name in arg_only:
            frame[aliases[name]] = [values.get((r, name)) for r in frame["run_id"]]
        frame = frame[["run_id", "version", "start_time", *loops_used, *aliases.values()]]
    return frame


def _aggregate(
    con: duckdb.DuckDBPyConnection, keys: list[int], loops: list[str], aggregates: dict[str, str]
) -> pd.DataFrame:
    """Pivot in two steps: group by integer (run, source, ctx_id), cheap on tens of millions
    of rows; then derive coordinates from the few loop entries. Only when replayed values
    exist is a second grouping by coordinates needed, where recorded values win. Run ids
    and versions are attached afterwards as categoricals instead of per-row strings."""
    import pandas as pd

    runs = con.execute(
        "SELECT run_key, run_id, version, start_time FROM runs ORDER BY start_time, run_key"
    ).df()
    order = "".join(f", {quote(c)} NULLS FIRST" for c in loops)
    if keys:
        values = {f"v{i}": alias for i, alias in enumerate(aggregates)}
        inner = "".join(f", {agg} AS v{i}" for i, agg in enumerate(aggregates.values()))
        coord_cols = "".join(f", {quote(c)}" for c in loops)
        value_cols = "".join(f", {v}" for v in values)
        key_list = ", ".join(map(str, keys))
        select = (
            f"SELECT a.run_key, a.source_key{coordinates_sql(loops, rows='a')}{value_cols} "
            f"FROM (SELECT run_key, source_key, ctx_id{inner} FROM log_rows "
            f"WHERE name_key IN ({key_list}) GROUP BY ALL) a {entry_join('a', 'e')}"
        )
        replayed = con.execute(
            f"SELECT count(*) FROM name_stats WHERE source_key != 0 AND name_key IN ({key_list})"
        ).fetchall()[0][0]
        if replayed:
            merged = "".join(
                f", arg_max({v}, source_key = 0) FILTER (WHERE {v} IS NOT NULL) AS {v}"
                for v in values
            )
            select = f"SELECT run_key{coord_cols}{merged} FROM ({select}) GROUP BY ALL"
    else:
        values, coord_cols, value_cols = {}, "", ""
        select = "SELECT run_key FROM runs"
    con.execute("SET SESSION preserve_insertion_order = false")  # the ORDER BY below decides order
    frame = _frame(
        con.execute(
            f"SELECT p.position{coord_cols}{value_cols} FROM ({select}) x JOIN (SELECT run_key, "
            f"row_number() OVER (ORDER BY start_time, run_key) - 1 AS position FROM runs) p "
            f"USING (run_key) ORDER BY p.position{order}"
        )
    )
    con.execute("SET SESSION preserve_insertion_order = true")
    codes = frame.pop("position").to_numpy()
    frame = frame.rename(columns=values)
    for i, column in enumerate(("run_id", "version")):
        per_run = pd.Categorical(runs[column].astype(object))  # codes, not 2.5M strings
        frame.insert(i, column, pd.Categorical.from_codes(per_run.codes[codes], per_run.categories))
    frame.insert(2, "start_time", runs["start_time"].to_numpy()[codes])
    return frame


def _frame(result: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """The result as DuckDB's `.df()` types it (nullable ints, booleans and strings), built
    from numpy columns without pandas copying them into blocks: 0.1-0.3 s less on millions
    of rows."""
    import numpy as np
    import pandas as pd

    columns = {}
    for name, column in result.fetchnumpy().items():
        if isinstance(column, np.ma.MaskedArray):
            mask = np.ma.getmaskarray(column)
            kind = column.dtype.kind
            if kind in "iu":
                column = pd.arrays.IntegerArray(column.data, mask)
            elif kind == "b":
                column = pd.arrays.BooleanArray(column.data, mask)
            elif kind == "f":
                column = column.filled(np.nan)
            else:  # filled(None) would fill with numpy's default, "?"
                data = column.data.astype(object)
                data[mask] = None
                column = pd.array(data, dtype="str")
        columns[name] = column
    return pd.DataFrame(columns, copy=False)


def _typed(value, text, vtype):
    if vtype == "int":
        return int(value)
    if vtype == "bool":
        return bool(value)
    if vtype == "float":
        return value
    if vtype == "json" and text is not None:
        return json.loads(text)
    return text


def check_read_only(sql: str) -> list[str]:
    """The statements of `sql`, or StoreError for empty, unparsable or writing SQL."""
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise StoreError(first_line(exc)) from None
    if not statements:
        raise StoreError("empty query")
    for statement in statements:
        kind = statement.type.name
        if kind not in READ_ONLY_STATEMENTS:
            raise StoreError(f"queries are read-only: {kind} statements are not allowed")
    return [s.query for s in statements]


def first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
