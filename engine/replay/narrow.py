"""flordb's `--iter NAME=all|last|none|i,j,k`: replay only some iterations of the main loop.

florwb starts a segment from the checkpoint before its first iteration, so narrowing the
main loop saves the work of the iterations left out, not only their logging. A segment
keeps its first iteration where no checkpoint lets it start later (a run that re-executes
from its start), and the iterations between two asked-for ones within a segment still run
and log: their values are as right as the others. Loops other than the main loop are not
narrowed; the plan says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from florwb_engine.contract.replay_spec import PREFIX
from florwb_engine.replay.errors import PlanError
from florwb_engine.replay.plan import SKIP, Plan, RunPlan

IterKind = Literal["all", "last", "none", "indices"]


@dataclass(frozen=True)
class IterSpec:
    """Which iterations of one loop to replay (flordb's `cli.IterSpec`)."""

    kind: IterKind
    indices: tuple[int, ...] = ()


def parse_iter_spec(text: str) -> IterSpec:
    s = str(text).strip()
    if s in ("all", "last"):
        return IterSpec(s)  # type: ignore[arg-type]
    if s in ("none", ""):
        return IterSpec("none")
    try:
        indices = tuple(sorted({int(p) for p in s.split(",") if p.strip()}))
    except ValueError:
        raise PlanError(f"--iter: expected all, last, none or i,j,k; got {text!r}") from None
    if any(i < 0 for i in indices):
        raise PlanError(f"--iter: iterations are 0-based and not negative; got {text!r}")
    return IterSpec("indices", indices)


def parse_iter_arg(text: str) -> tuple[str, IterSpec]:
    """`epoch=0,2` -> ("epoch", IterSpec("indices", (0, 2)))."""
    name, sep, spec = str(text).partition("=")
    if not sep or not name.strip():
        raise PlanError(f"--iter expects NAME=SPEC (e.g. epoch=0,2 or epoch=last); got {text!r}")
    return name.strip(), parse_iter_spec(spec)


def as_spec(spec: object) -> IterSpec:
    """An IterSpec from flordb's (kind, indices) object or from text like `0,2`."""
    kind = getattr(spec, "kind", None)
    if kind is not None:
        indices = tuple(int(i) for i in getattr(spec, "indices", ()) or ())
        if kind not in ("all", "last", "none", "indices"):
            raise PlanError(f"unknown iteration kind {kind!r}")
        return IterSpec(kind, indices)
    return parse_iter_spec(str(spec))


def narrow(plan: Plan, iters: dict[str, IterSpec]) -> None:
    """Cut each ready run's segments to the main-loop iterations `iters` asks for."""
    if not iters:
        return
    before = sum(s.estimate_s for run in plan.ready() for s in run.segments)
    for run in plan.ready():
        _narrow_run(run, iters)
    after = sum(s.estimate_s for run in plan.ready() for s in run.segments)
    if before > 0:
        plan.estimate_s *= after / before


def _narrow_run(run: RunPlan, iters: dict[str, IterSpec]) -> None:
    others = sorted(n for n in iters if n != run.main_loop)
    if others:
        run.notes.append(
            f"--iter {', '.join(others)}: only the main loop ({run.main_loop or 'none'}) is "
            "narrowed; the others replay every iteration they need"
        )
    spec = iters.get(run.main_loop or "")
    if spec is None or spec.kind == "all" or run.mode == PREFIX or not run.segments:
        return
    last = max(s.last for s in run.segments)
    wanted = {
        "none": set(),
        "last": {last},
        "indices": set(spec.indices),
    }[spec.kind]
    beyond = sorted(i for i in wanted if i > last)
    if beyond:
        run.notes.append(f"--iter {run.main_loop}: the run has no iteration {beyond} (0-{last})")
    kept = []
    for segment in run.segments:
        chosen = sorted(i for i in wanted if segment.first <= i <= segment.last)
        if not chosen:
            continue
        first = segment.first
        if not run.from_start and (
            chosen[0] == 0 or str(chosen[0] - 1) in {**run.checkpoints, **run.mirrored}
        ):
            first = chosen[0]
        n_before = segment.last - segment.first + 1
        segment.estimate_s *= (chosen[-1] - first + 1) / n_before
        segment.first, segment.last = first, chosen[-1]
        segment.skip_inner = [i for i in segment.skip_inner if first <= i <= segment.last]
        kept.append(segment)
    run.segments = kept
    if not kept:
        run.status = SKIP
        run.reason = f"--iter {run.main_loop}: no recorded iteration asked for"
        return
    spans = ", ".join(f"{s.first}-{s.last}" for s in kept)
    run.notes.append(f"--iter {run.main_loop}: replays {spans}")
    run.estimate_s = sum(s.estimate_s for s in kept)
