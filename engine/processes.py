"""Identifying processes across pid reuse, so a reader can tell a killed run from a live one."""

from __future__ import annotations

import os
import time


def start_ticks(pid: int) -> int | None:
    """Kernel start time of a process (Linux); with the pid it names one process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        return int(stat.rsplit(b")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def is_gone(pid: int, ticks: int | None) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    now = start_ticks(pid)
    return ticks is not None and now is not None and now != ticks


def is_multiprocessing_child() -> bool:
    """True in processes multiprocessing started (DataLoader workers, Pool workers).

    A spawned child re-runs the script's module level while it starts; at that point
    parent_process() is not set yet, but the current process is marked as inheriting.
    """
    import sys

    mp = sys.modules.get("multiprocessing")
    if mp is None:
        return False
    return mp.parent_process() is not None or getattr(mp.current_process(), "_inheriting", False)


def start_time(pid: int) -> float | None:
    """When a process started, as a Unix time (Linux: boot time + its start ticks); the
    same for every process that asks about the same pid."""
    ticks = start_ticks(pid)
    if ticks is None:
        return None
    try:
        with open("/proc/stat", "rb") as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith(b"btime "))
    except (OSError, StopIteration, ValueError, IndexError):
        return None
    return boot + ticks / os.sysconf("SC_CLK_TCK")


def running_for(pid: int) -> float | None:
    """Seconds since a process started (Linux), to the kernel's tick: its start ticks
    against the clock since boot, not the boot time /proc/stat rounds to a second."""
    ticks = start_ticks(pid)
    if ticks is None or not hasattr(time, "CLOCK_BOOTTIME"):
        return None
    return max(0.0, time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK"))
