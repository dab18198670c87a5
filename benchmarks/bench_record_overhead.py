"""Recording overhead: train_mlp.py as a real process under plain / florwb / flordb.

Each backend runs the script in a fresh throwaway git repo, in interleaved rounds (the order
rotates every round) after one untimed warm-up run each; medians are compared as ratios taken
in this one run, because the shared machine is noisy. A backend whose warm-up fails is reported
and skipped. Sizes come from BENCH_EPOCHS / BENCH_STEPS / BENCH_HIDDEN / BENCH_BATCH.

  record_wall_s_<b>          median wall time of the whole process (interpreter, imports, commit)
  record_train_s_<b>         median time from the backend's import through flor.commit()
  record_overhead_<b>        wall median / plain's wall median
  record_loop_overhead_<b>   train median / plain's train median (without import/startup)
  record_wall_flordb_over_florwb   flordb wall median / florwb wall median
  record_fsync_s_florwb      median time a florwb run spends in fsync (journal at commit,
                             each checkpoint file and its folder), measured on its files
  record_fsync_share_florwb  that time / florwb's wall median

With --device cuda the names get `_cuda` after `record_` (record_cuda_wall_s_florwb...), and
`plain_item` runs plain with the script calling `loss.item()` every step, as a flordb script
must (record_cuda_wall_florwb_over_plain_item: florwb logging the tensor against that).
"""

import argparse
import json
import os
import time
from pathlib import Path

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

TRAIN_SCRIPT = BENCH_DIR / "train_mlp.py"


FSYNCS: list[float] = []  # seconds of the fsyncs a florwb run makes, measured after it


DEVICE = "cpu"  # --device: train_mlp.py's BENCH_DEVICE


PLAIN_ITEM = "plain_item"  # with --device cuda: plain, the script calling loss.item()


def run_once(backend: str) -> tuple[float, float]:
    """(wall seconds, in-script train seconds) of one train_mlp.py process."""
    with temp_git_repo(TRAIN_SCRIPT) as repo:
        timing_file = repo.parent / "timing.json"
        extra = {"BENCH_ITEM": "1"} if backend == PLAIN_ITEM else {}
        env = backend_env(
            "plain" if backend == PLAIN_ITEM else backend,
            BENCH_TIMING_FILE=str(timing_file),
            BENCH_DEVICE=DEVICE,
            **extra,
        )
        wall = run_timed([str(PYTHON), TRAIN_SCRIPT.name], cwd=repo, env=env)
        train = json.loads(timing_file.read_text())["train_s"]
        if backend == "florwb":
            FSYNCS.append(fsync_cost(repo / ".florwb"))
    return wall, train


def fsync_cost(store: Path) -> float:
    """What the durability of one run costs: rewrite and fsync each of its checkpoints (file
    and folder, as the checkpoint writer does) and its journal, on the same filesystem."""
    files = [*store.glob("checkpoints/*/*.pt"), *store.glob("journal/*.journal")]
    total = 0.0
    for path in files:
        data = path.read_bytes()
        copy = path.with_name(path.name + ".fsync")
        with open(copy, "wb") as f:
            f.write(data)
            f.flush()
            start = time.perf_counter()
            os.fsync(f.fileno())
            folder = os.open(path.parent, os.O_RDONLY)
            os.fsync(folder)
            os.close(folder)
            total += time.perf_counter() - start
        copy.unlink()
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--backends", default="plain,florwb,flordb")
    parser.add_argument(
        "--device",
        default="cpu",
        choices=["cpu", "cuda"],
        help="cuda: train on the GPU, florwb logging the loss as a CUDA tensor",
    )
    args = parser.parse_args()
    global DEVICE
    DEVICE = args.device

    backends = usable_backends(args.backends)
    if DEVICE == "cuda" and "plain" in backends:  # the .item() a flordb script has to make
        backends.insert(backends.index("plain") + 1, PLAIN_ITEM)
    sizes = {
        k: os.environ[k] for k in ("BENCH_EPOCHS", "BENCH_STEPS", "BENCH_HIDDEN") if k in os.environ
    }
    note(f"train_mlp.py sizes: {sizes or 'defaults'}; {args.rounds} rounds; stdout to /dev/null")
    note(
        f"device {args.device}"
        + (": florwb logs the CUDA loss, flordb its .item()" if args.device == "cuda" else "")
    )

    for backend in list(backends):  # warm-up: file caches, and finding broken backends
        try:
            run_once(backend)
        except BenchError as exc:
            note(f"SKIP {backend}: {exc}")
            backends.remove(backend)
    if not backends:
        raise SystemExit("no backend ran")

    walls: dict[str, list[float]] = {b: [] for b in backends}
    trains: dict[str, list[float]] = {b: [] for b in backends}
    for r in range(args.rounds):
        line = []
        for backend in rotated(backends, r):
            wall, train = run_once(backend)
            walls[backend].append(wall)
            trains[backend].append(train)
            line.append(f"{backend} {wall:.2f}s")
        note(f"round {r + 1}/{args.rounds}: " + ", ".join(line))

    tag = "record_cuda" if DEVICE == "cuda" else "record"
    wall_med = {b: median(walls[b]) for b in backends}
    train_med = {b: median(trains[b]) for b in backends}
    for b in backends:
        result(f"{tag}_wall_s_{b}", wall_med[b], "s")
        result(f"{tag}_train_s_{b}", train_med[b], "s")
    if "plain" in backends:
        for b in backends:
            if b != "plain":
                result(f"{tag}_overhead_{b}", wall_med[b] / wall_med["plain"], "x")
                result(f"{tag}_loop_overhead_{b}", train_med[b] / train_med["plain"], "x")
    if FSYNCS:  # durability (fsync of journal and checkpoints), part of the wall time above
        result(f"{tag}_fsync_s_florwb", median(FSYNCS), "s")
        result(f"{tag}_fsync_share_florwb", median(FSYNCS) / wall_med["florwb"], "x")
    if PLAIN_ITEM in backends and "florwb" in backends:
        ratio = wall_med["florwb"] / wall_med[PLAIN_ITEM]
        result(f"{tag}_wall_florwb_over_plain_item", ratio, "x")
    if "florwb" in backends and "flordb" in backends:
        result(f"{tag}_wall_flordb_over_florwb", wall_med["flordb"] / wall_med["florwb"], "x")


if __name__ == "__main__":
    main()
