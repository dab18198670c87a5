"""Replays that share the machine and reach what the run reached: each worker gets its
share of the cores, and data read through `..` from outside the project resolves as it did
for the run. Real recordings, real replays through the CLI and the engine, real torch."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import git, repo_state, run_py, write

from florwb_engine.replay import execute, plan_replay
from florwb_engine.replay.cores import (
    THREADS_ENV,
    available_cores,
    default_workers,
    recorded_thread_env,
    recorded_threads,
    thread_env,
    threads_per_worker,
    workers_for_threads,
)
from florwb_engine.replay.mirror import mirrored_path, mirrored_project
from florwb_engine.store import Store

TRAIN = """
import os
import time
import torch
import florwb as flor

torch.manual_seed(0)
epochs = flor.arg("epochs", 4)
flor.set_checkpoint_budget(1.0)
net = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(net.parameters(), lr=0.05)
data, target = torch.randn(32, 4), torch.randn(32, 1)
with flor.checkpointing(model=net, optimizer=opt):
    for epoch in flor.loop("epoch", range(epochs)):
        for step in flor.loop("step", range(2)):
            loss = ((net(data) - target) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            flor.log("loss", loss.item())
        time.sleep(0.05)  # epochs well above checkpoint cost: every epoch is checkpointed
"""

EPOCH_BODY = "        for step in flor.loop"


def _cli(project: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, "-m", "florwb.cli", *args],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    return proc


def _values(project: Path, name: str) -> list:
    frame = Store(project).dataframe(name)
    return list(frame[frame[name].notna()][name])


def test_each_replay_worker_gets_its_share_of_the_cores(repo):
    write(repo / "train.py", TRAIN)
    run_py(repo, "train.py")
    with Store(repo).session() as con:  # as a run recorded before its threads were
        con.execute("UPDATE run_context SET torch_threads = NULL, torch_interop_threads = NULL")
    today = TRAIN.replace(
        EPOCH_BODY,
        '        flor.log("threads", torch.get_num_threads())\n'
        '        flor.log("omp", int(os.environ.get("OMP_NUM_THREADS", "0")))\n'
        '        flor.log("threads_alone", torch.get_num_threads())\n' + EPOCH_BODY,
    )
    (repo / "train.py").write_text(today)
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    cores = available_cores()

    # The default: one worker per core, no more than there are independent segments.
    out = json.loads(_cli(repo, "replay", "threads,omp", "--yes", "--json", env=env).stdout)
    plan = out["plan"]
    segments = sum(len(run["segments"]) for run in plan["runs"])
    assert plan["workers"] == min(cores, segments) == default_workers(segments, cores)
    assert segments == min(cores, 4)  # 4 epochs, each one checkpointed
    assert plan["threads_per_worker"] == cores // plan["workers"]
    assert "core(s)" in plan["workers_why"] and "segment(s)" in plan["workers_why"]
    assert out["result"]["status"] == "finished", out["result"]
    share = cores // plan["workers"]
    assert _values(repo, "threads") == [share] * 4  # torch, imported before the fork
    assert _values(repo, "omp") == [share] * 4  # the environment, for what the script starts

    # One worker alone has every core.
    out = json.loads(
        _cli(repo, "replay", "threads_alone", "--yes", "--json", "--workers", "1", env=env).stdout
    )
    assert out["plan"]["workers"] == 1 and out["result"]["status"] == "finished"
    assert _values(repo, "threads_alone") == [cores] * 4


def test_runs_replay_with_the_threads_they_were_recorded_with(repo):
    write(repo / "train.py", TRAIN)
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    run_py(repo, "train.py", env={**env, "OMP_NUM_THREADS": "2"})
    run_py(repo, "train.py", env={**env, "OMP_NUM_THREADS": "1"})
    two, one = (r["run_id"] for r in Store(repo).runs())
    context = Store(repo).query(
        "SELECT run_id, torch_threads, omp_num_threads FROM run_context ORDER BY run_id"
    )
    assert sorted(zip(context.torch_threads, context.omp_num_threads)) == [(1, "1"), (2, "2")]
    step_body = "            loss = ((net(data)"
    today = TRAIN.replace(  # in the step loop: its losses are recomputed and compared
        step_body,
        '            flor.log("threads", torch.get_num_threads())\n'
        '            flor.log("omp", int(os.environ.get("OMP_NUM_THREADS", "0")))\n' + step_body,
    )
    (repo / "train.py").write_text(today)
    # the replaying shell has other settings: the recorded ones win
    out = json.loads(
        _cli(
            repo, "replay", "threads,omp", "--yes", "--json", env={**env, "OMP_NUM_THREADS": "7"}
        ).stdout
    )
    plan, result = out["plan"], out["result"]
    cores = available_cores()
    assert plan["workers"] == max(1, min(cores // 2, 4)), plan
    if cores // 2 < min(cores, 4):  # fewer workers than cores: the plan says why
        assert "recorded with (up to 2)" in plan["workers_why"], plan["workers_why"]
    assert {r["run_id"]: r["threads"]["torch"] for r in plan["runs"]} == {two: 2, one: 1}
    # values equal the recording: every recomputed loss is compared with the recorded one
    assert result["status"] == "finished", result
    assert all(r["status"] == "finished" and r["compared"] == 8 for r in result["runs"]), result
    frame = Store(repo).dataframe("threads", "omp")
    for run_id, threads in ((two, 2), (one, 1)):
        mine = frame[(frame.run_id == run_id) & frame.threads.notna()]
        assert list(mine.threads) == [threads] * 8, (run_id, list(mine.threads))
        assert list(mine.omp) == [threads] * 8


def test_workers_are_cut_so_recorded_threads_fit_the_cores():
    two = recorded_threads(
        {"torch_threads": 2, "torch_interop_threads": 2, "omp_num_threads": None}
    )
    assert two is not None and two.omp is None
    assert workers_for_threads(4, [two, None], cores=4) == (
        2,
        "2 worker(s), not 4: runs replay with the threads they were recorded with (up to 2), "
        "and 2 x 2 fits the 4 core(s)",
    )
    assert workers_for_threads(2, [two], cores=4) == (2, None)
    assert workers_for_threads(4, [None], cores=2) == (4, None)  # older runs: as before
    assert recorded_threads({"torch_threads": None}) is None
    assert recorded_threads(two.to_json()) == two
    env = recorded_thread_env(two)
    assert env["OMP_NUM_THREADS"] == env["MKL_NUM_THREADS"] == env[THREADS_ENV] == "2"
    kept = recorded_threads({"torch_threads": 4, "omp_num_threads": "1", "mkl_num_threads": "3"})
    assert kept is not None
    assert recorded_thread_env(kept)["OMP_NUM_THREADS"] == "1"
    assert recorded_thread_env(kept)["MKL_NUM_THREADS"] == "3"


def test_thread_budget_is_cores_over_workers_and_keeps_a_lower_user_setting():
    assert threads_per_worker(2, cores=8, environ={}) == 4
    assert threads_per_worker(3, cores=8, environ={}) == 2
    assert threads_per_worker(16, cores=2, environ={}) == 1
    assert threads_per_worker(1, cores=8, environ={"OMP_NUM_THREADS": "2"}) == 2
    assert threads_per_worker(1, cores=2, environ={"OMP_NUM_THREADS": "8"}) == 2
    assert default_workers(segments=3, cores=2) == 2
    assert default_workers(segments=1, cores=16) == 1
    assert default_workers(segments=0, cores=4) == 1
    env = thread_env(3)
    assert env["OMP_NUM_THREADS"] == env["MKL_NUM_THREADS"] == env["OPENBLAS_NUM_THREADS"] == "3"


# --------------------------------------------------------------------------- data via `..`

READS_SIBLING = """
import torch
import florwb as flor

torch.manual_seed(0)
with open("../data/x.txt") as f:  # data kept next to the project, not in it
    scale = float(f.read())
epochs = flor.arg("epochs", 3)
flor.set_checkpoint_budget(1.0)
net = torch.nn.Linear(3, 1)
opt = torch.optim.SGD(net.parameters(), lr=0.1)
inputs = torch.randn(16, 3) * scale
with flor.checkpointing(model=net, optimizer=opt):
    for epoch in flor.loop("epoch", range(epochs)):
        with open("../data/x.txt") as f:
            factor = float(f.read())
        for step in flor.loop("step", range(2)):
            loss = (net(inputs) * factor).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            flor.log("loss", loss.item())
"""


def test_data_read_through_dotdot_outside_the_project_replays_like_a_forward_run(repo, tmp_path):
    data = tmp_path / "data" / "x.txt"  # a sibling of the project folder
    write(data, "0.5")
    write(repo / "train.py", READS_SIBLING)
    git(repo, "add", "train.py")
    git(repo, "commit", "-q", "-m", "reads ../data")
    run_py(repo, "train.py")

    today = READS_SIBLING.replace(
        '        for step in flor.loop("step", range(2)):\n',
        '        flor.log("seen", factor * float(net.weight.sum()))\n'
        '        for step in flor.loop("step", range(2)):\n',
    ).replace(
        '            flor.log("loss", loss.item())\n',
        '            flor.log("loss", loss.item())\n'
        '            flor.log("scaled_loss", scale * loss.item())\n',
    )
    (repo / "train.py").write_text(today)
    before = repo_state(repo)
    result = execute(plan_replay(repo, ["seen", "scaled_loss"]))
    assert result.status == "finished", result
    assert result.runs[0].compared > 0  # the recorded losses were recomputed and equal

    fresh = tmp_path / "fresh"  # today's script run forward, from a sibling of data/ too
    write(fresh / "train.py", today)
    run_py(fresh, "train.py")
    for name in ("seen", "scaled_loss"):
        replayed = _values(repo, name)
        assert len(replayed) == (3 if name == "seen" else 6)
        assert replayed == _values(fresh, name), name
    assert data.read_text() == "0.5"
    assert repo_state(repo) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "fresh", "project"]
    assert not list((repo / ".florwb" / "replays").iterdir())  # the mirror is gone


def test_the_mirror_reaches_every_parent_level_and_is_made_only_under_its_base(tmp_path):
    outer = tmp_path / "outer"
    project = outer / "team" / "project"
    project.mkdir(parents=True)
    write(outer / "team" / "data" / "a.txt", "a")
    write(outer / "shared" / "b.txt", "b")
    base = project / ".florwb" / "replays" / "r1" / "code" / "v1"
    listing = sorted(os.listdir(tmp_path))
    code = mirrored_project(base, project)

    assert code == base.joinpath(*project.resolve().parts[1:]) and code.is_dir()
    assert not os.listdir(code)  # the caller materialises the version here
    assert (code / ".." / "data" / "a.txt").read_text() == "a"
    assert (code / ".." / ".." / "shared" / "b.txt").read_text() == "b"
    assert (code.parent / "data").is_symlink()
    assert not (code.parent / "project").is_symlink()  # the way down is the mirror itself
    assert sorted(os.listdir(tmp_path)) == listing
    assert sorted(os.listdir(outer / "team")) == ["data", "project"]
    assert mirrored_path(base, outer / "team") == code.parent
    assert mirrored_path(base, outer / "shared") is None  # a link to the real folder
    mirrored_project(base, project)  # a second version's runs: nothing breaks


def test_a_mirror_made_again_follows_the_folders_as_they_are_now(tmp_path):
    """A Ray warm worker keeps its mirror between segments: made again, it links what
    appeared since, drops what went, and removes what a script wrote into its folders."""
    project = tmp_path / "team" / "project"
    project.mkdir(parents=True)
    write(tmp_path / "team" / "old" / "a.txt", "a")
    base = tmp_path / "worker" / "mirror"
    code = mirrored_project(base, project)
    write(code / "train.py", "print()")
    write(code.parent / "written-by-a-script.txt", "x")  # `../x` of a name not there
    shutil.rmtree(tmp_path / "team" / "old")
    write(tmp_path / "team" / "new" / "b.txt", "b")
    shutil.rmtree(code)  # the worker removes the segment's code after it

    again = mirrored_project(base, project)
    assert again == code and not os.listdir(again)
    assert sorted(os.listdir(code.parent)) == ["new", "project"]
    assert (again / ".." / "new" / "b.txt").read_text() == "b"
    assert sorted(os.listdir(tmp_path / "team")) == ["new", "project"]


def test_a_run_started_in_a_subfolder_reads_dotdot_from_there(repo, tmp_path):
    """cwd recorded relative to the project; `../../data` from project/scripts/."""
    subfolder = "scripts"
    write(tmp_path / "data" / "x.txt", "2.0")
    code = READS_SIBLING.replace("../data/x.txt", "../../data/x.txt")
    write(repo / subfolder / "train.py", code)
    run_py(repo / subfolder, "train.py", "--kwargs", "epochs=2")
    today = code.replace(
        '        for step in flor.loop("step", range(2)):\n',
        '        flor.log("seen", factor * float(net.weight.sum()))\n'
        '        for step in flor.loop("step", range(2)):\n',
    )
    (repo / subfolder / "train.py").write_text(today)
    result = execute(plan_replay(repo, ["seen"]))
    assert result.status == "finished", result
    fresh = tmp_path / "fresh" / subfolder
    write(fresh / "train.py", today)
    run_py(fresh, "train.py", "--kwargs", "epochs=2")
    assert _values(repo, "seen") == _values(tmp_path / "fresh" / subfolder, "seen")
    assert len(_values(repo, "seen")) == 2
