"""A replay never writes into the user's files.

The old version saves `model.pt` with torch.save (written from C++), a PDF, a checkpoint
in a folder and a file in a folder next to the project (`../outputs`). Those paths exist
in the working tree (ignored or untracked) with the user's own bytes; after a replay they
are byte for byte what they were. Both ways of keeping writes off them are exercised: the
private overlay (where this machine allows a mount namespace) and copies.
"""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path

import pytest
from conftest import florwb, git, repo_state, run_py, write

from florwb_engine.replay import contain
from florwb_engine.store import Store

TRAIN = """
import os
import torch
import florwb as flor

torch.manual_seed(0)
net = torch.nn.Linear(3, 1)
opt = torch.optim.SGD(net.parameters(), lr=0.1)
x, y = torch.randn(16, 3), torch.randn(16, 1)
with flor.checkpointing(model=net, optimizer=opt):
    for epoch in flor.loop("epoch", range(3)):
        loss = ((net(x) - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        flor.log("loss", loss.item())
        torch.save(net.state_dict(), "model.pt")
        open("report.pdf", "wb").write(b"%PDF replayed " + bytes([epoch]))
        torch.save(opt.state_dict(), f"ckpt/epoch_{epoch}.pth")
        open("../outputs/last.txt", "w").write(f"epoch {epoch}")
        open(os.path.expanduser("~/last.txt"), "w").write(f"epoch {epoch}")
"""
STATEMENT = '        flor.log("weight_sum", float(net.weight.sum()))\n'
ANCHOR = '        flor.log("loss", loss.item())\n'
USER_FILES = ("model.pt", "report.pdf", "ckpt/epoch_1.pth", "ckpt/notes.txt")


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _home(repo: Path) -> dict[str, str]:
    """A home folder of the user's own, away from the project's parent folder."""
    home = Path(tempfile.mkdtemp(prefix="home-", dir=repo.parent.parent))
    (home / "last.txt").write_text("the user's own home file")
    return {"HOME": str(home)}


def _project(repo: Path, env: dict[str, str]) -> Path:
    """v1 recorded, then the user's own outputs in place and v2 with a new statement."""
    write(repo / ".gitignore", "*.pt\n*.pth\n")
    (repo / "ckpt").mkdir()
    (repo.parent / "outputs").mkdir()
    write(repo / "train.py", TRAIN)
    git(repo, "add", ".gitignore", "train.py")
    git(repo, "commit", "-q", "-m", "v1")
    run_py(repo, "train.py", env=env)
    (Path(env["HOME"]) / "last.txt").write_text("the user's own home file")
    # what the user has now: their own model, report and checkpoints (untracked, ignored)
    for name in USER_FILES:
        (repo / name).write_bytes(b"the user's own " + name.encode())
    (repo.parent / "outputs" / "last.txt").write_text("the user's own output")
    (repo / "train.py").write_text(TRAIN.replace(ANCHOR, ANCHOR + STATEMENT))
    return repo


def _replay_and_compare(repo: Path, env: dict[str, str], outside: bool) -> None:
    before = {name: _digest(repo / name) for name in USER_FILES}
    listing = sorted(p.relative_to(repo) for p in repo.rglob("*") if ".florwb" not in p.parts)
    state = repo_state(repo)
    florwb(repo, "replay", "weight_sum", "--yes", env=env)
    values = Store(repo).query("SELECT count(*) AS n FROM logs WHERE name = 'weight_sum'")
    assert values["n"][0] == 3  # the replay did run and wrote its values where they belong
    assert {name: _digest(repo / name) for name in USER_FILES} == before
    after = sorted(p.relative_to(repo) for p in repo.rglob("*") if ".florwb" not in p.parts)
    assert after == listing  # no file appeared in the working tree either
    assert repo_state(repo) == state
    if outside:
        assert (repo.parent / "outputs" / "last.txt").read_text() == "the user's own output"
        assert (Path(env["HOME"]) / "last.txt").read_text() == "the user's own home file"


def test_a_replay_in_the_private_overlay_leaves_every_user_file_as_it_was(repo: Path):
    home = _home(repo)
    project = _project(repo, home)
    env = {contain.MODE_ENV: "namespace", **home}
    with pytest.MonkeyPatch.context() as patch:  # the home the replay command will see
        patch.setenv("HOME", home["HOME"])
        overlaid = contain._overlaid(project)
    assert Path(home["HOME"]) in overlaid and project.parent in overlaid
    if contain._probe(overlaid) is None:
        _replay_and_compare(project, env, outside=True)
    else:  # a kernel without mount namespaces: insisting on one refuses, in one line
        proc = florwb(project, "replay", "weight_sum", "--yes", check=False, env=env)
        assert proc.returncode == 1
        assert proc.stderr.strip().startswith("florwb: FLORWB_REPLAY_CONTAIN=namespace, but no")


def test_a_replay_on_copies_leaves_the_project_files_as_they_were(repo: Path):
    home = _home(repo)
    project = _project(repo, home)
    _replay_and_compare(project, {contain.MODE_ENV: "copy", **home}, outside=False)


def test_copies_past_the_budget_refuse_the_replay_before_it_starts(repo: Path):
    home = _home(repo)
    project = _project(repo, home)
    (project / "ckpt" / "big.bin").write_bytes(b"\0" * 4096)
    before = _digest(project / "model.pt")
    proc = florwb(
        project,
        "replay",
        "weight_sum",
        "--yes",
        check=False,
        env={contain.MODE_ENV: "copy", contain.COPY_MAX_ENV: "1000", **home},
    )
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "replay refused" in lines[0] and "ckpt" in lines[0], proc.stderr
    assert "FLORWB_REPLAY_COPY_MAX" in lines[0]
    assert _digest(project / "model.pt") == before
    values = Store(project).query("SELECT count(*) AS n FROM logs WHERE name = 'weight_sum'")
    assert values["n"][0] == 0
