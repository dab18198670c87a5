"""Benchmark: propagate 20 new log statements into a 1,000-line training script.

Generates an old script of ~1,000 lines (many training/evaluation functions with nested
flor.loops, comments and formatting quirks) and a new version of it with 20 additional log
statements plus unrelated edits (a renamed variable, changed hyperparameters), then times
`propagate` (parse both, match, place, re-check). Prints
`RESULT propagate_20_into_1000_lines <seconds> s` (median of several runs, cold caches).
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from florwb_engine.propagate import finder, propagate  # noqa: E402

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


def main() -> None:
    new, old = make_sources()
    times = []
    for _ in range(5):
        finder._analyze.cache_clear()
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
