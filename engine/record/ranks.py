"""Which rank of a multi-process launch this process is, read from the launcher.

`torchrun` / `python -m torch.distributed.run` start every worker with RANK, WORLD_SIZE,
LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_WORLD_SIZE and TORCHELASTIC_RUN_ID in its environment;
`torch.multiprocessing.spawn` calls `fn(i, *args)` from its `_wrap` function in each child.
On one node nothing here talks to the other ranks: every rank derives the same run id from
what the launch shares (the rendezvous id, or the launching process on this host: its pid
and kernel start time), so all ranks of one launch write into one run without any
coordination. Ranks on several nodes share no launching process and may share no fresh
rendezvous id, so they agree on a run id in torchrun's agent store (`_agreed_run_id`).

Each rank writes its own journal (`<run>.rank<r>.journal`); rank 0 writes the checkpoints
(DDP keeps the replicas identical, so one copy of the state is enough) and every rank keeps
its own RNG states beside them (`checkpoints/<run>/rank<r>/`).
"""

from __future__ import annotations

import hashlib
import os
import socket
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from florwb_engine import processes

# Launcher options that say how the launch met (nodes, ports, rendezvous): a replay on this
# machine picks its own; everything else the launcher was given is passed again.
_PLACEMENT_OPTIONS = {
    "nproc_per_node",
    "nproc-per-node",
    "nnodes",
    "node_rank",
    "node-rank",
    "master_addr",
    "master-addr",
    "master_port",
    "master-port",
    "rdzv_backend",
    "rdzv-backend",
    "rdzv_endpoint",
    "rdzv-endpoint",
    "rdzv_id",
    "rdzv-id",
    "rdzv_conf",
    "rdzv-conf",
    "standalone",
    "log_dir",
    "log-dir",
    "local_addr",
    "local-addr",
}
_FLAGS = {"standalone", "no_python", "no-python", "run_path", "run-path", "module", "m"}
SPAWN = "mp.spawn"
TORCHRUN = "torchrun"


@dataclass
class Rank:
    """This process's place in its launch, as the start event and the catalog keep it."""

    rank: int
    world_size: int | None  # None until known (mp.spawn before init_process_group)
    local_rank: int
    launcher: str  # TORCHRUN or SPAWN
    launch_id: str  # the same in every rank of one launch
    nnodes: int = 1
    launcher_argv: list[str] = field(default_factory=list)  # the launcher's own options
    # seconds from the launching process's start to this rank's first flor call: what a
    # replay pays again to start the launch (replay/cost.py), measured, not modelled
    launch_s: float | None = field(default_factory=lambda: launch_seconds())

    def to_event(self) -> dict:
        return asdict(self)


def detect() -> Rank | None:
    """The rank of this process, or None for a process that is not one of a launch."""
    if processes.is_multiprocessing_child():
        return _spawned()
    env = os.environ
    if "RANK" not in env or "WORLD_SIZE" not in env or "LOCAL_RANK" not in env:
        return None
    try:
        rank, world = int(env["RANK"]), int(env["WORLD_SIZE"])
        local = int(env["LOCAL_RANK"])
        nnodes = int(env.get("GROUP_WORLD_SIZE", "1"))
    except ValueError:
        return None
    run_id = env.get("TORCHELASTIC_RUN_ID", "")
    restart = env.get("TORCHELASTIC_RESTART_COUNT", "0")
    if nnodes > 1 and (agreed := _agreed_run_id(restart)) is not None:
        shared = f"agreed:{agreed}"
    elif run_id and run_id != "none":
        shared = f"rdzv:{run_id}:{restart}"
    elif nnodes > 1:  # no agent store to agree in: what every node's ranks see alike
        shared = f"{env.get('MASTER_ADDR')}:{env.get('MASTER_PORT')}:{restart}"
    else:  # static rendezvous: the agent that started us, on this host
        shared = f"{env.get('MASTER_ADDR')}:{env.get('MASTER_PORT')}:{restart}:{_parent_key()}"
    return Rank(rank, world, local, TORCHRUN, shared, nnodes, _launcher_options())


def _agreed_run_id(restart: str) -> str | None:
    """The run id the ranks of a multi-node launch agree on in torchrun's agent store.

    Ranks on different hosts share no launching process, and a rendezvous id or master
    port repeats from launch to launch; so every rank proposes a fresh id and the store's
    compare-and-set keeps the first, which all of them read back. None without an agent
    store (TORCHELASTIC_USE_AGENT_STORE) or when it cannot be reached: then the ranks fall
    back to what the launch shares."""
    env = os.environ
    if env.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() != "true":
        return None
    try:
        from datetime import timedelta

        import torch.distributed as dist

        store = dist.TCPStore(
            env["MASTER_ADDR"],
            int(env["MASTER_PORT"]),
            is_master=False,
            timeout=timedelta(seconds=30),
        )
        proposed = time.strftime("%Y%m%d-%H%M%S") + "-" + os.urandom(3).hex()
        agreed = store.compare_set(f"florwb/run_id/{restart}", "", proposed)
        return bytes(agreed).decode() or None
    except Exception:  # noqa: BLE001 - recording never stops training: fall back
        return None


def _spawned() -> Rank | None:
    """A child of torch.multiprocessing.spawn: `_wrap(fn, i, ...)` is on the stack."""
    frame = sys._getframe()
    while frame is not None:
        code = frame.f_code
        if code.co_name == "_wrap" and frame.f_globals.get("__name__") == (
            "torch.multiprocessing.spawn"
        ):
            i = frame.f_locals.get("i")
            if type(i) is not int:
                return None
            return Rank(i, world_size(), i, SPAWN, f"spawn:{_parent_key()}")
        frame = frame.f_back  # type: ignore[assignment]
    return None


def launch_seconds() -> float | None:
    """Seconds since the launching process (torchrun's agent, mp.spawn's parent) started."""
    started = processes.start_time(os.getppid())
    return None if started is None else round(max(time.time() - started, 0.0), 3)


def world_size() -> int | None:
    """The process group's size once the script initialised it; WORLD_SIZE before."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return int(dist.get_world_size())
    value = os.environ.get("WORLD_SIZE")
    return int(value) if value and value.isdigit() else None


def _parent_key() -> str:
    ppid = os.getppid()
    return f"{socket.gethostname()}:{ppid}:{processes.start_ticks(ppid)}"


def run_id(rank: Rank) -> str:
    """The run id every rank of the launch derives alike: the launching process's start
    time (on one host) and a hash of what the launch shares."""
    if rank.launch_id.startswith("agreed:"):
        return rank.launch_id.removeprefix("agreed:")
    digest = hashlib.sha1(rank.launch_id.encode()).hexdigest()[:6]
    started = processes.start_time(os.getppid()) if rank.nnodes == 1 else None
    if started is None:
        return f"dist-{hashlib.sha1(rank.launch_id.encode()).hexdigest()[:12]}"
    return time.strftime("%Y%m%d-%H%M%S", time.localtime(started)) + "-" + digest


def journal_name(stem: str, rank: Rank | None, suffix: str) -> str:
    """`<stem>.rank<r><suffix>`: the rank in the journal's name (and in its start event)."""
    return f"{stem}{suffix}" if rank is None else f"{stem}.rank{rank.rank}{suffix}"


def rank_folder(folder: Path, rank: Rank | None) -> Path:
    """Where a rank keeps its own RNG states: the run's checkpoint folder for rank 0."""
    return folder if rank is None or rank.rank == 0 else folder / f"rank{rank.rank}"


def entry_slot(rank: Rank | None) -> int:
    """Which block of loop entry ids this rank's flor.loops take (see api.SEGMENT_ENTRIES):
    ranks of one run and source must not share entry ids, or coordinates would mix."""
    return 0 if rank is None else rank.rank


def _launcher_options() -> list[str]:
    """The options torchrun was given, less where it met (see _PLACEMENT_OPTIONS), read
    from the agent's command line (Linux); the script and its arguments are not included."""
    try:
        with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:
            argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []
    start = next(
        (i + 1 for i, a in enumerate(argv) if a == "torch.distributed.run" or _is_torchrun(a)),
        None,
    )
    if start is None:
        return []
    kept: list[str] = []
    i = start
    while i < len(argv):
        arg = argv[i]
        if not arg.startswith("-"):
            break  # the training script: the rest is its own argv
        key, has_value = arg.lstrip("-").split("=", 1)[0], "=" in arg
        takes_next = not has_value and key not in _FLAGS
        if key not in _PLACEMENT_OPTIONS:
            kept.append(arg)
            if takes_next and i + 1 < len(argv):
                kept.append(argv[i + 1])
        i += 2 if takes_next else 1
    return kept


def _is_torchrun(arg: str) -> bool:
    return os.path.basename(arg) == "torchrun"


def is_spawned_rank() -> bool:
    """True inside the rank function of a torch.multiprocessing.spawn child."""
    return _spawned() is not None


def may_become_rank() -> bool:
    """A spawned child still re-importing the script (before its target runs): its rank
    function may record once it is called, so recording is not switched off for good."""
    mp = sys.modules.get("multiprocessing")
    return mp is not None and bool(getattr(mp.current_process(), "_inheriting", False))


def rank_file(path: str, rank: Rank | None) -> str:
    """A file of rank 0's in the run's checkpoint folder, as rank `rank` keeps it."""
    if not path or rank is None or rank.rank == 0:
        return path
    p = Path(path)
    return str(rank_folder(p.parent, rank) / p.name)


def end_fields(rank: Rank | None) -> dict:
    """The world size a spawned rank learnt only after it started (init_process_group)."""
    if rank is None:
        return {}
    if rank.world_size is None:
        rank.world_size = world_size()
    return {"world_size": rank.world_size}
