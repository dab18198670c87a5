"""What the moment a run's checkpoints were taken allows a replay.

A checkpoint records the state at the end of its iteration's inner loops (`after_inner`,
record/checkpoint.py): an outer-mode replay restores it where the inner loops would run and
then runs the rest of the body, and a segment starting at f first replays the rest of
f - 1's body from checkpoint f - 1 (record/replaying.py). Two cases cannot be replayed that
way and are planned otherwise here:

- checkpoints written before florwb took them there hold the state at their iteration's
  end, after the code that follows the inner loops (a scheduler step, best-so-far): skipping
  the inner loops and running that code again would apply it twice, so the inner loops are
  re-executed (each segment restores the iteration-end state at its start, which is exact);
- the rest of the body reads names the inner loops set (`print(loss.item())`) that the
  checkpoints did not memoize (written before florwb kept what each inner loop leaves, or
  a value too big to keep): replayed from a checkpoint it would read names nothing set, so
  the run is re-executed from its first iteration in one segment. Names they memoized are
  put back where each skipped loop would have left them (`memoized`, state_decision.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from florwb_engine.analysis.loop_state import LoopState
from florwb_engine.contract.replay_spec import INNER, OUTER, ReplayMode
from florwb_engine.project import store_dir
from florwb_engine.propagate import FlorLoop
from florwb_engine.record.checkpoint import taken_after_inner
from florwb_engine.replay.facts import RunFacts
from florwb_engine.replay.mode import reads_inner


@dataclass
class MomentDecision:
    mode: ReplayMode
    from_start: bool = False
    notes: list[str] = field(default_factory=list)


def moment_decision(
    project: Path,
    run_id: str,
    facts: RunFacts,
    loops: tuple[FlorLoop, ...],
    mode: ReplayMode,
    memoized: frozenset[str] = frozenset(),
    found: LoopState | None = None,
) -> MomentDecision:
    """The mode (and whether to run from the start) that the run's checkpoints allow;
    names in `memoized` are put back where a skipped inner loop would have left them
    (`found`: the loop state of the code, mode.reads_inner)."""
    decision = MomentDecision(mode)
    if mode not in (OUTER, INNER) or not facts.checkpoints:
        return decision
    loop = facts.main_loop or "main"
    name, _size = facts.checkpoints[min(facts.checkpoints)]  # one florwb version per run
    try:
        after_inner = taken_after_inner(store_dir(project) / "checkpoints" / run_id / name)
    except (OSError, RuntimeError, ValueError) as exc:
        decision.notes.append(f"checkpoint {name} cannot be read ({exc})")
        return decision
    if not after_inner:
        if mode == OUTER and _has_tail(loops, facts.main_loop):
            decision.mode = INNER
            decision.notes.append(
                f"this run's checkpoints hold the state at the end of each {loop} iteration, "
                "after the code that follows its inner loops: the inner loops are re-executed"
            )
        return decision
    stale = reads_inner(loops, facts.main_loop, found) - memoized
    if mode == INNER and stale and min(facts.checkpoints) < max(facts.epoch_s, default=0):
        decision.from_start = True
        listed = ", ".join(sorted(stale)[:4])
        decision.notes.append(
            f"the {loop} body reads {listed} after its inner loops set it, which no checkpoint "
            f"holds: the {loop} loop is re-executed from its first iteration, in one segment"
        )
    return decision


def _has_tail(loops: tuple[FlorLoop, ...], main_loop: str | None) -> bool:
    """Whether the main loop's body has lines after its last inner loop."""
    for main in loops:
        if main.name != main_loop:
            continue
        inner = [other.last_line for other in loops if main.contains(other)]
        if inner and max(inner) < main.last_line:
            return True
    return False
