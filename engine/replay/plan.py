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

from florwb_engine import versions
from florwb_engine.analysis.loop_state import loop_state
from florwb_engine.contract.replay_spec import INNER, OUTER, PREFIX, ReplayMode
from florwb_engine.project import checkpoint_dir, store_dir
from florwb_engine.record.notebook import is_notebook_script
from florwb_engine.replay import ddp_launch, requests, run_inputs
from florwb_engine.replay.cores import recorded_threads, workers_for_threads
from florwb_engine.replay.cost import (
    CALIBRATION_BOUNDS,
    DENSER_WORTH,
    ExecutorName,
    Work,
    denser_work,
    replay_estimate,
    run_work,
    segment_parts,
)
from florwb_engine.replay.errors import PlanError
from florwb_engine.replay.facts import RunFacts, past_ratio, run_facts, select_runs
from florwb_engine.replay.mode import replay_mode
from florwb_engine.replay.placing import Placer, placed_statements
from florwb_engine.replay.saved_state import use_saved_state
from florwb_engine.replay.skipblock import moment_decision
from florwb_engine.replay.state_decision import (
    Memo,
    memoized,
    state_decision,
    whole_state_or_none,
)
from florwb_engine.store import Store, lineage
from florwb_engine.store.repair import again_if_rebuilt
from florwb_engine.store.run_selection import SelectedRun

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
    launch: dict | None = None  # how a multi-process run's replay starts (ddp_launch.py)
    mirrored: dict[str, str] = field(default_factory=dict)  # iteration -> own-save manifest
    saved_map: dict[str, list[list]] = field(default_factory=dict)  # save site -> targets
    inputs: dict[str, str] = field(default_factory=dict)  # left-out file -> the run's blob
    at_risk: list[str] = field(default_factory=list)  # changed left-out files, bytes gone
    from_start: bool = False  # statements read state no checkpoint holds (state_reads.py)
    threads: dict | None = None  # the run's recorded thread settings (cores.RecordedThreads)
    hide: list[str] = field(default_factory=list)  # files the run created: absent in replay
    # the estimate had the run checkpointed every main-loop iteration (None: no different),
    # and the iterations re-executed now for want of a checkpoint (cost.denser_work)
    denser_estimate_s: float | None = None
    rerun: list[int] = field(default_factory=list)
    starts: list[dict] = field(default_factory=list)  # its flor.load_checkpoint calls


@dataclass
class Plan:
    replay_id: str
    project: Path
    names: list[str]
    workers: int
    runs: list[RunPlan]
    estimate_s: float
    executor: ExecutorName = "local"
    # the cost model's own estimate, before the project's past replays calibrated it
    estimate_raw_s: float = 0.0
    calibration: float = 1.0
    notes: list[str] = field(default_factory=list)  # about the whole replay (fewer workers)
    # what the user must know before starting (runs still recording)
    warnings: list[str] = field(default_factory=list)
    # the replay's estimate had its runs checkpointed every main-loop iteration (None: the
    # runs' checkpoints would not make it much shorter)
    denser_estimate_s: float | None = None

    def denser_note(self) -> str | None:
        """What a checkpoint every iteration would have saved this replay, in one line."""
        if self.denser_estimate_s is None:
            return None
        rerun = [r for r in self.ready() if r.denser_estimate_s is not None]
        loops = sorted({r.main_loop or "main-loop" for r in rerun})
        n = sum(len(r.rerun) for r in rerun)
        return (
            f"with a checkpoint every {'/'.join(loops)} iteration this replay would take "
            f"~{seconds_text(self.denser_estimate_s)} instead of "
            f"~{seconds_text(self.estimate_s)} (re-run now: {n} iterations from the nearest "
            "checkpoint; flor.checkpointing(..., every=1) records one per iteration)"
        )

    def ready(self) -> list[RunPlan]:
        return [r for r in self.runs if r.status == READY]

    def to_json(self) -> dict:
        return {
            "replay_id": self.replay_id,
            "names": self.names,
            "workers": self.workers,
            "executor": self.executor,
            "estimate_s": self.estimate_s,
            "estimate_raw_s": self.estimate_raw_s,
            "calibration": self.calibration,
            "notes": self.notes,
            "warnings": self.warnings,
            "denser_estimate_s": self.denser_estimate_s,
            "denser_note": self.denser_note(),
            "runs": [
                {
                    key: value
                    for key, value in asdict(run).items()
                    if key
                    not in ("code", "checkpoints", "args", "argv", "cwd", "mirrored", "saved_map")
                }
                for run in self.runs
            ],
        }


def estimate_of(plan: Plan) -> float:
    """The plan's wall-time estimate from its ready runs' segments, as plan_replay makes it
    (the segments scheduled on the workers, what a replay pays once, the calibration): the
    workbench re-estimates with it after leaving runs out, so every screen and the CLI say
    the same for the same runs."""
    factor = plan.calibration or 1.0
    costs = [s.estimate_s / factor for run in plan.ready() for s in run.segments]
    return replay_estimate(costs, plan.workers, plan.executor) * factor


@again_if_rebuilt
def plan_replay(
    project: Path,
    names: Sequence[str],
    *,
    where: str | None = None,
    run_ids: Sequence[str] | None = None,
    workers: int = 1,
    executor: ExecutorName = "local",
    strict: bool = False,
) -> Plan:
    """Plan replaying `names` for the runs matching `where` (SQL over runs and args) and,
    when given, only the runs in `run_ids` (the workbench's marked runs). `executor` is
    where the segments will run: its start and transfer costs enter the estimate.
    `strict`: every run re-executes its main loop from the start in one segment and
    restores nothing (the executor's retry of a diverged run)."""
    names = list(dict.fromkeys(n.strip() for n in names if n.strip()))
    if not names:
        raise PlanError("name at least one log statement to replay")
    store = Store(project)
    with store.reading() as con:  # a snapshot: planning holds no catalog
        runs = select_runs(con, where)
        if run_ids is not None:
            wanted = set(run_ids)
            runs = [run for run in runs if run.run_id in wanted]
            if not runs:
                raise PlanError("none of the chosen runs is recorded")
        facts = {run.run_id: run_facts(con, run.run_id) for run in runs}
        ratio = past_ratio(con, executor)
        seen_inputs = {run.run_id: run_inputs.load(con, run.run_id) for run in runs}
        seen_files = {run.run_id: run_inputs.load_files(con, run.run_id) for run in runs}
        launched = ddp_launch.launches(con, [run.run_id for run in runs])
    gpus = _gpus_for(executor) if launched else 0
    placer = Placer(project, names)
    listed: dict[str, frozenset[str]] = {}  # version -> its files
    plans = []
    work: dict[str, Work] = {}
    for run in runs:
        plan = _plan_run(project, placer, names, run, facts[run.run_id], strict)
        if plan.status == READY:
            ddp_launch.settle(plan, launched.get(run.run_id), gpus, executor != "local")
        if plan.status == READY and not strict:
            use_saved_state(project, plan, facts[run.run_id])
            whole_state_or_none(project, plan, facts[run.run_id])
        if plan.status == READY and executor != "local" and _outside_checkpoints(plan.starts):
            plan.status = SKIP  # ray_executor.py ships files of the checkpoints folder only
            plan.reason = (
                "a run started from a checkpoint outside the project's checkpoints folder "
                "(flor.load_checkpoint) replays with the local executor, not on Ray"
            )
        if plan.status == READY:
            assert plan.mode is not None
            found = run_work(
                plan.mode,
                plan.main_loop,
                facts[run.run_id],
                executor,
                from_start=plan.from_start,
                launch=plan.launch,
            )
            if isinstance(found, str):
                plan.status, plan.reason = SKIP, found
            else:
                work[run.run_id] = found
                files = seen_files[run.run_id]
                inputs = run_inputs.check(
                    project,
                    seen_inputs[run.run_id],
                    files,
                    _version_files(project, run.version, listed) if files else (),
                )
                plan.inputs, plan.at_risk = inputs.restore, inputs.at_risk
                plan.hide = inputs.hide  # a Ray task removes them after its copy too
                plan.notes = [
                    *([found.summary] if found.summary else []),
                    *plan.notes,
                    *found.notes,
                    *inputs.notes,
                ]
        plans.append(plan)
    notes: list[str] = []
    ready = [p for p in plans if p.status == READY]
    for plan in ready:
        threads = recorded_threads(facts[plan.run_id].context)
        plan.threads = threads.to_json() if threads is not None else None
    at_once = workers
    if executor == "local":  # a Ray task's threads follow its CPUs (ray_executor.py)
        at_once, cut = workers_for_threads(workers, [recorded_threads(p.threads) for p in ready])
        notes += [cut] if cut else []
    recording = [p.run_id for p in ready if facts[p.run_id].status == "running"]
    warnings = []
    if recording:  # what such a replay fills in is not the whole run
        warnings.append(
            f"{len(recording)} run(s) still recording ({', '.join(recording[:3])}): only "
            "the iterations recorded so far are replayed"
        )
    factor = 1.0 if ratio is None else min(max(ratio, CALIBRATION_BOUNDS[0]), CALIBRATION_BOUNDS[1])
    # segments as many as `workers` asked for (each still starts from a checkpoint); at most
    # `at_once` of them run side by side, each with its run's recorded threads
    _assign_segments(ready, work, workers, factor)
    raw = replay_estimate(
        [s.estimate_s / factor for p in plans for s in p.segments], at_once, executor
    )
    denser = _denser_policy(ready, work, facts, workers, at_once, factor, executor)
    if denser is not None and denser > raw * factor * DENSER_WORTH:
        denser = None
    return Plan(
        replay_id=time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2),
        project=project,
        names=names,
        workers=at_once,
        runs=plans,
        estimate_s=raw * factor,
        executor=executor,
        estimate_raw_s=raw,
        calibration=factor,
        notes=notes,
        warnings=warnings,
        denser_estimate_s=denser,
    )


def _gpus_for(executor: ExecutorName) -> int:
    """The GPUs one replay of a multi-process run can have: this machine's, or on Ray the
    largest node's of the connected cluster (a run's processes are one task on one node)."""
    if executor != "local":
        from florwb_engine.replay.ray_executor import largest_gpus

        gpus = largest_gpus()  # the CLI connects (or finds the warm driver) before it plans
        if gpus is not None:
            return gpus
    return ddp_launch.gpus_here()


def _outside_checkpoints(starts: list[dict]) -> bool:
    """Whether a flor.load_checkpoint call of the run loaded a file outside the project's
    checkpoints folder (recorded as an absolute path): a Ray task cannot be sent it."""
    return any(Path(str(s.get("path") or "")).is_absolute() for s in starts)


def _version_files(project: Path, version: str | None, cache: dict[str, frozenset[str]]):
    """The paths a code version holds (the replay has them as the run did)."""
    if not version:
        return frozenset()
    if version not in cache:
        try:
            cache[version] = frozenset(versions.list_files(store_dir(project), version))
        except versions.VersionError:
            cache[version] = frozenset()
    return cache[version]


def _plan_run(
    project: Path,
    placer: Placer,
    names: list[str],
    run: SelectedRun,
    facts: RunFacts,
    strict: bool = False,
) -> RunPlan:
    plan = RunPlan(run_id=run.run_id, version=run.version, script=run.script, status=SKIP)
    plan.argv = run.argv
    plan.cwd = run.cwd
    plan.args = facts.args
    plan.main_loop = facts.main_loop
    plan.checkpoints = {str(i): path for i, (path, _size) in facts.checkpoints.items()}
    wanted = [n for n in names if n not in facts.present]
    plan.starts = facts.starts
    gone = [s for s in facts.starts if not (checkpoint_dir(project) / str(s["path"])).is_file()]
    if gone:
        plan.reason = (
            f"it started from {lineage.describe(gone[0])}, whose file is gone: its replay "
            "cannot start where it started"
        )
        return plan
    if is_notebook_script(run.script):
        plan.reason = "recorded in a notebook: replaying notebook runs is not supported"
        return plan
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
    handler = requests.refusal(result.code, {n: p.old_line for n, p in placed.items()})
    if handler is not None:
        plan.reason = handler
        return plan
    if facts.main_loop is not None and facts.main_loop in requests.iteration_names(result.code):
        # the outermost coordinate is a flor.iteration: the loop around it is the script's
        # own, with no checkpoints to start from, so the script runs whole
        plan.main_loop = None
        plan.mode = PREFIX
        plan.names = list(placed)
        plan.code = result.code
        plan.notes.append(
            f"{facts.main_loop} is a flor.iteration in the script's own loop: the script is "
            "re-executed whole"
        )
        plan.status = READY
        return plan
    found = loop_state(result.code, facts.main_loop)
    memo = memoized(project, run.run_id, result.code, facts, found) if not strict else Memo()
    mode, why = replay_mode(placed, facts.main_loop, found, memo.names)
    if mode is None:
        plan.reason = why
        return plan
    state = state_decision(project, run.run_id, result.code, placed, facts, mode)
    if isinstance(state, str):
        plan.reason = state
        return plan
    if strict and mode != PREFIX and not state.from_start:
        state.from_start = True
        state.notes.append(
            f"strict: the {facts.main_loop or 'main'} loop is re-executed from its first "
            "iteration, in one segment, restoring no checkpoint"
        )
    if state.from_start:
        mode = INNER
    moment = moment_decision(project, run.run_id, facts, found, mode, memo.names)
    mode = moment.mode
    plan.from_start = state.from_start or moment.from_start
    plan.notes.extend(state.notes)
    plan.notes.extend(moment.notes)
    plan.mode = mode
    plan.names = list(placed)
    plan.code = result.code
    if why:
        plan.notes.append(why)
    if memo.missing and (plan.from_start or mode != OUTER):
        plan.notes.append(f"what the inner loops leave is not all memoized: {memo.missing}")
    if memo.names and not plan.from_start:
        plan.notes.append(
            f"{', '.join(sorted(memo.names)[:4])}, which inner loops leave for the code after "
            "them, are restored from the values memoized with each checkpoint"
        )
    if facts.diverged:
        plan.notes.append(f"retries replay {facts.diverged}, which diverged on this run")
    if facts.status == "running":
        plan.notes.insert(0, "still recording: only the iterations recorded so far replay")
    plan.status = READY
    return plan


def _assign_segments(
    ready: list[RunPlan], work: dict[str, Work], workers: int, factor: float
) -> None:
    """Give each run as many segments as keeps `workers` busy, balancing estimated time;
    `factor` calibrates the estimates from the project's past replays."""
    per_run = _per_run(workers, ready)
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
                    estimate_s=part.estimate_s * factor,
                )
            )
            index += 1
        # the run's own wall time with its segments side by side: more workers cut a run
        # into more segments, which never makes the run itself look longer
        plan.estimate_s = max((s.estimate_s for s in plan.segments), default=0.0)


def _per_run(workers: int, ready: list[RunPlan]) -> int:
    """Segments per run that keep `workers` busy."""
    return max(1, math.ceil(workers / max(len(ready), 1)))


def _denser_policy(
    ready: list[RunPlan],
    work: dict[str, Work],
    facts: dict[str, RunFacts],
    workers: int,
    at_once: int,
    factor: float,
    executor: ExecutorName,
) -> float | None:
    """What a checkpoint every main-loop iteration would have made of the estimate: each
    run's own (with a note where it is much shorter) and the whole replay's, returned
    (None when no run's would change). Each run's `rerun` is set on the way."""
    per_run = _per_run(workers, ready)
    costs: list[float] = []
    changed = False
    for plan in ready:
        own = [s.estimate_s / factor for s in plan.segments]
        found = work[plan.run_id]
        plan.rerun = list(found.rerun)
        dense = denser_work(
            plan.mode or PREFIX, plan.main_loop, facts[plan.run_id], found, executor
        )
        if dense is None:
            costs += own
            continue
        parts = [part.estimate_s for part in segment_parts(dense, per_run)]
        estimate = max(parts, default=0.0) * factor
        if estimate > plan.estimate_s * DENSER_WORTH:
            costs += own
            continue
        changed = True
        costs += parts
        plan.denser_estimate_s = estimate
        loop = plan.main_loop or "main-loop"
        plan.notes.append(
            f"with a checkpoint every {loop} iteration ~{seconds_text(estimate)} instead of "
            f"~{seconds_text(plan.estimate_s)} (re-run now: {len(found.rerun)} {loop} "
            "iterations from the nearest checkpoint; flor.checkpointing(..., every=1))"
        )
    return replay_estimate(costs, at_once, executor) * factor if changed else None


def seconds_text(seconds: float) -> str:
    """An estimate in seconds as a plan says it: tenths below 10 s."""
    return f"{seconds:.1f} s" if seconds < 10 else f"{seconds:.0f} s"


__all__ = [
    "Plan",
    "PlanError",
    "RunPlan",
    "RunPlanStatus",
    "Segment",
    "estimate_of",
    "plan_replay",
]
