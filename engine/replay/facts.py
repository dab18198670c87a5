"""What the catalog knows about the runs a replay is planned for.

Per run chosen by `--where` (store/run_selection.py): its args, main loop, checkpoints and
recorded timings, everything planning needs from the store, read in the planner's one
session so the rest of planning works on plain values.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import duckdb

from florwb_engine.contract.checkpoint_files import is_manifest
from florwb_engine.replay.errors import PlanError
from florwb_engine.store import lineage, run_context
from florwb_engine.store.run_selection import SelectedRun, WhereError, runs_where
from florwb_engine.store.schema import loop_column, loop_columns, quote
from florwb_engine.store.values import decode_value
from florwb_engine.store.verdicts import latest_verdict, run_verdicts

if TYPE_CHECKING:
    from florwb_engine.store.runs import RunStatus


@dataclass
class RunFacts:
    args: dict
    main_loop: str | None
    checkpoints: dict[int, tuple[str, int]]  # iteration -> (file name, bytes)
    epoch_s: dict[int, float]  # main-loop iteration -> seconds (robust: see _robust_times)
    inner_s: dict[int, float]  # main-loop iteration -> seconds spent in nested loops (robust)
    wall_s: float
    present: set[str]  # names the run already has values served (recorded or replayed)
    status: RunStatus | None = None  # the run's: 'running' while it still records
    prefix_s: float = 0.0  # seconds from the run's start to its main loop (estimated)
    # the script's own torch.save calls mirrored while it recorded (record/save_mirror.py):
    # iteration -> (manifest file, bytes); replay/saved_state.py decides which are usable
    mirrored: dict[int, tuple[str, int]] = field(default_factory=dict)
    # the replay whose verdict on this run is diverged (its rows withheld, so the names
    # it logged are not `present` and a replay of them re-tries the run)
    diverged: str | None = None
    # the run_context row (record/context.py): its thread settings are replayed (cores.py)
    context: dict | None = None
    # flor.load_checkpoint calls the run made (store/lineage.py): its replay makes the same
    starts: list[dict] = field(default_factory=list)


def select_runs(con: duckdb.DuckDBPyConnection, where: str | None) -> list[SelectedRun]:
    """Runs matching --where, which may name args as columns (e.g. `lr > 0.01`)."""
    try:
        runs = runs_where(con, where)
    except WhereError as exc:
        raise PlanError(str(exc)) from None
    if not runs:
        raise PlanError("no recorded run matches" + (f" --where {where}" if where else ""))
    return runs


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
        epoch_s, inner_s = _robust_times(con, run_id, main)
        _cover_logged(epoch_s, main_iterations(con, run_id, main))
    wall, status, first_ckpt_s = con.execute(
        "SELECT epoch(coalesce(end_time, now()::TIMESTAMP) - start_time), status, "
        "(SELECT epoch(min(c.time) - r.start_time) FROM checkpoints c "
        "WHERE c.run_id = r.run_id AND c.iteration = ?) FROM runs r WHERE run_id = ?",
        [ckpt_rows[0][1] if ckpt_rows else -1, run_id],
    ).fetchall()[0]
    prefix_s = _prefix_s(
        float(wall or 0.0), first_ckpt_s, ckpt_rows, _raw_epochs(con, run_id, main)
    )
    present = {
        r[0]
        for r in con.execute(
            "SELECT DISTINCT k.name FROM name_stats s JOIN name_keys k USING (name_key) "
            "JOIN runs r ON r.run_key = s.run_key WHERE r.run_id = ?",
            [run_id],
        ).fetchall()
    }
    latest = run_verdicts(con, run_id).get(run_id, [])
    return RunFacts(
        diverged=latest[-1]["replay_id"] if latest_verdict(latest) == "diverged" else None,
        args=args,
        main_loop=main,
        checkpoints={
            int(i): (path, int(size or 0))
            for _loop, i, path, size in ckpt_rows
            if not is_manifest(path)
        },
        epoch_s=epoch_s,
        inner_s=inner_s,
        wall_s=float(wall or 0.0),
        present=present,
        status=status,
        prefix_s=prefix_s,
        mirrored={
            int(i): (path, int(size or 0))
            for _loop, i, path, size in ckpt_rows
            if is_manifest(path)
        },
        context=run_context.context_of(con, run_id),
        starts=lineage.lineage_of(con, run_id),
    )


def main_iterations(
    con: duckdb.DuckDBPyConnection, run_id: str, main: str, source: str = "record"
) -> set[int]:
    """The main-loop iterations `source` (the recording, or a replay) has a trace of: a
    timing, or a value logged inside it. A run recorded before the iteration a loop was
    left in (`break`) got its timing has that iteration's values alone."""
    found = {
        int(i)
        for (i,) in con.execute(
            "SELECT DISTINCT iteration FROM iterations WHERE run_id = ? AND source = ? "
            "AND depth = 0 AND loop = ?",
            [run_id, source, main],
        ).fetchall()
    }
    column = _outer_column(con, main)
    if column is not None:
        found |= {
            int(i)
            for (i,) in con.execute(
                f"SELECT DISTINCT {quote(column)} FROM logs WHERE run_id = ? AND source = ? "
                f"AND {quote(column)} IS NOT NULL",
                [run_id, source],
            ).fetchall()
        }
    return found


def _cover_logged(epoch_s: dict[int, float], iterations: set[int]) -> None:
    """Count the iterations with values but no timing at the run's typical iteration."""
    if not iterations - epoch_s.keys():
        return
    ordered = sorted(epoch_s.values())
    typical = ordered[len(ordered) // 2] if ordered else 0.0
    for i in iterations - epoch_s.keys():
        epoch_s[i] = typical


def _outer_column(con: duckdb.DuckDBPyConnection, loop_name: str) -> str | None:
    wanted = loop_column(loop_name).lower()
    for column in loop_columns(con):
        if column.lower() == wanted:
            return column
    return None


# An iteration slower than this many times the median of its loop is taken as slowed by
# the machine (another process, threads spinning on too few cores) and counted at this
# many medians: a recording made on a busy box must not make every estimate 5x too long.
OUTLIER_MEDIANS = 10.0
MIN_ITERATION_S = 1e-4


def _raw_epochs(con: duckdb.DuckDBPyConnection, run_id: str, main: str | None) -> dict[int, float]:
    if main is None:
        return {}
    return {
        int(i): float(s or 0.0)
        for i, s in con.execute(
            "SELECT iteration, iter_s FROM iterations WHERE run_id = ? AND source = 'record' "
            "AND depth = 0 AND loop = ? AND rank = 0",  # a multi-process run: rank 0's times
            [run_id, main],
        ).fetchall()
    }


def _robust_times(
    con: duckdb.DuckDBPyConnection, run_id: str, main: str
) -> tuple[dict[int, float], dict[int, float]]:
    """Per main-loop iteration: its seconds and the seconds of its nested loops, each
    iteration of a loop counted at no more than OUTLIER_MEDIANS times that loop's median."""
    cap = f"least(t, {OUTLIER_MEDIANS} * greatest(m, {MIN_ITERATION_S}))"
    inner_raw: dict[int, float] = {}
    inner_s: dict[int, float] = {}
    outer_column = _outer_column(con, main)
    if outer_column:
        for iteration, raw, robust in con.execute(
            f"WITH steps AS (SELECT loop, {quote(outer_column)} AS it, "
            "wait_s + coalesce(iter_s, 0) AS t FROM iterations WHERE run_id = ? "
            "AND source = 'record' AND depth = 1 AND rank = 0), "
            "med AS (SELECT loop, median(t) AS m FROM steps GROUP BY loop) "
            f"SELECT it, sum(t), sum({cap}) FROM steps JOIN med USING (loop) "
            "WHERE it IS NOT NULL GROUP BY it",
            [run_id],
        ).fetchall():
            inner_raw[int(iteration)] = float(raw or 0.0)
            inner_s[int(iteration)] = float(robust or 0.0)
    # the main loop's own part (evaluation, checkpointing...) outside its nested loops
    epochs = _raw_epochs(con, run_id, main)
    outer = {i: max(s - inner_raw.get(i, 0.0), 0.0) for i, s in epochs.items()}
    if outer:
        ordered = sorted(outer.values())
        limit = OUTLIER_MEDIANS * max(ordered[len(ordered) // 2], MIN_ITERATION_S)
        outer = {i: min(s, limit) for i, s in outer.items()}
    return {i: s + inner_s.get(i, 0.0) for i, s in outer.items()}, inner_s


def _prefix_s(
    wall: float, first_ckpt_s: float | None, ckpt_rows: list, epochs: dict[int, float]
) -> float:
    """Seconds before the main loop: the first checkpoint's time less the iterations up to
    it, when there is one (the code after the loop, which a replay never runs, stays out);
    else the run's time outside its main loop."""
    outside = max(wall - sum(epochs.values()), 0.0)
    if first_ckpt_s is None or not ckpt_rows:
        return outside
    first = int(ckpt_rows[0][1])
    before = float(first_ckpt_s) - sum(s for i, s in epochs.items() if i <= first)
    return min(max(before, 0.0), outside)


def past_ratio(con: duckdb.DuckDBPyConnection, executor: str, last: int = 5) -> float | None:
    """Median of recorded duration / estimate over the project's last finished replays on
    `executor`: how this machine (its speed, its load, what the model leaves out) compares
    with the cost model. None before the first one."""
    rows = con.execute(
        "SELECT epoch(ended - started), detail FROM replays WHERE status IN "
        "('finished', 'diverged', 'partial') AND ended IS NOT NULL ORDER BY ended DESC LIMIT 50"
    ).fetchall()
    ratios = []
    for seconds, detail in rows:
        try:
            plan = json.loads(detail or "{}")
        except ValueError:
            continue
        estimate = plan.get("estimate_raw_s") or plan.get("estimate_s")
        if plan.get("executor", "local") != executor or not estimate or seconds is None:
            continue
        ratios.append(float(seconds) / float(estimate))
        if len(ratios) == last:
            break
    if not ratios:
        return None
    ratios.sort()
    return ratios[len(ratios) // 2]
