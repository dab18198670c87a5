"""How many replay workers the machine supports, and how many threads each one gets.

torch, OpenMP, MKL and OpenBLAS each start one thread per core by default. Two workers
that both do so run twice as many busy threads as there are cores, and time goes to
switching between them: on 2 cores `--workers 2` was 3-25x slower than `--workers 1`.
So each worker gets `cores // workers` threads: torch.set_num_threads in the worker
itself (a worker forked from the warm fork server has torch imported already, so the
environment alone would come too late) and OMP/MKL/OPENBLAS_NUM_THREADS in its
environment for torch imported later and for the processes the old script starts. A
lower thread count the user set in OMP_NUM_THREADS is kept.

That budget is only the default of runs recorded before their thread settings were: a run
that recorded them (record/context.py) replays with the threads it ran with, because the
intra-op thread count changes how torch splits a reduction and so the float bits of what
it logs (a run with 2 threads replayed with 1 was 1% off). The planner then runs fewer
workers, so that threads x workers stays within the cores (`workers_for_threads`).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from florwb_engine import settings

THREADS_ENV = settings.REPLAY_THREADS.name  # the worker's budget, read by the fork server's child
INTEROP_ENV = settings.REPLAY_INTEROP_THREADS.name  # the recorded inter-op count, where known
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def available_cores() -> int:
    """Cores this process may run on (its CPU affinity, which containers and taskset
    narrow), else the machine's count."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def default_workers(segments: int, cores: int | None = None) -> int:
    """What the machine and the plan support: one worker per core, and no more workers
    than independent segments to give them."""
    return max(1, min(cores or available_cores(), segments))


def threads_per_worker(
    workers: int, cores: int | None = None, environ: Mapping[str, str] | None = None
) -> int:
    """`cores // workers` (at least 1), or the user's own OMP_NUM_THREADS when lower."""
    budget = max(1, (cores or available_cores()) // max(1, workers))
    user = (os.environ if environ is None else environ).get("OMP_NUM_THREADS", "")
    if user.strip().isdigit() and int(user) >= 1:
        budget = min(budget, int(user))
    return budget


def thread_env(threads: int) -> dict[str, str]:
    """Environment variables that give a worker, and what it starts, `threads` threads."""
    return {THREADS_ENV: str(threads), **dict.fromkeys(THREAD_VARIABLES, str(threads))}


@dataclass(frozen=True)
class RecordedThreads:
    """The thread settings a run recorded at its start (record/context.py)."""

    torch: int  # torch.get_num_threads()
    interop: int | None  # torch.get_num_interop_threads()
    omp: str | None  # OMP_NUM_THREADS as set (None: unset)
    mkl: str | None  # MKL_NUM_THREADS as set

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def recorded_threads(facts: Mapping[str, Any] | None) -> RecordedThreads | None:
    """The thread settings of a run from its run_context row (store/run_context.py
    `context_of`) or a RecordedThreads' `to_json`; None for a run recorded before they
    were, or without torch, which replays with `threads_per_worker`'s budget."""
    if not facts:
        return None
    count = facts.get("torch_threads", facts.get("torch"))
    if not isinstance(count, int) or count < 1:
        return None
    interop = facts.get("torch_interop_threads", facts.get("interop"))
    return RecordedThreads(
        torch=count,
        interop=interop if isinstance(interop, int) and interop >= 1 else None,
        omp=facts.get("omp_num_threads", facts.get("omp")),
        mkl=facts.get("mkl_num_threads", facts.get("mkl")),
    )


def recorded_thread_env(threads: RecordedThreads) -> dict[str, str]:
    """A worker's environment for a run replayed with its recorded threads: torch's count
    (set in the worker by `limit_threads`), the OMP/MKL variables as the run had them
    (else torch's count, for torch imported later and processes the script starts)."""
    count = str(threads.torch)
    env = thread_env(threads.torch)
    env["OMP_NUM_THREADS"] = threads.omp or count
    env["MKL_NUM_THREADS"] = threads.mkl or count
    if threads.interop is not None:
        env[INTEROP_ENV] = str(threads.interop)
    return env


def workers_for_threads(
    workers: int, threads: Sequence[RecordedThreads | None], cores: int | None = None
) -> tuple[int, str | None]:
    """At most as many workers as keep threads x workers within the cores, for the most
    threads any run replays with; and the plan's note when that cuts `workers`."""
    counts = [t.torch for t in threads if t is not None]
    if not counts:
        return workers, None
    cores = cores or available_cores()
    most = max(counts)
    fits = max(1, cores // most)
    if workers <= fits:
        return workers, None
    return fits, (
        f"{fits} worker(s), not {workers}: runs replay with the threads they were recorded "
        f"with (up to {most}), and {fits} x {most} fits the {cores} core(s)"
    )


def limit_threads() -> None:
    """In a worker, before the old script runs: apply the budget (or the run's recorded
    threads) to a torch already imported (the fork server preloads it); a later import
    reads the environment. The inter-op count can only be set before torch's inter-op
    pool has started: a fork server that started it leaves the worker with its count."""
    threads = settings.read(settings.REPLAY_THREADS)
    if threads is None:
        return
    torch = sys.modules.get("torch")
    if torch is None:
        return
    torch.set_num_threads(threads)
    interop = settings.read(settings.REPLAY_INTEROP_THREADS)
    if interop is not None and torch.get_num_interop_threads() != interop:
        # Refused once the pool has run (a worker forked after torch used it); harmless:
        # inter-op threads run independent ops side by side, they do not split reductions,
        # so the values logged are the same.
        with contextlib.suppress(RuntimeError):
            torch.set_num_interop_threads(int(interop))
