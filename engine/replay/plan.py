"""Replay planning: which runs, which code, what to re-execute, what to skip, how long.

For each selected run the new log statements are propagated into the code version the run
executed (placing.py). Where a statement sits decides the mode (mode.py, FLOR's replay
cases): before the main loop (PREFIX: run the script up to the loop), in the main loop's
body (OUTER: per iteration restore the previous checkpoint, skip the inner loops, restore
their end state from the iteration's own checkpoint), or inside a nested loop (INNER:
re-execute the iterations, each segment starting from the nearest earlier checkpoint).
Segments of iterations that start from a checkpoint are independent and run in parallel
(cost.py). What the catalog knows about the runs comes from facts.py.
"""

from __future__ import annotations

import math
import secrets
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Final, Literal

from florwb_engine.replay.cost import Work, run_work, schedule, segment_parts
from florwb_engine.replay.errors import PlanError
from florwb_engine.replay.facts import RunFacts, SelectedRun, run_facts, select_runs
from florwb_engine.replay.mode import replay_mode
from florwb_engine.replay.placing import Placer, placed_statements
from florwb_engine.replay.spec import INNER, ReplayMode
from florwb_engine.replay.state_decision import state_decision
from florwb_engine.store import Store

# What a run's plan says: it will be replayed, it cannot be (with the reason), or it
# already has every requested name.
RunPlanStatus = Literal["ready", "skip", "done"]
READY: Final = "ready"
SKIP: Final = "skip"
DONE: Final = "done"


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
    status: RunPlanStatus
    reason: str | None = None
    names: list[str] = field(default_factory=list)
    mode: ReplayMode | None = None
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
    from_start: bool = False  # statements read state no checkpoint holds (state_reads.py)


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
        runs = select_runs(con, where)
        if run_ids is not None:
            wanted = set(run_ids)
            runs = [run for run in runs if run.run_id in wanted]
            if not runs:
                raise PlanError("none of the chosen runs is recorded")
        facts = {run.run_id: run_facts(con, run.run_id) for run in runs}
    placer = Placer(project, names)
    plans = []
    work: dict[str, Work] = {}
    for run in runs:
        plan = _plan_run(project, placer, names, run, facts[run.run_id])
        if plan.status == READY:
            assert plan.mode is not None
            found = run_work(
                plan.mode, plan.main_loop, facts[run.run_id], from_start=plan.from_start
            )
            if isinstance(found, str):
                plan.status, plan.reason = SKIP, found
            else:
                work[run.run_id] = found
                plan.notes = [
                    *([found.summary] if found.summary else []),
                    *plan.notes,
                    *found.notes,
                ]
        plans.append(plan)
    _assign_segments([p for p in plans if p.status == READY], work, workers)
    return Plan(
        replay_id=time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2),
        project=project,
        names=names,
        workers=workers,
        runs=plans,
        estimate_s=schedule([s.estimate_s for p in plans for s in p.segments], workers),
    )


def _plan_run(
    project: Path, placer: Placer, names: list[str], run: SelectedRun, facts: RunFacts
) -> RunPlan:
    plan = RunPlan(run_id=run.run_id, version=run.version, script=run.script, status=SKIP)
    plan.argv = run.argv
    plan.cwd = run.cwd
    plan.args = facts.args
    plan.main_loop = facts.main_loop
    plan.checkpoints = {str(i): path for i, (path, _size) in facts.checkpoints.items()}
    wanted = [n for n in names if n not in facts.present]
    if not wanted:
        plan.status = DONE
        plan.reason = "already has " + ", ".join(names)
        return plan
    result = placer.place(run.version, run.script, wanted)
    if isinstance(result, str):
        plan.reason = result
        return plan
    plan.placements = [placement.to_json() for placement in result.placements]
    placed, plan.notes = placed_statements(result, wanted)
    if not placed:
        plan.reason = "; ".join(plan.notes) or "no statement could be placed"
        return plan
    mode, why = replay_mode(result, placed, facts.main_loop)
    if mode is None:
        plan.reason = why
        return plan
    state = state_decision(project, run.run_id, result.code, placed, facts, mode)
    if isinstance(state, str):
        plan.reason = state
        return plan
    if state.from_start:
        mode = INNER
    plan.from_start = state.from_start
    plan.notes.extend(state.notes)
    plan.mode = mode
    plan.names = list(placed)
    plan.code = result.code
    if why:
        plan.notes.append(why)
    plan.status = READY
    return plan


def _assign_segments(ready: list[RunPlan], work: dict[str, Work], workers: int) -> None:
    """Give each run as many segments as keeps `workers` busy, balancing estimated time."""
    per_run = max(1, math.ceil(workers / max(len(ready), 1)))
    index = 0
    for plan in ready:
        for part in segment_parts(work[plan.run_id], per_run):
            plan.segments.append(
                Segment(
                    index=index,
                    run_id=plan.run_id,
                    first=part.first,
                    last=part.last,
                    skip_inner=part.skip_inner,
                    estimate_s=part.estimate_s,
                )
            )
            index += 1
        plan.estimate_s = sum(s.estimate_s for s in plan.segments)


__all__ = ["Plan", "PlanError", "RunPlan", "RunPlanStatus", "Segment", "plan_replay"]
