"""The user's repository is never written, and florwb's private version store runs nothing
that was planted in it: real repositories, real hooks that leave a marker when they run."""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import sys
from pathlib import Path

from conftest import florwb, git, run_py, write

TRAIN = """
import time
import torch
import florwb as flor
torch.manual_seed(0)
net = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(net.parameters(), lr=0.1)
data = torch.randn(16, 4)
flor.set_checkpoint_budget(1.0)
with flor.checkpointing(model=net, optimizer=opt):
    for epoch in flor.loop("epoch", range(2)):
        loss = (net(data) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        flor.log("loss", loss.item())
        time.sleep(0.05)
"""


def _hook(path: Path, marker: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\necho \"$0 $*\" >> '{marker}'\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def _index(repo: Path) -> str:
    return hashlib.sha256((repo / ".git" / "index").read_bytes()).hexdigest()


def test_stale_stat_data_never_refreshes_the_users_index(repo: Path, tmp_path: Path) -> None:
    corpus = Path(__file__).parent / "instrument_corpus" / "01_classifier" / "train.py"
    (repo / "train.py").write_bytes(corpus.read_bytes())
    write(
        repo / "small.py",
        "import florwb as flor\nfor i in flor.loop('i', range(2)):\n    flor.log('x', i)\n",
    )
    git(repo, "add", "train.py", "small.py")
    git(repo, "commit", "-q", "-m", "scripts")
    marker = tmp_path / "hook-ran"
    _hook(repo / ".git" / "hooks" / "post-index-change", marker)
    old = 978307200  # 2001-01-01: the index's stat data no longer matches the files
    for name in ("train.py", "small.py", "README.md"):
        os.utime(repo / name, (old, old))
    # (not `git status` here: that itself refreshes the index of a stale file)
    refs = git(repo, "for-each-ref")
    index = _index(repo)

    proc = subprocess.run(
        [sys.executable, "-m", "florwb.cli", "instrument", "train.py", "--write"],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "git holds the original" in proc.stdout + proc.stderr  # no .bak: HEAD has it
    assert not (repo / "train.py.bak").exists()
    run_py(repo, "small.py")
    florwb(repo, "runs")

    assert not marker.exists(), marker.read_text()
    assert _index(repo) == index
    assert git(repo, "for-each-ref") == refs


def test_hooks_and_config_planted_in_the_private_store_never_run(
    repo: Path, tmp_path: Path
) -> None:
    write(repo / "train.py", TRAIN)
    git(repo, "add", "train.py")
    git(repo, "commit", "-q", "-m", "train")
    run_py(repo, "train.py")
    private = repo / ".florwb" / "versions.git"
    assert (private / "HEAD").is_file()

    marker = tmp_path / "planted-ran"
    for name in ("reference-transaction", "post-index-change", "post-checkout", "pre-commit"):
        _hook(private / "hooks" / name, marker)
    monitor = tmp_path / "fsmonitor.sh"
    _hook(monitor, marker)
    with open(private / "config", "a") as f:
        f.write(f"[core]\n\tfsmonitor = {monitor}\n\thooksPath = {private / 'hooks'}\n")
        f.write(f"[include]\n\tpath = {tmp_path / 'more.config'}\n")
    (tmp_path / "more.config").write_text(f"[core]\n\tfsmonitor = {monitor}\n")

    # a new version is recorded (a new tree and ref), then replayed (materialised)
    write(repo / "train.py", TRAIN.replace("lr=0.1", "lr=0.2"))
    run_py(repo, "train.py")
    new = '        flor.log("wnorm", net.weight.norm().item())\n'
    today = TRAIN.replace("        time.sleep(0.05)\n", new + "        time.sleep(0.05)\n")
    write(repo / "train.py", today)
    proc = florwb(repo, "replay", "wnorm", "--yes", check=False)
    assert proc.returncode == 0, proc.stderr
    values = florwb(repo, "query", "SELECT count(*) FROM logs WHERE name = 'wnorm'").stdout
    assert values.split()[-1] == "4"  # 2 runs x 2 epochs replayed

    assert not marker.exists(), marker.read_text()
    assert "fsmonitor" not in (private / "config").read_text()
