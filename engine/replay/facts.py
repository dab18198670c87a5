"""What the catalog knows about the runs a replay is planned for.

Which runs match `--where` (SQL over runs, with args as columns), and per run its args,
main loop, checkpoints and recorded timings: everything planning needs from the store,
read in the planner's one session so the rest of planning works on plain values.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import duckdb

from florwb_engine.replay.errors import PlanError
from florwb_engine.store import run_context
from florwb_engine.store.schema import TABLES, literal, loop_column, loop_columns, quote
from florwb_engine.store.values import decode_value

RUN_COLUMNS = {part.split()[0].lower() for part in TABLES["runs"].split(",")} | set(
    run_context.COLUMNS  # --where "device_kind = 'cuda'" selects by where runs ran
)


@dataclass
class SelectedRun:
    """A run chosen for the replay, with how it was started."""

    run_id: str
    version: str | None
    script: str | None
    argv: list[str]
    cwd: str | None


@dataclass
class RunFacts:
    args: dict
    main_loop: str | None
    checkpoints: dict[int, tuple[str, int]]  # iteration -> (file name, bytes)
    epoch_s: dict[int, float]  # main-loop iteration -> seconds
    inner_s: dict[int, float]  # main-loop iteration -> seconds spent in nested loops
    wall_s: float
    present: set[str]  # names the run already has values for (recorded or replayed)
    status: str | None = None  # the run's: 'running' while it still records


def select_runs(con: duckdb.DuckDBPyConnection, where: str | None) -> list[SelectedRun]:
    """Runs matching --where, which may name args as columns (e.g. `lr > 0.01`)."""
    runs = runs_where(con, where)
    if not runs:
        raise PlanError("no recorded run matches" + (f" --where {where}" if where else ""))
    return runs


def runs_where(con: duckdb.DuckDBPyConnection, where: str | None) -> list[SelectedRun]:
    """The runs matching a --where condition (none is no error); a condition DuckDB
    cannot run raises PlanError with its one-line reason. The workbench's history filter
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
        "LEFT JOIN run_context c USING (run_id)) runs"
    )
    if where:
        try:
            statements = duckdb.extract_statements(f"SELECT 1 WHERE {where}")
        except duckdb.Error as exc:
            raise PlanError(f"bad --where: {str(exc).splitlines()[0]}") from None
        if len(statements) != 1:
            raise PlanError("bad --where: one SQL condition expected")
        filtered += f" WHERE ({where})"
    try:
        con.execute("BEGIN")
        rows = con.execute(
            f"SELECT run_id, version, script, argv, cwd FROM ({filtered}) "
            "ORDER BY start_time, run_id"
        ).fetchall()
    except duckdb.Error as exc:
        raise PlanError(f"bad --where: {str(exc).splitlines()[0]}") from None
    finally:
        con.execute("ROLLBACK")
    return [
        SelectedRun(run_id, version, script, json.loads(argv) if argv else [], cwd)
        for run_id, version, script, argv, cwd in rows
    ]


def run_facts(con: duckdb.DuckDBPyConnection, run_id: str) -> RunFacts:
    args = {
        name: decode_value(value, text, vtype)
        for name, value, text, vtype in con.execute(
            "SELECT name, value, text, vtype FROM args WHERE run_id = ?", [run_id]
        ).fetchall()
    }
    ckpt_rows = con.execute(
        "SELECT loop, iteration, path, bytes FROM checkpoints WHERE run_id = ? ORDER BY iteration",
        [run_id],
    ).fetchall()
    main = ckpt_rows[0][0] if ckpt_rows else None
    if main is None:
        first = con.execute(
            "SELECT loop FROM loops WHERE run_id = ? AND source = 'record' AND depth = 0 "
            "ORDER BY entry_id LIMIT 1",
            [run_id],
        ).fetchall()
        main = first[0][0] if first else None
    epoch_s: dict[int, float] = {}
    inner_s: dict[int, float] = {}
    if main is not None:
        for iteration, seconds in con.execute(
            "SELECT iteration, iter_s FROM iterations WHERE run_id = ? AND source = 'record' "
            "AND depth = 0 AND loop = ?",
            [run_id, main],
        ).fetchall():
            epoch_s[int(iteration)] = float(seconds or 0.0)
        outer_column = _outer_column(con, main)
        if outer_column:
            for iteration, seconds in con.execute(
                f"SELECT {quote(outer_column)}, sum(wait_s + coalesce(iter_s, 0)) FROM iterations "
                "WHERE run_id = ? AND source = 'record' AND depth = 1 GROUP BY 1",
                [run_id],
            ).fetchall():
                if iteration is not None:
                    inner_s[int(iteration)] = float(seconds or 0.0)
    wall, status = con.execute(
        "SELECT epoch(coalesce(end_time, now()::TIMESTAMP) - start_time), status FROM runs "
        "WHERE run_id = ?",
        [run_id],
    ).fetchall()[0]
    present = {
        r[0]
        for r in con.execute(
            "SELECT DISTINCT k.name FROM name_stats s JOIN name_keys k USING (name_key) "
            "JOIN runs r ON r.run_key = s.run_key WHERE r.run_id = ?",
            [run_id],
        ).fetchall()
    }
    return RunFacts(
        args=args,
        main_loop=main,
        checkpoints={int(i): (path, int(size or 0)) for _loop, i, path, size in ckpt_rows},
        epoch_s=epoch_s,
        inner_s=inner_s,
        wall_s=float(wall or 0.0),
        present=present,
        status=status,
    )


def _outer_column(con: duckdb.DuckDBPyConnection, loop_name: str) -> str | None:
    wanted = loop_column(loop_name).lower()
    for column in loop_columns(con):
        if column.lower() == wanted:
            return column
    return None
