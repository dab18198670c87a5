"""What keeping printed lines costs: train_mlp.py printing a line every step, recorded by
florwb with capture on and off (FLORWB_CAPTURE=0), as real processes.

Both arms run the same script in fresh throwaway git repos, in interleaved rounds (the
order alternates) after one untimed warm-up each. Measured in the script, from florwb's
import through flor.commit() (which includes writing the last lines): wall time, and the
CPU time of all its threads (the training thread's tee writes and the flusher thread's
line assembly both count there). The overhead is taken on CPU time: on a shared machine
the wall time of a few-second run swings by more than the effect measured. stdout goes to
/dev/null. Sizes come from BENCH_EPOCHS / BENCH_STEPS / BENCH_HIDDEN / BENCH_BATCH.

  capture_train_s_on / _off      median train wall time with capture on / off
  capture_train_cpu_s_on / _off  median train CPU time with capture on / off
  capture_lines                  lines the run kept (one per step, and the final line)
  capture_overhead               (cpu on / cpu off - 1) in percent; target at most 3 %
  capture_overhead_wall          the same on wall time (noisy where the machine is shared)
  capture_us_per_line            the worst case, a loop that only prints: extra CPU
                                 microseconds per printed line with capture on
"""

import argparse
import json
import os
import subprocess

from _common import BENCH_DIR, PYTHON, backend_env, median, note, result, run_timed, temp_git_repo

TRAIN_SCRIPT = BENCH_DIR / "train_mlp.py"
ARMS = {"on": "1", "off": "0"}


def run_once(arm: str) -> tuple[float, float, int]:
    """(train wall seconds, train CPU seconds, lines kept) of one train_mlp.py process."""
    with temp_git_repo(TRAIN_SCRIPT) as repo:
        timing_file = repo.parent / "timing.json"
        env = backend_env(
            "florwb",
            BENCH_TIMING_FILE=str(timing_file),
            BENCH_PRINT="1",
            FLORWB_CAPTURE=ARMS[arm],
        )
        run_timed([str(PYTHON), TRAIN_SCRIPT.name], cwd=repo, env=env)
        timings = json.loads(timing_file.read_text())
        lines = 0
        if arm == "on":
            from florwb_engine.store import Store

            lines = int(Store(repo).query("SELECT count(*) AS n FROM console")["n"][0])
    return timings["train_s"], timings["train_cpu_s"], lines


PRINT_ONLY = """
import os, time
import florwb as flor
n = int(os.environ["BENCH_LINES"])
flor.arg("n", n)
t0 = time.process_time()
for step in flor.loop("step", range(n)):
    print(f"step {step} loss {1.0 / (step + 1):.6f}")
flor.commit()
print("CPU", time.process_time() - t0)
"""


def print_only_cpu(arm: str, lines: int) -> float:
    """CPU seconds of a loop that prints `lines` lines and does nothing else."""
    with temp_git_repo() as repo:
        (repo / "prints.py").write_text(PRINT_ONLY)
        env = backend_env("florwb", BENCH_LINES=str(lines), FLORWB_CAPTURE=ARMS[arm])
        out = subprocess.run(
            [str(PYTHON), "prints.py"], cwd=repo, env=env, capture_output=True, text=True
        ).stdout
    return float(out.strip().splitlines()[-1].split()[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    sizes = {
        k: os.environ[k] for k in ("BENCH_EPOCHS", "BENCH_STEPS", "BENCH_HIDDEN") if k in os.environ
    }
    note(f"train_mlp.py printing every step, sizes: {sizes or 'defaults'}; {args.rounds} rounds")
    for arm in ARMS:
        run_once(arm)  # warm-up: file caches
    walls: dict[str, list[float]] = {arm: [] for arm in ARMS}
    cpus: dict[str, list[float]] = {arm: [] for arm in ARMS}
    kept = 0
    for r in range(args.rounds):
        order = list(ARMS) if r % 2 == 0 else list(reversed(ARMS))
        line = []
        for arm in order:
            wall, cpu, lines = run_once(arm)
            walls[arm].append(wall)
            cpus[arm].append(cpu)
            kept = lines or kept
            line.append(f"{arm} {wall:.3f}s wall {cpu:.3f}s cpu")
        note(f"round {r + 1}/{args.rounds}: " + ", ".join(line))
    wall = {arm: median(walls[arm]) for arm in ARMS}
    cpu = {arm: median(cpus[arm]) for arm in ARMS}
    result("capture_train_s_on", wall["on"], "s")
    result("capture_train_s_off", wall["off"], "s")
    result("capture_train_cpu_s_on", cpu["on"], "s")
    result("capture_train_cpu_s_off", cpu["off"], "s")
    result("capture_lines", kept, "lines")
    result("capture_overhead", (cpu["on"] / cpu["off"] - 1) * 100, "%")
    result("capture_overhead_wall", (wall["on"] / wall["off"] - 1) * 100, "%")
    lines = 100_000
    extra = [print_only_cpu("on", lines) - print_only_cpu("off", lines) for _ in range(3)]
    result("capture_us_per_line", median(extra) / lines * 1e6, "us")


if __name__ == "__main__":
    main()
