"""Cost model and scheduling: how long each part of a replay takes, and who runs what.

A run's main-loop iterations are cut into chunks that each start from a known state (the
first iteration, or one after a checkpoint); chunks are grouped into segments of similar
estimated time, one process each, and the replay's wall time is estimated by scheduling
the segments longest first on the workers, plus what every replay pays once.

Estimates come from the run's recorded iteration timings (made robust in facts.py: a few
iterations slowed by a busy machine do not stand for the run), its checkpoint sizes and the
executor's costs: a segment on the local fork server starts by forking a warm process; a
Ray task waits for a worker, receives the version's code and the segment's checkpoints over
the network and forks the script from its Ray worker's fork server, whose imports each Ray
worker pays once, side by side with the others. The
constants below were measured on a 2-core box with the demo and a 10-run sweep
(tests/test_replay_estimate.py checks the estimate against the replays' recorded durations).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Literal

from florwb_engine.contract.replay_spec import OUTER, PREFIX, ReplayMode
from florwb_engine.replay.facts import RunFacts

# Where segments run: the local fork server, or tasks on a Ray cluster (ray_executor.py).
ExecutorName = Literal["local", "ray"]

LOAD_BYTES_PER_S = 300e6  # torch.load of a checkpoint from the page cache or a local disk
# What a replay pays once: its record, materialising versions, ingesting the journals and
# the fidelity check.
REPLAY_FIXED_S = 0.5
# Per segment: fork from the warm server, the florwb runtime's start and its last flush.
LOCAL_START_S = 0.35
# Per Ray task: scheduling, unpacking the code and checkpoints, forking the script from the
# Ray worker's fork server (its mirror of the project's parents kept from the last
# segment): 0.45-0.85 s with `bench_replay.py --executor ray` on a 2-core box at load 4-9.
# Once per replay where no warm worker is up, the workers side by side: their processes
# start (Python, ray, florwb) and their fork servers import the script's modules (torch is
# most of it).
RAY_START_S = 0.6
RAY_IMPORT_S = 3.0
# Once per replay on Ray, where its warm workers (ray_executor.warm_pool) are up already:
# finding them and shipping; and where the replay starts Ray on this machine itself (no
# warm driver, ray_driver.py), Ray's own start (ray.init of a local cluster: 9-20 s on a
# busy 2-core box).
RAY_WARM_S = 0.5
RAY_INIT_S = 10.0
RAY_BYTES_PER_S = 100e6  # object-store transfer of code and checkpoints to the node
PREFIX_FLOOR_S = 0.2
PREFIX_EPOCHS = 2.0
# A multi-process run's replay starts its processes afresh, not from the warm fork server
# (ddp_launch.py): torchrun's launcher imports torch, then every rank's interpreter imports
# torch and the script's modules (side by side, as many at once as there are cores) and
# the ranks meet at the rendezvous. Measured on a 2-core box: `import torch` 1.7 s of
# CPU; a 2-rank torchrun of a script that only joins the process group, 5.2 s of CPU.
TORCH_IMPORT_S = 1.7
RENDEZVOUS_S = 1.0
# A project's finished replays calibrate the next estimate: the median ratio of their
# recorded durations to their estimates, within these bounds (facts.past_ratio).
CALIBRATION_BOUNDS = (0.25, 4.0)


def replayed_prefix_s(facts: RunFacts) -> float:
    """What the code before the main loop costs a replay. The recorded time also holds what
    a replay does not pay again: imports the run made late (torch.optim's first use pulls
    in torch._dynamo, seconds here; the fork server has it deferred), the code snapshot and
    the first RNG save. It is counted up to PREFIX_EPOCHS of the run's typical iteration
    (data loading before a long loop stays in full; seconds of imports before a loop of
    milliseconds do not) and never less than PREFIX_FLOOR_S."""
    epochs = sorted(facts.epoch_s.values())
    typical = epochs[len(epochs) // 2] if epochs else 0.0
    return min(facts.prefix_s, PREFIX_FLOOR_S + PREFIX_EPOCHS * typical)


def segment_start_s(executor: ExecutorName, launch: dict | None = None) -> float:
    """Seconds a segment costs before the old script runs its first line; `launch`: the
    plan's launch of a multi-process run (ddp_launch.py), whose processes start afresh."""
    start = LOCAL_START_S if executor == "local" else RAY_START_S
    return start + launch_start_s(launch)


def launch_start_s(launch: dict | None) -> float:
    """What starting a torchrun / mp.spawn launch's processes costs (0 for one process):
    what the recorded launch took to start (`start_s`, measured by its ranks), else the
    model below."""
    if not launch:
        return 0.0
    measured = launch.get("start_s")
    if isinstance(measured, (int, float)) and measured > 0:
        return float(measured)
    # planning imports these anyway (ddp_launch.py); the Replay tab imports this module
    from florwb_engine.record.ranks import TORCHRUN
    from florwb_engine.replay.cores import available_cores

    ranks = max(int(launch.get("nproc") or 1), 1)
    waves = math.ceil(ranks / max(available_cores(), 1))
    launcher = TORCH_IMPORT_S if launch.get("launcher") == TORCHRUN else 0.0
    return launcher + waves * TORCH_IMPORT_S + RENDEZVOUS_S


@dataclass
class Work:
    """A run's main-loop iterations in chunks that each start from a known state."""

    chunks: list[list[int]]
    cost: dict[int, float]
    skipped: set[int]  # iterations whose inner loops are skipped (OUTER mode)
    prefix_s: float  # process start and the code before the main loop
    summary: str | None = None  # what the replay re-executes, first of the run's notes
    notes: list[str] = field(default_factory=list)
    # per chunk start f > 0: replaying the tail of iteration f - 1 from its checkpoint,
    # which a segment starting at f runs first (replaying.py)
    lead: dict[int, float] = field(default_factory=dict)
    # iterations re-executed for want of a checkpoint: in full (OUTER), or run on from the
    # iteration before instead of starting a segment of their own (INNER)
    rerun: list[int] = field(default_factory=list)


@dataclass
class SegmentPart:
    """One segment's iterations [first, last] and its estimated seconds."""

    first: int
    last: int
    skip_inner: list[int]
    estimate_s: float


def run_work(
    mode: ReplayMode,
    main_loop: str | None,
    facts: RunFacts,
    executor: ExecutorName = "local",
    *,
    from_start: bool = False,
    launch: dict | None = None,
) -> Work | str:
    """The work of replaying one run in `mode` on `executor`, or why there is none to do.
    `from_start`: the statements read state no checkpoint holds, so the main loop runs
    from its first iteration in one segment, restoring nothing (state_reads.py).
    `launch`: how a multi-process run starts (each segment pays it)."""
    prefix_s = segment_start_s(executor, launch) + replayed_prefix_s(facts)
    if mode == PREFIX:
        return Work([], {}, set(), prefix_s)
    epochs = sorted(facts.epoch_s) or sorted(facts.checkpoints)
    if not epochs:
        if facts.status == "running":
            return "the run is still recording (no iteration of its main loop done yet)"
        return "the run finished no iteration of its main loop"
    ckpt = facts.checkpoints
    per_s = (
        LOAD_BYTES_PER_S
        if executor == "local"
        else 1 / (1 / LOAD_BYTES_PER_S + 1 / RAY_BYTES_PER_S)
    )
    load_s = {i: size / per_s for i, (_path, size) in ckpt.items()}
    skipped: set[int] = set()
    cost: dict[int, float] = {}

    def tail_s(i: int) -> float:
        """An iteration restored at its inner loops: what it still runs, and the load."""
        return max(facts.epoch_s.get(i, 0.0) - facts.inner_s.get(i, 0.0), 0.0) + load_s.get(i, 0.0)

    for i in epochs:
        if mode == OUTER and i in ckpt:
            skipped.add(i)
            cost[i] = tail_s(i)
        else:
            cost[i] = facts.epoch_s.get(i, 0.0)
    executed = [i for i in epochs if i not in skipped]
    notes = []
    rerun: list[int] = []
    if mode == OUTER:
        summary = (
            f"outer: {len(skipped)} of {len(epochs)} {main_loop} iterations skip their inner loops"
        )
        if executed:
            notes.append(f"no checkpoint around {ranges(executed)}: re-executed in full")
        rerun = executed
    elif from_start:
        summary = (
            f"inner: re-executes {len(epochs)} {main_loop} iterations from the first, "
            "in one segment"
        )
        return Work([epochs], cost, skipped, prefix_s, summary, notes)
    else:
        summary = f"inner: re-executes {len(epochs)} {main_loop} iterations"
        missing = rerun = [i for i in epochs if i > 0 and i - 1 not in ckpt]
        if missing:
            notes.append(
                f"{checkpoint_spacing(sorted(ckpt), main_loop or 'iteration')}: "
                f"{ranges(missing)} run on "
                "from the iteration before them, not from a checkpoint"
            )
    starts = [i for i in epochs if i == epochs[0] or i - 1 in ckpt]
    chunks = [
        [i for i in epochs if start <= i < (starts[k + 1] if k + 1 < len(starts) else math.inf)]
        for k, start in enumerate(starts)
    ]
    lead = {start: tail_s(start - 1) for start in starts if start > 0}
    return Work(chunks, cost, skipped, prefix_s, summary, notes, lead, rerun)


# A denser checkpoint policy is named in the plan when it would cut the estimate to this
# share of it or less: below that the difference is within what the estimate can tell.
DENSER_WORTH = 0.9


def denser_work(
    mode: ReplayMode,
    main_loop: str | None,
    facts: RunFacts,
    work: Work,
    executor: ExecutorName = "local",
) -> Work | None:
    """The same replay's work had the run checkpointed every main-loop iteration, each
    checkpoint the size of its typical one; None where more checkpoints would change
    nothing: nothing is re-executed for want of one, or the replay restores no checkpoint
    at all (the state they hold is not the whole state, or a statement reads what none
    holds: more of them would not be used either)."""
    if mode == PREFIX or not work.rerun or not facts.checkpoints:
        return None
    sizes = sorted(size for _path, size in facts.checkpoints.values())
    typical = sizes[len(sizes) // 2]
    epochs = sorted(set(facts.epoch_s) | set(facts.checkpoints))
    dense = dataclasses.replace(facts, checkpoints={i: ("", typical) for i in epochs})
    found = run_work(mode, main_loop, dense, executor)
    return found if isinstance(found, Work) else None


def segment_parts(work: Work, per_run: int) -> list[SegmentPart]:
    """The run's work cut into at most `per_run` segments of similar estimated time."""
    groups = (
        balance(work.chunks, work.cost, min(per_run, len(work.chunks))) if work.chunks else [[]]
    )
    return [
        SegmentPart(
            first=group[0] if group else 0,
            last=group[-1] if group else -1,
            skip_inner=[i for i in group if i in work.skipped],
            estimate_s=work.prefix_s
            + (work.lead.get(group[0], 0.0) if group else 0.0)
            + sum(work.cost[i] for i in group),
        )
        for group in groups
    ]


def balance(chunks: list[list[int]], cost: dict[int, float], groups: int) -> list[list[int]]:
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


def schedule(costs: list[float], workers: int) -> float:
    """Wall time of longest-first scheduling of independent tasks on `workers` processes."""
    loads = [0.0] * max(1, workers)
    for cost in sorted(costs, reverse=True):
        loads[loads.index(min(loads))] += cost
    return max(loads) if costs else 0.0


def replay_estimate(costs: list[float], workers: int, executor: ExecutorName = "local") -> float:
    """The replay's wall time: its segments scheduled on the workers, plus what it pays once
    (on Ray: starting Ray where the replay does, and its workers' imports where they are not
    warm already: ray_executor.start_s)."""
    if not costs:
        return 0.0
    once = REPLAY_FIXED_S
    if executor == "ray":
        from florwb_engine.replay.ray_executor import start_s

        once += start_s()
    return once + schedule(costs, workers)


def ranges(values: list[int]) -> str:
    """`iterations 0-3, 7` for [0, 1, 2, 3, 7]."""
    parts: list[str] = []
    start: int | None = None
    prev: int | None = None
    for v in values:
        if start is None or prev is None:
            start = prev = v
        elif v == prev + 1:
            prev = v
        else:
            parts.append(f"{start}" if start == prev else f"{start}-{prev}")
            start = prev = v
    if start is not None:
        parts.append(f"{start}" if start == prev else f"{start}-{prev}")
    return "iterations " + ", ".join(parts)


def checkpoint_spacing(checkpointed: list[int], loop: str) -> str:
    """How the run's checkpoints are spaced, in words: 'every N' only of evenly spaced ones
    (a run that checkpointed its last iteration alone, or as its budget allowed, has no
    period)."""
    if not checkpointed:
        return "no checkpoint"
    if len(checkpointed) == 1:
        return f"one checkpoint, after {loop} {checkpointed[0]}"
    gaps = {b - a for a, b in zip(checkpointed, checkpointed[1:])}
    if len(gaps) == 1:
        return f"checkpoints only every {gaps.pop()} iterations"
    return f"checkpoints after {loop} {ranges(checkpointed).removeprefix('iterations ')}"


# Below this share of the iterations done, the plan's estimate says more than the pace so far.
ETA_FROM_PACE_AFTER = 0.05


def remaining_s(
    elapsed_s: float, done: int, total: int, estimate_s: float
) -> tuple[float, bool] | None:
    """Seconds a running replay has left and whether that is the plan's estimate (False:
    from the pace of the iterations done so far); None once past the estimate with too
    few iterations done to tell."""
    fraction = done / total if total else 0.0
    if fraction >= ETA_FROM_PACE_AFTER:
        return elapsed_s * (1 - fraction) / fraction, False
    if elapsed_s < estimate_s:
        return estimate_s - elapsed_s, True
    return None
