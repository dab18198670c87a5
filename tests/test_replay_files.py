"""A replay sees the files of the run's start, not its end.

A script that resumes from its own snapshot when the file exists, and writes it every
epoch, created the file while it recorded: replayed, it must start from scratch as the run
did, not resume from the run's last epoch. A file a run only writes (`model.pt`,
overwritten by every run) is no input of it: no "changed since the run", no values at
risk. Real recordings, real replays, the user's files checked byte for byte.
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import pytest
from conftest import florwb, git, run_py, write

from florwb_engine.record import file_access
from florwb_engine.replay import execute, plan_replay
from florwb_engine.store import Store

RESUMES = """
import os
import time

import torch
import florwb as flor

flor.set_checkpoint_budget(1.0)
torch.manual_seed(0)
net = torch.nn.Linear(4, 1)
opt = torch.optim.Adam(net.parameters(), lr=0.05)
x, y = torch.randn(32, 4), torch.randn(32, 1)
start = 0
if os.path.exists("ckpt/snapshot.pt"):  # resume where the last run stopped
    snap = torch.load("ckpt/snapshot.pt", weights_only=True)
    net.load_state_dict(snap["model"])
    opt.load_state_dict(snap["opt"])
    start = snap["epoch"] + 1
os.makedirs("ckpt", exist_ok=True)
with flor.checkpointing(model=net, optimizer=opt):
    for epoch in flor.loop("epoch", range(start, 4)):
        for step in flor.loop("step", range(2)):
            loss = ((net(x) - y) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            flor.log("loss", loss.item())
        snap = {"model": net.state_dict(), "opt": opt.state_dict(), "epoch": epoch}
        torch.save(snap, "ckpt/snapshot.pt")
        time.sleep(0.05)  # epochs well above their checkpoint's cost
"""
STEP = '            flor.log("loss", loss.item())\n'


@pytest.mark.parametrize("contain", ["auto", "copy"])  # auto: the namespace where there is one
def test_a_script_resuming_from_its_own_snapshot_replays_from_the_start(
    repo: Path, contain: str, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("FLORWB_REPLAY_CONTAIN", contain)
    write(repo / "train.py", RESUMES)
    git(repo, "add", "train.py")
    git(repo, "commit", "-q", "-m", "resumes")
    run_py(repo, "train.py")
    (run_id,) = Store(repo).query("SELECT run_id FROM runs")["run_id"]
    files = Store(repo).query(f"SELECT path, access, size FROM run_files WHERE run_id = '{run_id}'")
    assert ("ckpt/snapshot.pt", "written") in set(zip(files["path"], files["access"]))
    snapshot = (repo / "ckpt" / "snapshot.pt").read_bytes()

    write(
        repo / "train.py",
        RESUMES.replace(STEP, STEP + '            flor.log("w", net.weight.sum().item())\n'),
    )
    # a Ray task removes it from its folder after copying the left-out files, as here
    (on_ray,) = plan_replay(repo, ["w"], workers=2, executor="ray").runs
    assert on_ray.status == "ready" and on_ray.hide == ["ckpt/snapshot.pt"], on_ray
    plan = plan_replay(repo, ["w"], workers=2)
    (run,) = plan.runs
    assert run.hide == ["ckpt/snapshot.pt"], run
    assert any("hides ckpt/snapshot.pt: the run created it" in n for n in run.notes), run.notes
    assert len(run.segments) == 2 and run.segments[1].first > 0, run.segments
    result = execute(plan)
    # every recomputed loss equals the recorded one: no segment resumed from the run's end
    assert result.status == "finished" and result.runs[0].compared == 8, result
    assert (repo / "ckpt" / "snapshot.pt").read_bytes() == snapshot  # the user's file

    os.remove(repo / "ckpt" / "snapshot.pt")
    run_py(repo, "train.py")  # today's script, forward from scratch
    forward = Store(repo).query("SELECT run_id FROM runs ORDER BY start_time DESC LIMIT 1")[
        "run_id"
    ][0]
    values = Store(repo).dataframe("w")
    replayed = list(values[values.run_id == run_id].w)
    assert replayed == list(values[values.run_id == forward].w) and len(replayed) == 8


ONLY_WRITES = """
import time

import torch
import florwb as flor

net = torch.nn.Linear(4, 1)
for epoch in flor.loop("epoch", range(2)):
    flor.log("w", net.weight.sum().item())
    with torch.no_grad():
        net.weight.add_(1.0)
    torch.save(net.state_dict(), "model.pt")
    with open("log.txt", "w") as out:
        out.write(str(epoch))
"""


def test_a_file_the_run_only_wrote_is_no_input(repo: Path):
    write(repo / "train.py", ONLY_WRITES)
    git(repo, "add", "train.py")
    git(repo, "commit", "-q", "-m", "writes model.pt")
    run_py(repo, "train.py")
    run_py(repo, "train.py")  # model.pt exists at its start: fingerprinted, then rewritten
    found = Store(repo).query(  # the second run found model.pt at its start, then wrote it
        "SELECT run_id FROM run_files WHERE path = 'model.pt' AND access = 'written' "
        "AND size IS NOT NULL"
    )
    (second,) = found["run_id"]
    inputs = Store(repo).query(f"SELECT path FROM run_inputs WHERE run_id = '{second}'")
    assert "model.pt" in set(inputs["path"])  # fingerprinted as a left-out file
    files = Store(repo).query(
        "SELECT run_id, path, access, size IS NULL AS created FROM run_files "
        "WHERE path IN ('model.pt', 'log.txt')"
    )
    assert sorted(
        zip(files["run_id"] == second, files["path"], files["access"], files["created"])
    ) == [
        (False, "log.txt", "written", True),
        (False, "model.pt", "written", True),
        (True, "log.txt", "written", False),
        (True, "model.pt", "written", False),
    ]
    write(
        repo / "train.py",
        ONLY_WRITES.replace("range(2)):\n", 'range(2)):\n    flor.log("e", epoch)\n'),
    )
    plan = plan_replay(repo, ["e"])
    for run in plan.runs:
        assert run.at_risk == [] and not any("changed since" in n for n in run.notes), run
    florwb(repo, "replay", "e", "--yes")
    issues = Store(repo).query("SELECT count(*) AS n FROM run_issues WHERE kind = 'input changed'")
    assert issues["n"][0] == 0


def test_first_accesses_tell_reads_from_writes(tmp_path: Path):
    """The audit hook in this process: a read of an existing file, a file created, one
    emptied, one appended to, and paths outside the project or in the store left out."""
    project = tmp_path / "p"
    (project / ".florwb").mkdir(parents=True)
    (project / "data.txt").write_text("data")
    (project / "old.txt").write_text("old")
    (project / "log.txt").write_text("log")
    (project / "mine.txt").write_text("florwb fingerprints it, the run never reads it")
    outside = tmp_path / "elsewhere.txt"
    file_access.install(project, [project / ".florwb"])
    try:
        here = os.getcwd()
        os.chdir(project)
        try:
            open("data.txt").read()
            open("data.txt", "w").close()  # a read came first: it stays a read
            open("new.txt", "w").close()
            open(project / "old.txt", "w").close()
            open("log.txt", "a").close()
            fd = os.open("fresh.bin", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.close(fd)
            open(outside, "w").close()
            open(".florwb/journal", "w").close()
            file_access.note_write(Path("saved.pt"))
            snapshot = threading.Thread(target=lambda: open("mine.txt").read(), name="florwb-snap")
            snapshot.start()
            snapshot.join()
        finally:
            os.chdir(here)
        events: list = []
        file_access.drain(events)
    finally:
        file_access.uninstall()
    (event,) = events
    got = {path: (access, size is None) for path, access, size, _mtime in event["paths"]}
    assert got == {
        "data.txt": ("read", False),
        "new.txt": ("written", True),
        "old.txt": ("written", False),
        "log.txt": ("read", False),
        "fresh.bin": ("written", True),
        "saved.pt": ("written", True),
    }
    open(project / "later.txt", "w").close()  # after the run: not noted
    file_access.drain(events)
    assert len(events) == 1 and sys.audit is not None
