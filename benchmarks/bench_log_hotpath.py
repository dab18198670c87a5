"""flor.log hot path: calls/s of flor.log inside two nested flor.loop's, per backend.

Each measurement is a worker process (hotpath_worker.py, copied with train_mlp.py into a fresh
throwaway git repo and run there) with the backend's environment (flordb from
benchmarks/.env/flordb). The worker starts the run with one flor.arg, then times, with
time.perf_counter and in-process,

    for epoch in flor.loop("epoch", range(EPOCHS)):
        for step in flor.loop("step", range(STEPS)):
            LOGS x flor.log(name, value)

and, separately, flor.commit(). After one untimed warm-up run per backend (a backend whose
warm-up fails is reported and skipped), workers run interleaved (order rotating) REPEATS
times; the median is reported. stdout goes to /dev/null: flordb prints every logged value,
and a real terminal would only make it slower. plain (a no-op shim) is the floor of the loop
itself.

  log_calls_per_s_<b>                     flor.log calls per second (loops included)
  log_commit_s_<b>                        time of the flor.commit() after them
  log_calls_ratio_florwb_over_flordb      florwb calls/s / flordb calls/s

With --device cuda every name gets `_cuda` after its kind (log_calls_per_s_cuda_florwb...):
each value logged is a 0-d CUDA tensor one kernel makes, which florwb copies to the host
without waiting and flordb can only take as `.item()` (one host sync per value); plain_item
is plain with that `.item()` (log_calls_ratio_cuda_florwb_over_plain_item).
"""

import argparse
import json
import sys

from _common import (
    BENCH_DIR,
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

WORKER = BENCH_DIR / "hotpath_worker.py"
TRAIN_SCRIPT = BENCH_DIR / "train_mlp.py"  # hotpath_worker takes `flor` from it


PLAIN_ITEM = "plain_item"  # with --device cuda: plain, logging each value's .item()


def measure(backend: str, args: argparse.Namespace) -> dict:
    with temp_git_repo(WORKER, TRAIN_SCRIPT) as repo:
        out = repo.parent / "hotpath.json"
        sizes = [str(args.epochs), str(args.steps), str(args.logs), args.device]
        if backend == PLAIN_ITEM:
            env = backend_env("plain", BENCH_ITEM="1")
        else:
            env = backend_env(backend)
        run_timed([str(PYTHON), WORKER.name, str(out), *sizes], cwd=repo, env=env)
        return json.loads(out.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--logs", type=int, default=5, help="flor.log calls per step")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--backends", default="plain,florwb,flordb")
    parser.add_argument(
        "--device",
        default="cpu",
        choices=["cpu", "cuda"],
        help="cuda: log a 0-d CUDA tensor made each step (flordb gets its .item())",
    )
    args = parser.parse_args()

    backends = usable_backends(args.backends)
    if args.device == "cuda" and "plain" in backends:  # the .item() flordb scripts make
        backends.insert(backends.index("plain") + 1, PLAIN_ITEM)
    calls = args.epochs * args.steps * args.logs
    note(f"{args.epochs} epochs x {args.steps} steps x {args.logs} logs = {calls} flor.log calls")
    note(f"{args.repeats} repeats; worker stdout to /dev/null (flordb prints every value)")
    if args.device == "cuda":
        note("device cuda: values are 0-d CUDA tensors; flordb logs their .item()")

    for backend in list(backends):  # warm-up: bytecode cache, and finding broken backends
        try:
            measure(backend, args)
        except BenchError as exc:
            note(f"SKIP {backend}: {exc}")
            backends.remove(backend)
    if not backends:
        sys.exit("no backend ran")

    rates: dict[str, list[float]] = {b: [] for b in backends}
    commits: dict[str, list[float]] = {b: [] for b in backends}
    for r in range(args.repeats):
        line = []
        for backend in rotated(backends, r):
            m = measure(backend, args)
            rates[backend].append(m["calls"] / m["log_s"])
            commits[backend].append(m["commit_s"])
            line.append(f"{backend} {m['calls'] / m['log_s']:.0f}/s commit {m['commit_s']:.2f}s")
        note(f"repeat {r + 1}/{args.repeats}: " + ", ".join(line))

    rate_med = {b: median(v) for b, v in rates.items()}
    tag = "_cuda" if args.device == "cuda" else ""
    for b in rates:
        result(f"log_calls_per_s{tag}_{b}", rate_med[b], "calls/s")
        result(f"log_commit_s{tag}_{b}", median(commits[b]), "s")
    if "florwb" in rates and PLAIN_ITEM in rates:
        ratio = rate_med["florwb"] / rate_med[PLAIN_ITEM]
        result(f"log_calls_ratio{tag}_florwb_over_plain_item", ratio, "x")
    if "florwb" in rates and "flordb" in rates:
        ratio = rate_med["florwb"] / rate_med["flordb"]
        result(f"log_calls_ratio{tag}_florwb_over_flordb", ratio, "x")


if __name__ == "__main__":
    main()
