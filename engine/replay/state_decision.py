"""One run's answer to state_reads.py: what the replay restores, what it re-executes, and
one line per statement saying which and why (the plan's notes)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from florwb_engine.analysis.loop_state import LoopState, loop_state
from florwb_engine.contract.checkpoint_files import is_manifest
from florwb_engine.contract.replay_spec import INNER, PREFIX, ReplayMode
from florwb_engine.project import store_dir
from florwb_engine.propagate import Placement
from florwb_engine.record.checkpoint import holds_grads, left_kept, loop_state_kept
from florwb_engine.replay.facts import RunFacts
from florwb_engine.replay.state_reads import state_reads


class RunPlanLike(Protocol):
    """The fields of a run's plan (plan.py's RunPlan) the whole-state check reads and sets."""

    run_id: str
    code: str | None
    mode: ReplayMode | None
    from_start: bool
    notes: list[str]
    saved_map: dict[str, list[list]]


@dataclass
class StateDecision:
    from_start: bool = False  # re-execute the main loop from its first iteration, one segment
    notes: list[str] = field(default_factory=list)


def state_decision(
    project: Path,
    run_id: str,
    code: str,
    placed: dict[str, Placement],
    facts: RunFacts,
    mode: ReplayMode,
) -> StateDecision | str:
    """What the statements need beyond the checkpoints, or why the run cannot be replayed."""
    reads = state_reads(code, placed, facts.main_loop)
    if reads.refused:
        return reads.refused
    decision = StateDecision()
    if mode == PREFIX:
        return decision
    loop = facts.main_loop or "main"
    again = f"the {loop} loop is re-executed from its first iteration, in one segment"
    if reads.grads:
        with_grads = _checkpoints_hold_grads(project, run_id, facts)
        for name in reads.grads:
            if isinstance(with_grads, str):
                decision.from_start = True
                decision.notes.append(f"{name} reads gradients; {with_grads}: {again}")
            elif with_grads:
                decision.notes.append(
                    f"{name} reads gradients: restored from the run's checkpoints, which hold them"
                )
            else:
                decision.from_start = True
                decision.notes.append(
                    f"{name} reads gradients, which this run's checkpoints do not hold: {again}"
                )
    for name, paths in reads.unheld.items():
        decision.from_start = True
        listed = ", ".join(paths[:3])
        decision.notes.append(
            f"{name} reads {listed}, which the {loop} loop changes and no checkpoint holds: {again}"
        )
    return decision


@dataclass
class Memo:
    """What the run's checkpoints memoized of the names skipped inner loops leave for the
    code after them (loop_state.LEFT): a replay that skips those loops puts them back."""

    names: frozenset[str] = frozenset()  # memoized in every checkpoint that skips loops
    missing: str | None = None  # why the other names the inner loops leave are not


def memoized(
    project: Path, run_id: str, code: str, facts: RunFacts, found: LoopState | None = None
) -> Memo:
    """The names of `found.leaves` every checkpoint of the run memoized (the first and the
    last are read: one florwb version per run, and a value that grows is too big in the
    last one), and why the rest are not. A checkpoint taken at its iteration's end skips
    no loop and needs none. `found`: the loop state of `code`, where the caller has it."""
    if found is None:
        found = loop_state(code, facts.main_loop)
    if not found.leaves:
        return Memo()
    ends = _first_and_last(project, run_id, facts)
    if not ends:
        return Memo(missing="the run has no flor.checkpointing checkpoint")
    names = set(found.leaves)
    for name, path in ends:
        try:
            kept = left_kept(path)
        except (OSError, RuntimeError, ValueError) as exc:
            return Memo(missing=f"checkpoint {name} cannot be read ({exc})")
        if kept is None:
            return Memo(missing="this run's checkpoints were written before florwb memoized them")
        after_inner, held, why = kept
        if not after_inner:
            continue
        if "*" in why:
            return Memo(missing=f"they were not memoized with checkpoint {name}: {why['*']}")
        for lost in sorted(set(why) & names):
            return Memo(
                frozenset(names - set(why)),
                f"{lost} could not be memoized with checkpoint {name}: {why[lost]}",
            )
        names &= held
    early = names & set(found.before_inner)
    if early:
        listed = ", ".join(sorted(early)[:4])
        return Memo(
            frozenset(names - early),
            f"the {facts.main_loop or 'main'} body reads {listed} before its inner loops, where "
            "a segment's first replayed iteration has no value for it",
        )
    missing = set(found.leaves) - names
    return Memo(
        frozenset(names),
        f"checkpoints do not hold {', '.join(sorted(missing)[:4])}" if missing else None,
    )


def whole_state_or_none(project: Path, plan: RunPlanLike, facts: RunFacts) -> None:
    """Restore from checkpoints only when they hold every piece of state the main loop
    keeps; otherwise re-execute the run from its start in one segment, saying why. Runs
    after the script's own saves are known (`saved_state.use_saved_state`): the objects
    they restore count as held."""
    if plan.from_start or plan.mode in (None, PREFIX) or not plan.code:
        return
    held = {
        tuple(target[1].split("."))
        for targets in plan.saved_map.values()
        for target in targets
        if isinstance(target[1], str)
    }
    why = _whole_state(project, plan.run_id, plan.code, facts, held)
    if why is None:
        return
    loop = facts.main_loop or "main"
    plan.from_start = True
    plan.mode = INNER
    plan.notes.append(
        f"{why}: the {loop} loop is re-executed from its first iteration, in one segment"
    )


def _whole_state(
    project: Path, run_id: str, code: str, facts: RunFacts, held: set[tuple[str, ...]]
) -> str | None:
    """Why restoring from this run's checkpoints would restore only part of the state the
    main loop keeps (objects it changes in place that none holds, loop-carried names the
    checkpoints lack or could not keep), or None when they hold all of it."""
    found = loop_state(code, facts.main_loop)
    loop = facts.main_loop
    changed = [
        m
        for m in found.mutated_objects
        if not any(tuple(m.split("."))[: len(h)] == h for h in held)
    ]
    if changed:
        listed = ", ".join(changed[:3])
        return (
            f"the {loop} loop changes {listed} in place, which no checkpoint holds "
            "(flor.checkpointing registers what a restore puts back)"
        )
    if found.leaves:
        memo = memoized(project, run_id, code, facts, found)
        stale = sorted(set(found.leaves) - memo.names)
        if stale:
            listed = ", ".join(stale[:4])
            why = f" ({memo.missing})" if memo.missing else ""
            return (
                f"code after an inner loop of the {loop} loop reads {listed}, which that loop "
                f"sets and no checkpoint holds{why}"
            )
    carried = ", ".join(found.carried[:4])
    ends = _first_and_last(project, run_id, facts)
    if not ends:
        if not found.carried:
            return None
        return (
            f"the {loop} loop carries {carried} from one iteration to the next, which the "
            "run's own saves do not hold"
        )
    for name, path in ends:
        try:
            kept = loop_state_kept(path)
        except (OSError, RuntimeError, ValueError) as exc:
            return f"checkpoint {name} cannot be read ({exc})"
        if kept is None:
            if not found.carried:
                return None
            return (
                f"the {loop} loop carries {carried} from one iteration to the next, which "
                "this run's checkpoints do not hold (recorded before florwb saved loop state)"
            )
        if kept:
            first = sorted(kept)[0]
            what = "the loop state" if first == "*" else first
            return f"{what} could not be saved with checkpoint {name}: {kept[first]}"
    return None


def _first_and_last(project: Path, run_id: str, facts: RunFacts) -> list[tuple[str, Path]]:
    """The run's first and last flor.checkpointing files (name, path), the ones planning
    reads for what its checkpoints kept: a value that grows is too big in the last one."""
    files = {i: name for i, (name, _size) in facts.checkpoints.items() if not is_manifest(name)}
    folder = store_dir(project) / "checkpoints" / run_id
    return (
        [(files[i], folder / files[i]) for i in sorted({min(files), max(files)})] if files else []
    )


def _checkpoints_hold_grads(project: Path, run_id: str, facts: RunFacts) -> bool | str:
    """Whether the run's checkpoints carry gradients (the first one answers for all: a run
    is recorded by one florwb version), or why that cannot be told."""
    if not facts.checkpoints:
        return False
    name, _size = facts.checkpoints[min(facts.checkpoints)]
    path = store_dir(project) / "checkpoints" / run_id / name
    try:
        return holds_grads(path)
    except (OSError, RuntimeError, ValueError) as exc:
        return f"checkpoint {name} cannot be read ({exc})"
