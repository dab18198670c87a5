"""Randomized SIGKILLs of recordings, readers and replays, checked against what they had done.

recordings  a script logs `i` and the time, printing both after each flor.log; it is
            killed at a random moment. Every value printed more than 0.25 s before the kill
            (four flush intervals) must be in the store, once.
readers     journals of several runs (a million rows) are ingested by `florwb runs`, killed
            at a random moment of its ingestion (the catalog removed before each trial, so
            every kill lands in a fresh ingestion); the next reader must find every row once.
replays     `florwb replay` of a new step-level statement over two recorded runs, killed at a
            random moment (planning, workers, ingestion); the next reader must show no
            partial rows of it, and a replay run to its end afterwards must give every
            value once.

faults_values_lost       values a killed process had logged (or a replay owed) that are missing
faults_duplicates        rows stored more than once
faults_runs_unreadable   runs not listed, or listed with an unexpected status
faults_trials_<kind>     how many kills of each kind were made
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import PYTHON, REPO, note, result, temp_git_repo

sys.path.insert(0, str(REPO))

TICKER = """
import random
import time
import florwb as flor
for i in flor.loop("tick", range(10**6)):
    now = flor.log("t", time.time())
    flor.log("i", i)
    print(i, now, flush=True)  # ground truth: what was logged, and when
    time.sleep(random.random() * 0.004)
"""

SLOW = """
import time
import florwb as flor

total = 0
for epoch in flor.loop("epoch", range(4)):
    for step in flor.loop("step", range(4)):
        total += step
        time.sleep(0.08)
        # STATEMENT
    flor.log("total", total)
"""


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", GIT_AUTHOR_NAME="b")
    env.update(GIT_AUTHOR_EMAIL="b@example.invalid", GIT_COMMITTER_NAME="b")
    env.update(GIT_COMMITTER_EMAIL="b@example.invalid")
    return env


def _florwb(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(PYTHON), "-m", "florwb.cli", *args],
        cwd=repo,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )


class Tally:
    def __init__(self) -> None:
        self.lost = 0
        self.duplicates = 0
        self.unreadable = 0
        self.trials: dict[str, int] = {}

    def add(self, kind: str, lost: int, duplicates: int, unreadable: int) -> None:
        self.lost += lost
        self.duplicates += duplicates
        self.unreadable += unreadable
        self.trials[kind] = self.trials.get(kind, 0) + 1
        if lost or duplicates or unreadable:
            note(
                f"{kind} trial {self.trials[kind]}: {lost} lost, {duplicates} duplicates, "
                f"{unreadable} unreadable"
            )


def recordings(
    tally: Tally, trials: int, rng: random.Random, kill_after: tuple[float, float] = (0.4, 2.5)
) -> None:
    from florwb_engine.store import Store
    from florwb_engine.store.db import NoProject

    with temp_git_repo() as repo:
        (repo / "ticker.py").write_text(TICKER)
        seen = 0  # runs in the store
        for _ in range(trials):
            proc = subprocess.Popen(
                [str(PYTHON), "ticker.py"],
                cwd=repo,
                env=_env(),
                stdout=subprocess.PIPE,
                text=True,
            )
            time.sleep(rng.uniform(*kill_after))
            killed_at = time.time()
            proc.send_signal(signal.SIGKILL)
            printed = [line.split() for line in proc.communicate()[0].splitlines()]
            owed = {
                int(i)
                for i, t in (p for p in printed if len(p) == 2)
                if float(t) < killed_at - 0.25
            }
            try:
                store = Store(repo)
                runs = store.runs()
            except NoProject:  # killed before its first flush made `.florwb/`: no run yet
                runs = []
            if len(runs) == seen:  # killed before its first flush: nothing was owed either
                tally.add("recordings", len(owed), 0, int(bool(owed)))
                continue
            seen += 1
            run = runs[-1]
            rows = (
                store.query(
                    f"SELECT value FROM logs WHERE run_id = '{run['run_id']}' AND name = 'i'"
                )
                .value.astype(int)
                .tolist()
            )
            unreadable = int(run["status"] != "killed") + int(len(runs) != seen)
            tally.add("recordings", len(owed - set(rows)), len(rows) - len(set(rows)), unreadable)


def _write_journals(folder: Path, runs: int, rows: int) -> None:
    from florwb_engine.journal import JournalWriter, pack_logs

    folder.mkdir(parents=True)
    for r in range(runs):
        writer = JournalWriter(folder / f"gen-{r}.journal")
        start = {"kind": "start", "run_id": f"gen-{r}", "time": 1.7e9 + r, "host": "elsewhere"}
        writer.append((None, None, [start]))
        step = 5000
        for first in range(0, rows, step):
            flat: list = []
            for i in range(first, min(first + step, rows)):
                flat.extend(("v", float(i), 0))
            writer.append((pack_logs(flat), None, []))
        writer.append((None, None, [{"kind": "end", "status": "finished", "time": 1.8e9}]))
        writer.close()


def readers(tally: Tally, trials: int, rng: random.Random, rows: int) -> None:
    from florwb_engine.store import Store

    root = Path(tempfile.mkdtemp(prefix="florwb-bench-"))
    try:
        project = root / "p"
        n_runs = 4
        _write_journals(project / ".florwb" / "journal", n_runs, rows // n_runs)
        start = time.perf_counter()
        assert _florwb(project, "runs").returncode == 0
        ingest_s = time.perf_counter() - start
        note(f"readers: {rows} rows in {n_runs} journals, one ingestion {ingest_s:.1f} s")
        for _ in range(trials):
            for leftover in (project / ".florwb").glob("florwb.duckdb*"):
                leftover.unlink()
            proc = subprocess.Popen(
                [str(PYTHON), "-m", "florwb.cli", "runs"],
                cwd=project,
                env=_env(),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            time.sleep(rng.uniform(0.1, ingest_s))
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            store = Store(project)
            counts = store.query(
                "SELECT count(*) AS n, count(DISTINCT (run_id, value)) AS d FROM logs"
            )
            n, distinct = int(counts.n[0]), int(counts.d[0])
            statuses = [r["status"] for r in store.runs()]
            unreadable = n_runs - statuses.count("finished")
            tally.add("readers", rows - distinct, n - distinct, unreadable)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def replays(tally: Tally, trials: int, rng: random.Random) -> None:
    from florwb_engine.store import Store

    with temp_git_repo() as repo:
        script = repo / "slow.py"
        script.write_text(SLOW)
        for _ in range(2):
            subprocess.run([str(PYTHON), "slow.py"], cwd=repo, env=_env(), check=True)
        for k in range(trials):
            name = f"seen{k}"
            script.write_text(SLOW.replace("# STATEMENT", f"flor.log('{name}', step)"))
            proc = subprocess.Popen(
                [str(PYTHON), "-m", "florwb.cli", "replay", name, "--yes"],
                cwd=repo,
                env=_env(),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            time.sleep(rng.uniform(0.3, 5.0))
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            store = Store(repo)
            runs = store.runs()
            unreadable = sum(r["status"] != "finished" for r in runs) + (len(runs) != 2)
            partial = store.query(
                f"SELECT run_id, count(*) AS n FROM logs WHERE name = '{name}' GROUP BY ALL"
            )
            duplicates = int(sum(max(0, n - 16) for n in partial.n))
            short = int(sum(16 - n for n in partial.n if n < 16))  # partial rows were kept
            done = _florwb(repo, "replay", name, "--yes")
            values = store.query(
                f"SELECT run_id, epoch, step, count(*) AS n FROM logs WHERE name = '{name}' "
                "GROUP BY ALL"
            )
            lost = 2 * 16 - len(values) + short + int(done.returncode != 0)
            duplicates += int(sum(n - 1 for n in values.n))
            tally.add("replays", lost, duplicates, unreadable)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20, help="kills of each kind")
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows the readers ingest")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--kinds", default="recordings,readers,replays")
    parser.add_argument(
        "--kill-after",
        default="0.4,2.5",
        help="LO,HI: a recording is killed this many seconds after its start, at random",
    )
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    note(f"seed {seed}; {args.trials} trials of each of {args.kinds}")
    rng = random.Random(seed)
    tally = Tally()
    kinds = args.kinds.split(",")
    start = time.perf_counter()
    if "recordings" in kinds:
        low, high = (float(x) for x in args.kill_after.split(","))
        recordings(tally, args.trials, rng, (low, high))
    if "readers" in kinds:
        readers(tally, args.trials, rng, args.rows)
    if "replays" in kinds:
        replays(tally, args.trials, rng)
    note(f"{time.perf_counter() - start:.0f} s")
    result("faults_values_lost", tally.lost, "values")
    result("faults_duplicates", tally.duplicates, "rows")
    result("faults_runs_unreadable", tally.unreadable, "runs")
    for kind, n in tally.trials.items():
        result(f"faults_trials_{kind}", n, "kills")


if __name__ == "__main__":
    main()
