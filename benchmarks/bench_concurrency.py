"""Readers never wait on readers: how long any reader waits on another process's hold of the
catalog while many read at once, one of them very slowly, and recordings go on.

In one throwaway project, for `--seconds`, all real processes:
  2 recordings       a script logging a few values per step with short sleeps, so journals
                     grow all the time and every reader has something to ingest
  2 pagers           the workbench's reads: the history refresh (load_history_values, as
                     the live monitor does), then a result paged through (ResultStream over
                     `logs`, a page every 0.2 s, left open between pages), again and again
  4 query loops      `flor.query`-style SQL, the run listing and `flor.dataframe` in a loop
  1 slow export      `florwb query "SELECT * FROM range(50000000)" --format csv` into a pipe
                     this script reads 4 KB of every 50 ms (it streams for the whole run)

Each pager and query loop counts, per read, the seconds its connections waited on DuckDB's
lock (engine/store/db.py's `freed` callback: the time from the first refusal to the file).

reader_wait_p95_s        95th percentile of the wait per read (0 when it did not wait)
reader_wait_max_s        the longest wait
reader_latency_p95_s     95th percentile of a whole read (waits, ingestion, the query)
reader_reads             reads measured
reader_reads_waited      reads that waited at all
slow_export_rows         rows the slow export had streamed by the end (it was still going)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from _common import PYTHON, REPO, note, result, temp_git_repo

RECORDING = """
import time
import florwb as flor
lr = flor.arg("lr", 0.1)
until = flor.arg("until", 0.0)
for epoch in flor.loop("epoch", range(10**6)):
    for step in flor.loop("step", range(20)):
        flor.log("loss", lr / (1 + step))
        time.sleep(0.005)
    flor.log("acc", epoch * 0.01)
    if time.time() > until:
        break
flor.commit()
"""

WORKER = """
import json, sys, time
from pathlib import Path

import florwb as flor
from florwb_engine.store import Store
from florwb_engine.store.db import lock_waits_reported
from florwb_engine.store.history_values import load_history_values
from florwb_engine.store.result_stream import ResultStream

role, until, out = sys.argv[1], float(sys.argv[2]), Path(sys.argv[3])
store = Store(Path.cwd())
lines = []


def measured(kind, read):
    waits = []
    began = time.perf_counter()
    with lock_waits_reported(lambda holder, waited_s: None, waits.append):
        value = read()
    lines.append(json.dumps({"kind": kind, "wait": sum(waits),
                             "took": time.perf_counter() - began}))
    return value


n = 0
while time.time() < until:
    n += 1
    if role == "pager":
        measured("history", lambda: load_history_values(store, "loss"))
        stream = ResultStream(store, "SELECT * FROM logs")
        measured("page", lambda: stream.fetch(1000))
        for _ in range(5):
            time.sleep(0.2)  # a user reading the page
            measured("page", lambda: stream.fetch(1000))
        stream.close()
    else:
        kind = ("query", "runs", "dataframe")[n % 3]
        if kind == "query":
            measured(kind, lambda: flor.query("SELECT name, count(*) FROM logs GROUP BY 1"))
        elif kind == "runs":
            measured(kind, store.runs)
        else:
            measured(kind, lambda: flor.dataframe("loss", "acc"))
        time.sleep(0.05)
out.write_text("\\n".join(lines) + "\\n")
"""


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    env.update(PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", FLORWB_LOCK_WAIT_S="120")
    return env


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return 0.0
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--pagers", type=int, default=2)
    parser.add_argument("--queries", type=int, default=4)
    parser.add_argument("--recordings", type=int, default=2)
    args = parser.parse_args()
    env = _env()
    with temp_git_repo() as project:
        (project / "train.py").write_text(RECORDING)
        (project / "worker.py").write_text(WORKER)
        warmup = time.time() + 1.0  # one short run, so every reader finds a catalog
        subprocess.run(
            [str(PYTHON), "train.py", "--kwargs", f"until={warmup}"], cwd=project, env=env
        )
        subprocess.run([str(PYTHON), "-m", "florwb.cli", "runs"], cwd=project, env=env, check=True)
        slow = subprocess.Popen(
            [
                str(PYTHON),
                "-m",
                "florwb.cli",
                "query",
                "SELECT * FROM range(50000000)",
                "--format",
                "csv",
            ],
            cwd=project,
            env=env,
            stdout=subprocess.PIPE,
        )
        assert slow.stdout is not None
        # it streams before the others start, so it is mid-result for the whole measurement
        newlines = slow.stdout.readline().count(b"\n") + slow.stdout.readline().count(b"\n")
        until = time.time() + args.seconds
        procs: list[subprocess.Popen] = []
        outs: list[Path] = []
        for i in range(args.recordings):
            procs.append(
                subprocess.Popen(
                    [str(PYTHON), "train.py", "--kwargs", f"lr={0.1 * (i + 1)}", f"until={until}"],
                    cwd=project,
                    env=env,
                    stdout=subprocess.DEVNULL,
                )
            )
        for role, count in (("pager", args.pagers), ("query", args.queries)):
            for i in range(count):
                outs.append(project.parent / f"{role}{i}.jsonl")
                procs.append(
                    subprocess.Popen(
                        [str(PYTHON), "worker.py", role, str(until), str(outs[-1])],
                        cwd=project,
                        env=env,
                    )
                )
        while time.time() < until:
            newlines += slow.stdout.read1(4096).count(b"\n")
            time.sleep(0.05)
        still_streaming = slow.poll() is None
        slow.kill()
        slow.wait()
        failed = [p.args for p in procs if p.wait(timeout=300) != 0]
        if failed:
            raise SystemExit(f"processes failed: {failed}")
        reads = [json.loads(line) for out in outs for line in out.read_text().splitlines()]
    waits = [r["wait"] for r in reads]
    note(f"{len(reads)} reads by {args.pagers} pagers and {args.queries} query loops")
    for kind in sorted({r["kind"] for r in reads}):
        mine = [r for r in reads if r["kind"] == kind]
        wait = percentile([r["wait"] for r in mine], 0.95)
        took = percentile([r["took"] for r in mine], 0.95)
        note(f"{kind}: {len(mine)} reads, wait p95 {wait:.3f} s, took p95 {took:.3f} s")
    note(f"the slow export was {'still' if still_streaming else 'no longer'} streaming at the end")
    result("reader_wait_p95_s", percentile(waits, 0.95), "s")
    result("reader_wait_max_s", max(waits, default=0.0), "s")
    result("reader_latency_p95_s", percentile([r["took"] for r in reads], 0.95), "s")
    result("reader_reads", len(reads), "reads")
    result("reader_reads_waited", sum(1 for w in waits if w > 0), "reads")
    result("slow_export_rows", max(newlines - 1, 0), "rows")


if __name__ == "__main__":
    sys.exit(main())
