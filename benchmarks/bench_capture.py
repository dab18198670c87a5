"""What keeping printed lines costs: train_mlp.py printing a line every step, recorded by
florwb with capture on and off (FLORWB_CAPTURE=0), as real processes.

Both arms run the same script in fresh throwaway git repos, in interleaved rounds (the
order alternates) after one untimed warm-up each; the medians of the in-script time from
florwb's import through flor.commit() (which includes writing the last lines) are
compared, because that is the time capture can add to. stdout goes to /dev/null. Sizes
come from BENCH_EPOCHS / BENCH_STEPS / BENCH_HIDDEN / BENCH_BATCH.

  capture_train_s_on / _off   median train time with capture on / off
  capture_lines               lines the run kept (one per step, and the final line)
  capture_overhead            (on / off - 1) in percent; the target is at most 3 %
"""

import argparse
import json
import os

from _common import BENCH_DIR, PYTHON, backend_env, median, note, result, run_timed, temp_git_repo

TRAIN_SCRIPT = BENCH_DIR / "train_mlp.py"
ARMS = {"on": "1", "off": "0"}


def run_once(arm: str) -> tuple[float, int]:
    """(in-script train seconds, lines kept) of one train_mlp.py process."""
    with temp_git_repo(TRAIN_SCRIPT) as repo:
        timing_file = repo.parent / "timing.json"
        env = backend_env(
            "florwb",
            BENCH_TIMING_FILE=str(timing_file),
            BENCH_PRINT="1",
            FLORWB_CAPTURE=ARMS[arm],
        )
        run_timed([str(PYTHON), TRAIN_SCRIPT.name], cwd=repo, env=env)
        train = json.loads(timing_file.read_text())["train_s"]
        lines = 0
        if arm == "on":
            from florwb_engine.store import Store

            lines = int(Store(repo).query("SELECT count(*) AS n FROM console")["n"][0])
    return train, lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    sizes = {
        k: os.environ[k] for k in ("BENCH_EPOCHS", "BENCH_STEPS", "BENCH_HIDDEN") if k in os.environ
    }
    note(f"train_mlp.py printing every step, sizes: {sizes or 'defaults'}; {args.rounds} rounds")
    for arm in ARMS:
        run_once(arm)  # warm-up: file caches
    times: dict[str, list[float]] = {arm: [] for arm in ARMS}
    kept = 0
    for r in range(args.rounds):
        order = list(ARMS) if r % 2 == 0 else list(reversed(ARMS))
        line = []
        for arm in order:
            train, lines = run_once(arm)
            times[arm].append(train)
            kept = lines or kept
            line.append(f"{arm} {train:.3f}s")
        note(f"round {r + 1}/{args.rounds}: " + ", ".join(line))
    on, off = median(times["on"]), median(times["off"])
    result("capture_train_s_on", on, "s")
    result("capture_train_s_off", off, "s")
    result("capture_lines", kept, "lines")
    result("capture_overhead", (on / off - 1) * 100, "%")


if __name__ == "__main__":
    main()
