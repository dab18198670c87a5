"""Which runs a `--where` condition selects: SQL over runs, with args and the run context
as columns.

The replay planner (`florwb replay --where`) and the workbench's history filter read a
condition by the same rule and select by the same query, so the runs a filter shows are
the runs a replay of that filter plans.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import duckdb

from florwb_engine.store import run_context
from florwb_engine.store.catalog import Store
from florwb_engine.store.repair import again_if_rebuilt
from florwb_engine.store.schema import TABLES, literal, quote
from florwb_engine.store.user_condition import matching_keys


class WhereError(ValueError):
    """A `--where` condition DuckDB cannot run, with its one-line reason."""


RUN_COLUMNS = {part.split()[0].lower() for part in TABLES["runs"].split(",")} | (
    set(run_context.COLUMNS) - {"rank"}  # --where "device_kind = 'cuda'": where runs ran
)


# Text with a comparison or an SQL operator is a `--where` condition (SQL over runs, args as
# columns); plain words are not. The workbench's filter line reads its text by this rule.
CONDITION_SYNTAX = re.compile(
    r"[<>=!~]|\b(like|ilike|between|is\s+(not\s+)?null|in\s*\()", re.IGNORECASE
)


def is_condition(text: str) -> bool:
    """Whether filter text is a `--where` condition rather than words to look for."""
    return bool(CONDITION_SYNTAX.search(text))


@dataclass
class SelectedRun:
    """A run chosen for the replay, with how it was started."""

    run_id: str
    version: str | None
    script: str | None
    argv: list[str]
    cwd: str | None


@again_if_rebuilt
def store_runs_where(store: Store, where: str | None) -> list[SelectedRun]:
    """`runs_where` in a session of its own (the workbench's run filter)."""
    with store.session() as con:
        return runs_where(con, where)


def runs_where(con: duckdb.DuckDBPyConnection, where: str | None) -> list[SelectedRun]:
    """The runs matching a --where condition (none is no error); a condition DuckDB
    cannot run raises WhereError with its one-line reason. The workbench's history filter
    reads the same condition through this function."""
    arg_columns = ""
    for name, numeric in con.execute(
        "SELECT name, bool_and(vtype IN ('float', 'int', 'bool')) FROM args GROUP BY 1 ORDER BY 1"
    ).fetchall():
        if name.lower() in RUN_COLUMNS:
            continue
        value = "a.value" if numeric else "coalesce(a.text, CAST(a.value AS VARCHAR))"
        arg_columns += (
            f", (SELECT {value} FROM args a WHERE a.run_id = r.run_id AND a.name = "
            f"{literal(name)}) AS {quote(name)}"
        )
    filtered = (
        f"SELECT * FROM (SELECT r.*, c.* EXCLUDE (run_id){arg_columns} FROM runs r "
        f"LEFT JOIN {run_context.ONE_PER_RUN} c USING (run_id)) runs"
    )
    if where:
        try:
            statements = duckdb.extract_statements(f"SELECT 1 WHERE {where}")
        except duckdb.Error as exc:
            raise WhereError(f"bad --where: {str(exc).splitlines()[0]}") from None
        if len(statements) != 1:
            raise WhereError("bad --where: one SQL condition expected")
    try:
        con.execute("BEGIN")
        if where:  # user SQL: evaluated on a copy that cannot reach anything (user_condition.py)
            kept = set(matching_keys(con, filtered, "run_id", where, "runs"))
        rows = [
            row
            for row in con.execute(
                f"SELECT run_id, version, script, argv, cwd FROM ({filtered}) "
                "ORDER BY start_time, run_id"
            ).fetchall()
            if not where or row[0] in kept
        ]
    except duckdb.Error as exc:
        raise WhereError(f"bad --where: {str(exc).splitlines()[0]}") from None
    finally:
        con.execute("ROLLBACK")
    return [
        SelectedRun(run_id, version, script, json.loads(argv) if argv else [], cwd)
        for run_id, version, script, argv, cwd in rows
    ]
