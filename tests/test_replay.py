"""Hindsight replay end to end: real recorded runs over two code versions, new statements
propagated into the old code and replayed from checkpoints in worker processes."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest
from conftest import florwb, git, repo_state, run_py, write

from florwb_engine.project import journal_dir
from florwb_engine.replay import execute, plan_replay
from florwb_engine.store import Store

V1 = """
import time
import torch
import florwb as flor

torch.manual_seed(0)
lr = flor.arg("lr", 0.1)
epochs = flor.arg("epochs", 4)
flor.set_checkpoint_budget(1.0)
data, target = torch.randn(64, 8), torch.randn(64, 1)
net = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(net.parameters(), lr=lr)
with flor.checkpointing(model=net, optimizer=opt):
    for epoch in flor.loop("epoch", range(epochs)):
        perm = torch.randperm(64)
        for step in flor.loop("step", range(4)):
            idx = perm[step * 16 : (step + 1) * 16]
            loss = ((net(data[idx]) - target[idx]) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            flor.log("loss", loss.item())
        flor.log("acc", float(-((net(data) - target) ** 2).mean()))
        time.sleep(0.05)  # epochs well above checkpoint cost: every epoch is checkpointed
"""

# v2: the model is renamed and a comment added; the computation is the same.
V2 = V1.replace("net", "model").replace("perm = ", "# a fresh order every epoch\n        perm = ")

# today: three new statements, one before the loop, one per epoch, one per step.
TODAY = (
    V2.replace(
        "with flor.checkpointing",
        'flor.log("n_params", sum(p.numel() for p in model.parameters()))\nwith flor.checkpointing',
    )
    .replace(
        "        perm = torch.randperm(64)",
        '        flor.log("wnorm", model.weight.norm().item())\n        perm = torch.randperm(64)',
    )
    .replace(
        "            opt.step()\n",
        '            opt.step()\n            flor.log("gnorm", model.weight.grad.norm().item())\n',
    )
)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """v1 run with lr=0.1 and lr=0.05, v2 run with lr=0.1 and epochs=3."""
    root = tmp_path_factory.mktemp("replay") / "project"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    write(root / "train.py", V1)
    git(root, "add", "train.py")
    git(root, "commit", "-q", "-m", "v1")
    run_py(root, "train.py")
    run_py(root, "train.py", "--kwargs", "lr=0.05")
    write(root / "train.py", V2)
    git(root, "commit", "-q", "-am", "v2")
    run_py(root, "train.py", "--kwargs", "epochs=3")
    assert Store(root).query("SELECT count(*) AS n FROM checkpoints").n[0] == 4 + 4 + 3
    return root


@pytest.fixture
def project(recorded, tmp_path):
    """A private copy of the recorded project with today's script in its working tree."""
    copy = tmp_path / "project"
    shutil.copytree(recorded, copy, symlinks=True)
    write(copy / "train.py", TODAY)
    return copy


@pytest.fixture(scope="module")
def fresh(recorded, tmp_path_factory):
    """What today's script logs when run from scratch (lr=0.1 and lr=0.05)."""
    folder = tmp_path_factory.mktemp("fresh")
    write(folder / "train.py", TODAY)
    run_py(folder, "train.py")
    run_py(folder, "train.py", "--kwargs", "lr=0.05")
    return Store(folder).dataframe("wnorm", "gnorm", "lr")


def _by_run(store: Store, name: str) -> dict:
    frame = store.dataframe(name, "lr")
    frame = frame[frame[name].notna()]
    return {run: list(group[name]) for run, group in frame.groupby("run_id", observed=True)}


def _fresh_values(fresh, name: str, lr: float) -> list:
    rows = fresh[(fresh.lr == lr) & fresh[name].notna()]
    return list(rows[name])


def test_epoch_statement_skips_inner_loops_and_matches_a_fresh_run(project, fresh):
    plan = plan_replay(project, ["wnorm"], workers=2)
    assert [r.mode for r in plan.runs] == ["outer"] * 3
    assert all(r.segments and r.segments[0].skip_inner for r in plan.runs)
    assert plan.estimate_s > 0
    result = execute(plan)
    assert result.status == "finished", result
    assert all(r.compared > 0 for r in result.runs)  # acc was recomputed and checked
    store = Store(project)
    steps = store.query(
        f"SELECT count(*) AS n FROM iterations WHERE source = '{plan.replay_id}' AND loop = 'step'"
    ).n[0]
    assert steps == 0  # every step loop was skipped
    runs = store.runs()
    values = _by_run(store, "wnorm")
    assert values[runs[0]["run_id"]] == pytest.approx(_fresh_values(fresh, "wnorm", 0.1))
    assert values[runs[1]["run_id"]] == pytest.approx(_fresh_values(fresh, "wnorm", 0.05))
    assert values[runs[2]["run_id"]] == pytest.approx(_fresh_values(fresh, "wnorm", 0.1)[:3])
    frame = store.dataframe("wnorm", "acc")
    assert frame.wnorm.notna().sum() == 4 + 4 + 3 and frame.acc.notna().sum() == 11

    again = plan_replay(project, ["wnorm"], workers=2)
    assert {r.status for r in again.runs} == {"done"} and again.ready() == []
    rows = store.query("SELECT count(*) AS n FROM logs").n[0]
    assert execute(again).runs == []
    assert store.query("SELECT count(*) AS n FROM logs").n[0] == rows


def test_step_statement_reexecutes_epochs_from_checkpoints_in_parallel(project, fresh):
    plan = plan_replay(project, ["gnorm"], where="lr = 0.05", workers=2)
    (run,) = plan.ready()
    assert run.mode == "inner"
    # two segments covering epochs 0-3, the second from a checkpoint (where the cut falls
    # follows the recorded epoch times)
    (first, second) = run.segments
    assert (first.first, second.last) == (0, 3) and second.first == first.last + 1 > 0
    result = execute(plan)
    assert result.status == "finished", result
    assert result.runs[0].compared >= 16  # every recorded loss was recomputed identically
    values = _by_run(Store(project), "gnorm")[run.run_id]
    assert values == pytest.approx(_fresh_values(fresh, "gnorm", 0.05))


def test_sparse_checkpoints_reexecute_the_epochs_between(project, fresh):
    run_id = Store(project).runs()[0]["run_id"]
    con = duckdb.connect(str(project / ".florwb" / "florwb.duckdb"))
    con.execute("DELETE FROM checkpoints WHERE run_id = ? AND iteration = 1", [run_id])
    con.close()
    plan = plan_replay(project, ["wnorm"], where=f"run_id = '{run_id}'")
    (run,) = plan.ready()
    # a checkpoint holds its epoch's state after the step loop: epoch 2 skips its step
    # loop from its own checkpoint, after epoch 1 ran in full
    assert run.segments[0].skip_inner == [0, 2, 3]
    assert any("iterations 1:" in note and "re-executed" in note for note in run.notes)
    assert execute(plan).status == "finished"
    values = _by_run(Store(project), "wnorm")[run_id]
    assert values == pytest.approx(_fresh_values(fresh, "wnorm", 0.1))


def test_prefix_statement_gets_recorded_args_not_todays_defaults(project):
    today = (project / "train.py").read_text().replace('flor.arg("lr", 0.1)', 'flor.arg("lr", 0.9)')
    (project / "train.py").write_text(
        today.replace("n_params", "lr_seen").replace(
            "sum(p.numel() for p in model.parameters())", "lr"
        )
    )
    plan = plan_replay(project, ["lr_seen"], where="lr < 0.1")
    assert [r.mode for r in plan.runs] == ["prefix"]
    assert execute(plan).status == "finished"
    frame = Store(project).dataframe("lr_seen")
    assert list(frame.lr_seen) == [0.05]
    assert (
        Store(project)
        .query(f"SELECT count(*) AS n FROM iterations WHERE source = '{plan.replay_id}'")
        .n[0]
        == 0
    )


def test_failing_version_is_reported_and_other_runs_finish(project):
    text = (
        (project / "train.py")
        .read_text()
        .replace(
            'flor.log("wnorm", model.weight.norm().item())',
            'flor.log("wnorm", model.weight.norm().item())\n'
            '        flor.log("bad", 1 / (epochs - 4))',
        )
    )
    (project / "train.py").write_text(text)
    where = "lr < 0.1 OR epochs = 3"
    proc = florwb(
        project, "replay", "bad", "--yes", "--workers", "2", "--where", where, check=False
    )
    assert proc.returncode == 1
    assert proc.stdout.count("failed, exit 1") == 1 and "ZeroDivisionError" in proc.stdout
    assert "finished" in proc.stdout  # the epochs=3 run
    assert "partial" in proc.stdout
    frame = Store(project).dataframe("bad")
    assert frame.bad.notna().sum() == 3 and set(frame.run_id) == {
        Store(project).runs()[2]["run_id"]
    }
    assert not any((project / ".florwb" / "replays").iterdir())


def test_statement_that_cannot_be_placed_is_reported_and_skipped(project):
    text = (project / "train.py").read_text()
    text = text.replace("torch.manual_seed(0)\n", "torch.manual_seed(0)\nscale = 2.0\n").replace(
        'flor.log("wnorm", model.weight.norm().item())',
        'flor.log("scaled", scale * model.weight.norm().item())',
    )
    (project / "train.py").write_text(text)
    plan = plan_replay(project, ["scaled"])
    assert {r.status for r in plan.runs} == {"skip"}
    assert all("scale" in r.reason for r in plan.runs)
    proc = florwb(project, "replay", "scaled", "--yes", check=False)
    assert proc.returncode == 1 and "nothing to replay" in proc.stdout
    assert "scale" in proc.stdout


def test_ctrl_c_cancels_and_leaves_nothing_half_written(project, fresh):
    before = repo_state(project)
    proc = subprocess.Popen(
        [sys.executable, "-m", "florwb.cli", "replay", "gnorm", "--yes"],
        cwd=project,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 60
    line = ""
    while time.time() < deadline and "running" not in line:
        line = proc.stderr.readline()
    # progress is printed from inside the worker loop, where Ctrl-C only sets the cancel
    proc.send_signal(signal.SIGINT)
    out, _err = proc.communicate(timeout=60)
    assert proc.returncode == 130, (out, _err)
    assert repo_state(project) == before
    store = Store(project)
    assert store.query("SELECT status FROM replays").status.tolist() == ["cancelled"]
    # a run that had finished before the cancel is kept whole; the
    # others leave nothing
    kept = _by_run(store, "gnorm") if "gnorm" in store.names() else {}
    full = len(_fresh_values(fresh, "gnorm", 0.1))
    assert all(len(values) == full for values in kept.values()), kept
    if not kept:
        assert store.query("SELECT count(*) AS n FROM logs WHERE source != 'record'").n[0] == 0
    assert not any((project / ".florwb" / "replays").iterdir())


def _workers_in(folder) -> set[int]:
    """Processes whose working directory is inside `folder` (replay workers run there)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):  # gone, or not ours to look at
                if os.readlink(entry / "cwd").startswith(str(folder)):
                    found.add(int(entry.name))
    return found


SLOW = """
import os
import time
import florwb as flor

total = 0
for epoch in flor.loop("epoch", range(3)):
    for step in flor.loop("step", range(3)):
        total += step
        time.sleep(float(os.environ.get("SLOW_S", "0")))
    flor.log("total", total)
"""


def _epochs_done(replays: Path) -> int:
    done = 0
    for progress in replays.glob("*/*.progress"):
        with contextlib.suppress(OSError, ValueError):  # being written
            done += json.loads(progress.read_text())["done"]
    return done


def test_killed_replay_stops_its_workers_and_the_next_replay_redoes_its_runs(repo):
    """SIGKILL gives the replay no chance to clean up: its workers must still stop, and the
    rows they wrote must not make the next replay think those runs are done."""
    write(repo / "slow.py", SLOW)
    run_py(repo, "slow.py")
    run_py(repo, "slow.py")
    write(
        repo / "slow.py",
        SLOW.replace("total += step\n", "total += step\n        flor.log('seen', step)\n"),
    )
    before = repo_state(repo)
    replays = repo / ".florwb" / "replays"
    proc = subprocess.Popen(
        # one worker (the default is one per core): one partial journal at the kill
        [sys.executable, "-m", "florwb.cli", "replay", "seen", "--yes", "--workers", "1"],
        cwd=repo,
        env={**os.environ, "SLOW_S": "1"},  # 9 s per run: killed long before the end
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 90
    while time.time() < deadline and not _epochs_done(replays):
        time.sleep(0.02)
    while time.time() < deadline and not any(  # its journal holds its first epoch's values
        p.stat().st_size for p in journal_dir(repo).glob("replay-*")
    ):
        time.sleep(0.02)
    assert _workers_in(replays), "no replay worker running"
    proc.kill()
    proc.wait(timeout=30)
    deadline = time.time() + 4  # the worker alone would sleep on for 5 s more
    while time.time() < deadline and (_workers_in(replays) or any(replays.glob("*.log"))):
        time.sleep(0.05)
    assert not _workers_in(replays)
    [killed] = [d.name for d in replays.iterdir()]  # its work folder; the server's log is gone
    [partial] = journal_dir(repo).glob(f"replay-{killed}-*")
    assert partial.stat().st_size > 0  # the killed worker's first epoch

    store = Store(repo)  # any reader clears what the killed replay left, before ingesting it
    assert store.query(f"SELECT status FROM replays WHERE replay_id = '{killed}'").status[0] == (
        "interrupted"
    )
    assert store.query(f"SELECT count(*) AS n FROM logs WHERE source = '{killed}'").n[0] == 0
    assert not partial.exists()
    again = json.loads(florwb(repo, "replay", "seen", "--yes", "--json").stdout)
    assert again["result"]["status"] == "finished"
    assert [run["status"] for run in again["plan"]["runs"]] == ["ready", "ready"]
    values = store.query(
        "SELECT run_id, epoch, step, count(*) AS n FROM logs WHERE name = 'seen' GROUP BY ALL"
    )
    assert len(values) == 2 * 9 and set(values.n) == {1}
    assert not (replays / killed).exists()
    assert repo_state(repo) == before


ARGP = """
import argparse
import random
import florwb as flor

parser = argparse.ArgumentParser()
parser.add_argument("--width", type=int, default=3)
args = parser.parse_args()
with open("data/offset.txt") as f:
    offset = float(f.read())
total = 0.0
for epoch in flor.loop("epoch", range(3)):
    total += args.width + offset + random.Random().random()  # unseeded: not reproducible
    flor.log("total", total)
"""


def test_argv_data_files_and_divergence_without_torch(repo):
    (repo / ".gitignore").write_text("data/\n")
    write(repo / "data" / "offset.txt", "0.5")
    write(repo / "argp.py", ARGP)
    run_py(repo, "argp.py", "--width", "7")
    today = ARGP.replace("total = 0.0\n", 'total = 0.0\nflor.log("seen", args.width + offset)\n')
    (repo / "argp.py").write_text(today)
    before = repo_state(repo)
    plan = plan_replay(repo, ["seen"])
    assert plan.ready()[0].mode == "prefix"
    assert execute(plan).status == "finished"
    assert list(Store(repo).dataframe("seen").seen) == [7.5]  # recorded argv, untracked data
    today = today.replace(
        '    flor.log("total", total)', '    flor.log("total", total)\n    flor.log("e", epoch)'
    )
    (repo / "argp.py").write_text(today)
    result = execute(plan_replay(repo, ["e"]))
    assert result.status == "diverged"
    assert result.runs[0].divergence.startswith("unreproducible: total at epoch=0: recorded ")
    assert repo_state(repo) == before
    assert Store(repo).query("SELECT status FROM replays ORDER BY started").status.tolist() == [
        "finished",
        "diverged",
    ]


def test_propagate_cli_prints_code_and_json(tmp_path):
    new = write(tmp_path / "new.py", TODAY)
    old = write(tmp_path / "old.py", V1 + "# trailing comment kept\n")
    out = florwb(tmp_path, "propagate", str(new), str(old)).stdout
    assert out.count("flor.log(") == V1.count("flor.log(") + 3
    assert "net.weight.norm()" in out  # renamed to the old version's variable
    assert out.endswith("# trailing comment kept\n")
    report = florwb(tmp_path, "propagate", str(new), str(old), "--json").stdout
    import json

    statements = {s["name"]: s for s in json.loads(report)["statements"]}
    assert set(statements["wnorm"]) == {
        "name",
        "line_new",
        "line_old",
        "status",
        "reason",
        "loop_path",
        "anchor",
    }
    assert statements["gnorm"]["status"] == "inserted" and statements["loss"]["status"] == "present"
    assert statements["gnorm"]["anchor"] in ("exact", "similar")
    assert statements["loss"]["anchor"] is None
    target = tmp_path / "out.py"
    florwb(tmp_path, "propagate", str(new), str(old), "-o", str(target))
    assert target.read_text() == out
    missing = florwb(tmp_path, "propagate", str(tmp_path / "nope.py"), str(old), check=False)
    assert missing.returncode == 1 and missing.stderr.startswith("florwb: cannot read")


STALE = """
import florwb as flor

for epoch in flor.loop("epoch", range(3)):
    total = 0.0
    for step in flor.loop("step", range(4)):
        loss = (epoch + 1) * (step + 1)
        total += loss
    flor.log("avg", total / 4)
"""


def test_epoch_body_reading_inner_loop_variables_reexecutes_the_inner_loops(repo):
    write(repo / "stale.py", STALE)
    run_py(repo, "stale.py")
    (repo / "stale.py").write_text(STALE + '    flor.log("last", loss)\n')
    plan = plan_replay(repo, ["last"])
    (run,) = plan.ready()
    assert run.mode == "inner"
    assert any("reads loss, total" in note for note in run.notes)
    result = execute(plan)
    assert result.status == "finished" and result.runs[0].compared == 3  # avg, checked
    assert list(Store(repo).dataframe("last")["last"]) == [4, 8, 12]
