"""How close the replay plan's time estimate lands to what the replay really took.

The estimator works from recorded timings and calibrates itself from the project's
finished replays, so the SECOND replay of a project is the one to judge: it is planned after
a first replay measured this machine. Printed as actual / estimate (1.0 is exact; the
target is within 2x, 0.5-2.0) on the demo project and on a 10-run sweep. A wall-clock
figure, so it lives here and not in the test suite (tests/test_replay_estimate.py checks
the calibration arithmetic itself).

    .venv/bin/python benchmarks/bench_replay_estimate.py [--sweep-runs 10]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from _common import PYTHON, REPO, note, result, temp_git_repo

FLORWB = [str(PYTHON), "-m", "florwb"]

SWEEP = """
import time
import torch
import florwb as flor

torch.manual_seed(0)
lr = flor.arg("lr", 0.1)
data, target = torch.randn(64, 8), torch.randn(64, 1)
net = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(net.parameters(), lr=lr)
with flor.checkpointing(model=net, optimizer=opt):
    for epoch in flor.loop("epoch", range(3)):
        for step in flor.loop("step", range(4)):
            loss = ((net(data) - target) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            time.sleep(0.05)
        flor.log("loss", loss.item())
"""
SWEEP_TODAY = SWEEP.replace(
    '        flor.log("loss", loss.item())\n',
    '        flor.log("loss", loss.item())\n'
    '        flor.log("wnorm", net.weight.norm().item())\n'
    '        flor.log("bnorm", net.bias.norm().item())\n',
)
DEMO_ANCHOR = '        flor.log("weight_norm"'
DEMO_NEW = (
    '        flor.log("bias_norm", sum(p.detach().norm().item() for n, p in '
    'model.named_parameters() if "bias" in n))\n'
)


def replay(project: Path, name: str) -> tuple[float, float]:
    """(estimate, actual) seconds of `florwb replay NAME --yes` in `project`."""
    out = subprocess.run(
        [*FLORWB, "replay", name, "--yes", "--json"],
        cwd=project,
        capture_output=True,
        text=True,
        check=True,
    )
    report = json.loads(out.stdout)
    assert report["result"]["status"] == "finished", report["result"]
    query = subprocess.run(
        [
            *FLORWB,
            "query",
            "SELECT epoch(ended - started) AS s FROM replays WHERE replay_id = "
            f"'{report['plan']['replay_id']}'",
            "--format",
            "json",
        ],
        cwd=project,
        capture_output=True,
        text=True,
        check=True,
    )
    return report["plan"]["estimate_s"], float(json.loads(query.stdout)[0]["s"])


def judge(label: str, project: Path, first: str, second: str) -> None:
    first_estimate, first_actual = replay(project, first)
    estimate, actual = replay(project, second)
    note(
        f"{label}: first replay estimated {first_estimate:.2f} s, took {first_actual:.2f} s; "
        f"second estimated {estimate:.2f} s, took {actual:.2f} s"
    )
    result(f"replay_estimate_ratio_{label}", actual / estimate, "x")


def demo(scratch: Path) -> None:
    project = scratch / "demo"
    subprocess.run([*FLORWB, "demo", str(project), "--no-ui"], check=True, capture_output=True)
    judge_script = project / "train.py"
    judge_script.write_text(judge_script.read_text().replace(DEMO_ANCHOR, DEMO_NEW + DEMO_ANCHOR))
    # the demo's pending statement is weight_norm: the first replay fills it
    judge("demo", project, "weight_norm", "bias_norm")


def sweep(runs: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "train.py"
        script.write_text(SWEEP)
        with temp_git_repo(script) as repo:
            env = {**os.environ, "OMP_NUM_THREADS": "1"}

            def record(k: int) -> None:
                subprocess.run(
                    [str(PYTHON), "train.py", "--kwargs", f"lr={0.01 * (k + 1):.2f}"],
                    cwd=repo,
                    env=env,
                    check=True,
                    capture_output=True,
                )

            with ThreadPoolExecutor(2) as pool:
                list(pool.map(record, range(runs)))
            (repo / "train.py").write_text(SWEEP_TODAY)
            judge("sweep", repo, "wnorm", "bnorm")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sweep-runs", type=int, default=10)
    args = parser.parse_args()
    os.chdir(REPO)
    with tempfile.TemporaryDirectory() as scratch:
        demo(Path(scratch))
    sweep(args.sweep_runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
