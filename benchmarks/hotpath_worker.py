"""Worker of bench_log_hotpath.py: times flor.log inside two nested flor.loop's, in-process.

Usage: BENCH_FLOR=<backend> python hotpath_worker.py OUT.json EPOCHS STEPS LOGS [DEVICE]

With DEVICE cuda each logged value is a 0-d CUDA tensor made by one kernel (a metric a
training step leaves on the GPU): plain pays that kernel, florwb its staged copy, and
flordb (and plain with BENCH_ITEM=1) gets `.item()` of it, what a flordb script must log.

Copied, with train_mlp.py (whose load_flor picks the backend), into a throwaway git repo and
run from there: florwb finds its project from the script's folder, so the script itself must
live in the throwaway repo, or its .florwb/ would land in this checkout.
"""

import json
import os
import sys
import time
from pathlib import Path

from train_mlp import flor  # the backend BENCH_FLOR names, exactly as the training script sees it


def main(out: Path, epochs: int, steps: int, logs: int, device: str = "cpu") -> None:
    names = [f"metric{i}" for i in range(logs)]
    flor.arg("logs_per_step", logs)  # the first flor call starts the run: keep it out of timing
    if device == "cuda":
        import torch

        base = torch.zeros((), device=device)
        as_item = os.environ.get("BENCH_FLOR") == "flordb" or os.environ.get("BENCH_ITEM") == "1"
        for name in names:  # warm-up outside the timing: the first staged copy, kernels
            flor.log(name, (base + 0.5).item() if as_item else base + 0.5)
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _epoch in flor.loop("epoch", range(epochs)):
        for step in flor.loop("step", range(steps)):
            if device == "cuda":
                for i, name in enumerate(names):
                    value = base + (step + i) * 0.5  # one kernel: the value is on the GPU
                    flor.log(name, value.item() if as_item else value)
            else:
                for name in names:
                    flor.log(name, step * 0.5)
    if device == "cuda":
        torch.cuda.synchronize()  # the GPU's work is part of the loop's time
    logged = time.perf_counter()
    flor.commit()
    committed = time.perf_counter()
    calls = epochs * steps * logs
    out.write_text(
        json.dumps({"calls": calls, "log_s": logged - start, "commit_s": committed - logged})
    )


if __name__ == "__main__":
    main(Path(sys.argv[1]), *map(int, sys.argv[2:5]), *sys.argv[5:6])
