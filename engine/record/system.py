"""System metrics of a recording process, sampled every SAMPLE_S seconds: CPU, memory, GPU.

An engineer reading a slow or failed run asks what the machine did meanwhile: was the
GPU busy, did memory climb? The flusher thread (runtime.py) calls `SystemSampler.drain`
on each of its passes; a sample is taken only when SAMPLE_S has passed, so training's own
thread never waits for it, and any failure turns sampling off with one line on stderr
and one `system` event saying why: it never reaches the training script.

Each sample is one `system` event: wall time, rank, and {name: value}. Names:
- `cpu_percent`: the host's CPU busy share, 0-100 over all cores (psutil, else /proc/stat);
- `process_cpu_percent`: this process's CPU time over the interval (100 = one core busy);
- `memory_used_bytes`, `memory_percent`: the host's memory in use (psutil, else
  /proc/meminfo's MemTotal - MemAvailable); `process_rss_bytes`: this process's resident set;
- `gpu<i>_util_percent`, `gpu<i>_memory_used_bytes`, `gpu<i>_power_w`: each GPU, from
  NVML (nvidia-ml-py's `pynvml`), only where it is importable and a driver is present.
What the machine does not expose is left out of the sample, never guessed.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from florwb_engine import settings
from florwb_engine.journal_events import System

SAMPLE_S = settings.SYSTEM_SAMPLE_S.default
SAMPLE_ENV = settings.SYSTEM_SAMPLE_S.name  # seconds between samples; 0 turns sampling off


def sample_interval() -> float:
    return settings.read(settings.SYSTEM_SAMPLE_S)


class SystemSampler:
    """Samples on the flusher's thread when due; `nvml` gives NVML handles once ready."""

    def __init__(
        self,
        rank: int | None,
        nvml: Callable[[], Any] | None = None,
        interval: float | None = None,
    ) -> None:
        self.rank = rank
        self.interval = sample_interval() if interval is None else interval
        self.nvml = nvml
        self.off = self.interval <= 0
        self._psutil = _psutil()
        self._host_prev: tuple[float, float] | None = None
        self._proc_prev = (time.monotonic(), 0.0)
        self._next = time.monotonic() + self.interval
        self._failed: str | None = None  # why the first readings failed: said at the first drain
        try:
            self._host_prev = self._host_cpu_times()
            self._proc_prev = (time.monotonic(), _process_cpu_s())
        except Exception as exc:  # built inside the training process: it must never raise
            self._failed = f"{type(exc).__name__}: {str(exc)[:200]}"

    def drain(self, events: list) -> None:
        """Append a `system` event when a sample is due (called by the flusher)."""
        if self.off or time.monotonic() < self._next:
            return
        self._next = time.monotonic() + self.interval
        try:
            if self._failed is not None:
                raise RuntimeError(self._failed)
            values = self.sample()
        except Exception as exc:  # sampling must never reach training: stop, say why once
            self.off = True
            why = self._failed or f"{type(exc).__name__}: {str(exc)[:200]}"
            print(f"florwb: system metrics no longer sampled: {why}", file=sys.stderr)
            events.append(System(time=time.time(), rank=self.rank, error=why).to_dict())
            return
        events.append(System(time=time.time(), rank=self.rank, values=values).to_dict())

    def sample(self) -> dict[str, float]:
        out: dict[str, float] = {}
        host = self._host_cpu_times()
        if host is not None and self._host_prev is not None:
            busy = host[0] - self._host_prev[0]
            total = host[1] - self._host_prev[1]
            if total > 0:
                out["cpu_percent"] = round(100.0 * busy / total, 2)
        self._host_prev = host
        now, cpu_s = time.monotonic(), _process_cpu_s()
        then, before = self._proc_prev
        if now > then:
            out["process_cpu_percent"] = round(100.0 * (cpu_s - before) / (now - then), 2)
        self._proc_prev = (now, cpu_s)
        out.update(self._memory())
        out.update(self._gpus())
        return out

    def _host_cpu_times(self) -> tuple[float, float] | None:
        """(busy, total) CPU seconds of the host since boot."""
        if self._psutil is not None:
            t = self._psutil.cpu_times()
            total = sum(t)
            return total - t.idle - getattr(t, "iowait", 0.0), total
        try:
            fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
        except OSError:
            return None
        ticks = [float(f) for f in fields]
        idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0.0)
        return sum(ticks) - idle, sum(ticks)

    def _memory(self) -> dict[str, float]:
        out: dict[str, float] = {}
        if self._psutil is not None:
            memory = self._psutil.virtual_memory()
            out["memory_used_bytes"] = float(memory.total - memory.available)
            out["memory_percent"] = float(memory.percent)
            out["process_rss_bytes"] = float(self._psutil.Process().memory_info().rss)
            return out
        try:
            info = dict(
                (line.split(":")[0], float(line.split()[1]) * 1024)
                for line in Path("/proc/meminfo").read_text().splitlines()
                if line.startswith(("MemTotal:", "MemAvailable:"))
            )
            used = info["MemTotal"] - info["MemAvailable"]
            out["memory_used_bytes"] = used
            out["memory_percent"] = round(100.0 * used / info["MemTotal"], 2)
        except (OSError, KeyError, ValueError, ZeroDivisionError):
            pass
        try:
            pages = int(Path("/proc/self/statm").read_text().split()[1])
            out["process_rss_bytes"] = float(pages * os.sysconf("SC_PAGE_SIZE"))
        except (OSError, ValueError, IndexError):
            pass
        return out

    def _gpus(self) -> dict[str, float]:
        meter = self.nvml() if self.nvml is not None else None
        if meter is None:
            return {}
        nvml, out = meter.nvml, {}
        for i, handle in enumerate(meter.handles):
            util = nvml.nvmlDeviceGetUtilizationRates(handle)
            out[f"gpu{i}_util_percent"] = float(util.gpu)
            out[f"gpu{i}_memory_used_bytes"] = float(nvml.nvmlDeviceGetMemoryInfo(handle).used)
            out[f"gpu{i}_power_w"] = nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0
        return out


def _psutil() -> Any:
    try:
        import psutil  # type: ignore[import-untyped]
    except ImportError:
        return None
    return psutil


def _process_cpu_s() -> float:
    times = os.times()
    return times.user + times.system
