"""Running SQL a user typed (`florwb query`, `flor.query`, the Query tab) on a connection that
cannot write.

A textual check of statement kinds is not a guarantee: `EXPLAIN ANALYZE DELETE ...` is an
EXPLAIN that deletes, `COPY ... TO` hides in EXPLAIN, comments hide keywords. So user SQL
runs on its own DuckDB connection opened `read_only` (every write to the catalog fails),
with external access off (no COPY TO, EXPORT, ATTACH, INSTALL/LOAD, reading or writing any
other file), no extension autoload/autoinstall, no persistent secrets, and the configuration
locked (no SET/RESET/PRAGMA can undo any of that). The textual check stays, as a friendly
early message only.

The connection is to a snapshot of the catalog (engine/store/snapshot.py), taken after
pending journals are ingested: a result read slowly, paged or streamed to a slow pipe, holds
its own file and never the catalog, so nobody waits on it. Each snapshot connection is its
own file and its own DuckDB instance (the configuration lock is per instance).

Results stream: callers fetch what they show (`fetch_df_chunk`/`fetchmany`, `ResultStream`
a page at a time), never the whole result, so `SELECT * FROM range(100000000000)` runs in
bounded memory.

Errors keep DuckDB's whole message (`UserSqlError.detail`: candidate bindings, the
`LINE 1 ... ^` pointer) for whoever can show it; `str()` is the first line, for the CLI.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import TYPE_CHECKING, Any

import duckdb

from florwb_engine.journal import VTYPES
from florwb_engine.store import repair, snapshot, verdicts
from florwb_engine.store.db import StoreError
from florwb_engine.store.repair import again_if_rebuilt
from florwb_engine.store.schema import literal

if TYPE_CHECKING:
    from pathlib import Path

    import pandas as pd

    from florwb_engine.store.catalog import Store

READ_ONLY_STATEMENTS = {"SELECT", "EXPLAIN", "PRAGMA"}
# What a read-only connection is opened with; settings DuckDB takes only at start-up.
READ_ONLY_CONFIG: dict[str, Any] = {
    "enable_external_access": False,
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
    "allow_community_extensions": False,
    "allow_unsigned_extensions": False,
    "allow_persistent_secrets": False,
}
CHUNK_VECTORS = 1  # one DuckDB vector (2,048 rows) per fetched chunk


_EXPLAIN = re.compile(r"^\s*EXPLAIN\s+(?:ANALY[SZ]E\s+)?(?:\([^)]*\)\s*)?", re.IGNORECASE)


def first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


class UserSqlError(StoreError):
    """The user's SQL failed: `str()` is DuckDB's first line, `detail` its whole message."""

    def __init__(self, message: str, detail: str | None = None) -> None:
        super().__init__(message)
        self.detail = detail if detail is not None else message


class QueryStopped(StoreError):
    """The user stopped the query (`ResultStream.interrupt`)."""


def failure_of(exc: duckdb.Error) -> StoreError:
    if isinstance(exc, duckdb.InterruptException):
        return QueryStopped("stopped")
    return UserSqlError(first_line(exc), str(exc).strip())


def check_read_only(sql: str) -> list[str]:
    """The statements of `sql`, or StoreError for empty, unparsable or writing SQL.

    A friendly early message only: what guarantees that nothing is written is the
    connection (`read_only_connection`), not this check."""
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise failure_of(exc) from None
    if not statements:
        raise StoreError("empty query")
    for statement in statements:
        kind = _refused_kind(statement.query, statement.type.name)
        if kind is not None:
            raise StoreError(f"queries are read-only: {kind} statements are not allowed")
    return [s.query for s in statements]


# Statements that write from inside a reading one: `WITH d AS (DELETE ... RETURNING *)`.
_WRITES = frozenset({"DELETE", "INSERT", "UPDATE", "MERGE"})


def _refused_kind(query: str, kind: str) -> str | None:
    """What to call `query` when it may not run; None when it only reads.

    DuckDB's parser files several statements under another's type (INSTALL under LOAD,
    CHECKPOINT under CALL, USE under SET, TRUNCATE under DELETE): the message names the
    statement's own first word instead. An EXPLAIN is judged by what it explains, past any
    comments before it."""
    tokens = _tokens(query)
    if kind == "EXPLAIN":
        inner = _EXPLAIN.sub("", query[tokens[0][0] :] if tokens else query, count=1)
        try:
            (explained,) = duckdb.extract_statements(inner)
        except (duckdb.Error, ValueError):
            return None  # not plainly one statement: the read-only connection judges it
        return _refused_kind(explained.query, explained.type.name)
    if kind in READ_ONLY_STATEMENTS:
        for (_, before), (_, word) in zip(tokens, tokens[1:]):
            if before == "(" and word.upper() in _WRITES:
                return word.upper()
        return None
    words = [text.upper() for _, text in tokens[:2]]
    if words and words[0] == "FORCE" and words[1:]:
        return words[1]  # FORCE CHECKPOINT
    if words and words[0].isalpha() and words[0] != "WITH":
        return words[0]
    return kind


def _tokens(query: str) -> list[tuple[int, str]]:
    """(offset, text) of each token of `query` but comments."""
    try:
        found = duckdb.tokenize(query)
    except (duckdb.Error, ValueError, RuntimeError):
        return []
    ends = [pos for pos, _ in found[1:]] + [len(query)]
    return [
        (pos, query[pos:end].strip())
        for (pos, token), end in zip(found, ends)
        if token.name != "comment"
    ]


@contextmanager
def read_only_connection(
    store: Store, *, writable: Path | None = None
) -> Iterator[duckdb.DuckDBPyConnection]:
    """A connection to a snapshot of the catalog (journals ingested first) that cannot
    write anything anywhere, or only the one file `writable` (an export's target: DuckDB's
    `allowed_paths`, set while external access is still on, which it must be at start-up
    for the setting to take). The configuration is locked before it is handed out."""
    config = READ_ONLY_CONFIG
    if writable is not None:
        config = {k: v for k, v in READ_ONLY_CONFIG.items() if k != "enable_external_access"}
    with ExitStack() as stack:
        private = stack.enter_context(snapshot.reading(store))
        stack.enter_context(repair.guarded(store.dir))
        con = snapshot.open_read_only(private, config)
        stack.callback(con.close)
        if writable is not None:
            con.execute(f"SET allowed_paths = [{literal(str(writable))}]")
            con.execute("SET enable_external_access = false")
        con.execute("SET lock_configuration = true")
        yield con


_READS_LOGS = re.compile(r"\blogs\b(?!_)", re.IGNORECASE)


@repair.again_if_rebuilt
def withheld_from(store: Store, sql: str) -> verdicts.Withheld:
    """What the `logs` view left out of `sql`'s answer (values of diverged replays): the
    note `florwb query` prints; nothing when `sql` does not read `logs`."""
    if not _READS_LOGS.search(sql):
        return verdicts.Withheld()
    with read_only_connection(store) as con:
        return verdicts.withheld(con)


_READS_VALUE = re.compile(r"\bvalue\b|(?<!\()\*", re.IGNORECASE)


@repair.again_if_rebuilt
def rounded_ints_note(store: Store, sql: str) -> str | None:
    """What to say when `sql` may read the `value` column of `logs` and the catalog holds
    ints a DOUBLE cannot hold exactly: there they are rounded; `text` keeps their digits."""
    if not (_READS_LOGS.search(sql) and _READS_VALUE.search(sql)):
        return None
    with read_only_connection(store) as con:
        row = con.execute(
            "SELECT count(*) FROM log_rows WHERE vtype = ? AND text IS NOT NULL",
            [VTYPES.index("int")],
        ).fetchone()
    n = int(row[0]) if row else 0
    if not n:
        return None
    return (
        f"{n} logged int(s) are past 2**53: `value` (a DOUBLE) holds them rounded; "
        "`text` holds their exact digits"
    )


@contextmanager
def user_result(store: Store, sql: str) -> Iterator[duckdb.DuckDBPyConnection | None]:
    """The pending result of the last statement of `sql` (None when it returns no rows),
    earlier statements run first. Fetch from it only what you show. A catalog found
    damaged before the result is handed out is rebuilt and the statements run again."""
    statements = check_read_only(sql)
    with ExitStack() as stack:
        try:
            result = stack.enter_context(_executed(store, statements))
        except repair.CatalogRebuilt:
            result = stack.enter_context(_executed(store, statements))
        yield result


@contextmanager
def _executed(store: Store, statements: list[str]) -> Iterator[duckdb.DuckDBPyConnection | None]:
    with read_only_connection(store) as con:
        try:
            for statement in statements[:-1]:
                con.execute(statement).fetchall()
            result = con.execute(statements[-1])
        except duckdb.Error as exc:
            raise failure_of(exc) from None
        yield result if result.description else None


def fetch_chunks(result: duckdb.DuckDBPyConnection) -> Iterator[pd.DataFrame]:
    """The result as DataFrames of about 2,048 rows, typed as `.df()` types them; the
    first one even when empty (it carries the columns)."""
    first = True
    while True:
        try:
            chunk = result.fetch_df_chunk(CHUNK_VECTORS)
        except duckdb.Error as exc:
            raise failure_of(exc) from None
        if chunk.empty and not first:
            return
        yield chunk
        first = False
        if chunk.empty:
            return


# Types DuckDB turns into Python values only with pytz installed: such results are written
# from DataFrames (which need no pytz), the rest from Python rows (NULL apart from NaN).
_NEEDS_PYTZ = ("TIMESTAMP WITH TIME ZONE", "TIME WITH TIME ZONE")


def rows_fetchable(result: duckdb.DuckDBPyConnection) -> bool:
    """Whether `fetch_rows` can read this result (no time-zone column anywhere in it)."""
    return not any(zone in str(d[1]) for d in (result.description or []) for zone in _NEEDS_PYTZ)


def fetch_rows(result: duckdb.DuckDBPyConnection, size: int = 2048) -> Iterator[list[tuple]]:
    """The result as lists of Python rows (None is NULL, float('nan') is NaN)."""
    while True:
        try:
            rows = result.fetchmany(size)
        except duckdb.Error as exc:
            raise failure_of(exc) from None
        if not rows:
            return
        yield rows


@again_if_rebuilt
def query_frame(store: Store, sql: str) -> pd.DataFrame:
    """The whole result as a DataFrame (`flor.query`): what a notebook asks for."""
    import pandas as pd

    with user_result(store, sql) as result:
        if result is None:
            return pd.DataFrame()
        try:
            return result.df()
        except duckdb.Error as exc:
            raise failure_of(exc) from None


@again_if_rebuilt
def count_result(store: Store, sql: str) -> int:
    """How many rows the last statement returns, counted by DuckDB without fetching them."""
    statements = check_read_only(sql)
    with read_only_connection(store) as con:
        try:
            for statement in statements[:-1]:
                con.execute(statement).fetchall()
            relation = con.sql(statements[-1])
            if relation is None:
                return 0
            return int(relation.aggregate("count(*)").fetchall()[0][0])
        except duckdb.Error as exc:
            raise failure_of(exc) from None
