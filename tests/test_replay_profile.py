"""`florwb replay --profile`: where a replay's time went, from the executor and from the
replayed processes, and the planning that reads checkpoints without importing torch."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import florwb, recorded_project, write

from florwb_engine.record import loop_state
from florwb_engine.record.checkpoint import (
    AFTER_INNER,
    GRADS,
    holds_grads,
)
from florwb_engine.replay.profile import LABELS, PARTS, Profiler, WorkerTimes, text

SCRIPT = """
import time
import torch
import florwb as flor

torch.manual_seed(0)
flor.set_checkpoint_budget(1.0)
data, target = torch.randn(32, 4), torch.randn(32, 1)
net = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(net.parameters(), lr=0.1)
with flor.checkpointing(model=net, optimizer=opt):
    for epoch in flor.loop("epoch", range(4)):
        for step in flor.loop("step", range(4)):
            loss = ((net(data) - target) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        flor.log("loss", loss.item())
        time.sleep(0.05)  # epochs well above checkpoint cost: every epoch is checkpointed
"""
STATEMENT = '        flor.log("wnorm", net.weight.norm().item())\n'
TODAY = SCRIPT.replace("        for step in", STATEMENT + "        for step in")


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("profile") / "project"
    return recorded_project(root, SCRIPT)


def test_profile_parts_sum_within_the_wall_time_and_values_match_a_forward_run(project):
    write(project / "train.py", TODAY)
    proc = florwb(project, "replay", "wnorm", "--yes", "--json", "--profile")
    report = json.loads(proc.stdout)
    assert report["plan"]["runs"][0]["mode"] == "outer"
    assert report["result"]["runs"][0]["verdict"] == "verified"
    assert "profile" not in report["result"]  # said once, at the top
    profile = report["profile"]
    assert list(profile["parts"]) == list(PARTS)
    assert all(seconds >= 0 for seconds in profile["parts"].values())
    assert sum(profile["parts"].values()) <= profile["wall_s"] + 1e-6
    assert profile["parts"]["start"] > 0  # the command's start and planning
    assert profile["parts"]["ingest"] > 0
    # the workers' own report reached the executor through their progress files
    assert profile["workers"] >= 1 and profile["workers_measured"]
    assert profile["checkpoint_loads"] >= 1
    assert {"worker_start", "restore", "compute"} <= set(profile["worker_s"])

    replayed = _values(project, "wnorm")
    run_id = next(iter(replayed))
    # the same code run forward (a new run of today's script) logs the same values
    subprocess.run([sys.executable, "train.py"], cwd=project, check=True, capture_output=True)
    forward = {r: v for r, v in _values(project, "wnorm").items() if r != run_id}
    assert len(forward) == 1
    assert replayed[run_id] == next(iter(forward.values()))
    assert sorted(replayed[run_id]) == [0, 1, 2, 3]


def _values(project: Path, name: str) -> dict[str, dict[int, float]]:
    rows = json.loads(florwb(project, "dataframe", name, "--format", "json").stdout)
    found: dict[str, dict[int, float]] = {}
    for row in rows:
        if row.get(name) is not None:
            found.setdefault(row["run_id"], {})[int(row["epoch"])] = row[name]
    return found


def test_planning_reads_checkpoints_without_torch_as_torch_does(project):
    """The planner's four questions of a checkpoint, asked in a fresh process: answered
    without importing torch, the same as from torch.load."""
    files = sorted((project / ".florwb" / "checkpoints").glob("*/epoch-*.pt"))
    assert files
    code = (
        "import json, sys\n"
        "from pathlib import Path\n"
        "from florwb_engine.record.checkpoint import (\n"
        "    holds_grads, left_kept, loop_state_kept, taken_after_inner)\n"
        "out = []\n"
        "for path in map(Path, sys.argv[1:]):\n"
        "    kept = left_kept(path)\n"
        "    out.append([holds_grads(path), taken_after_inner(path), loop_state_kept(path),\n"
        "                None if kept is None else [kept[0], sorted(kept[1]), kept[2]]])\n"
        "print(json.dumps({'answers': out, 'torch': 'torch' in sys.modules}))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, *map(str, files)], capture_output=True, text=True, check=True
    )
    found = json.loads(proc.stdout)
    assert found["torch"] is False
    expected = []
    for path in files:
        saved = torch.load(path, weights_only=True, map_location="cpu")
        left = saved[loop_state.LEFT]
        expected.append(
            [
                GRADS in saved,
                AFTER_INNER in saved,
                dict(saved.get(loop_state.UNCARRIED) or {}),
                [
                    int(saved.get(AFTER_INNER, 0)),
                    sorted({name for values in left.values() for name in values}),
                    dict(saved.get(loop_state.UNMEMOIZED) or {}),
                ],
            ]
        )
    assert found["answers"] == expected
    assert expected[0][3][1] == ["loss", "step"]  # what the step loop leaves, memoized


def test_a_damaged_checkpoint_is_read_by_torch_and_fails_loudly(tmp_path):
    """Not a checkpoint florwb wrote: torch reads it instead, and says what is wrong (no
    answer made up from a half-read file)."""
    path = tmp_path / "epoch-000000.pt"
    torch.save({GRADS: {}, "w": torch.ones(2)}, path)
    path.write_bytes(path.read_bytes()[:-40])  # cut off: the zip's directory is gone
    with pytest.raises(Exception, match="zip|archive|central directory"):
        holds_grads(path)


def test_workers_side_by_side_are_spread_over_the_time_they_ran():
    """Two workers of 4 s each that ran in 4 s of wall time: their parts are halved, and
    every part stays within the wall time."""
    profiler = Profiler(began=100.0, executing=101.0)
    profiler.spans = {"materialise": 0.5, "ingest": 0.5}
    profiler.run_s = 4.0
    for _ in range(2):
        profiler.workers.append(
            WorkerTimes(
                requested=102.0, exited=106.0, run_start=103.0, end=105.5, restore_s=0.5, loads=3
            )
        )
    found = profiler.result(ended=107.0)
    parts = found["parts"]
    assert found["wall_s"] == 7.0
    assert parts["start"] == 1.0
    assert parts["worker_start"] == pytest.approx(1.0)  # 2 x 1 s, spread over 4 s
    assert parts["restore"] == pytest.approx(0.5)
    assert parts["compute"] == pytest.approx(2.0)
    assert parts["other"] == pytest.approx(7.0 - 1.0 - 0.5 - 0.5 - 1.0 - 0.5 - 2.0)
    assert sum(parts.values()) == pytest.approx(found["wall_s"])
    assert found["checkpoint_loads"] == 6
    lines = text(found)
    assert lines[0] == "profile: 7.00 s wall"
    assert all(LABELS[part] in "\n".join(lines) for part in PARTS)


def test_a_worker_that_never_reported_counts_as_other():
    profiler = Profiler(began=0.0, executing=1.0)
    profiler.run_s = 2.0
    profiler.workers.append(WorkerTimes(requested=1.0, exited=3.0))
    parts = profiler.result(ended=3.0)["parts"]
    assert parts["compute"] == 0 and parts["worker_start"] == 0
    assert parts["other"] == pytest.approx(2.0)
