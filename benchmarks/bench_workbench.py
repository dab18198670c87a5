"""Workbench speed on a large project: 1,000 runs and 10 million log rows, one run with
10,000 names and a run recording meanwhile (benchmarks/README.md).

    .venv/bin/python benchmarks/bench_workbench.py [--runs 1000] [--rows 10000000]
        [--rounds 3] [--rebuild] [--project DIR]

Builds the project once (each run's events in a journal, ingested; the log rows generated in
DuckDB: see build_project) under the system temp dir and reuses it. Prints:

  workbench_cold_start_s      process start -> first complete frame (the history listed:
                              runs, versions, metrics, the summary pane), headless, median
  workbench_cold_start_min_s  the fastest round (the least disturbed by other processes)
  workbench_cold_start_first_cpu_s  the CPU seconds of that process to the first frame
  workbench_cold_values_s     process start -> the metric's values shown (sparklines, final
                              and best: the scan of its log rows, read after the first frame)
  workbench_cold_start_cpu_s  CPU seconds of that whole process, to the values (median)
  workbench_move_ms           j in the version list -> summary pane updated (median)
  workbench_move_p95_ms       the same, 95th percentile
  workbench_key_p95_ms        95th percentile of every key timed (the moves, and scrolling,
                              `/`, typing and esc on the 10,000-name run's detail)
  workbench_key_p95_cpu_ms    the 95th percentile of the CPU time the process spent on each
                              key (all its threads), the steadier number on a busy machine
  workbench_wide_detail_s     the 10,000-name run's detail: pushed -> its metrics drawn
                              (median; _max_s the slowest, _cpu_s the CPU time)
  workbench_query_first_page_s  `SELECT * FROM logs LIMIT 1000000`: run -> first page shown
  workbench_query_sorted_first_page_s  a sorted 1,000,000-row result -> first page shown
  workbench_chart_draw_ms     10 marked runs x 10,000 loss values each, in hand: `l` (log
                              scale) -> the chart repainted (downsampling, plotext), median
  workbench_chart_draw_cpu_ms the CPU time of this process meanwhile (steadier on a busy
                              machine: the wall time there is mostly waiting for a core)
  workbench_chart_open_ms     `c` -> the chart painted, reading the 100,000 values first
  workbench_chart_open_cpu_ms its CPU time
  workbench_idle_cpu_pct      the app idle on the History tab (its live monitor polling as
                              it does for a user, live.py recording): process CPU time / wall
                              time over IDLE_S seconds once the history's values are read,
                              in a child process of its own
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import PYCACHE, PYTHON, REPO, note, result  # noqa: E402

from florwb_engine.journal import JournalWriter  # noqa: E402

EPOCHS = 10
VERSIONS = 20
DEFAULT_DIR = Path(tempfile.gettempdir()) / "florwb-bench-workbench"

# What `florwb PATH` runs (florwb.cli_app.open_workbench), headless, timed to the first
# complete frame: the app calls on_ready after the refresh that follows the loaded history.
# The first frame lists the history; its metric's values (sparklines, final and best)
# follow from a second read, timed too (workbench_cold_values_s).
CHILD = """
import sys, threading, time
from pathlib import Path
from florwb.cli_app import run_workbench
import textual.app

out = open(sys.argv[2], "w")

def values(app):
    while app.history is None or app.history.values_pending:
        time.sleep(0.005)
    out.write(f"{time.time()}\\n")
    out.flush()
    app.call_from_thread(app.exit)

def ready():
    out.write(f"{time.time()} {time.process_time()}\\n")
    out.flush()
    app = textual.app.active_app.get()
    threading.Thread(target=values, args=(app,), daemon=True).start()

run_workbench(Path(sys.argv[1]), headless=True, size=(80, 24), on_ready=ready)
"""

IDLE_S = 10.0
SETTLE_S = 3.0
# The workbench as a user opens it (poll every second, script watcher on), left alone on
# the History tab: after the first frame and SETTLE_S seconds, CPU time over IDLE_S.
IDLE_CHILD = """
import sys, threading, time
from pathlib import Path
from florwb.cli_app import run_workbench
import textual.app

def measure(app):
    time.sleep(SETTLE_S)
    cpu, wall = time.process_time(), time.monotonic()
    time.sleep(IDLE_S)
    cpu, wall = time.process_time() - cpu, time.monotonic() - wall
    Path(sys.argv[2]).write_text(f"{cpu} {wall}\\n")
    app.call_from_thread(app.exit)

def ready():
    app = textual.app.active_app.get()
    threading.Thread(target=measure_when_read, args=(app,), daemon=True).start()

def measure_when_read(app):
    while app.history is None or app.history.values_pending:  # the first load's second read
        time.sleep(0.05)
    measure(app)

run_workbench(Path(sys.argv[1]), headless=True, size=(100, 30), on_ready=ready)
""".replace("SETTLE_S", repr(SETTLE_S)).replace("IDLE_S", repr(IDLE_S))


WIDE_NAMES = 10_000
WIDE_STEPS = 10  # the 10,000-name run logs each name once per step: 100 values a name
WIDE_RUN = "20991231-235959-wide00"
# A run that records while everything is measured: a real training process in the project,
# logging every 50 ms; the live monitor follows it as it does for a user.
LIVE_SCRIPT = """
import time
import florwb as flor

for epoch in flor.loop("epoch", range(1_000_000)):
    for step in flor.loop("step", range(20)):
        flor.log("loss", 1.0 / (epoch * 20 + step + 1))
        time.sleep(0.05)
"""


def _run_events(folder: Path, run_id: str, when: float, version: str, args: dict) -> list:
    events = [
        {
            "kind": "start",
            "source": "record",
            "run_id": run_id,
            "script": "train.py",
            "argv": ["train.py", "--kwargs", *(f"{k}={v}" for k, v in args.items())],
            "cwd": str(folder),
            "host": "bench",
            "pid": None,
            "pid_ticks": None,
            "python": "3.11",
            "time": when,
        },
        {
            "kind": "version",
            "version": version,
            "n_files": 1,
            "n_bytes": 1000,
            "skipped": [],
            "git_head": None,
            "git_branch": "main",
            "git_dirty": False,
        },
        *({"kind": "arg", "name": k, "value": v} for k, v in args.items()),
        {"kind": "loop", "entry": 1, "names": ["epoch"], "outer": [], "total": EPOCHS},
    ]
    return events


def build_project(folder: Path, runs: int, rows: int) -> None:
    """`runs` finished runs with `rows` log rows in all, plus one run with WIDE_NAMES names.

    Each run's journal holds what a recording writes about it (start, version, args, loop
    entries, end), ingested as usual; the log and timing rows are then generated inside
    DuckDB, straight into the catalog's own tables (`log_rows`, `iteration_rows`,
    `name_stats`), which takes seconds where writing 10 million values through journals
    takes minutes. (A catalog rebuilt from these journals would lack those rows: the
    project is for measuring, made again by --rebuild.)
    """
    from florwb_engine.store import Store
    from florwb_engine.store.db import connect

    if folder.exists():
        shutil.rmtree(folder)
    journal = folder / ".florwb" / "journal"
    journal.mkdir(parents=True)
    (folder / "train.py").write_text("import florwb as flor\n")
    (folder / "live.py").write_text(LIVE_SCRIPT)
    rng = random.Random(0)
    steps = max(rows // runs // EPOCHS - 1, 1)
    versions = [f"{rng.getrandbits(160):040x}" for _ in range(VERSIONS)]
    start = time.time() - runs * 60 - 3600
    for i in range(runs + 1):
        wide = i == runs
        run_id = (
            WIDE_RUN
            if wide
            else time.strftime("%Y%m%d-%H%M%S", time.localtime(start + i * 60)) + f"-{i:06x}"
        )
        lr = rng.choice([0.1, 0.05, 0.02, 0.01])
        failed = i % 50 == 49
        loop_steps = WIDE_STEPS if wide else steps
        events = _run_events(
            folder,
            run_id,
            start + i * 60,
            versions[min(i * VERSIONS // runs, VERSIONS - 1)],
            {"lr": lr, "epochs": EPOCHS, "seed": i},
        )
        for epoch in range(EPOCHS):
            events.append(
                {
                    "kind": "loop",
                    "entry": 2 + epoch,
                    "names": ["epoch", "step"],
                    "outer": [epoch],
                    "total": loop_steps,
                }
            )
        events.append(
            {
                "kind": "end",
                "status": "failed" if failed else "finished",
                "exception": "RuntimeError" if failed else None,
                "message": "CUDA out of memory" if failed else None,
                "time": start + i * 60 + 50,
            }
        )
        writer = JournalWriter(journal / f"{run_id}.journal")
        writer.append((None, None, events))
        writer.close()
    began = time.perf_counter()
    store = Store(folder)
    store.ingest()
    note(f"{runs + 1} runs ingested in {time.perf_counter() - began:.1f} s")
    began = time.perf_counter()
    names = ["loss", "acc"] + [
        f"layers.{i // 4}.{('q', 'k', 'v', 'o')[i % 4]}_proj.grad_norm" for i in range(WIDE_NAMES)
    ]
    with connect(folder / ".florwb") as con:
        con.execute("BEGIN")
        con.executemany(
            "INSERT INTO name_keys VALUES (?, ?)", [[k + 1, n] for k, n in enumerate(names)]
        )
        # loss per step (seq e*(steps+1)+s, ctx entry 2+e), acc once per epoch at its end
        con.execute(
            f"""
            INSERT INTO log_rows
            SELECT r.run_key, 0, e.e * ({steps} + 1) + s.s, 1,
                   exp(-(e.e * {steps} + s.s) / ({EPOCHS * steps} / 3.0)) * (0.5 + r.run_key
                       % 7 / 7.0) + random() * 0.01,
                   NULL, 0, ((2 + e.e) << 32) + s.s
            FROM runs r, range({EPOCHS}) e(e), range({steps}) s(s)
            WHERE r.run_id != '{WIDE_RUN}'
            """
        )
        con.execute(
            f"""
            INSERT INTO log_rows
            SELECT r.run_key, 0, e.e * ({steps} + 1) + {steps}, 2,
                   1 - exp(-e.e / 3.0) * 0.5 - r.run_key % 5 / 50.0, NULL, 0,
                   (1::BIGINT << 32) + e.e
            FROM runs r, range({EPOCHS}) e(e) WHERE r.run_id != '{WIDE_RUN}'
            """
        )
        # the wide run: every name once per step (loss among them)
        per_step = len(names) - 1
        con.execute(
            f"""
            INSERT INTO log_rows
            SELECT r.run_key, 0, (e.e * {WIDE_STEPS} + s.s) * {per_step} + k.k, k.k + 1,
                   CASE WHEN k.k = 0 THEN 1.0 / (e.e * {WIDE_STEPS} + s.s + 1)
                        ELSE random() END,
                   NULL, 0, ((2 + e.e) << 32) + s.s
            FROM runs r, range({EPOCHS}) e(e), range({WIDE_STEPS}) s(s),
                 (SELECT k FROM range({per_step + 1}) t(k) WHERE k != 1) k(k)
            WHERE r.run_id = '{WIDE_RUN}'
            """
        )
        con.execute(
            """
            INSERT INTO iteration_rows
            SELECT r.run_key, 0, (1::BIGINT << 32) + e.e, random() * 0.2, 1.0 + random()
            FROM runs r, range(10) e(e)
            """
        )
        con.execute(
            """
            INSERT INTO name_stats
            SELECT l.run_key, l.source_key, l.name_key, coalesce(e.path, ''), count(*),
                   count(*), 0, 0, max(l.ctx_id)
            FROM log_rows l LEFT JOIN loop_entries e ON e.run_key = l.run_key
                 AND e.source_key = l.source_key AND e.entry_id = l.ctx_id >> 32
            GROUP BY ALL
            """
        )
        con.execute("COMMIT")
        total = con.execute("SELECT count(*) FROM log_rows").fetchall()[0][0]
    note(f"{total:,} log rows generated in {time.perf_counter() - began:.1f} s")
    (folder / ".florwb" / "bench-complete").write_text(f"{runs} {rows} {WIDE_NAMES}\n")


def start_recording(project: Path) -> subprocess.Popen:
    """The run in progress: live.py recording in the project until the bench ends."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(PYTHONPATH=str(REPO), PYTHONPYCACHEPREFIX=str(PYCACHE))
    return subprocess.Popen(
        [str(PYTHON), "live.py"],
        cwd=project,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def cold_start(project: Path, rounds: int) -> dict[str, list[float]]:
    """Wall seconds to the first complete frame (`listed`) and to the history's values
    shown (`read`); CPU seconds of the child to the first frame (`listed_cpu`: its own
    threads) and of the whole child (`cpu`), the steadier numbers on a shared machine (the
    child exits right after the values are shown)."""
    times, read, listed_cpu, cpu = [], [], [], []
    # Bytecode cached as in an installed package (this machine sets PYTHONDONTWRITEBYTECODE,
    # which would make every start compile the app from source), under benchmarks/.env.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(PYTHONPATH=str(REPO), PYTHONPYCACHEPREFIX=str(PYCACHE))
    for _ in range(rounds):
        with tempfile.NamedTemporaryFile("r", suffix=".ready") as ready:
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            began = time.time()
            subprocess.run(
                [str(PYTHON), "-c", CHILD, str(project), ready.name],
                env=env,
                check=True,
                timeout=120,
                stdout=subprocess.DEVNULL,
            )
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            listed, listed_at, shown = (float(t) for t in Path(ready.name).read_text().split())
        times.append(listed - began)
        read.append(shown - began)
        listed_cpu.append(listed_at)
        cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return {"listed": times, "read": read, "listed_cpu": listed_cpu, "cpu": cpu}


def idle_cpu(project: Path) -> float:
    """Percent of one core the idle workbench uses (process CPU time / wall time)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(PYTHONPATH=str(REPO), PYTHONPYCACHEPREFIX=str(PYCACHE))
    with tempfile.NamedTemporaryFile("r", suffix=".idle") as out:
        subprocess.run(
            [str(PYTHON), "-c", IDLE_CHILD, str(project), out.name],
            env=env,
            check=True,
            timeout=120,
            stdout=subprocess.DEVNULL,
        )
        cpu, wall = (float(v) for v in Path(out.name).read_text().split())
    return cpu / wall * 100


async def chart(project: Path, rounds: int) -> dict[str, list[float]]:
    """Mark 10 runs, chart their loss (10,000 values each): `c` -> painted, `l` -> painted."""
    from textual import events

    from florwb.app import WorkbenchApp
    from florwb.screens.chart import ChartScreen

    app = WorkbenchApp(project, poll_s=0)
    out: dict[str, list[float]] = {"open": [], "open_cpu": [], "draw": [], "draw_cpu": []}

    async def painted(screen: ChartScreen, before: object) -> None:
        while screen.drawing is None or screen.drawing is before:
            await asyncio.sleep(0.001)
        done = asyncio.Event()
        screen.query_one("#chart").call_after_refresh(done.set)
        await done.wait()

    async with app.run_test(size=(120, 36)) as pilot:
        while app.history is None or app.history.values_pending:  # listed, then its values
            await pilot.pause(0.05)
        while app.history.metric != "loss":
            await pilot.press("m")
            await pilot.pause(0.2)
        listing = app.query_one("#history-list")
        while len(app.marked_runs) < 10:  # ten of train.py (not live.py, not the wide run)
            current = listing.current
            run = current.run if current is not None else None
            wanted = run is not None and run.run_id != WIDE_RUN and run.script == "train.py"
            await pilot.press("space" if wanted and run.run_id not in app.marked_runs else "j")
        for _ in range(rounds):
            began, cpu = time.perf_counter(), time.process_time()
            app._driver.send_message(events.Key("c", "c"))
            while not isinstance(app.screen, ChartScreen):
                await asyncio.sleep(0.001)
            screen = app.screen
            await painted(screen, None)
            out["open"].append(time.perf_counter() - began)
            out["open_cpu"].append(time.process_time() - cpu)
            assert screen.curves is not None and screen.curves.points >= 10 * 9_990, (
                screen.curves.points
            )
            before = screen.drawing
            began, cpu = time.perf_counter(), time.process_time()
            app._driver.send_message(events.Key("l", "l"))
            await painted(screen, before)
            out["draw"].append(time.perf_counter() - began)
            out["draw_cpu"].append(time.process_time() - cpu)
            note(f"chart: {screen.curves.points:,} values, {screen.drawing.points:,} drawn")
            await pilot.press("escape")
            while isinstance(app.screen, ChartScreen):
                await pilot.pause(0.02)
    return out


async def wide_detail(app, pilot) -> dict[str, list[float]]:
    """The run detail of the 10,000-name run: push -> its metrics drawn, then keys on it
    (scrolling, finding a name, esc) until the frame after each is drawn."""
    from textual import events

    from florwb.screens.run_detail import RunDetailScreen

    out: dict[str, list[float]] = {"wide": [], "wide_cpu": [], "wide_keys": [], "wide_keys_cpu": []}

    async def drawn(node) -> None:
        painted = asyncio.Event()
        node.call_after_refresh(painted.set)
        await painted.wait()

    for _ in range(3):
        began, cpu = time.perf_counter(), time.process_time()
        screen = RunDetailScreen(app.store, WIDE_RUN)
        app.push_screen(screen)
        while screen.detail is None:
            await asyncio.sleep(0.001)
        await drawn(screen.query_one("#detail"))
        out["wide"].append(time.perf_counter() - began)
        out["wide_cpu"].append(time.process_time() - cpu)
        assert len(screen.detail.metrics) == WIDE_NAMES + 1, len(screen.detail.metrics)
        for key, char in [("j", "j")] * 10 + [("slash", "/"), ("7", "7"), ("escape", None)]:
            began, cpu = time.perf_counter(), time.process_time()
            app._driver.send_message(events.Key(key, char))
            await pilot.pause(0)
            await drawn(screen.query_one("#detail"))
            out["wide_keys"].append(time.perf_counter() - began)
            out["wide_keys_cpu"].append(time.process_time() - cpu)
        began, cpu = time.perf_counter(), time.process_time()
        app._driver.send_message(events.Key("escape", None))
        while app.screen is screen:
            await asyncio.sleep(0.001)
        await drawn(app.screen)
        out["wide_keys"].append(time.perf_counter() - began)
        out["wide_keys_cpu"].append(time.process_time() - cpu)
    return out


async def in_app(project: Path, moves: int) -> dict[str, list[float]]:
    from florwb.app import WorkbenchApp

    app = WorkbenchApp(project, poll_s=0)
    out: dict[str, list[float]] = {"move": [], "move_cpu": [], "page": [], "sorted": []}
    async with app.run_test(size=(80, 24)) as pilot:
        while app.history is None or app.history.values_pending:  # listed, then its values
            await pilot.pause(0.05)
        await pilot.pause(0.5)
        summary = app.query_one("#run-summary")
        listing = app.query_one("#history-list")
        from textual import events

        for _ in range(moves):
            # The key goes in as the terminal driver delivers it (Pilot.press would add its
            # own settle-down waits); timed until the frame with the new summary is drawn.
            before = listing.current.key if listing.current else None
            began, cpu = time.perf_counter(), time.process_time()
            app._driver.send_message(events.Key("j", "j"))
            while listing.current is None or listing.current.key == before:
                await asyncio.sleep(0)
            key = listing.current.key
            while summary.shown_key != key:
                await asyncio.sleep(0)
            painted = asyncio.Event()
            summary.call_after_refresh(painted.set)
            await painted.wait()
            out["move"].append(time.perf_counter() - began)
            out["move_cpu"].append(time.process_time() - cpu)
            await pilot.pause(0.02)
        out.update(await wide_detail(app, pilot))
        await pilot.press("4")
        pane = app.query_one("#query-pane")
        status = app.query_one("#query-status")
        table = app.query_one("#results")
        for key, sql in (
            ("page", "SELECT * FROM logs LIMIT 1000000"),
            (
                "sorted",
                "SELECT run_id, epoch, step, value FROM logs WHERE name = 'loss' AND step < 100 "
                "ORDER BY value DESC",
            ),
        ):
            for _ in range(3):
                began = time.perf_counter()
                pane.run_sql(sql)
                while "rows" not in str(status.content) or not table.row_count:
                    await asyncio.sleep(0.001)
                painted = asyncio.Event()
                table.call_after_refresh(painted.set)  # the frame showing the first rows
                await painted.wait()
                out[key].append(time.perf_counter() - began)
                while "counting" in str(status.content):
                    await pilot.pause(0.05)
                note(f"{key}: {status.content}")
    return out


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[max(int(len(ordered) * 0.95) - 1, 0)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--moves", type=int, default=40)
    parser.add_argument("--rebuild", action="store_true")
    parser.add_argument(
        "--only", choices=("all", "chart", "idle"), default="all", help="run only these parts"
    )
    parser.add_argument("--project", type=Path, default=DEFAULT_DIR)
    args = parser.parse_args()
    marker = args.project / ".florwb" / "bench-complete"
    if (
        args.rebuild
        or not marker.exists()
        or marker.read_text().split() != [str(args.runs), str(args.rows), str(WIDE_NAMES)]
    ):
        note(f"building {args.runs} runs, {args.rows:,} log rows in {args.project}")
        build_project(args.project, args.runs, args.rows)
    else:
        note(f"reusing {args.project}")
    note(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    recording = start_recording(args.project)
    try:
        measure(args)
    finally:
        recording.terminate()
        recording.wait(timeout=30)


def measure(args: argparse.Namespace) -> None:
    if args.only in ("all", "chart"):
        drawn = asyncio.run(chart(args.project, args.rounds))
        for key in ("draw", "draw_cpu", "open", "open_cpu"):
            result(f"workbench_chart_{key}_ms", statistics.median(drawn[key]) * 1000, "ms")
    if args.only in ("all", "idle"):
        result("workbench_idle_cpu_pct", idle_cpu(args.project), "%")
    if args.only != "all":
        return
    cold_start(args.project, 1)  # untimed: writes the bytecode cache once
    starts = cold_start(args.project, args.rounds)
    note("cold starts: " + ", ".join(f"{t:.2f}" for t in starts["listed"]))
    result("workbench_cold_start_s", statistics.median(starts["listed"]), "s")
    result("workbench_cold_start_min_s", min(starts["listed"]), "s")
    result("workbench_cold_start_first_cpu_s", statistics.median(starts["listed_cpu"]), "s")
    result("workbench_cold_values_s", statistics.median(starts["read"]), "s")
    result("workbench_cold_start_cpu_s", statistics.median(starts["cpu"]), "s")
    measured = asyncio.run(in_app(args.project, args.moves))
    moves = sorted(measured["move"])
    result("workbench_move_ms", statistics.median(moves) * 1000, "ms")
    result("workbench_move_p95_ms", p95(moves) * 1000, "ms")
    keys = sorted(measured["move"] + measured["wide_keys"])
    result("workbench_key_p95_ms", p95(keys) * 1000, "ms")
    keys_cpu = sorted(measured["move_cpu"] + measured["wide_keys_cpu"])
    result("workbench_key_p95_cpu_ms", p95(keys_cpu) * 1000, "ms")
    result("workbench_wide_detail_s", statistics.median(measured["wide"]), "s")
    result("workbench_wide_detail_max_s", max(measured["wide"]), "s")
    result("workbench_wide_detail_cpu_s", statistics.median(measured["wide_cpu"]), "s")
    result("workbench_query_first_page_s", statistics.median(measured["page"]), "s")
    result("workbench_query_sorted_first_page_s", statistics.median(measured["sorted"]), "s")


if __name__ == "__main__":
    main()
