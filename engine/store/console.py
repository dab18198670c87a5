"""Printed and logged lines of recorded runs (`console_rows`, view `console`).

The recording side (record/capture.py) sends lines as `console` events in the run's
journal; ingestion stores them here in the same transaction as the journal offset, so
they are kept exactly once. A line repeated within one loop iteration is one row with its
count `n`. The view puts the run id and the loop coordinates back, as `logs` does:
`SELECT epoch, text FROM console WHERE channel = 'stdout'`. Each rank of a multi-process
run numbers its lines from `rank << RANK_SHIFT`, as its log rows (run_ranks.py), so the
ranks' lines never share a seq and the view's `rank` says whose line it is.

Also here: reading a run's lines (`flor.io`, `florwb io`, the run detail's console tail)
and the opt-in extraction of metrics from them (`florwb io RUN --extract REGEX`), whose
values become logs of the source `extract`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import duckdb

from florwb_engine.errors import FlorwbError
from florwb_engine.store.repair import again_if_rebuilt

TABLE = """
        run_key INTEGER, source_key INTEGER, seq BIGINT, ctx_id BIGINT, channel VARCHAR,
        text VARCHAR, n INTEGER"""
VIEW_COLUMNS = ("run_id", "seq", "rank", "channel", "text", "n", "ctx_id")
EXTRACT_SOURCE = "extract"


def create_view(con: duckdb.DuckDBPyConnection, loop_columns: list[str]) -> None:
    """The `console` view; a loop named like one of its own columns is left out of it."""
    from florwb_engine.store.schema import RANK_SHIFT, coordinates_sql, entry_join

    columns = [c for c in loop_columns if c.lower() not in VIEW_COLUMNS]
    con.execute(
        "CREATE OR REPLACE VIEW console AS SELECT r.run_id, l.seq, "
        f"(l.seq >> {RANK_SHIFT})::INTEGER AS rank, l.channel, l.text, l.n, "
        f"l.ctx_id{coordinates_sql(columns)} FROM console_rows l "
        f"JOIN runs r ON r.run_key = l.run_key {entry_join()}"
    )


# --- ingestion ------------------------------------------------------------------------


def insert(
    con: duckdb.DuckDBPyConnection, run_key: int, source_key: int, events: list, base: int = 0
) -> int:
    """Store the lines of a batch's `console` events, numbered from `base` (the rank's first
    seq); returns how many lines."""
    from florwb_engine.store.ingest import clean_text

    seqs: list[int] = []
    ctxs: list[int] = []
    channels: list[str] = []
    texts: list[str] = []
    counts: list[int] = []
    more: list[tuple[int, int]] = []
    for event in events:
        for seq, ctx, channel, text, n in event.lines:
            seqs.append(base + int(seq))
            ctxs.append(int(ctx))
            channels.append(clean_text(channel))
            texts.append(clean_text(text))
            counts.append(int(n))
        more.extend((base + int(s), int(k)) for s, k in event.more)
    if seqs:
        import numpy as np  # not at import: the catalog's schema imports this module

        frame = {
            "seq": np.array(seqs, dtype=np.int64),
            "ctx_id": np.array(ctxs, dtype=np.int64),
            "channel": np.array(channels, dtype=object),
            "text": np.array(texts, dtype=object),
            "n": np.array(counts, dtype=np.int32),
        }
        con.register("florwb_console", frame)
        con.execute(
            "INSERT INTO console_rows SELECT ?, ?, seq, ctx_id, channel, text, n "
            "FROM florwb_console",
            [run_key, source_key],
        )
        con.unregister("florwb_console")
    if more:
        con.executemany(
            "UPDATE console_rows SET n = n + ? WHERE run_key = ? AND source_key = ? AND seq = ?",
            [[k, run_key, source_key, s] for s, k in more],
        )
    return len(seqs)


# --- reading --------------------------------------------------------------------------


@dataclass
class ConsoleLine:
    seq: int
    channel: str
    text: str
    n: int
    where: dict[str, int]  # loop coordinates (loop column -> iteration), outermost first
    rank: int = 0  # the rank that printed it (multi-process runs)


def resolve_run(con: duckdb.DuckDBPyConnection, run_id: str) -> str:
    """The run id `run_id` names, exactly or as a unique prefix; StoreError otherwise."""
    from florwb_engine.store.db import StoreError

    rows = con.execute(
        "SELECT run_id FROM runs WHERE run_id = ? OR starts_with(run_id, ?) ORDER BY run_id",
        [run_id, run_id],
    ).fetchall()
    exact = [r[0] for r in rows if r[0] == run_id]
    if exact:
        return exact[0]
    if len(rows) == 1 and run_id:
        return rows[0][0]
    if rows and run_id:
        raise StoreError(f"run {run_id!r} is ambiguous: {', '.join(r[0] for r in rows[:5])}")
    raise StoreError(f"unknown run {run_id!r}")


def _where(run_id: str | None, grep: str | None) -> tuple[str, list]:
    clauses, params = [], []
    if run_id is not None:
        clauses.append("run_id = ?")
        params.append(run_id)
    if grep:
        clauses.append("regexp_matches(text, ?)")
        params.append(grep)
    return (" WHERE " + " AND ".join(clauses)) if clauses else "", params


def frame(con: duckdb.DuckDBPyConnection, run_id: str | None = None, grep: str | None = None):
    """pandas DataFrame of lines (all runs, or one), in order: run_id, `rank` where a run
    has several, loop coordinates, channel, text, n. `grep` is a regular expression (RE2) a
    line must contain."""
    if run_id is not None:
        run_id = resolve_run(con, run_id)
    where, params = _where(run_id, grep)
    coords = _coordinates(con, run_id)
    ranks = ["rank"] if _several_ranks(con, run_id) else []
    select = ", ".join(["run_id", *ranks, *(_q(c) for c in coords), "channel", "text", "n"])
    return con.execute(f"SELECT {select} FROM console{where} ORDER BY run_id, seq", params).df()


def _coordinates(con: duckdb.DuckDBPyConnection, run_id: str | None) -> list[str]:
    """The view's loop columns that the selected lines have values in."""
    from florwb_engine.store.schema import loop_columns

    columns = [c for c in loop_columns(con) if c.lower() not in VIEW_COLUMNS]
    return _used_coordinates(con, run_id, columns)


def _several_ranks(con: duckdb.DuckDBPyConnection, run_id: str | None) -> bool:
    where, params = _where(run_id, None)
    return bool(con.execute(f"SELECT max(rank) > 0 FROM console{where}", params).fetchall()[0][0])


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _used_coordinates(con, run_id: str | None, columns: list[str]) -> list[str]:
    """The loop columns the selected runs' lines have values in (others are all NULL)."""
    if not columns:
        return []
    where, params = _where(run_id, None)
    counts = con.execute(
        f"SELECT {', '.join(f'count({_q(c)})' for c in columns)} FROM console{where}", params
    ).fetchall()[0]
    return [c for c, k in zip(columns, counts) if k]


def tail(
    con: duckdb.DuckDBPyConnection, run_id: str, limit: int = 200
) -> tuple[list[ConsoleLine], int]:
    """The last `limit` lines of a run, oldest first, and how many it has in all; a
    multi-rank run's ranks interleaved by each one's own line order."""
    from florwb_engine.store.schema import LOCAL_SEQ

    coords = _coordinates(con, run_id)
    extra = "".join(f", {_q(c)}" for c in coords)
    rows = con.execute(
        f"SELECT seq, channel, text, n, rank{extra} FROM console WHERE run_id = ? "
        f"ORDER BY seq & {LOCAL_SEQ} DESC, rank DESC LIMIT ?",  # the ranks side by side
        [run_id, int(limit)],
    ).fetchall()
    total = con.execute(
        "SELECT count(*) FROM console_rows c JOIN runs r USING (run_key) WHERE r.run_id = ?",
        [run_id],
    ).fetchall()[0][0]
    lines = [
        ConsoleLine(
            int(r[0]),
            r[1],
            r[2],
            int(r[3]),
            {c: int(v) for c, v in zip(coords, r[5:]) if v is not None},
            int(r[4]),
        )
        for r in reversed(rows)
    ]
    return lines, int(total)


@again_if_rebuilt
def read_io(store: Any, run_id: str | None = None, grep: str | None = None):
    """`flor.io`: the lines of every run (or of `run_id`, a unique prefix allowed) as a
    DataFrame; a bad `grep` pattern is a StoreError with DuckDB's one-line reason."""
    from florwb_engine.store.db import StoreError

    with store.reading() as con:
        try:
            return frame(con, run_id, grep)
        except duckdb.InvalidInputException as exc:
            raise StoreError(f"--grep: {str(exc).splitlines()[0]}") from None


def run_extraction(store: Any, run_id: str, pattern: str, save: bool) -> Extraction:
    """`florwb io RUN --extract PATTERN [--dry-run]`, in one store session."""
    with store.session() as con:
        return extract(con, run_id, pattern, store=save)


# --- extraction -----------------------------------------------------------------------


class ExtractError(FlorwbError, ValueError):
    """A pattern that cannot extract anything; the message is one line."""


@dataclass
class Extraction:
    """What a pattern finds in a run's lines: (ctx_id, name, value, line) per value."""

    run_id: str
    names: list[str]
    found: list[tuple[int, str, float, str, dict[str, int]]] = field(default_factory=list)
    lines_matched: int = 0
    not_numbers: int = 0  # groups that matched text float() does not read
    stored: bool = False


def compile_pattern(pattern: str) -> re.Pattern[str]:
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        raise ExtractError(f"not a regular expression: {exc}") from None
    if not compiled.groupindex:
        raise ExtractError(
            "the pattern names no value: use a named group, e.g. 'loss: (?P<loss>[0-9.]+)'"
        )
    return compiled


def extract(
    con: duckdb.DuckDBPyConnection, run_id: str, pattern: str, store: bool = False
) -> Extraction:
    """Apply `pattern` (Python `re`, one named group per metric) to every line of a run;
    a line matching several times gives its first match. With `store`, the values become
    logs of the source `extract` at each line's loop coordinates, replacing what an
    earlier extraction stored under those names for this run."""
    compiled = compile_pattern(pattern)
    run_id = resolve_run(con, run_id)
    names = list(compiled.groupindex)
    result = Extraction(run_id, names)
    coords = _coordinates(con, run_id)
    extra = "".join(f", {_q(c)}" for c in coords)
    rows = con.execute(
        f"SELECT ctx_id, text{extra} FROM console WHERE run_id = ? ORDER BY seq", [run_id]
    ).fetchall()
    for row in rows:
        match = compiled.search(row[1])
        if match is None:
            continue
        result.lines_matched += 1
        where = {c: int(v) for c, v in zip(coords, row[2:]) if v is not None}
        for name in names:
            raw = match.group(name)
            if raw is None:
                continue
            try:
                value = float(raw)
            except ValueError:
                result.not_numbers += 1
                continue
            result.found.append((int(row[0]), name, value, row[1], where))
    if store:
        _store_values(con, result)
        result.stored = True
    return result


def _store_values(con: duckdb.DuckDBPyConnection, result: Extraction) -> None:
    from florwb_engine import journal
    from florwb_engine.store import ingest
    from florwb_engine.store.db import fetch_one

    con.execute("BEGIN")
    keys = ingest.RunKeys(result.run_id, EXTRACT_SOURCE)
    ingest.resolve_keys(con, keys)
    key_of = dict(
        con.execute(
            "SELECT name, name_key FROM name_keys WHERE name IN (SELECT unnest(?))",
            [result.names],
        ).fetchall()
    )
    # The values' coordinates come from the run's loop entries, copied under this source.
    con.execute(
        "DELETE FROM loop_entries WHERE run_key = ? AND source_key = ?",
        [keys.run_key, keys.source_key],
    )
    con.execute(
        "INSERT INTO loop_entries SELECT * REPLACE (?::INTEGER AS source_key) FROM loop_entries "
        "WHERE run_key = ? AND source_key = 0",
        [keys.source_key, keys.run_key],
    )
    if key_of:
        for table in ("log_rows", "name_stats"):
            con.execute(
                f"DELETE FROM {table} WHERE run_key = ? AND source_key = ? "
                "AND name_key IN (SELECT unnest(?))",
                [keys.run_key, keys.source_key, list(key_of.values())],
            )
    first = fetch_one(
        con,
        "SELECT coalesce(max(seq), -1) + 1 FROM log_rows WHERE run_key = ? AND source_key = ?",
        [keys.run_key, keys.source_key],
    )[0]
    flat: list[Any] = []
    for ctx, name, value, _line, _where in result.found:
        flat.extend((name, value, ctx))
    block = journal.pack_logs(flat)
    ingest.insert_logs(con, keys, [block] if block else [], int(first))
    con.execute("COMMIT")
