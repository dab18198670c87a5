"""flor.log hot path: calls/s of flor.log inside two nested flor.loop's, per backend.

Each measurement is a worker process (this script with --worker) started in a fresh throwaway
git repo with the backend's environment (flordb from benchmarks/.env/flordb). The worker starts
the run with one flor.arg, then times, with time.perf_counter and in-process,

    for epoch in flor.loop("epoch", range(EPOCHS)):
        for step in flor.loop("step", range(STEPS)):
            LOGS x flor.log(name, value)

and, separately, flor.commit(). Workers run interleaved (order rotating) REPEATS times; the
median is reported. stdout goes to /dev/null: flordb prints every logged value, and a real
terminal would only make it slower. plain (a no-op shim) is the floor of the loop itself.

  log_calls_per_s_<b>                     flor.log calls per second (loops included)
  log_commit_s_<b>                        time of the flor.commit() after them
  log_calls_ratio_florwb_over_flordb      florwb calls/s / flordb calls/s
"""

import argparse
import json
import sys
import time
from pathlib import Path

from _common import (
    PYTHON,
    BenchError,
    backend_env,
    median,
    note,
    result,
    rotated,
    run_timed,
    temp_git_repo,
    usable_backends,
)


def worker(out: Path, epochs: int, steps: int, logs: int) -> None:
    from train_mlp import flor  # the backend BENCH_FLOR names, as the training script sees it

    names = [f"metric{i}" for i in range(logs)]
    flor.arg("logs_per_step", logs)  # first flor call: run start stays out of the timing
    start = time.perf_counter()
    for _epoch in flor.loop("epoch", range(epochs)):
        for step in flor.loop("step", range(steps)):
            for name in names:
                flor.log(name, step * 0.5)
    logged = time.perf_counter()
    flor.commit()
    committed = time.perf_counter()
    timings = {"calls": epochs * steps * logs, "log_s": logged - start}
    out.write_text(json.dumps({**timings, "commit_s": committed - logged}))


def measure(backend: str, args: argparse.Namespace) -> dict:
    with temp_git_repo() as repo:
        out = repo.parent / "hotpath.json"
        sizes = ["--epochs", str(args.epochs), "--steps", str(args.steps), "--logs", str(args.logs)]
        cmd = [str(PYTHON), str(Path(__file__).resolve()), "--worker", str(out), *sizes]
        run_timed(cmd, cwd=repo, env=backend_env(backend))
        return json.loads(out.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--logs", type=int, default=5, help="flor.log calls per step")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--backends", default="plain,florwb,flordb")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.epochs, args.steps, args.logs)
        return

    backends = usable_backends(args.backends)
    calls = args.epochs * args.steps * args.logs
    note(f"{args.epochs} epochs x {args.steps} steps x {args.logs} logs = {calls} flor.log calls")
    note(f"{args.repeats} repeats; worker stdout to /dev/null (flordb prints every value)")

    rates: dict[str, list[float]] = {b: [] for b in backends}
    commits: dict[str, list[float]] = {b: [] for b in backends}
    for r in range(args.repeats):
        line = []
        for backend in rotated(list(rates), r):
            try:
                m = measure(backend, args)
            except BenchError as exc:
                note(f"SKIP {backend}: {exc}")
                del rates[backend], commits[backend]
                continue
            rates[backend].append(m["calls"] / m["log_s"])
            commits[backend].append(m["commit_s"])
            line.append(f"{backend} {m['calls'] / m['log_s']:.0f}/s commit {m['commit_s']:.2f}s")
        note(f"repeat {r + 1}/{args.repeats}: " + ", ".join(line))
    if not rates:
        sys.exit("no backend ran")

    rate_med = {b: median(v) for b, v in rates.items()}
    for b in rates:
        result(f"log_calls_per_s_{b}", rate_med[b], "calls/s")
        result(f"log_commit_s_{b}", median(commits[b]), "s")
    if "florwb" in rates and "flordb" in rates:
        result("log_calls_ratio_florwb_over_flordb", rate_med["florwb"] / rate_med["flordb"], "x")


if __name__ == "__main__":
    main()
