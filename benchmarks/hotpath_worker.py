"""Worker of bench_log_hotpath.py: times flor.log inside two nested flor.loop's, in-process.

Usage: BENCH_FLOR=<backend> python hotpath_worker.py OUT.json EPOCHS STEPS LOGS

Copied, with train_mlp.py (whose load_flor picks the backend), into a throwaway git repo and
run from there: florwb finds its project from the script's folder, so the script itself must
live in the throwaway repo, or its .florwb/ would land in this checkout.
"""

import json
import sys
import time
from pathlib import Path

from train_mlp import flor  # the backend BENCH_FLOR names, exactly as the training script sees it


def main(out: Path, epochs: int, steps: int, logs: int) -> None:
    names = [f"metric{i}" for i in range(logs)]
    flor.arg("logs_per_step", logs)  # the first flor call starts the run: keep it out of timing
    start = time.perf_counter()
    for _epoch in flor.loop("epoch", range(epochs)):
        for step in flor.loop("step", range(steps)):
            for name in names:
                flor.log(name, step * 0.5)
    logged = time.perf_counter()
    flor.commit()
    committed = time.perf_counter()
    calls = epochs * steps * logs
    out.write_text(
        json.dumps({"calls": calls, "log_s": logged - start, "commit_s": committed - logged})
    )


if __name__ == "__main__":
    main(Path(sys.argv[1]), *map(int, sys.argv[2:5]))
