"""Where a run ran and what it needed: device, library versions, peak memory, energy,
and the thread settings its numbers depend on.

Placement on memory-limited devices and the energy a run cost are questions asked after
the fact, so every run records them. Nothing here touches `flor.log`'s hot path: readings
are taken once when the run starts and once when it ends, and energy counters that can
wrap are read by a background thread every ENERGY_SAMPLE_S only where such a counter is
readable. What the machine does not expose is None, never a guess.

Rules that keep recording cheap and harmless:
- torch is never imported here: its versions and CUDA figures are read only when the
  script imported torch itself (`sys.modules`).
- CUDA is never initialised: GPU figures from torch only once the script initialised CUDA;
  otherwise GPU names come from the driver's /proc files or NVML (if pynvml is installed).
- The intra-op thread count changes how torch splits a reduction, so the same script gives
  other float bits with other threads: torch's intra- and inter-op counts (from the torch
  the script imported, read at the first florwb call that finds it) and the OMP/MKL
  environment are recorded, and replays use them (replay/cores.py `recorded_threads`).
- Linux RAPL package counters (`/sys/class/powercap/intel-rapl:N/energy_uj`) are often
  readable by root only; unreadable means energy None.
"""

from __future__ import annotations

import os
import resource
import sys
import threading
from pathlib import Path
from typing import Any

POWERCAP = Path("/sys/class/powercap")
NVIDIA_PROC = Path("/proc/driver/nvidia/gpus")
ENERGY_SAMPLE_S = 20.0  # RAPL wraps after max_energy_range_uj: minutes at full power


def cpu_name(cpuinfo: Path = Path("/proc/cpuinfo")) -> str | None:
    """The CPU model as the kernel names it (x86 `model name`, arm `Hardware`/`Model`)."""
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        import platform

        return platform.processor() or None
    for key in ("model name", "Hardware", "Model", "cpu model"):
        for line in text.splitlines():
            name, sep, value = line.partition(":")
            if sep and name.strip() == key and value.strip():
                return value.strip()
    return None


def proc_gpu_names(root: Path = NVIDIA_PROC) -> list[str]:
    """NVIDIA GPU models from the driver's /proc files: no CUDA, no NVML needed."""
    names: list[str] = []
    if not root.is_dir():
        return names
    for info in sorted(root.glob("*/information")):
        try:
            for line in info.read_text(errors="replace").splitlines():
                key, _, value = line.partition(":")
                if key.strip() == "Model":
                    names.append(value.strip())
                    break
        except OSError:
            continue
    return names


def peak_rss_bytes() -> int:
    """Peak resident set of this process (ru_maxrss: KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


# --- energy -------------------------------------------------------------------------


class RaplCounter:
    """One RAPL package zone: microjoules since some point, wrapping at `max_uj`."""

    def __init__(self, zone: Path) -> None:
        self.path = zone / "energy_uj"
        self.max_uj = int((zone / "max_energy_range_uj").read_text())
        self.last = self.read()
        self.total_uj = 0

    def read(self) -> int:
        return int(self.path.read_text())

    def sample(self) -> None:
        now = self.read()
        delta = now - self.last
        if delta < 0:  # wrapped once since the last sample (sampled often enough)
            delta += self.max_uj + 1
        self.total_uj += delta
        self.last = now


def rapl_counters(root: Path = POWERCAP) -> list[RaplCounter]:
    """Readable top-level package zones; sub-zones (core, dram) are inside a package's
    count, and `psys` covers the whole platform, so both are left out to avoid counting
    energy twice."""
    counters = []
    for zone in sorted(root.glob("intel-rapl:*")):
        if zone.name.count(":") != 1:
            continue
        try:
            if not (zone / "name").read_text().strip().startswith("package"):
                continue
            counters.append(RaplCounter(zone))
        except (OSError, ValueError):  # root-only counters (the common case) or no zone
            continue
    return counters


class NvmlEnergy:
    """Total GPU energy from NVML (millijoules since driver load, 64-bit: no wrap)."""

    def __init__(self) -> None:
        import pynvml  # type: ignore[import-not-found]

        self.nvml = pynvml
        pynvml.nvmlInit()
        self.handles = [
            pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())
        ]
        self.names = [_text(pynvml.nvmlDeviceGetName(h)) for h in self.handles]
        self.start = self.read()

    def read(self) -> int:
        return sum(self.nvml.nvmlDeviceGetTotalEnergyConsumption(h) for h in self.handles)

    def joules(self) -> float:
        return (self.read() - self.start) / 1000.0


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _nvml() -> NvmlEnergy | None:
    try:
        import pynvml  # noqa: F401  # type: ignore[import-not-found]
    except ImportError:
        return None
    try:
        meter = NvmlEnergy()
    except Exception as exc:  # NVMLError (no driver, no energy counter on this GPU)
        print(f"florwb: GPU energy not recorded: {str(exc)[:200]}", file=sys.stderr)
        return None
    return meter if meter.handles else None


# --- the context of one run -----------------------------------------------------------


class RunContext:
    """Readings of one run: `at_start()` goes into the start event (what is known then and
    survives a kill), `at_end()` into the end event (everything, measured at the end)."""

    def __init__(self) -> None:
        self.rapl = rapl_counters()
        self.nvml: NvmlEnergy | None = None
        self._lock = threading.Lock()
        self._threads: dict[str, Any] | None = None  # the first reading with torch imported
        self._stop = threading.Event()
        self._sampler: threading.Thread | None = None
        self._nvml_ready = threading.Event()
        if self.rapl or _may_have_nvml():
            self._sampler = threading.Thread(target=self._sample, name="florwb-ctx", daemon=True)
            self._sampler.start()
        else:
            self._nvml_ready.set()

    def nvml_meter(self) -> NvmlEnergy | None:
        """NVML once this run's sampler thread started it (None until then, or without)."""
        return self.nvml if self._nvml_ready.is_set() else None

    def _sample(self) -> None:
        # NVML starts here, off the training thread: its init takes tens of milliseconds.
        self.nvml = _nvml() if _may_have_nvml() else None
        self._nvml_ready.set()
        while not self._stop.wait(ENERGY_SAMPLE_S):
            self._sample_rapl()

    def _sample_rapl(self) -> None:
        with self._lock:
            for counter in list(self.rapl):
                try:
                    counter.sample()
                except (OSError, ValueError):  # the zone went away: its energy is unknown
                    self.rapl = []
                    return

    def at_start(self) -> dict[str, Any]:
        gpus = proc_gpu_names()
        return {
            "cpu_name": cpu_name(),
            "cpu_count": os.cpu_count(),
            "gpu_name": gpus[0] if gpus else None,
            "gpu_count": len(gpus) or None,
            **self.threads(),
        }

    def threads(self) -> dict[str, Any]:
        """The run's thread settings, as first seen once the script had imported torch
        (a later `torch.set_num_threads` in the script is the script's own: a replay runs
        it too); before that only the environment."""
        if self._threads is not None:
            return self._threads
        found = thread_facts()
        if found["torch_threads"] is not None:
            self._threads = found
        return found

    def at_end_or_error(self) -> dict[str, Any]:
        """`at_end()`, or what failed in one line (kept with the run): the end of a run
        must never raise into the training script's exit."""
        try:
            return self.at_end()
        except Exception as exc:
            reason = f"{type(exc).__name__}: {str(exc)[:200]}"
            print(f"florwb: run context not recorded: {reason}", file=sys.stderr)
            return {"error": reason}

    def at_end(self) -> dict[str, Any]:
        self._stop.set()
        self._nvml_ready.wait(timeout=5)
        self._sample_rapl()
        context = self.at_start()
        context.update(_torch_context())
        if context["device_kind"] == "cuda":
            names = context.pop("cuda_names")
            context["gpu_name"], context["gpu_count"] = names[0], len(names)
        else:
            context.pop("cuda_names", None)
        if context["gpu_name"] is None and self.nvml is not None:
            context["gpu_name"], context["gpu_count"] = self.nvml.names[0], len(self.nvml.names)
        context["device_name"] = (
            context["gpu_name"] if context["device_kind"] == "cuda" else context["cpu_name"]
        )
        context["peak_rss_bytes"] = peak_rss_bytes()
        cpu_j = sum(c.total_uj for c in self.rapl) / 1e6 if self.rapl else None
        gpu_j = None
        if self.nvml is not None:
            try:
                gpu_j = self.nvml.joules()
            except Exception as exc:  # NVMLError: say so, record no number
                print(f"florwb: GPU energy not recorded: {str(exc)[:200]}", file=sys.stderr)
        context["energy_cpu_j"] = cpu_j
        context["energy_gpu_j"] = gpu_j
        parts = [j for j in (cpu_j, gpu_j) if j is not None]
        context["energy_j"] = sum(parts) if parts else None
        context["energy_note"] = None if parts else energy_unavailable(self.nvml is not None)
        return context


def energy_unavailable(nvml_started: bool, root: Path = POWERCAP) -> str:
    """Why no energy counter was readable, in one line (a run says so instead of NULL)."""
    zones = [z for z in sorted(root.glob("intel-rapl:*")) if z.name.count(":") == 1]
    if not root.is_dir():
        cpu = f"no RAPL counters ({root} absent: not Linux on Intel/AMD, or a container)"
    elif not zones:
        cpu = f"no RAPL package zone under {root}"
    else:
        try:
            (zones[0] / "energy_uj").read_text()
            cpu = "RAPL counters went away during the run"
        except OSError as exc:
            cpu = f"RAPL unreadable ({zones[0] / 'energy_uj'}: {exc.strerror or exc}; root only)"
    if nvml_started:
        gpu = "NVML gave no energy"
    elif not _may_have_nvml():
        gpu = "no NVIDIA GPU driver"
    else:
        try:
            import pynvml  # noqa: F401  # type: ignore[import-not-found]

            gpu = "NVML did not start"
        except ImportError:
            gpu = "pynvml not installed (pip install nvidia-ml-py)"
    return f"{cpu}; {gpu}"


THREAD_ENVIRONMENT = {"omp_num_threads": "OMP_NUM_THREADS", "mkl_num_threads": "MKL_NUM_THREADS"}


def thread_facts() -> dict[str, Any]:
    """torch's intra- and inter-op thread counts (None when torch is not imported: importing
    it here would cost the script seconds) and the OMP/MKL environment as set (None: unset)."""
    torch = sys.modules.get("torch")
    out: dict[str, Any] = {"torch_threads": None, "torch_interop_threads": None}
    if torch is not None and hasattr(torch, "get_num_threads"):
        try:
            out["torch_threads"] = int(torch.get_num_threads())
            out["torch_interop_threads"] = int(torch.get_num_interop_threads())
        except Exception:  # a torch half imported (the script's import failed): unknown
            out["torch_threads"] = out["torch_interop_threads"] = None
    for key, variable in THREAD_ENVIRONMENT.items():
        out[key] = os.environ.get(variable)
    return out


def _may_have_nvml() -> bool:
    return NVIDIA_PROC.is_dir()


def _torch_context() -> dict[str, Any]:
    """Versions and CUDA figures from the torch the script imported (None without one)."""
    torch = sys.modules.get("torch")
    out: dict[str, Any] = {
        "device_kind": "cpu",
        "torch_version": None,
        "cuda_version": None,
        "gpu_peak_bytes": None,
    }
    if torch is None or not hasattr(torch, "cuda"):
        return out
    out["torch_version"] = str(getattr(torch, "__version__", "")) or None
    version = getattr(torch, "version", None)
    out["cuda_version"] = getattr(version, "cuda", None)
    cuda = torch.cuda
    if cuda.is_initialized():  # the script used CUDA: asking costs nothing new
        count = cuda.device_count()
        out["device_kind"] = "cuda"
        out["cuda_names"] = [cuda.get_device_name(i) for i in range(count)]
        out["gpu_peak_bytes"] = [int(cuda.max_memory_allocated(i)) for i in range(count)]
    return out
