"""Benchmarks of propagation: one CLI process per corpus pair, and a large script.

1. `florwb propagate NEW OLD` as a process for every pair of tests/propagation_corpus,
   process start included (what a user or a script calling the CLI waits for). Each pair
   runs 3 times; the pair's figure is the median of its runs; the result is the median over
   the corpus. Children run with bytecode caching on (as an installed package does; a
   warm-up run writes the caches first). Prints `RESULT propagate_pair_median_s <s> s`,
   and the CPU time per process (`propagate_pair_cpu_median_s`), which a loaded machine
   does not inflate the way it does wall time.
2. Generates an old script of ~1,000 lines (many training/evaluation functions with nested
   flor.loops, comments and formatting quirks) and a new version of it with 20 additional
   log statements plus unrelated edits (a renamed variable, changed hyperparameters), then
   times `propagate` (parse both, match, place, re-check). Prints
   `RESULT propagate_20_into_1000_lines <seconds> s` (median of several runs, cold caches).
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from florwb_engine.propagate import propagate  # noqa: E402
from florwb_engine.propagate.propagation import clear_caches  # noqa: E402

CORPUS = Path(__file__).resolve().parents[1] / "tests" / "propagation_corpus"
RUNS_PER_PAIR = 3

HEADER = """\
import florwb as flor
import torch
import torch.nn as nn
import torch.nn.functional as F


"""


def _block(k: int, new: bool) -> list[str]:
    lr = "3e-4" if new and k % 3 == 0 else "1e-3"
    run = "running_loss" if new and k == 5 else "running"
    lines = f'''\
def train_{k}(model, loader, optimizer, scheduler, epochs={k % 7 + 1}):
    """Variant {k} of the training loop."""
    lr = flor.arg("lr_{k}", {lr})
    total = 0
    with flor.checkpointing(model=model, optimizer=optimizer):
        for epoch in flor.loop("epoch", range(epochs)):
            model.train()
            {run} = 0.0  # running loss
            for step, (x, y) in enumerate(flor.loop("step", loader)):
                optimizer.zero_grad()
                out = model(x)
                loss = F.cross_entropy(out, y)
                loss.backward()
                optimizer.step()
                {run} += loss.item()
                total += x.shape[0]
                if step % 10 == 0:
                    print(f"step {{step}} loss {{loss.item():.3f}}")
            scheduler.step()
            acc = evaluate_{k}(model, loader)
            print(epoch, {run} / max(1, len(loader)), acc)
    return total


def evaluate_{k}(model, loader):
    correct = n = 0
    with torch.no_grad():
        for x, y in loader:
            pred = model(x).argmax(dim=1)
            correct += (pred == y).sum().item()
            n += y.numel()
    return correct / max(1, n)


'''.splitlines(keepends=True)
    if new and k < 10:
        # two new statements per variant for the first ten variants: 20 in all
        at = lines.index("                optimizer.step()\n") + 1
        lines.insert(at, f'                flor.log("grad_norm_{k}", out.grad_fn is not None)\n')
        at = next(i for i, ln in enumerate(lines) if ln.startswith("            acc = ")) + 1
        lines.insert(at, f'            flor.log("acc_{k}", acc)\n')
    return lines


def make_sources(n_blocks: int = 30) -> tuple[str, str]:
    """(new, old): ~1,000-line old script; new = old + 20 log statements + small edits."""
    old = HEADER + "".join(line for k in range(n_blocks) for line in _block(k, False))
    new = HEADER + "".join(line for k in range(n_blocks) for line in _block(k, True))
    return new, old


def _florwb() -> list[str]:
    script = Path(sys.executable).with_name("florwb")
    return [str(script)] if script.exists() else [sys.executable, "-m", "florwb.cli"]


def pair_processes() -> tuple[float, float, int]:
    """(median wall s, median CPU s, pairs) of one `florwb propagate` process per pair."""
    command = _florwb()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    cases = sorted(p for p in CORPUS.iterdir() if p.is_dir())

    def run(case: Path) -> tuple[float, float]:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run(
            [*command, "propagate", str(case / "new.py"), str(case / "old.py")],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=True,
        )
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
        return wall, cpu

    run(cases[0])  # writes the bytecode caches, as the first run of an installed package does
    walls, cpus = [], []
    for case in cases:
        samples = [run(case) for _ in range(RUNS_PER_PAIR)]
        walls.append(statistics.median(w for w, _ in samples))
        cpus.append(statistics.median(c for _, c in samples))
    return statistics.median(walls), statistics.median(cpus), len(cases)


def main() -> None:
    wall, cpu, pairs = pair_processes()
    print(f"# {pairs} corpus pairs, {RUNS_PER_PAIR} processes each; load {os.getloadavg()[0]:.1f}")
    print(f"RESULT propagate_pair_median_s {wall:.3f} s")
    print(f"RESULT propagate_pair_cpu_median_s {cpu:.3f} s")
    new, old = make_sources()
    times = []
    for _ in range(5):
        clear_caches()
        start = time.perf_counter()
        result = propagate(new, old)
        times.append(time.perf_counter() - start)
    inserted = sum(p.status == "inserted" for p in result.placements)
    print(
        f"# old: {len(old.splitlines())} lines, new statements: {len(result.placements)}, "
        f"inserted: {inserted}, runs: {[round(t, 3) for t in times]}"
    )
    print(f"RESULT propagate_20_into_1000_lines {statistics.median(times):.3f} s")


if __name__ == "__main__":
    main()
