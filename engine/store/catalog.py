"""The catalog of one project: `Store` opens it, ingests journals, and answers reads
(runs, ad-hoc SQL, and the flordb-style dataframe).

Every session first ingests pending journals, inside the same short connection, so results
include runs that are still going or were just killed. The run listing is runs.py (shared
with the workbench), the workbench's other reads are queries.py.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb

from florwb_engine import project as projects
from florwb_engine.store import repair, run_ranks, user_sql, verdicts
from florwb_engine.store.db import StoreError
from florwb_engine.store.ingest import IngestReport, ingest_pending
from florwb_engine.store.replays import clear_abandoned
from florwb_engine.store.runs import RunRow, list_runs
from florwb_engine.store.user_sql import check_read_only, first_line
from florwb_engine.store.values import decode_value

if TYPE_CHECKING:  # pandas loads only when a DataFrame is made: it slows every start-up
    import pandas as pd

from florwb_engine.store.schema import (
    RANK_SHIFT,
    coordinates_sql,
    ensure_schema,
    entry_join,
    literal,
    loop_column,
    loop_columns,
    quote,
)

_INGEST_LOCK = threading.Lock()
# Recorded values win over replayed ones at the same coordinates; then the latest logged.
_RECORDED_FIRST = "(CASE WHEN source_key = 0 THEN 4611686018427387904 ELSE 0 END + seq)"


class Store:
    """The catalog of one project (`<project>/.florwb/florwb.duckdb`)."""

    def __init__(self, project: Path | str) -> None:
        self.project = Path(project)
        self.dir = projects.store_dir(self.project)
        self.last_ingest = IngestReport()
        self.leftovers: list[str] = []
        self._cleaned = False

    @contextmanager
    def session(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A connection with the schema in place and every journal ingested; what killed
        replays left is removed first, so no reader sees their partial results."""
        with repair.guarded(self.dir), repair.opened(self.dir, self._prepare) as con:
            yield con

    def _prepare(self, con: duckdb.DuckDBPyConnection) -> None:
        """Schema, abandoned replays, journals; once per Store, leftovers of killed runs
        and replays (engine/store/repair.py)."""
        with _INGEST_LOCK:  # threads of one process share one DuckDB instance
            ensure_schema(con)
            clear_abandoned(con, self.project)
            self.last_ingest = ingest_pending(con, projects.journal_dir(self.project))
            if self.last_ingest.journals:  # a rebuilt catalog: its verdicts back from files
                verdicts.apply_sidecars(con, projects.journal_dir(self.project))
            if not self._cleaned:
                self.leftovers = repair.remove_leftovers(self.dir, repair.running_replays(con))
                self._cleaned = True

    @repair.again_if_rebuilt
    def ingest(self) -> IngestReport:
        with self.session():
            return self.last_ingest

    @repair.again_if_rebuilt
    def query(self, sql: str) -> pd.DataFrame:
        """Run read-only SQL on a connection that cannot write (see user_sql); bad SQL
        raises StoreError with DuckDB's one-line reason."""
        return user_sql.query_frame(self, sql)

    @repair.again_if_rebuilt
    def run_rows(self) -> list[RunRow]:
        """Every run, oldest first, as the CLI and the workbench list them."""
        with self.session() as con:
            return list_runs(con)

    def runs(self) -> list[dict]:
        """Every run as `florwb runs --json` prints it."""
        return [run.to_json() for run in self.run_rows()]

    @repair.again_if_rebuilt
    def names(self) -> list[str]:
        with self.session() as con:
            return _logged_names(con)

    @repair.again_if_rebuilt
    def dataframe(self, *names: str, diverged: bool = False) -> pd.DataFrame:
        """One row per run x loop coordinates, one column per name (logs or args).

        A name both logged and passed as an arg (`lr` and a logged `lr` schedule) is the
        log; `arg:lr` and `log:lr` pick one, and the column is named as asked.

        Values of diverged replays are left out, counted in `frame.attrs["withheld"]`
        (a `verdicts.Withheld`); `diverged=True` puts them in, with a `diverged` column
        naming the row's values that come from a diverged replay."""
        if not names:
            raise StoreError("dataframe needs at least one log name")
        with self.session() as con:
            return _pivot(con, list(dict.fromkeys(names)), diverged)


def _logged_names(con: duckdb.DuckDBPyConnection) -> list[str]:
    return [
        r[0]
        for r in con.execute(
            "SELECT DISTINCT k.name FROM name_stats s JOIN name_keys k USING (name_key) ORDER BY 1"
        ).fetchall()
    ]


def _requested(token: str) -> tuple[str, str | None]:
    """`arg:NAME` / `log:NAME` pick the arg or the log of that name; a bare NAME is the
    log when one was logged under it, else the arg."""
    for kind in ("arg", "log"):
        if token.startswith(kind + ":") and len(token) > len(kind) + 1:
            return token[len(kind) + 1 :], kind
    return token, None


# With `diverged=True` the dataframe reads the withheld rows of diverged replays too,
# flagged (store/verdicts.py).
_ALL_STATS = "(SELECT * FROM name_stats UNION ALL SELECT * FROM withheld_name_stats)"
_ALL_ROWS = (
    "(SELECT *, false AS withheld FROM log_rows UNION ALL SELECT *, true FROM withheld_rows)"
)


def _pivot(
    con: duckdb.DuckDBPyConnection, tokens: list[str], diverged: bool = False
) -> pd.DataFrame:
    """Conditional aggregation over integer name keys: one pass over the selected rows."""
    wanted = {token: _requested(token) for token in tokens}
    log_names = [n for n, kind in wanted.values() if kind != "arg"]
    stats = _ALL_STATS if diverged else "name_stats"
    logged = {
        r[0]: r[1:]
        for r in con.execute(
            "SELECT k.name, k.name_key, string_agg(DISTINCT s.path, '|'), sum(s.n), "
            "sum(s.n_numeric), sum(s.n_int), coalesce(sum(s.n_repeat) = 0, false) "
            f"FROM {stats} s JOIN name_keys k USING (name_key) "
            "WHERE k.name IN (SELECT unnest(?)) GROUP BY ALL",
            [log_names],
        ).fetchall()
    }
    arg_names = {
        r[0]
        for r in con.execute(
            "SELECT DISTINCT name FROM args WHERE name IN (SELECT unnest(?))",
            [[n for n, kind in wanted.values() if kind != "log"]],
        ).fetchall()
    }
    for kind, known_names in (("log", logged), ("arg", arg_names)):
        missing = [n for n, k in wanted.values() if k == kind and n not in known_names]
        if missing:
            raise StoreError(f"no {kind} named {', '.join(map(repr, missing))}")
    unknown = [n for n, k in wanted.values() if k is None and n not in logged.keys() | arg_names]
    held = verdicts.withheld(con, log_names)
    if unknown and held and not diverged:
        only = [n for n in unknown if n in verdicts.withheld_names(con, unknown)]
        if only:
            raise StoreError(
                f"{', '.join(map(repr, only))} has only values of diverged replays "
                "(left out; --diverged or diverged=True shows them)"
            )
    if unknown:
        known = _logged_names(con)
        hint = (", ".join(known[:20]) + (" ..." if len(known) > 20 else "")) or "none yet"
        raise StoreError(f"unknown log name {', '.join(map(repr, unknown))} (logged names: {hint})")
    from_log = {t: n in logged and k != "arg" for t, (n, k) in wanted.items()}
    existing = {c.lower(): c for c in loop_columns(con)}
    loops_used: list[str] = []
    for name in logged:
        for path in (logged[name][1] or "").split("|"):
            for loop_name in filter(None, path.split("/")):
                column = existing.get(loop_column(loop_name).lower())
                if column and column not in loops_used:
                    loops_used.append(column)
    taken = {"run_id", "version", "start_time", *(c.lower() for c in loops_used)}
    if diverged:
        taken.add("diverged")
    aliases: dict[str, str] = {}
    aggregates: dict[str, str] = {}  # output column -> aggregate over log_rows
    flags: dict[str, str] = {}  # output column -> whether its value is withheld
    casts = {}
    for token, (name, _kind) in wanted.items():
        alias = token if token.lower() not in taken else f"{token}_value"
        taken.add(alias.lower())
        aliases[token] = alias
        if not from_log[token]:
            continue
        key, _paths, n, n_numeric, n_int, once = logged[name]
        value = "value" if n_numeric == n else TEXT_OF_VALUE
        # Logged more than once in an iteration: the last value counts. Once (the usual
        # case, known from ingestion): any aggregate gives it, and max is 1.5x faster.
        last = f"max({value})" if once else f"arg_max({value}, seq)"
        aggregates[alias] = f"{last} FILTER (WHERE name_key = {int(key)})"
        if diverged:
            flags[alias] = f"bool_or(withheld) FILTER (WHERE name_key = {int(key)})"
        if n_numeric == n and n_int == n:
            casts[alias] = "Int64"
    keys = [int(v[0]) for v in logged.values()]
    ranked = run_ranks.any_ranked(con)  # a `rank` column once a multi-process run exists
    frame = _aggregate(con, keys, loops_used, aggregates, ranked, flags).astype(casts)
    if diverged and "diverged" not in frame.columns:  # no value of these names diverged
        frame["diverged"] = None
    arg_only = {t: wanted[t][0] for t in wanted if not from_log[t]}
    if arg_only:
        values: dict[tuple, object] = {
            (run_id, name): decode_value(value, text, vtype)
            for run_id, name, value, text, vtype in con.execute(
                "SELECT run_id, name, value, text, vtype FROM args "
                "WHERE name IN (SELECT unnest(?))",
                [list(set(arg_only.values()))],
            ).fetchall()
        }
        for token, name in arg_only.items():
            frame[aliases[token]] = [values.get((r, name)) for r in frame["run_id"]]
        ranks = ["rank"] if ranked else []
        marks = ["diverged"] if diverged else []
        frame = frame[
            ["run_id", "version", "start_time", *ranks, *loops_used, *aliases.values(), *marks]
        ]
    frame.attrs["withheld"] = verdicts.Withheld() if diverged else held
    return frame


# A column of mixed kinds (an int past 2**53 keeps its digits as text) is text: an int
# beside it reads as its digits ("1", not "1.0"), so every int in it is exact.
TEXT_OF_VALUE = (
    "coalesce(text, CASE WHEN vtype = 1 AND isfinite(value) "
    "THEN CAST(CAST(value AS HUGEINT) AS VARCHAR) ELSE CAST(value AS VARCHAR) END)"
)


def _aggregate(
    con: duckdb.DuckDBPyConnection,
    keys: list[int],
    loops: list[str],
    aggregates: dict[str, str],
    ranked: bool = False,
    flags: dict[str, str] | None = None,
) -> pd.DataFrame:
    """Pivot in two steps: group by integer (run, source, ctx_id), cheap on tens of millions
    of rows; then derive coordinates from the few loop entries. Only when replayed values
    exist is a second grouping by coordinates needed, where recorded values win. Run ids
    and versions are attached afterwards as categoricals instead of per-row strings.
    `flags` (with diverged replays' rows read too): per column, whether its value is
    withheld; they become one `diverged` column naming those columns."""
    import pandas as pd

    flags = flags or {}
    rows_table, stats_table = (_ALL_ROWS, _ALL_STATS) if flags else ("log_rows", "name_stats")

    runs = con.execute(
        "SELECT run_key, run_id, version, start_time FROM runs ORDER BY start_time, run_key"
    ).df()
    order = "".join(f", {quote(c)} NULLS FIRST" for c in loops)
    rank_col = rank_expr = a_rank = ""
    if ranked:  # rank first: a rank's rows together (run_ranks.py: the rank is in seq)
        rank_col, rank_expr = ", rank", f", (seq >> {RANK_SHIFT})::INTEGER AS rank"
        order = ", rank" + order
        a_rank = ", a.rank"
    if keys:
        values = {f"v{i}": alias for i, alias in enumerate(aggregates)}
        marks = {f"w{i}": alias for i, alias in enumerate(aggregates) if alias in flags}
        inner = "".join(f", {agg} AS v{i}" for i, agg in enumerate(aggregates.values()))
        inner += "".join(f", {flags[alias]} AS {w}" for w, alias in marks.items())
        coord_cols = "".join(f", {quote(c)}" for c in loops)
        value_cols = "".join(f", {v}" for v in values)
        mark_cols = "".join(f", {w}" for w in marks)
        key_list = ", ".join(map(str, keys))
        select = (
            f"SELECT a.run_key, a.source_key{a_rank}{coordinates_sql(loops, rows='a')}"
            f"{value_cols}{mark_cols} FROM (SELECT run_key, source_key, ctx_id{rank_expr}{inner} "
            f"FROM {rows_table} "
            f"WHERE name_key IN ({key_list}) GROUP BY ALL) a {entry_join('a', 'e')}"
        )
        replayed = con.execute(
            f"SELECT count(*) FROM {stats_table} WHERE source_key != 0 AND name_key IN ({key_list})"
        ).fetchall()[0][0]
        if replayed:
            merged = "".join(
                f", arg_max({v}, source_key = 0) FILTER (WHERE {v} IS NOT NULL) AS {v}"
                for v in values
            )
            merged += "".join(
                f", arg_max({w}, source_key = 0) FILTER (WHERE v{w[1:]} IS NOT NULL) AS {w}"
                for w in marks
            )
            select = f"SELECT run_key{rank_col}{coord_cols}{merged} FROM ({select}) GROUP BY ALL"
        if marks:  # one column naming the row's diverged values
            named = ", ".join(
                f"CASE WHEN {w} THEN {literal(alias)} END" for w, alias in marks.items()
            )
            value_cols += ", nullif(concat_ws(',', " + named + "), '') AS diverged"
    else:
        values, coord_cols, value_cols = {}, "", ""
        select = f"SELECT run_key{', 0 AS rank' if ranked else ''} FROM runs"
    con.execute("SET SESSION preserve_insertion_order = false")  # the ORDER BY below decides order
    frame = _frame(
        con.execute(
            f"SELECT p.position{rank_col}{coord_cols}{value_cols} FROM ({select}) x "
            "JOIN (SELECT run_key, row_number() OVER (ORDER BY start_time, run_key) - 1 "
            "AS position FROM runs) p "
            f"USING (run_key) ORDER BY p.position{order}"
        )
    )
    con.execute("SET SESSION preserve_insertion_order = true")
    codes = frame.pop("position").to_numpy()
    logged_nan = frame.attrs.pop(LOGGED_NAN, {})
    frame = frame.rename(columns=values)
    frame.attrs[LOGGED_NAN] = {values.get(name, name): nan for name, nan in logged_nan.items()}
    for i, column in enumerate(("run_id", "version")):
        per_run = pd.Categorical(runs[column].astype(object))  # codes, not 2.5M strings
        frame.insert(i, column, pd.Categorical.from_codes(per_run.codes[codes], per_run.categories))
    frame.insert(2, "start_time", runs["start_time"].to_numpy()[codes])
    return frame


# frame.attrs key: per float column holding a logged NaN, the index labels of its rows that
# hold one; its other NaN cells, and every NaN of the other float columns, are missing
# values (SQL NULL). pandas spells both NaN; CSV and JSON must not (florwb/output.py).
LOGGED_NAN = "logged_nan"


def _frame(result: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """The result as DuckDB's `.df()` types it (nullable ints, booleans and strings), built
    from numpy columns without pandas copying them into blocks: 0.1-0.3 s less on millions
    of rows."""
    import numpy as np
    import pandas as pd

    columns = {}
    logged_nan = {}
    for name, column in result.fetchnumpy().items():
        if isinstance(column, np.ma.MaskedArray):
            mask = np.ma.getmaskarray(column)
            kind = column.dtype.kind
            if kind in "iu":
                column = pd.arrays.IntegerArray(column.data, mask)
            elif kind == "b":
                column = pd.arrays.BooleanArray(column.data, mask)
            elif kind == "f":
                nan = np.isnan(column.data) & ~mask
                if nan.any():
                    logged_nan[name] = frozenset(np.flatnonzero(nan).tolist())
                column = column.filled(np.nan)
            else:  # filled(None) would fill with numpy's default, "?"
                data = column.data.astype(object)
                data[mask] = None
                column = pd.array(data, dtype="str")
        elif column.dtype.kind == "f" and np.isnan(column).any():
            logged_nan[name] = frozenset(np.flatnonzero(np.isnan(column)).tolist())
        columns[name] = column
    frame = pd.DataFrame(columns, copy=False)
    frame.attrs[LOGGED_NAN] = logged_nan
    return frame


__all__ = ["Store", "check_read_only", "first_line"]
