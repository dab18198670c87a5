"""Adaptive checkpoint policy: measured checkpoint cost stays under the budget, and cheap
checkpoints happen every epoch.

Runs train_mlp.py with florwb twice in throwaway repos: a small model (checkpoints far
cheaper than an epoch) at the default budget, and a wide model with short epochs
(checkpoints of tens of MB) at a 5% budget. Cost is what the policy counts: the copy to
host memory on the training thread plus the background write.
Run: .venv/bin/python benchmarks/bench_checkpoint.py
"""

from __future__ import annotations

import json
import subprocess

from _common import BENCH_DIR, PYTHON, backend_env, note, result, temp_git_repo

SQL = (
    "SELECT (SELECT count(*) FROM checkpoints) AS checkpoints, "
    "(SELECT count(*) FROM iterations WHERE depth = 0) AS epochs, "
    "(SELECT sum(snapshot_s + write_s) FROM checkpoints) AS cost_s, "
    "(SELECT sum(iter_s) FROM iterations WHERE depth = 0) AS compute_s"
)


def measure(label: str, budget: float, **sizes: str) -> dict:
    with temp_git_repo(BENCH_DIR / "train_mlp.py") as repo:
        env = backend_env("florwb", FLORWB_CKPT_BUDGET=str(budget), **sizes)
        subprocess.run(
            [str(PYTHON), "train_mlp.py"], cwd=repo, env=env, check=True, stdout=subprocess.DEVNULL
        )
        out = subprocess.run(
            [str(PYTHON), "-m", "florwb.cli", "query", SQL, "--format", "json"],
            cwd=repo,
            env=backend_env("florwb"),
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    row = json.loads(out)[0]
    share = row["cost_s"] / row["compute_s"]
    note(
        f"{label}: {row['checkpoints']} checkpoints over {row['epochs']} epochs, "
        f"cost {row['cost_s']:.3f} s of {row['compute_s']:.2f} s compute "
        f"({share:.2%}, budget {budget:.0%})"
    )
    return {**row, "share": share}


def main() -> None:
    cheap = measure("small model", 0.02, BENCH_EPOCHS="8", BENCH_STEPS="400")
    result("ckpt_cheap_epochs_checkpointed", cheap["checkpoints"] / cheap["epochs"], "fraction")
    result("ckpt_cheap_cost_share", cheap["share"], "fraction")
    wide = measure("wide model", 0.05, BENCH_EPOCHS="12", BENCH_STEPS="15", BENCH_HIDDEN="1536")
    result("ckpt_budget", 0.05, "fraction")
    result("ckpt_wide_cost_share", wide["share"], "fraction")
    result("ckpt_wide_epochs_checkpointed", wide["checkpoints"] / wide["epochs"], "fraction")


if __name__ == "__main__":
    main()
