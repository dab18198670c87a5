"""How many replay workers the machine supports, and how many threads each one gets.

torch, OpenMP, MKL and OpenBLAS each start one thread per core by default. Two workers
that both do so run twice as many busy threads as there are cores, and time goes to
switching between them: on 2 cores `--workers 2` was 3-25x slower than `--workers 1`.
So each worker gets `cores // workers` threads: torch.set_num_threads in the worker
itself (a worker forked from the warm fork server has torch imported already, so the
environment alone would come too late) and OMP/MKL/OPENBLAS_NUM_THREADS in its
environment for torch imported later and for the processes the old script starts. A
lower thread count the user set in OMP_NUM_THREADS is kept.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

THREADS_ENV = "FLORWB_REPLAY_THREADS"  # the worker's budget, read by the fork server's child
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


def limit_threads() -> None:
    """In a worker, before the old script runs: apply the budget to a torch already
    imported (the fork server preloads it); a later import reads the environment."""
    value = os.environ.get(THREADS_ENV, "")
    if not value.isdigit() or int(value) < 1:
        return
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(int(value))
