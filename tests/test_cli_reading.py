"""`florwb runs`, the replay plan, `dataframe` and `query` read by a person in a terminal:
the arg that tells runs apart shows, replayed values are counted, reasons are never cut,
an arg shadowed by a log stays reachable, durations print."""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading

import pytest
from conftest import florwb, run_py, write

LONG = "weight_norm_measured_after_every_epoch_of_training"

TRAIN = """
import torch
import florwb as flor

torch.manual_seed(0)
augment_policy = flor.arg("augment_policy", "random_crop_and_horizontal_flip")
batch_size = flor.arg("batch_size", 32)
dropout = flor.arg("dropout", 0.125)
hidden = flor.arg("hidden", 16)
lr = flor.arg("lr", 0.01)
net = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(net.parameters(), lr=lr)
x, y = torch.randn(32, 4), torch.randn(32, 1)
with flor.checkpointing(model=net, optimizer=opt):
    for epoch in flor.loop("epoch", range(2)):
        loss = ((net(x) - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        flor.log("loss", loss.item())
        flor.log("lr", lr * 0.5 ** epoch)  # a schedule logged under the arg's name
flor.commit()
"""


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """Two runs that differ only in lr, then a replay of a long-named statement."""
    from conftest import git

    root = tmp_path_factory.mktemp("reading") / "project"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    write(root / "README.md", "# project\n")
    git(root, "add", "README.md")
    git(root, "commit", "-q", "-m", "init")
    write(root / "train.py", TRAIN)
    run_py(root, "train.py", "--kwargs", "lr=0.05")
    run_py(root, "train.py", "--kwargs", "lr=0.2")
    new = f'        flor.log("{LONG}", net.weight.norm().item())\n'
    write(
        root / "train.py", TRAIN.replace('        flor.log("loss"', new + '        flor.log("loss"')
    )
    florwb(root, "replay", LONG, "--yes")
    return root


def test_args_that_tell_runs_apart_are_per_script():
    """One rule for `florwb runs`, the History tab and the chart's legend: an arg differs
    when runs of one script disagree on it. Runs of two scripts are told apart by their
    script: eval.py's constant `batch`, which train.py's runs lack, is not a differing arg
    (the CLI once compared across all runs and put it first), nor is train.py's `seed`."""
    from florwb_engine.store.runs import args_that_differ

    runs = [
        ("train.py", {"lr": 0.1, "seed": 1}),
        ("train.py", {"lr": 0.01, "seed": 1}),
        ("eval.py", {"batch": 32}),
        ("eval.py", {"batch": 32}),
    ]
    assert args_that_differ(runs) == ["lr"]
    # within one script, an arg some runs lack differs
    assert args_that_differ([*runs, ("eval.py", {})]) == ["batch", "lr"]


def test_runs_shows_the_differing_arg_first_and_counts_replayed_values(sweep):
    for columns in ("80", "250"):
        out = florwb(sweep, "runs", env={"COLUMNS": columns}).stdout
        lines = out.splitlines()
        assert len(lines) >= 3, out
        for line, lr in zip(lines[1:3], ("0.05", "0.2")):
            args = line[lines[0].index("args") :]
            assert args.startswith(f"lr={lr} "), line
            assert "4+2" in line.split(), line  # 4 recorded, 2 replayed values
    wide = florwb(sweep, "runs", env={"COLUMNS": "250"}).stdout.splitlines()[1]
    assert "augment_policy=random_crop_and_hor…" in wide and "hidden=16" in wide
    assert "…" not in wide.replace("random_crop_and_hor…", "")  # the args fit in 250
    narrow = florwb(sweep, "runs", env={"COLUMNS": "80"}).stdout.splitlines()[1]
    assert narrow.endswith("…") and "hidden=16" not in narrow
    rows = json.loads(florwb(sweep, "runs", "--json").stdout)
    assert [(r["n_logs"], r["n_replayed"]) for r in rows] == [(4, 2), (4, 2)]


def test_replay_plan_never_cuts_why_a_run_is_skipped(sweep):
    proc = florwb(sweep, "replay", LONG, env={"COLUMNS": "80"})
    assert "nothing to replay" in proc.stdout
    skipped = [line for line in proc.stdout.splitlines() if line.startswith(("run", "2", "1"))]
    reasons = [line for line in proc.stdout.splitlines() if f"already has {LONG}" in line]
    assert len(reasons) == 2, proc.stdout
    assert "…" not in proc.stdout, skipped


def test_dataframe_reaches_an_arg_shadowed_by_a_log(sweep):
    bare = json.loads(florwb(sweep, "dataframe", "lr", "--format", "json").stdout)
    assert sorted({r["lr"] for r in bare}) == [0.025, 0.05, 0.1, 0.2]  # the logged schedule
    both = json.loads(
        florwb(sweep, "dataframe", "arg:lr,log:lr", "loss", "--format", "json").stdout
    )
    assert len(both) == 4
    for row in both:
        assert row["arg:lr"] in (0.05, 0.2)
        assert row["log:lr"] == row["arg:lr"] * 0.5 ** row["epoch"]
        assert isinstance(row["loss"], float)
    wrong = florwb(sweep, "dataframe", "arg:loss", check=False)
    assert wrong.returncode == 1 and "no arg named 'loss'" in wrong.stderr
    assert "Traceback" not in wrong.stderr


def test_query_prints_intervals_as_seconds(sweep):
    sql = "SELECT run_id, end_time - start_time AS took, INTERVAL 90 SECOND AS ninety FROM runs"
    table = florwb(sweep, "query", sql)
    assert table.returncode == 0 and "90s" in table.stdout and "Traceback" not in table.stderr
    rows = json.loads(florwb(sweep, "query", sql, "--format", "json").stdout)
    assert len(rows) == 2
    assert all(r["ninety"] == 90.0 and 0 < r["took"] < 600 for r in rows)
    csv = florwb(sweep, "query", sql, "--format", "csv").stdout.splitlines()
    assert csv[0] == "run_id,took,ninety" and csv[1].endswith(",90.0")


def test_runs_says_who_holds_the_database_and_goes_on_when_released(sweep):
    """Another process holds the catalog with a write lock (as harlequin or a notebook's
    `duckdb.connect` does): `florwb runs` says once who, keeps retrying, and lists the
    runs once the lock is released."""
    florwb(sweep, "runs")  # the catalog exists and is up to date
    path = sweep / ".florwb" / "florwb.duckdb"
    hold = (
        "import duckdb, sys\n"
        f"con = duckdb.connect({str(path)!r})\n"
        "print('held', flush=True)\n"
        "sys.stdin.readline()\n"
        "con.close()\n"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", hold], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        proc = subprocess.Popen(
            [sys.executable, "-m", "florwb.cli", "runs"],
            cwd=sweep,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        lines: queue.Queue[str | None] = queue.Queue()

        def read_stderr() -> None:
            assert proc.stderr is not None
            for line in proc.stderr:
                lines.put(line)
            lines.put(None)

        reader = threading.Thread(target=read_stderr, daemon=True)
        reader.start()
        notice = lines.get(timeout=60)  # the first thing it says is who holds the file
        assert notice is not None
        assert f"is locked by another process (PID {holder.pid}," in notice, notice
        assert "retrying" in notice and proc.poll() is None
    finally:
        assert holder.stdin is not None
        holder.stdin.write("\n")
        holder.stdin.close()
        holder.wait(timeout=60)
    assert proc.wait(timeout=120) == 0
    reader.join(timeout=60)
    rest = []
    while (line := lines.get(timeout=10)) is not None:
        rest.append(line)
    assert not any("locked" in line for line in rest), rest  # said once
    assert proc.stdout is not None
    listing = proc.stdout.read()
    assert "lr=0.05" in listing and "lr=0.2" in listing
