"""Replaying a multi-process run the way it was launched.

A run recorded under `torchrun --nproc_per_node=N` (record/ranks.py) is replayed by
`python -m torch.distributed.run --nproc_per_node=N` with the launcher options it was given
(less where it met: nodes, addresses, ports), a free rendezvous port on this machine, and
the old script and its argv; every rank reads the same replay spec, restores the state from
rank 0's checkpoint and its RNG states from its own (the script keeps choosing its backend:
gloo on CPU, NCCL on GPUs). Each rank writes its own replay journal
(`replay-<id>-<segment>.rank<r>.journal`), ingested like any other.

A run launched by `torch.multiprocessing.spawn` starts its ranks itself: its replay runs
the script as it was run (`python script.py`), and the spawned ranks replay.

A run launched on several nodes (`torchrun --nnodes N`) is replayed by the local executor
on this machine as one node of all its ranks (`--nproc_per_node=<world size> --nnodes=1`):
every rank keeps its global rank, so its RNG states and journal are its own, while its
LOCAL_RANK runs 0..world-1 here. On Ray it is replayed across nodes, one launcher per
recorded node meeting at a c10d rendezvous (ray_nodes.py; the `rendezvous` of a launch).

When this machine has fewer GPUs than the run needs on it, the plan says so before
anything starts: a statement in the main loop's body or before it (no step re-executed, so
no gradient all-reduce) is replayed for rank 0 alone as a world of one; a statement inside
the step loop, which needs every rank's collectives, is refused with the reason.
"""

from __future__ import annotations

import os
import socket
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb

from florwb_engine.contract.replay_spec import INNER, ReplayMode
from florwb_engine.journal import SUFFIX, replay_journal_name
from florwb_engine.record.context import proc_gpu_names
from florwb_engine.record.ranks import SPAWN, TORCHRUN
from florwb_engine.store import run_context

if TYPE_CHECKING:
    from florwb_engine.replay.plan import RunPlan

MODULE = "torch.distributed.run"


@dataclass
class Launch:
    """How a replay of one run starts its processes (kept in the plan's JSON)."""

    launcher: str  # TORCHRUN or SPAWN
    world_size: int  # ranks the run had
    nproc: int  # ranks the replay starts (world_size, or 1 on a machine short of GPUs)
    options: list[str] = field(default_factory=list)  # the launcher's recorded options
    devices: int = 0  # GPUs the run used per node (0: CPU)
    # seconds the recorded launch took from the launcher's start to its slowest rank's
    # first flor call (record/ranks.py); None for runs recorded before it was measured
    start_s: float | None = None
    nnodes: int = 1  # nodes the run was launched on (torchrun --nnodes)


def launches(con: duckdb.DuckDBPyConnection, run_ids: list[str]) -> dict[str, Launch]:
    """The launch of every multi-process run among `run_ids`."""
    import json

    if not run_ids:
        return {}
    found = {}
    rows = con.execute(
        "SELECT r.run_id, r.world_size, r.launcher, c.device_kind FROM runs r "
        f"LEFT JOIN {run_context.ONE_PER_RUN} c USING (run_id) "
        "WHERE r.launcher IS NOT NULL AND r.run_id IN (SELECT unnest(?))",
        [run_ids],
    ).fetchall()
    for run_id, world, launcher_json, device_kind in rows:
        info = json.loads(launcher_json)
        world = int(world or 1)
        nnodes = max(1, int(info.get("nnodes") or 1))
        found[run_id] = Launch(
            launcher=info.get("launcher") or TORCHRUN,
            world_size=world,
            nproc=world,
            options=list(info.get("argv") or []),
            devices=(world // nnodes) if device_kind == "cuda" else 0,
            start_s=info.get("start_s"),
            nnodes=nnodes,
        )
    return found


def gpus_here() -> int:
    """GPUs this machine lets a process use (CUDA_VISIBLE_DEVICES, else the driver's list),
    without importing torch or initialising CUDA in the planning process."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip() and d.strip() != "-1"])
    return len(proc_gpu_names())


def fit(
    launch: Launch, mode: ReplayMode, here: int, across_nodes: bool = False
) -> tuple[str | None, str | None]:
    """(note, refusal) for replaying `launch` where a node has `here` GPUs; the launch's
    `nproc` is lowered to 1 where only rank 0 can be replayed. `across_nodes`: a
    multi-node run keeps one node per recorded node (on Ray), so a node needs the run's
    GPUs per node; otherwise all its ranks run on one machine and need them all."""
    nodes = launch.nnodes if launch.launcher == TORCHRUN else 1
    needed = launch.devices if across_nodes or nodes == 1 else launch.devices * nodes
    if needed <= here:
        if nodes == 1:
            return f"launched as {launch.world_size} processes: replayed the same way", None
        if across_nodes:
            return (
                f"launched on {nodes} nodes, {launch.world_size // nodes} process(es) each: "
                f"replayed on Ray as {nodes} launchers, one per bundle of a placement group "
                "(STRICT_SPREAD over as many Ray nodes; PACK where the cluster has fewer and "
                "they fit)",
                None,
            )
        return (
            f"launched on {nodes} nodes, {launch.world_size} processes in all: replayed on "
            f"this machine as one node of {launch.world_size} processes",
            None,
        )
    if nodes == 1 or across_nodes:
        have = f"the run used {launch.devices} GPUs per node, this machine has {here}"
    else:
        have = (
            f"the run used {launch.devices} GPUs on each of {nodes} nodes, replayed on one "
            f"machine it needs {needed}; this machine has {here}"
        )
    if here == 0:
        return None, f"{have}: not even rank 0 can run here"
    if launch.launcher == SPAWN:
        return None, f"{have}: the script starts its own {launch.world_size} processes"
    if mode == INNER:
        return None, (
            f"{have}: a statement inside the step loop re-executes steps, which need every "
            "rank's collectives"
        )
    launch.nproc = 1
    return (
        f"{have}: rank 0 alone is replayed (a world of 1); ranks 1-{launch.world_size - 1} "
        "get no values, and rank 0's are checked against the run",
        None,
    )


def settle(plan: RunPlan, launch: Launch | None, here: int, across_nodes: bool = False) -> None:
    """Give a ready run's plan its launch, with the note that says how it starts, or skip
    it with the reason when this machine cannot run what the statement needs
    (`across_nodes`: see fit)."""
    if launch is None or plan.mode is None:
        return
    note, refusal = fit(launch, plan.mode, here, across_nodes)
    if refusal is not None:
        plan.status, plan.reason = "skip", refusal
        return
    plan.launch = asdict(launch)
    if note:
        plan.notes.append(note)


def free_port() -> int:
    """A TCP port nobody listens on now, for the replay's rendezvous."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def launch_argv(launch: dict | None, argv: list[str]) -> list[str]:
    """The interpreter arguments that start the replay: `argv` (script and its arguments)
    as it is, or under `-m torch.distributed.run` for a torchrun launch: on this machine
    alone, or as one node of several where the launch has a `rendezvous` (ray_nodes.py:
    nnodes, a c10d endpoint, its id, and whether this node hosts it)."""
    if not launch or launch.get("launcher") != TORCHRUN:
        return argv
    meet = launch.get("rendezvous")
    if meet:
        where = [
            f"--nnodes={meet['nnodes']}",
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint={meet['endpoint']}",
            f"--rdzv-id={meet['id']}",
            f"--rdzv-conf=is_host={1 if meet['host'] else 0}",
        ]
    else:
        where = ["--nnodes=1", "--master_addr=127.0.0.1", f"--master_port={free_port()}"]
    return [
        "-m",
        MODULE,
        f"--nproc_per_node={launch['nproc']}",
        *where,
        *launch.get("options", []),
        *argv,
    ]


def launch_env(launch: dict | None) -> dict[str, str]:
    """Environment for a replay of a run whose script spawns its own ranks: a free
    rendezvous port here (a script that takes MASTER_PORT from the environment, or sets it
    only when unset, uses it; one that hard-codes its port keeps it)."""
    if not launch or launch.get("launcher") != SPAWN:
        return {}
    return {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}


def runs_under_launcher(argv: list[str]) -> bool:
    """True for a worker that must be a fresh interpreter (`python -m ...`), not a fork."""
    return bool(argv) and argv[0] == "-m"


def segment_journals(journal_dir: Path, replay_id: str, segment: int) -> list[Path]:
    """A segment's replay journals: one, or one per rank."""
    plain = journal_dir / replay_journal_name(replay_id, segment)
    stem = plain.name.removesuffix(SUFFIX)
    return [plain, *journal_dir.glob(f"{stem}.rank*{SUFFIX}")]


__all__ = [
    "Launch",
    "fit",
    "free_port",
    "gpus_here",
    "launch_argv",
    "launch_env",
    "launches",
    "runs_under_launcher",
    "segment_journals",
    "settle",
]
