"""Replay planning: which runs, which code, what to re-execute, what to skip, how long.

For each selected run the new log statements are propagated into the code version the run
executed. Where a statement sits decides the mode (FLOR's replay cases): before the main
loop (PREFIX: run the script up to the loop), in the main loop's body (OUTER: per
iteration restore the previous checkpoint, skip the inner loops, restore their end state
from the iteration's own checkpoint), or inside a nested loop (INNER: re-execute the
iterations, each segment starting from the nearest earlier checkpoint). Segments of
iterations that start from a checkpoint are independent and can run in parallel.
"""

from __future__ import annotations

import ast
import math
import secrets
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import duckdb

from florwb_engine import versions
from florwb_engine.project import store_dir
from florwb_engine.propagate import PropagationError, find_log_statements, propagate
from florwb_engine.replay.spec import INNER, OUTER, PREFIX
from florwb_engine.store import Store
from florwb_engine.store.schema import TABLES, literal, quote

RUN_COLUMNS = {part.split()[0].lower() for part in TABLES["runs"].split(",")}

READY, SKIP, DONE = "ready", "skip", "done"
_LOAD_BYTES_PER_S = 300e6
_PROCESS_START_S = 1.0


@dataclass
class Segment:
    index: int
    run_id: str
    first: int
    last: int
    skip_inner: list[int]
    estimate_s: float


@dataclass
class RunPlan:
    run_id: str
    version: str | None
    script: str | None
    status: str
    reason: str | None = None
    names: list[str] = field(default_factory=list)
    mode: str | None = None
    main_loop: str | None = None
    segments: list[Segment] = field(default_factory=list)
    estimate_s: float = 0.0
    notes: list[str] = field(default_factory=list)
    placements: list[dict] = field(default_factory=list)
    code: str | None = None
    argv: list[str] = field(default_factory=list)
    cwd: str | None = None
    args: dict = field(default_factory=dict)
    checkpoints: dict[str, str] = field(default_factory=dict)


@dataclass
class Plan:
    replay_id: str
    project: Path
    names: list[str]
    workers: int
    runs: list[RunPlan]
    estimate_s: float

    def ready(self) -> list[RunPlan]:
        return [r for r in self.runs if r.status == READY]

    def to_json(self) -> dict:
        return {
            "replay_id": self.replay_id,
            "names": self.names,
            "workers": self.workers,
            "estimate_s": self.estimate_s,
            "runs": [
                {
                    key: value
                    for key, value in asdict(run).items()
                    if key not in ("code", "checkpoints", "args", "argv", "cwd")
                }
                for run in self.runs
            ],
        }


class PlanError(Exception):
    """A replay that cannot be planned at all (no runs match, bad --where...)."""


def plan_replay(
    project: Path,
    names: Sequence[str],
    *,
    where: str | None = None,
    run_ids: Sequence[str] | None = None,
    workers: int = 1,
) -> Plan:
    """Plan replaying `names` for the runs matching `where` (SQL over runs and args) and,
    when given, only the runs in `run_ids` (the workbench's marked runs)."""
    names = list(dict.fromkeys(n.strip() for n in names if n.strip()))
    if not names:
        raise PlanError("name at least one log statement to replay")
    store = Store(project)
    with store.session() as con:
        runs = _select_runs(con, where)
        if run_ids is not None:
            wanted = set(run_ids)
            runs = [run for run in runs if run[0] in wanted]
            if not runs:
                raise PlanError("none of the chosen runs is recorded")
        facts = {run_id: _facts(con, run_id) for run_id, *_ in runs}
    plans = []
    work: dict[str, _Work] = {}
    propagated: dict[tuple[str, str], object] = {}
    for run_id, version, script, argv, cwd in runs:
        plan = _plan_run(
            project, names, run_id, version, script, argv, cwd, facts[run_id], propagated
        )
        if plan.status == READY:
            work[run_id] = _work(plan, facts[run_id])
        plans.append(plan)
    _assign_segments([p for p in plans if p.status == READY], work, workers)
    return Plan(
        replay_id=time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2),
        project=project,
        names=names,
        workers=workers,
        runs=plans,
        estimate_s=_schedule([s.estimate_s for p in plans for s in p.segments], workers),
    )


def _select_runs(con: duckdb.DuckDBPyConnection, where: str | None) -> list[tuple]:
    """Runs matching --where, which may name args as columns (e.g. `lr > 0.01`)."""
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
    filtered = f"SELECT * FROM (SELECT r.*{arg_columns} FROM runs r) runs"
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
    if not rows:
        raise PlanError("no recorded run matches" + (f" --where {where}" if where else ""))
    return rows


@dataclass
class _Facts:
    args: dict
    main_loop: str | None
    checkpoints: dict[int, tuple[str, int]]  # iteration -> (file name, bytes)
    epoch_s: dict[int, float]  # main-loop iteration -> seconds
    inner_s: dict[int, float]  # main-loop iteration -> seconds spent in nested loops
    wall_s: float
    present: set[str]


def _facts(con: duckdb.DuckDBPyConnection, run_id: str) -> _Facts:
    from florwb_engine.store.read import _typed

    args = {
        name: _typed(value, text, vtype)
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
    wall = con.execute(
        "SELECT epoch(coalesce(end_time, now()::TIMESTAMP) - start_time) FROM runs "
        "WHERE run_id = ?",
        [run_id],
    ).fetchall()[0][0]
    present = {
        r[0]
        for r in con.execute(
            "SELECT DISTINCT k.name FROM name_stats s JOIN name_keys k USING (name_key) "
            "JOIN runs r ON r.run_key = s.run_key WHERE r.run_id = ?",
            [run_id],
        ).fetchall()
    }
    return _Facts(
        args=args,
        main_loop=main,
        checkpoints={int(i): (path, int(size or 0)) for _loop, i, path, size in ckpt_rows},
        epoch_s=epoch_s,
        inner_s=inner_s,
        wall_s=float(wall or 0.0),
        present=present,
    )


def _outer_column(con: duckdb.DuckDBPyConnection, loop_name: str) -> str | None:
    from florwb_engine.store.schema import loop_column, loop_columns

    wanted = loop_column(loop_name).lower()
    for column in loop_columns(con):
        if column.lower() == wanted:
            return column
    return None


def _plan_run(project, names, run_id, version, script, argv, cwd, facts: _Facts, cache) -> RunPlan:
    import json

    plan = RunPlan(run_id=run_id, version=version, script=script, status=SKIP)
    plan.argv = json.loads(argv) if argv else []
    plan.cwd = cwd
    plan.args = facts.args
    plan.main_loop = facts.main_loop
    plan.checkpoints = {str(i): path for i, (path, _size) in facts.checkpoints.items()}
    wanted = [n for n in names if n not in facts.present]
    if not wanted:
        plan.status = DONE
        plan.reason = "already has " + ", ".join(names)
        return plan
    if not version or not script:
        plan.reason = "the run has no recorded code version"
        return plan
    today = project / script
    if not today.is_file():
        plan.reason = f"{script} is not in the working tree"
        return plan
    # Only the names this run lacks go into its code: a name the run has, recorded or
    # from an earlier replay, is done for it and must not be recomputed (issue 14, 4).
    key = (version, script, tuple(wanted))
    if key not in cache:
        cache[key] = _propagate(project, version, script, today.read_text(), wanted)
    result = cache[key]
    if isinstance(result, str):
        plan.reason = result
        return plan
    placed = {}
    for placement in result.placements:
        plan.placements.append(placement.to_json())
        if placement.name in wanted:
            if placement.status == "unplaced":
                plan.notes.append(f"{placement.name}: cannot place: {placement.reason}")
            else:
                placed[placement.name] = placement
    if not placed:
        plan.reason = "; ".join(plan.notes) or "no statement could be placed"
        return plan
    mode, why = _mode(result.code, placed, facts.main_loop)
    if mode is None:
        plan.reason = why
        return plan
    plan.mode = mode
    plan.names = list(placed)
    plan.code = result.code
    if why:
        plan.notes.append(why)
    plan.status = READY
    return plan


def _propagate(project: Path, version: str, script: str, new_source: str, names):
    try:
        old = versions.read_file(store_dir(project), version, script)
    except versions.VersionError as exc:
        return f"code version unavailable: {exc}"
    if old is None:
        return f"{script} is not in the run's code version"
    available = {s.name for s in find_log_statements(new_source)}
    missing = [n for n in names if n not in available]
    if missing:
        hint = (
            ""
            if available
            else " (florwb finds log calls through the name the script imports florwb as, "
            "e.g. `import florwb as flor`)"
        )
        return f"no flor.log statement named {', '.join(missing)} in today's {script}{hint}"
    try:
        return propagate(new_source, old.decode("utf-8", errors="replace"), names)
    except PropagationError as exc:
        return str(exc)


def _mode(code: str, placed: dict, main_loop: str | None) -> tuple[str | None, str | None]:
    """The replay mode all placed statements need, or (None, reason)."""
    loop_line = _main_loop_lines(code, main_loop)
    modes = []
    for name, placement in placed.items():
        path = tuple(placement.loop_path)
        if not path:
            if loop_line is not None and placement.old_line is not None:
                if placement.old_line > loop_line[1]:
                    return None, f"{name} runs after the main loop; only statements before "
                    "or inside it can be replayed"
            modes.append(PREFIX)
        elif main_loop is not None and path[0] != main_loop:
            return None, f"{name} sits in loop {path[0]!r}, not in the main loop {main_loop!r}"
        elif len(path) == 1:
            modes.append(OUTER)
        else:
            modes.append(INNER)
    mode = INNER if INNER in modes else OUTER if OUTER in modes else PREFIX
    note = None
    if mode == OUTER:
        stale = _reads_inner(code, main_loop)
        if stale:
            mode = INNER
            listed = ", ".join(sorted(stale)[:4])
            note = (
                f"the {main_loop} body reads {listed} after the inner loop sets it, "
                "so inner loops are re-executed"
            )
    return mode, note


def _main_loop_lines(code: str, main_loop: str | None) -> tuple[int, int] | None:
    if main_loop is None:
        return None
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.For) and _loop_name(node.iter) == main_loop:
            return node.lineno, node.end_lineno or node.lineno
    return None


def _loop_name(expr: ast.expr) -> str | None:
    for node in ast.walk(expr):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "loop"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            return node.args[0].value
    return None


def _reads_inner(code: str, main_loop: str | None) -> set[str]:
    """Names the main loop's body reads outside its inner loops that the inner loops assign.

    Skipping the inner loops restores registered state (model, optimizer...) from the
    checkpoint, but not plain variables: `print(loss.item())` or a running total after the
    step loop would read a stale or missing value. Such bodies need the inner loops run.
    """
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return {"<unparsable>"}
    found: set[str] = set()
    for node in ast.walk(tree):
        if not (isinstance(node, ast.For) and _loop_name(node.iter) == main_loop):
            continue
        inner = [
            sub
            for sub in ast.walk(node)
            if sub is not node and isinstance(sub, ast.For) and _loop_name(sub.iter)
        ]
        inside = {id(n) for loop in inner for n in ast.walk(loop)}
        assigned = {
            n.id
            for loop in inner
            for n in ast.walk(loop)
            if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del))
        }
        reads = {
            n.id
            for stmt in node.body
            for n in ast.walk(stmt)
            if id(n) not in inside and isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
        }
        found |= assigned & reads
    return found


@dataclass
class _Work:
    """A run's main-loop iterations in chunks that each start from a known state."""

    chunks: list[list[int]]
    cost: dict[int, float]
    skipped: set[int]
    prefix_s: float


def _work(plan: RunPlan, facts: _Facts) -> _Work:
    prefix_s = _PROCESS_START_S + max(facts.wall_s - sum(facts.epoch_s.values()), 0.0)
    if plan.mode == PREFIX:
        return _Work([], {}, set(), prefix_s)
    epochs = sorted(facts.epoch_s) or sorted(facts.checkpoints)
    if not epochs:
        plan.status, plan.reason = SKIP, "the run finished no iteration of its main loop"
        return _Work([], {}, set(), prefix_s)
    ckpt = facts.checkpoints
    load_s = {i: size / _LOAD_BYTES_PER_S for i, (_path, size) in ckpt.items()}
    skipped: set[int] = set()
    cost: dict[int, float] = {}
    for i in epochs:
        whole = facts.epoch_s.get(i, 0.0)
        if plan.mode == OUTER and (i == 0 or i - 1 in ckpt) and i in ckpt:
            skipped.add(i)
            cost[i] = max(whole - facts.inner_s.get(i, 0.0), 0.0) + 2 * load_s.get(i, 0.0)
        else:
            cost[i] = whole + load_s.get(i - 1, 0.0)
    executed = [i for i in epochs if i not in skipped]
    loop = plan.main_loop
    if plan.mode == OUTER:
        plan.notes.insert(
            0, f"outer: {len(skipped)} of {len(epochs)} {loop} iterations skip their inner loops"
        )
        if executed:
            plan.notes.append(f"no checkpoint around {_ranges(executed)}: re-executed in full")
    else:
        plan.notes.insert(0, f"inner: re-executes {len(epochs)} {loop} iterations")
        missing = [i for i in epochs if i > 0 and i - 1 not in ckpt]
        if missing:
            plan.notes.append(
                f"checkpoints only every {_period(sorted(ckpt))} iteration(s): {_ranges(missing)} "
                "start from the iteration before them, not from a checkpoint"
            )
    starts = [i for i in epochs if i == epochs[0] or i - 1 in ckpt]
    chunks = [
        [i for i in epochs if start <= i < (starts[k + 1] if k + 1 < len(starts) else math.inf)]
        for k, start in enumerate(starts)
    ]
    return _Work(chunks, cost, skipped, prefix_s)


def _assign_segments(ready: list[RunPlan], work: dict[str, _Work], workers: int) -> None:
    """Give each run as many segments as keeps `workers` busy, balancing estimated time."""
    per_run = max(1, math.ceil(workers / max(len(ready), 1)))
    index = 0
    for plan in ready:
        w = work[plan.run_id]
        if plan.status != READY:
            continue
        groups = _balance(w.chunks, w.cost, min(per_run, len(w.chunks))) if w.chunks else [[]]
        for group in groups:
            plan.segments.append(
                Segment(
                    index=index,
                    run_id=plan.run_id,
                    first=group[0] if group else 0,
                    last=group[-1] if group else -1,
                    skip_inner=[i for i in group if i in w.skipped],
                    estimate_s=w.prefix_s + sum(w.cost[i] for i in group),
                )
            )
            index += 1
        plan.estimate_s = sum(s.estimate_s for s in plan.segments)


def _balance(chunks: list[list[int]], cost: dict[int, float], groups: int) -> list[list[int]]:
    """Contiguous grouping of chunks into `groups` parts of similar total cost."""
    sizes = [sum(cost[i] for i in chunk) for chunk in chunks]
    target = (sum(sizes) or 1.0) / groups
    out: list[list[int]] = [[]]
    acc = 0.0
    for k, (chunk, size) in enumerate(zip(chunks, sizes)):
        groups_left = groups - len(out)
        must_split = len(chunks) - k <= groups_left
        if out[-1] and groups_left > 0 and (acc + size / 2 > target or must_split):
            out.append([])
            acc = 0.0
        out[-1].extend(chunk)
        acc += size
    return out


def _schedule(costs: list[float], workers: int) -> float:
    """Wall time of longest-first scheduling of independent tasks on `workers` processes."""
    loads = [0.0] * max(1, workers)
    for cost in sorted(costs, reverse=True):
        loads[loads.index(min(loads))] += cost
    return max(loads) if costs else 0.0


def _ranges(values: list[int]) -> str:
    parts, start, prev = [], None, None
    for v in values:
        if start is None:
            start = prev = v
        elif v == prev + 1:
            prev = v
        else:
            parts.append(f"{start}" if start == prev else f"{start}-{prev}")
            start = prev = v
    if start is not None:
        parts.append(f"{start}" if start == prev else f"{start}-{prev}")
    return "iterations " + ", ".join(parts)


def _period(checkpointed: list[int]) -> int:
    gaps = [b - a for a, b in zip(checkpointed, checkpointed[1:])]
    return min(gaps) if gaps else 1


__all__ = ["Plan", "PlanError", "RunPlan", "Segment", "plan_replay"]
