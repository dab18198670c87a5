"""Build the demo project: a git repository with runs over two code versions and one
hindsight log statement waiting in the working tree, so every screen has something real
to show. The runs are real training subprocesses recorded by florwb."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from florwb_engine.errors import FlorwbError

HERE = Path(__file__).parent
GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "florwb demo",
    "GIT_AUTHOR_EMAIL": "demo@florwb.invalid",
    "GIT_COMMITTER_NAME": "florwb demo",
    "GIT_COMMITTER_EMAIL": "demo@florwb.invalid",
}
VERSIONS = (
    ("train_v1.py", "First model", [("0.1", "5"), ("0.05", "5")]),
    ("train_v2.py", "Momentum, held-out split, rename net -> model", [("0.1", "6"), ("0.02", "6")]),
)


class DemoError(FlorwbError):
    """The demo project could not be built; printed as one line."""


def _git(folder: Path, *args: str) -> None:
    subprocess.run(
        ["git", *args],
        cwd=folder,
        check=True,
        capture_output=True,
        env={**os.environ, **GIT_IDENTITY},
    )


def _train(folder: Path, lr: str, epochs: str) -> None:
    proc = subprocess.run(
        [sys.executable, "train.py", "--kwargs", f"lr={lr}", f"epochs={epochs}"],
        cwd=folder,
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise DemoError(f"demo training run failed: {tail}")


def build_demo(folder: Path, progress: Callable[[str], None] = lambda _line: None) -> Path:
    """Create the demo in `folder` (reused as is if it already holds a florwb demo)."""
    folder = folder.resolve()
    if (folder / ".florwb").is_dir() and (folder / "train.py").exists():
        progress(f"using the existing demo in {folder}")
        return folder
    if folder.exists() and any(folder.iterdir()):
        raise DemoError(f"{folder} exists and is not empty; choose another folder")
    folder.mkdir(parents=True, exist_ok=True)
    _git(folder, "init", "-q", "-b", "main")
    for script, message, runs in VERSIONS:
        shutil.copyfile(HERE / script, folder / "train.py")
        _git(folder, "add", "train.py")
        _git(folder, "commit", "-q", "-m", message)
        progress(f"{message}: training {len(runs)} runs")
        with ThreadPoolExecutor(max_workers=2) as pool:
            list(pool.map(lambda args: _train(folder, *args), runs))
    (folder / "train.py").write_text(pending_script())
    progress("added a hindsight log statement (weight_norm) to train.py, not yet replayed")
    return folder


PENDING_STATEMENT = (
    '        flor.log("weight_norm", torch.cat([p.detach().flatten() '
    "for p in model.parameters()]).norm().item())\n"
)


def pending_script() -> str:
    """Today's script: the last version plus one hindsight statement at the epoch start."""
    text = (HERE / VERSIONS[-1][0]).read_text()
    anchor = '    for epoch in flor.loop("epoch", range(epochs)):\n'
    if anchor not in text:
        raise DemoError("the demo script changed: no epoch loop to add the statement to")
    return text.replace(anchor, anchor + PENDING_STATEMENT)
