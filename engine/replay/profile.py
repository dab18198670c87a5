"""Where a replay's time went: `florwb replay --profile`.

A replay's wall time is split into the parts a user can act on: start (the command line
and planning), worker start / import (waiting for the fork server's imports, then the old
script's own imports up to its first florwb call), materialising the version, restore
(checkpoint loads), compute (the user's code, including the iterations re-executed),
ingest (the catalog's sessions: journals in, fidelity checks, verdicts) and other.

The executor times its own phases; each worker's runtime (record/replaying.py) writes its
times into its segment's progress file when it finishes, the file the executor already
reads. Workers run side by side, so their seconds are spread over the wall time they ran
in: each part gets its share of the workers' summed seconds, and the parts never add up to
more than the wall time.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

PARTS = ("start", "worker_start", "materialise", "restore", "compute", "ingest", "other")
LABELS = {
    "start": "start (CLI + planning)",
    "worker_start": "worker start / import",
    "materialise": "materialise the version",
    "restore": "restore (checkpoint loads)",
    "compute": "compute (user code)",
    "ingest": "ingest (catalog, fidelity)",
    "other": "other",
}


@dataclass
class WorkerTimes:
    """One segment's worker, in Unix seconds (the executor's and the worker's clocks are
    the same machine's)."""

    requested: float  # the executor asked the fork server for it
    exited: float  # the executor saw it end
    run_start: float | None = None  # its first florwb call: its imports are done
    end: float | None = None  # its last iteration is done (the journal's last flush next)
    restore_s: float = 0.0  # checkpoint loads and restores inside the worker
    loads: int = 0  # checkpoint files read

    def parts(self) -> dict[str, float]:
        """Its seconds per part; a worker that never reported (it failed, or its script
        ended without reaching the end of its main loop) counts as other."""
        life = max(0.0, self.exited - self.requested)
        if self.run_start is None or self.end is None:
            return {"other": life}
        started = min(max(0.0, self.run_start - self.requested), life)
        ran = min(max(0.0, self.end - self.run_start), life - started)
        restore = min(self.restore_s, ran)
        return {
            "worker_start": started,
            "restore": restore,
            "compute": ran - restore,
            "other": life - started - ran,
        }


@dataclass
class Profiler:
    """The executor's clock: spans by part, and the workers' reports."""

    began: float  # when the user started the replay (the command's process start)
    executing: float = field(default_factory=time.time)  # when the executor took over
    spans: dict[str, float] = field(default_factory=dict)
    workers: list[WorkerTimes] = field(default_factory=list)
    run_s: float = 0.0  # wall time while workers ran, less ingestion done meanwhile
    measured_workers: bool = True  # False on Ray: the tasks' own times stay remote
    fork_server: dict | None = None  # which fork server ran the workers (ForkServer.identity)

    @contextmanager
    def span(self, part: str) -> Iterator[None]:
        t = time.time()
        try:
            yield
        finally:
            self.spans[part] = self.spans.get(part, 0.0) + time.time() - t

    def result(self, ended: float | None = None) -> dict:
        """The breakdown: `wall_s`, `parts` (seconds, summing to at most wall_s) and the
        workers' own seconds (`worker_s`, summed over workers, not spread)."""
        ended = time.time() if ended is None else ended
        wall = max(0.0, ended - self.began)
        parts = dict.fromkeys(PARTS, 0.0)
        parts["start"] = max(0.0, self.executing - self.began)
        for part, seconds in self.spans.items():
            parts[part] += seconds
        summed = dict.fromkeys(PARTS, 0.0)
        for worker in self.workers:
            for part, seconds in worker.parts().items():
                summed[part] += seconds
        total = sum(summed.values())
        if self.measured_workers and total > 0:
            scale = self.run_s / max(total, self.run_s)  # side by side: their share
            for part, seconds in summed.items():
                parts[part] += seconds * scale
        parts["other"] = 0.0
        measured = sum(parts.values())
        if measured > wall > 0:  # clocks read a tick apart: never more than the wall time
            parts = {part: seconds * wall / measured for part, seconds in parts.items()}
        parts["other"] = max(0.0, wall - sum(parts.values()))
        return {
            "wall_s": wall,
            "parts": parts,
            "worker_s": {k: v for k, v in summed.items() if v},
            "workers": len(self.workers),
            "checkpoint_loads": sum(w.loads for w in self.workers),
            "workers_measured": self.measured_workers,
            **({"fork_server": self.fork_server} if self.fork_server else {}),
        }


def text(profile: dict) -> list[str]:
    """The breakdown as lines for a terminal."""
    wall = profile["wall_s"]
    lines = [f"profile: {wall:.2f} s wall"]
    for part in PARTS:
        seconds = profile["parts"][part]
        share = 100 * seconds / wall if wall else 0.0
        lines.append(f"  {LABELS[part]:<28} {seconds:7.2f} s {share:5.1f}%")
    lines.append(
        f"  ({profile['workers']} worker(s), {profile['checkpoint_loads']} checkpoint load(s)"
        + ("" if profile["workers_measured"] else "; Ray tasks' own parts not measured")
        + ")"
    )
    server = profile.get("fork_server")
    if server and "session" in server:
        warm = "warm" if server.get("served", 1) > 1 else "started by this replay"
        lines.append(f"  (shared fork server {server['server']}, {warm})")
    return lines
