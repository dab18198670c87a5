"""Hindsight replay: a new log statement filled in for past runs of train_mlp.py.

Two measurements, each in throwaway git repos, in one run of this script:

1. Epoch-level statement (the weight norm at the start of every epoch) over one recorded
   run sized to about --record-s seconds (calibrated with two short plain runs first, unless
   BENCH_EPOCHS is set). florwb: record once, add the statement, time `florwb replay NAME
   --yes --json` (a subprocess, wall clock) on --repeats fresh copies of the recorded project
   (median). flordb: record once with `import flordb as flor`, add the statement, time
   `python -m flordb replay --apply NAME` (answering its prompt with "y"). Both are checked:
   a value for every epoch, and florwb's values against flordb's (same seeds, same training).

     replay_epoch_statement_ratio_<b>   replay wall / recorded wall of the same run
     replay_epoch_record_s_<b>, replay_epoch_replay_s_<b>   the absolute seconds

   florwb's replays share a fork server that outlives one replay (in a runtime folder of
   the benchmark's own, so the first replay starts it): the first replay is reported on its
   own (cold), the median is of the later ones (warm); FLORWB_FORKSERVER_IDLE_S=0 makes
   every replay start its own, as a cold one does.

     replay_epoch_cold_ratio_florwb, replay_epoch_cold_replay_s_florwb   the first replay

2. Step-level statement (the gradient norm after every backward pass) over --runs recorded
   runs (different lr, about --small-s seconds each): `florwb replay NAME --yes --workers 1`
   and `--workers 2`, each on its own fresh copy (shutil.copytree) of the same recorded
   project, --rounds rounds in ABBA order; medians.

     replay_workers1_s, replay_workers2_s, replay_workers2_speedup (= workers1 / workers2)

3. With `--executor ray` (only this part): the epoch-level and the step-level statement over
   --runs recorded runs (--small-epochs, default 3, of --small-steps), each replayed by the
   local fork server and on a local Ray cluster started once by the benchmark (`florwb
   replay NAME --executor ray --address ADDR`), --rounds rounds in ABBA order after an
   untimed warm-up of each (which starts the warm Ray driver, engine/replay/ray_driver.py,
   and the warm workers; each line names the driver that ran it); medians, and the bytes
   put into the object store per segment (code + checkpoints, each once per replay).

     replay_local_s_<level>, replay_ray_s_<level>, replay_ray_over_local_<level> (= ray /
     local; level epoch or step), replay_ray_over_local (the worse of the two)
     replay_ray_bytes_per_segment

4. Real-script shapes (`--parts real`; in the default run): each script in
   benchmarks/real_scripts/ (an epoch summary printed after the step loop, accuracy
   accumulated over batches, a nanoGPT-like iteration loop with estimate_loss() every N
   iterations) sized to about --real-record-s seconds (calibrated by two runs without
   recording), recorded, given an epoch-level statement and replayed with florwb
   (--real-repeats fresh copies, median) and with flordb; florwb's values are checked equal
   to a forward run of today's script, flordb's against the same.

     replay_ratio_<script>_florwb, replay_ratio_<script>_flordb   replay wall / recorded wall

The workload is benchmarks/train_mlp.py with its dynamic `flor = load_flor(...)` line
replaced by a static `import florwb as flor` (or `import flordb as flor`): florwb finds log
statements through the names its import binds, and flordb through the literal name `flor`.
The machine is shared: the load average is noted before and after.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import resource
import shutil
import signal
import sqlite3
import subprocess
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

from _common import (
    BENCH_DIR,
    PYTHON,
    BenchError,
    backend_env,
    flordb_available,
    median,
    note,
    result,
    run_timed,
    temp_git_repo,
)

TRAIN_SCRIPT = BENCH_DIR / "train_mlp.py"
SCRIPT = TRAIN_SCRIPT.name
DYNAMIC_IMPORT = 'flor = load_flor(os.environ.get("BENCH_FLOR", "plain"))\n'

EPOCH_NAME = "weight_norm"
EPOCH_ANCHOR = "            net.train()\n"
EPOCH_STATEMENT = (
    f'            flor.log("{EPOCH_NAME}", '
    "torch.cat([p.detach().flatten() for p in net.parameters()]).norm().item())\n"
)
# `--epoch-statement last_loss`: an epoch-level statement that reads what the step loop
# leaves (`loss` of the last batch), as most scripts' epoch summaries do: the replay skips
# the step loop only where the checkpoints memoized it
LOSS_NAME = "last_loss"
LOSS_ANCHOR = "            net.eval()\n"
LOSS_STATEMENT = f'            flor.log("{LOSS_NAME}", loss.item())\n'
STEP_NAME = "grad_norm"
STEP_ANCHOR = "                loss.backward()\n"
STEP_STATEMENT = (
    f'                flor.log("{STEP_NAME}", '
    "torch.cat([p.grad.flatten() for p in net.parameters()]).norm().item())\n"
)
LRS = ("1e-3", "3e-3", "1e-2", "3e-2", "3e-4", "1e-4", "2e-3", "5e-3")


# ---------------------------------------------------------------------------- helpers


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} cpu(s)"


def uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return load()


def workload(backend: str) -> str:
    """train_mlp.py with a static `import <backend> as flor` in place of load_flor(...)."""
    source = TRAIN_SCRIPT.read_text()
    if source.count(DYNAMIC_IMPORT) != 1:
        raise SystemExit(f"{SCRIPT} changed: cannot find {DYNAMIC_IMPORT.strip()!r}")
    return source.replace(DYNAMIC_IMPORT, f"import {backend} as flor\n")


def add_statement(repo: Path, anchor: str, statement: str) -> None:
    """Today's script gets a new log statement after `anchor` (which must occur once)."""
    path = repo / SCRIPT
    source = path.read_text()
    if source.count(anchor) != 1:
        raise SystemExit(f"{SCRIPT} changed: cannot find {anchor.strip()!r} exactly once")
    path.write_text(source.replace(anchor, anchor + statement))


def new_project(root: Path, backend: str) -> Path:
    """Replace the copied train_mlp.py with the static-import variant and commit it."""
    (root / SCRIPT).write_text(workload(backend))
    env = backend_env("plain")
    for cmd in (["git", "add", "-A"], ["git", "-c", "commit.gpgsign=false", "commit", "-qm", "x"]):
        subprocess.run(cmd, cwd=root, env=env, check=True, stdout=subprocess.DEVNULL)
    return root


class Ran(NamedTuple):
    wall: float  # seconds
    stdout: str
    cpu: float  # user + system seconds of the process and every descendant it waited for


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_logged(cmd: list[str], cwd: Path, env: dict[str, str], stdin: str | None = None) -> Ran:
    """Run `cmd` to completion; stdout and stderr go to temp files, not pipes."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        cpu = _children_cpu()
        start = time.perf_counter()
        proc = subprocess.run(
            cmd,
            cwd=cwd,
            env=env,
            input=stdin.encode() if stdin is not None else None,
            stdin=None if stdin is not None else subprocess.DEVNULL,
            stdout=out,
            stderr=err,
        )
        elapsed = time.perf_counter() - start
        cpu = _children_cpu() - cpu
        out.seek(0)
        stdout = out.read().decode(errors="replace")
        if proc.returncode != 0:
            err.seek(0)
            tail = err.read().decode(errors="replace").strip().splitlines()[-15:]
            raise BenchError(
                f"{' '.join(map(str, cmd))} exited {proc.returncode}:\n  " + "\n  ".join(tail)
            )
    return Ran(elapsed, stdout, cpu)


def florwb_cli(repo: Path, *args: str) -> Ran:
    return run_logged([str(PYTHON), "-m", "florwb.cli", *args], repo, backend_env("florwb"))


def florwb_json(repo: Path, *args: str):
    return json.loads(florwb_cli(repo, *args).stdout)


def fresh_copy(repo: Path, name: str) -> Path:
    """A copy of the recorded project beside it (outside it), replayed instead of it."""
    target = repo.parent / name
    shutil.copytree(repo, target, symlinks=True)
    return target


def calibrate(steps: int) -> tuple[float, float]:
    """(fixed seconds, seconds per epoch of `steps` steps) of train_mlp.py, plain backend.

    Two runs, of 1 and 3 epochs: the difference of their in-script times is two epochs, so
    one-off costs inside the script (data, the optimizer's first import of torch._dynamo)
    are not mistaken for epoch time.
    """
    walls, trains = [], []
    with tempfile.TemporaryDirectory(prefix="florwb-bench-") as tmp:
        timing = Path(tmp) / "timing.json"
        for epochs in (1, 3):
            env = backend_env(
                "plain",
                BENCH_EPOCHS=str(epochs),
                BENCH_STEPS=str(steps),
                BENCH_TIMING_FILE=str(timing),
            )
            walls.append(run_timed([str(PYTHON), str(TRAIN_SCRIPT)], cwd=Path(tmp), env=env))
            trains.append(json.loads(timing.read_text())["train_s"])
    per_epoch = max((trains[1] - trains[0]) / 2, 1e-3)
    return max(walls[0] - per_epoch, 0.0), per_epoch


def parallel_capacity() -> float:
    """How many cores two CPU-bound processes get right now: 2 x (one alone) / (two at once).

    2.0 on two idle cores; less when other work shares the machine. The best speedup any
    `--workers 2` can show at the moment.
    """
    cmd = [str(PYTHON), "-c", "s = 0\nfor i in range(10_000_000): s += i"]
    start = time.perf_counter()
    subprocess.run(cmd, check=True)
    one = time.perf_counter() - start
    start = time.perf_counter()
    procs = [subprocess.Popen(cmd) for _ in range(2)]
    for proc in procs:
        proc.wait()
    return 2 * one / (time.perf_counter() - start)


def epochs_for(target_s: float, fixed_s: float, epoch_s: float, least: int) -> int:
    return max(least, round((target_s - fixed_s) / max(epoch_s, 1e-3)))


# ------------------------------------------------------------- 1. epoch-level statement


def florwb_epoch(repo: Path, sizes: dict[str, str], repeats: int) -> dict | None:
    new_project(repo, "florwb")
    env = backend_env("florwb", **sizes)
    record_s = run_timed([str(PYTHON), SCRIPT], cwd=repo, env=env)
    n_ckpt = florwb_json(repo, "query", "SELECT count(*) AS n FROM checkpoints", "--format", "json")
    note(
        f"florwb recorded 1 run in {record_s:.1f} s; {n_ckpt[0]['n']} of {sizes['BENCH_EPOCHS']}"
        " epochs checkpointed (default budget)"
    )
    add_statement(repo, EPOCH_ANCHOR, EPOCH_STATEMENT)
    walls, values = [], None
    runtime = tempfile.mkdtemp(prefix="fwb")  # no server from before: the first is cold
    servers: set[int] = set()
    previous = os.environ.get("XDG_RUNTIME_DIR")
    os.environ["XDG_RUNTIME_DIR"] = runtime
    try:
        for i in range(repeats):
            copy = fresh_copy(repo, f"florwb-epoch-{i}")
            ran = florwb_cli(copy, "replay", EPOCH_NAME, "--yes", "--json", "--profile")
            walls.append(ran.wall)
            report = json.loads(ran.stdout)
            run = report["plan"]["runs"][0]
            res = report["result"]
            server = report["profile"].get("fork_server", {})
            servers.update([server["server"]] if "server" in server else [])
            which = (
                f"shared fork server {server['server']} (replay {server['served']} it served)"
                if "server" in server
                else "a fork server of its own"
            )
            note(
                f"florwb replay {i + 1}/{repeats}: {ran.wall:.2f} s wall ({ran.cpu:.1f} s "
                f"cpu), mode {run['mode']}, estimate {report['plan']['estimate_s']:.1f} s, "
                f"executor {res['elapsed_s']:.2f} s, status {res['status']}, {which}; {load()}"
            )
            parts = report["profile"]["parts"]
            note("  profile: " + ", ".join(f"{k} {v:.2f} s" for k, v in parts.items()))
            rows = florwb_json(copy, "dataframe", EPOCH_NAME, "--format", "json")
            got = {int(r["epoch"]): r[EPOCH_NAME] for r in rows if r.get(EPOCH_NAME) is not None}
            check_epochs("florwb", got, int(sizes["BENCH_EPOCHS"]))
            values = values or got
            if got != values:
                note(f"WARNING florwb replay {i + 1} gave different values than replay 1")
            shutil.rmtree(copy, ignore_errors=True)
    finally:
        if previous is None:
            os.environ.pop("XDG_RUNTIME_DIR", None)
        else:
            os.environ["XDG_RUNTIME_DIR"] = previous
        for pid in servers:  # its idle time would outlast the benchmark
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        shutil.rmtree(runtime, ignore_errors=True)
    warm = walls[1:] or walls
    return {
        "record_s": record_s,
        "replay_s": median(warm),
        "cold_s": walls[0],
        "values": values,
    }


def flordb_epoch(repo: Path, sizes: dict[str, str]) -> dict | None:
    new_project(repo, "flordb")
    # flordb's replay starts `python <script> --replay_flor ...` from PATH.
    env = backend_env("flordb", **sizes)
    env["PATH"] = f"{PYTHON.parent}{os.pathsep}{env.get('PATH', '')}"
    record_s = run_logged([str(PYTHON), SCRIPT], repo, env).wall
    note(f"flordb recorded 1 run in {record_s:.1f} s (flordb 4.0.1 has no checkpoints)")
    add_statement(repo, EPOCH_ANCHOR, EPOCH_STATEMENT)
    cmd = [str(PYTHON), "-m", "flordb", "replay", "--apply", EPOCH_NAME]
    ran = run_logged(cmd, repo, env, stdin="y\n")
    replay_s, stdout = ran.wall, ran.stdout
    note(
        f"flordb replay: {replay_s:.2f} s wall ({ran.cpu:.1f} s cpu; re-executes every step of "
        f"every epoch); {load()}"
    )
    got = flordb_values(repo, EPOCH_NAME)
    if not got:
        tail = " | ".join(stdout.strip().splitlines()[-5:])
        note(f"flordb replay recorded no {EPOCH_NAME} values; its stdout ends: {tail}")
    check_epochs("flordb", got, int(sizes["BENCH_EPOCHS"]))
    return {"record_s": record_s, "replay_s": replay_s, "values": got}


def flordb_values(repo: Path, name: str, loop: str = "epoch") -> dict[int, float]:
    """iteration of `loop` -> value of the replayed `name`, read from flordb's sqlite cache."""
    dbs = sorted((repo / ".flor").glob("*.db"))
    if not dbs:
        return {}
    con = sqlite3.connect(dbs[0])
    try:
        rows = con.execute(
            "SELECT ctx, value FROM logs WHERE value_name = ? AND source = 'replay'", [name]
        ).fetchall()
    finally:
        con.close()
    got = {}
    for ctx, value in rows:
        epoch = next(s["iteration"] for s in json.loads(ctx) if s["name"] == loop)
        got[int(epoch)] = float(value)
    return got


def check_epochs(backend: str, got: dict[int, float], epochs: int) -> None:
    missing = sorted(set(range(epochs)) - set(got))
    if missing:
        note(f"FAIL {backend}: no replayed {EPOCH_NAME} for epoch(s) {missing}")
    else:
        note(f"{backend}: replayed {EPOCH_NAME} present for all {epochs} epochs")


def part_epoch(args) -> None:
    note(f"== 1. epoch-level statement `{EPOCH_STATEMENT.strip()}`")
    if "BENCH_EPOCHS" in os.environ:
        epochs, steps = int(os.environ["BENCH_EPOCHS"]), int(os.environ.get("BENCH_STEPS", "800"))
        note(f"sizes from the environment: {epochs} epochs x {steps} steps")
    else:
        steps = args.steps
        fixed, per_epoch = calibrate(steps)
        epochs = epochs_for(args.record_s, fixed, per_epoch, least=4)
        note(
            f"calibration (plain): {fixed:.1f} s fixed + {per_epoch:.2f} s per {steps}-step epoch"
            f" -> {epochs} epochs for ~{args.record_s:.0f} s"
        )
    sizes = {"BENCH_EPOCHS": str(epochs), "BENCH_STEPS": str(steps)}
    out = {}
    with temp_git_repo(TRAIN_SCRIPT) as repo:
        try:
            out["florwb"] = florwb_epoch(repo, sizes, args.repeats)
        except BenchError as exc:
            note(f"florwb failed: {exc}")
    if args.flordb:
        with temp_git_repo(TRAIN_SCRIPT) as repo:
            try:
                out["flordb"] = flordb_epoch(repo, sizes)
            except BenchError as exc:
                note(f"flordb failed: {exc}")
    for backend, m in out.items():
        result(f"replay_epoch_record_s_{backend}", m["record_s"], "s")
        result(f"replay_epoch_replay_s_{backend}", m["replay_s"], "s")
        result(f"replay_epoch_statement_ratio_{backend}", m["replay_s"] / m["record_s"], "x")
        if "cold_s" in m:
            result(f"replay_epoch_cold_replay_s_{backend}", m["cold_s"], "s")
            result(f"replay_epoch_cold_ratio_{backend}", m["cold_s"] / m["record_s"], "x")
    if "florwb" in out and "flordb" in out and out["florwb"]["values"] and out["flordb"]["values"]:
        a, b = out["florwb"]["values"], out["flordb"]["values"]
        common = sorted(set(a) & set(b))
        diff = max((abs(a[e] - b[e]) for e in common), default=math.nan)
        note(f"max |florwb - flordb| {EPOCH_NAME} over {len(common)} epochs: {diff:.3g}")


# -------------------------------------------------------------- 2. step-level, workers


def part_workers(args) -> None:
    note(f"== 2. step-level statement `{STEP_STATEMENT.strip()}`, {args.runs} runs")
    steps = args.small_steps
    if args.small_epochs:  # a fixed size: calibration on a busy machine can be far off
        epochs = args.small_epochs
        note(f"{epochs} epochs of {steps} steps per run (--small-epochs)")
    else:
        fixed, per_epoch = calibrate(steps)
        epochs = epochs_for(args.small_s, fixed, per_epoch, least=2)
        note(
            f"calibration (plain): {fixed:.1f} s fixed + {per_epoch:.2f} s per {steps}-step "
            f"epoch -> {epochs} epochs for ~{args.small_s:.0f} s per run"
        )
    env = backend_env("florwb", BENCH_EPOCHS=str(epochs), BENCH_STEPS=str(steps))
    with temp_git_repo(TRAIN_SCRIPT) as repo:
        new_project(repo, "florwb")
        walls = []
        for lr in LRS[: args.runs]:
            walls.append(run_timed([str(PYTHON), SCRIPT, "--kwargs", f"lr={lr}"], repo, env))
        n_ckpt = florwb_json(
            repo, "query", "SELECT count(*) AS n FROM checkpoints", "--format", "json"
        )
        note(
            f"recorded {args.runs} runs: {', '.join(f'{w:.1f}' for w in walls)} s; "
            f"{n_ckpt[0]['n']} checkpoints for {args.runs * epochs} epochs"
        )
        add_statement(repo, STEP_ANCHOR, STEP_STATEMENT)
        copies = {
            (w, r): fresh_copy(repo, f"workers{w}-{r}") for r in range(args.rounds) for w in (1, 2)
        }
        note(f"parallel capacity before: {parallel_capacity():.2f} of 2 cores; {load()}")
        times: dict[int, list[float]] = {1: [], 2: []}
        values: dict[int, list] = {}
        for r in range(args.rounds):
            for w in (1, 2) if r % 2 == 0 else (2, 1):  # ABBA against drifting load
                copy = copies[(w, r)]
                ran = florwb_cli(copy, "replay", STEP_NAME, "--yes", "--json", "--workers", str(w))
                times[w].append(ran.wall)
                report = json.loads(ran.stdout)
                res = report["result"]
                segments = sum(len(run["segments"]) for run in report["plan"]["runs"])
                bad = [x["run_id"] for x in res["runs"] if x["status"] != "finished"]
                note(
                    f"round {r + 1} --workers {w}: {ran.wall:.2f} s wall ({ran.cpu:.1f} s cpu = "
                    f"{ran.cpu / ran.wall:.2f} cores), {segments} segments, "
                    f"estimate {report['plan']['estimate_s']:.1f} s, executor "
                    f"{res['elapsed_s']:.2f} s, status {res['status']}"
                    + (f", not finished: {bad}" if bad else "")
                    + f"; {load()}"
                )
                rows = florwb_json(copy, "dataframe", STEP_NAME, "--format", "json")
                got = sorted(
                    (x["run_id"], int(x["epoch"]), int(x["step"]), x[STEP_NAME])
                    for x in rows
                    if x.get(STEP_NAME) is not None
                )
                want = args.runs * epochs * steps
                if len(got) != want:
                    note(f"FAIL --workers {w}: {len(got)} {STEP_NAME} values, expected {want}")
                values.setdefault(w, got)
                shutil.rmtree(copy, ignore_errors=True)
        note(f"parallel capacity after: {parallel_capacity():.2f} of 2 cores; {load()}")
        if values.get(1) != values.get(2):
            note(f"FAIL --workers 1 and --workers 2 replayed different {STEP_NAME} values")
        else:
            note(f"--workers 1 and 2: identical {len(values[1])} {STEP_NAME} values")
    t1, t2 = median(times[1]), median(times[2])
    result("replay_workers_record_s", median(walls), "s")
    result("replay_workers1_s", t1, "s")
    result("replay_workers2_s", t2, "s")
    result("replay_workers2_speedup", t1 / t2, "x")


# ------------------------------------------------------ 4. real-script shapes, side by side


class RealScript(NamedTuple):
    """A script in benchmarks/real_scripts/ and the epoch-level statement added to it."""

    loop: str  # the main loop's name
    anchor: str  # the statement goes on its own line after the line starting with this
    name: str
    statement: str
    steps: int  # BENCH_STEPS: batches per epoch (nanogpt_like: the eval interval)
    calibrate: tuple[int, int]  # BENCH_EPOCHS of the two calibration runs


REAL_DIR = BENCH_DIR / "real_scripts"
REAL_IMPORT = "import florwb as flor\n"
REAL = {
    "summary_print": RealScript(
        "epoch",
        '        print(f"[epoch',
        "epoch_loss",
        'flor.log("epoch_loss", running_loss / len(loader))',
        1000,
        (1, 5),
    ),
    "accuracy": RealScript(
        "epoch",
        '        print(f"epoch {epoch}:',
        "train_acc",
        'flor.log("train_acc", 100.0 * correct / total)',
        1000,
        (1, 5),
    ),
    "nanogpt_like": RealScript(
        "iter",
        '            print(f"step {iter_num}',
        "val_ppl",
        'flor.log("val_ppl", math.exp(losses["val"]))',
        25,
        (20, 100),
    ),
}
# `import florwb as flor` resolves to this in a calibration run's folder (the script's
# folder comes first on sys.path): what the script costs with no recording at all.
PLAIN_SHIM = """import contextlib
def arg(name, default=None): return default
def log(name, value): return value
def loop(name, iterable): yield from iterable
def checkpointing(**objects): return contextlib.nullcontext()
def commit(): pass
"""


def real_project(
    repo: Path, script: str, backend: str, with_statement: RealScript | None = None
) -> Path:
    """The real script (with `import <backend> as flor`, and the new statement where
    `with_statement` is given) committed in `repo`."""
    source = (REAL_DIR / f"{script}.py").read_text()
    if source.count(REAL_IMPORT) != 1:
        raise SystemExit(f"{script}.py changed: cannot find {REAL_IMPORT.strip()!r}")
    (repo / f"{script}.py").write_text(source.replace(REAL_IMPORT, f"import {backend} as flor\n"))
    if with_statement is not None:
        add_real_statement(repo, script, with_statement)
    env = backend_env("plain")
    for cmd in (["git", "add", "-A"], ["git", "-c", "commit.gpgsign=false", "commit", "-qm", "x"]):
        subprocess.run(cmd, cwd=repo, env=env, check=True, stdout=subprocess.DEVNULL)
    return repo


def add_real_statement(repo: Path, script: str, spec: RealScript) -> None:
    """Today's script gets the statement on a line of its own after the anchor's line,
    indented like it."""
    path = repo / f"{script}.py"
    lines = path.read_text().splitlines(keepends=True)
    at = [i for i, line in enumerate(lines) if line.startswith(spec.anchor)]
    if len(at) != 1:
        raise SystemExit(f"{script}.py changed: cannot find {spec.anchor.strip()!r} once")
    indent = spec.anchor[: len(spec.anchor) - len(spec.anchor.lstrip())]
    lines.insert(at[0] + 1, f"{indent}{spec.statement}\n")
    path.write_text("".join(lines))


def real_calibrate(script: str, spec: RealScript) -> tuple[float, float]:
    """(fixed seconds, seconds per main-loop iteration) of the script without recording:
    two runs of different lengths, their difference is the loop. CPU seconds (the scripts
    run one thread): on a shared machine they say what an idle one would take, wall
    seconds under load do not."""
    cpus = []
    with tempfile.TemporaryDirectory(prefix="florwb-bench-") as tmp:
        shutil.copy2(REAL_DIR / f"{script}.py", tmp)
        (Path(tmp) / "florwb.py").write_text(PLAIN_SHIM)
        for n in spec.calibrate:
            env = backend_env("plain", BENCH_EPOCHS=str(n), BENCH_STEPS=str(spec.steps))
            env.pop("PYTHONPATH", None)
            cpus.append(run_logged([str(PYTHON), f"{script}.py"], Path(tmp), env).cpu)
    a, b = spec.calibrate
    per = max((cpus[1] - cpus[0]) / (b - a), 1e-4)
    return max(cpus[0] - a * per, 0.0), per


def florwb_values(repo: Path, name: str, loop: str) -> dict[int, float]:
    """main-loop iteration -> the value of `name`, as `florwb dataframe` serves it."""
    rows = florwb_json(repo, "dataframe", name, "--format", "json")
    return {int(r[loop]): r[name] for r in rows if r.get(name) is not None}


def compare_values(label: str, got: dict[int, float], want: dict[int, float]) -> bool:
    if not want:
        note(f"FAIL {label}: the forward run logged no values to compare with")
        return False
    missing = sorted(set(want) - set(got))
    if missing:
        note(f"FAIL {label}: no value for iteration(s) {missing[:10]}")
        return False
    differ = [i for i in sorted(want) if got[i] != want[i]]
    if differ:
        worst = max(abs(got[i] - want[i]) for i in differ)
        note(f"FAIL {label}: {len(differ)} of {len(want)} values differ (max |diff| {worst:.3g})")
        return False
    note(f"{label}: all {len(want)} values equal to the forward run's")
    return True


def real_florwb(script: str, spec: RealScript, sizes: dict[str, str], repeats: int) -> dict:
    """Record the script, then replay the new statement on `repeats` fresh copies (median)
    and run today's script forward once for the values to compare with."""
    out: dict = {}
    env = backend_env("florwb", **sizes)
    with temp_git_repo() as repo:
        real_project(repo, script, "florwb")
        out["record_s"] = run_timed([str(PYTHON), f"{script}.py"], cwd=repo, env=env)
        n_ckpt = florwb_json(
            repo, "query", "SELECT count(*) AS n FROM checkpoints", "--format", "json"
        )[0]["n"]
        note(
            f"{script}: florwb recorded {sizes['BENCH_EPOCHS']} {spec.loop} iterations in "
            f"{out['record_s']:.1f} s, {n_ckpt} checkpointed"
        )
        add_real_statement(repo, script, spec)
        walls, values = [], None
        for i in range(repeats):
            copy = fresh_copy(repo, f"replay-{i}")
            ran = florwb_cli(copy, "replay", spec.name, "--yes", "--json")
            walls.append(ran.wall)
            report = json.loads(ran.stdout)
            run = report["plan"]["runs"][0]
            res = report["result"]
            note(
                f"{script}: florwb replay {i + 1}/{repeats} {ran.wall:.2f} s wall "
                f"({ran.cpu:.1f} s cpu), mode {run['mode']}, status {res['status']}; "
                f"plan: {' | '.join(run['notes'])}"
            )
            got = florwb_values(copy, spec.name, spec.loop)
            if values is not None and got != values:
                note(f"FAIL {script}: florwb replay {i + 1} differs from replay 1")
            values = values if values is not None else got
            shutil.rmtree(copy, ignore_errors=True)
        out["replay_s"] = median(walls)
    out["values"] = values or {}
    with temp_git_repo() as forward:  # today's script run forward: what a replay must give
        real_project(forward, script, "florwb", with_statement=spec)
        run_timed([str(PYTHON), f"{script}.py"], cwd=forward, env=env)
        out["forward"] = florwb_values(forward, spec.name, spec.loop)
    out["equal"] = compare_values(f"{script} florwb replay", out["values"], out["forward"])
    return out


def real_flordb(script: str, spec: RealScript, sizes: dict[str, str]) -> dict:
    with temp_git_repo() as repo:
        real_project(repo, script, "flordb")
        env = backend_env("flordb", **sizes)
        env["PATH"] = f"{PYTHON.parent}{os.pathsep}{env.get('PATH', '')}"
        record_s = run_logged([str(PYTHON), f"{script}.py"], repo, env).wall
        add_real_statement(repo, script, spec)
        cmd = [str(PYTHON), "-m", "flordb", "replay", "--apply", spec.name]
        ran = run_logged(cmd, repo, env, stdin="y\n")
        note(
            f"{script}: flordb recorded in {record_s:.1f} s, replayed in {ran.wall:.2f} s "
            f"({ran.cpu:.1f} s cpu)"
        )
        values = flordb_values(repo, spec.name, spec.loop)
    return {"record_s": record_s, "replay_s": ran.wall, "values": values}


def part_real(args) -> None:
    scripts = [s.strip() for s in args.real_scripts.split(",") if s.strip()]
    unknown = set(scripts) - set(REAL)
    if unknown:
        raise SystemExit(f"unknown real script(s) {sorted(unknown)}; choose from {sorted(REAL)}")
    note(f"== 4. real-script shapes ({', '.join(scripts)}), ~{args.real_record_s:.0f} s each")
    for script in scripts:
        spec = REAL[script]
        fixed, per = real_calibrate(script, spec)
        n = max(spec.calibrate[1], round((args.real_record_s - fixed) / per))
        note(
            f"{script}: calibration (no recording) {fixed:.1f} s fixed + {per * 1000:.0f} ms cpu "
            f"per {spec.loop} -> {n} iterations; statement `{spec.statement}`"
        )
        sizes = {"BENCH_EPOCHS": str(n), "BENCH_STEPS": str(spec.steps)}
        out = {}
        try:
            out["florwb"] = real_florwb(script, spec, sizes, args.real_repeats)
        except BenchError as exc:
            note(f"{script}: florwb failed: {exc}")
        if args.flordb:
            try:
                out["flordb"] = real_flordb(script, spec, sizes)
            except BenchError as exc:
                note(f"{script}: flordb failed: {exc}")
        if "florwb" in out and "flordb" in out:
            compare_values(
                f"{script} flordb replay", out["flordb"]["values"], out["florwb"]["forward"]
            )
        for backend, m in out.items():
            result(f"replay_ratio_{script}_{backend}", m["replay_s"] / m["record_s"], "x")


# ------------------------------------------------- 3. the same replay, local and on Ray


def part_ray(args) -> None:
    """An epoch-level and a step-level statement over --runs recorded runs, each replayed
    by the local fork server and by Ray on a local Ray cluster (started once here, as a
    cluster would be up already), --rounds rounds in ABBA order after one untimed warm-up
    each (the warm-up starts the local shared fork server and Ray's warm workers)."""
    try:
        import ray
    except ImportError:
        raise SystemExit("--executor ray needs Ray: pip install 'florwb[ray]'") from None
    epochs = args.small_epochs or 3
    steps = args.small_steps
    note(f"== 3. local and Ray, {args.runs} runs x {epochs} epochs x {steps} steps")
    context = ray.init(include_dashboard=False, log_to_driver=False)
    address = context.address_info["gcs_address"]
    note(f"Ray {ray.__version__} started here: {ray.cluster_resources().get('CPU', 0):.0f} CPU(s)")
    env = backend_env("florwb", BENCH_EPOCHS=str(epochs), BENCH_STEPS=str(steps))
    flags = {"local": [], "ray": ["--executor", "ray", "--address", address]}
    levels = {"epoch": EPOCH_NAME, "step": STEP_NAME}
    times = {(level, ex): [] for level in levels for ex in flags}
    shipped: list[dict] = []
    try:
        with temp_git_repo(TRAIN_SCRIPT) as repo:
            new_project(repo, "florwb")
            walls = [
                run_timed([str(PYTHON), SCRIPT, "--kwargs", f"lr={lr}"], repo, env)
                for lr in LRS[: args.runs]
            ]
            note(f"recorded {args.runs} runs: {', '.join(f'{w:.1f}' for w in walls)} s")
            add_statement(repo, EPOCH_ANCHOR, EPOCH_STATEMENT)
            add_statement(repo, STEP_ANCHOR, STEP_STATEMENT)
            for level, name in levels.items():
                values: dict[str, list] = {}
                for r in range(args.rounds + 1):
                    for ex in ("local", "ray") if r % 2 == 0 else ("ray", "local"):
                        copy = fresh_copy(repo, f"{level}-{ex}-{r}")
                        ran = florwb_cli(copy, "replay", name, "--yes", "--json", *flags[ex])
                        report = json.loads(ran.stdout)
                        res = report["result"]
                        driver = report.get("ray_driver")
                        note(
                            f"{level} {'warm-up' if r == 0 else f'round {r}'} {ex}: "
                            f"{ran.wall:.2f} s wall, estimate "
                            f"{report['plan']['estimate_s']:.1f} s (calibration "
                            f"{report['plan']['calibration']:.2f}), executor "
                            f"{res['elapsed_s']:.2f} s, status {res['status']}"
                            + (
                                f", driver pid {driver['pid']} (served {driver['served']}"
                                f"{', started' if driver['started'] else ''})"
                                if driver
                                else ""
                            )
                            + f"; {load()}"
                        )
                        if r:
                            times[(level, ex)].append(ran.wall)
                        if ex == "ray":
                            shipped.extend(res["shipped"].values())
                        rows = florwb_json(copy, "dataframe", name, "--format", "json")
                        keys = [k for k in ("epoch", "step") if k in (rows[0] if rows else {})]
                        got = sorted(
                            (x["run_id"], *(int(x[k]) for k in keys), x[name])
                            for x in rows
                            if x.get(name) is not None
                        )
                        values.setdefault(ex, got)
                        shutil.rmtree(copy, ignore_errors=True)
                if values["local"] != values["ray"]:
                    note(f"FAIL local and Ray replays gave different {name} values")
                else:
                    note(f"local and Ray: identical {len(values['local'])} {name} values")
    finally:
        ray.shutdown()
    code = sum(s["code_bytes"] for s in shipped) / max(1, len(shipped))
    ckpt = sum(s["checkpoint_bytes"] for s in shipped) / max(1, len(shipped))
    note(
        f"put into the object store per segment (mean of {len(shipped)}; each version's "
        f"code and each checkpoint once per replay): {code:.0f} B code + {ckpt:.0f} B checkpoints"
    )
    ratios = []
    for level in levels:
        local, on_ray = median(times[(level, "local")]), median(times[(level, "ray")])
        result(f"replay_local_s_{level}", local, "s")
        result(f"replay_ray_s_{level}", on_ray, "s")
        result(f"replay_ray_over_local_{level}", on_ray / local, "x")
        ratios.append(on_ray / local)
    result("replay_ray_over_local", max(ratios), "x")  # the worse of the two
    result("replay_ray_bytes_per_segment", code + ckpt, "B")


def use_loss_statement() -> None:
    global EPOCH_NAME, EPOCH_ANCHOR, EPOCH_STATEMENT
    EPOCH_NAME, EPOCH_ANCHOR, EPOCH_STATEMENT = LOSS_NAME, LOSS_ANCHOR, LOSS_STATEMENT


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record-s", type=float, default=30.0, help="part 1 recorded run size")
    parser.add_argument("--steps", type=int, default=800, help="part 1 steps per epoch")
    parser.add_argument("--repeats", type=int, default=3, help="part 1 florwb replays (median)")
    parser.add_argument("--small-s", type=float, default=8.0, help="part 2 size of each run")
    parser.add_argument("--small-steps", type=int, default=400, help="part 2 steps per epoch")
    parser.add_argument(
        "--small-epochs", type=int, default=0, help="part 2 epochs per run (skips calibration)"
    )
    parser.add_argument("--runs", type=int, default=4, help="part 2 recorded runs")
    parser.add_argument("--rounds", type=int, default=3, help="part 2 rounds (medians)")
    parser.add_argument("--parts", default="epoch,workers,real", help="epoch, workers, real")
    parser.add_argument(
        "--real-record-s", type=float, default=30.0, help="part 4 recorded size of each script"
    )
    parser.add_argument("--real-repeats", type=int, default=2, help="part 4 replays (median)")
    parser.add_argument("--real-scripts", default=",".join(REAL), help="part 4 scripts")
    parser.add_argument(
        "--executor",
        choices=("local", "ray"),
        default="local",
        help="ray: compare the same replay on the local fork server and on Ray (part 3 only)",
    )
    parser.add_argument("--no-flordb", dest="flordb", action="store_false")
    parser.add_argument(
        "--epoch-statement",
        choices=(EPOCH_NAME, LOSS_NAME),
        default=EPOCH_NAME,
        help=f"part 1's statement; {LOSS_NAME} reads the step loop's last loss after it",
    )
    args = parser.parse_args()
    if args.epoch_statement == LOSS_NAME:
        use_loss_statement()
    args.runs = max(1, min(args.runs, len(LRS)))
    if args.flordb and not flordb_available():
        note("SKIP flordb: not installed; create it once with: bash benchmarks/flordb_env.sh")
        args.flordb = False

    started = time.perf_counter()
    note(f"before: {uptime()}")
    parts = {p.strip() for p in args.parts.split(",")}
    if args.executor == "ray":
        parts = {"ray"}
    if "ray" in parts:
        part_ray(args)
    if "epoch" in parts:
        part_epoch(args)
    if "workers" in parts:
        part_workers(args)
    if "real" in parts:
        part_real(args)
    note(f"after: {uptime()}")
    note(f"benchmark took {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
