"""Where a project's florwb data lives.

Recording (inside a training script) and reading (CLI, app, notebooks) must agree on one
folder without any configuration, so both resolve the project the same way: the nearest
ancestor that already has a `.florwb/` folder, else the enclosing git work tree, else the
folder itself. `FLORWB_PROJECT` overrides all of that.
"""

from __future__ import annotations

import os
from pathlib import Path

STORE_DIRNAME = ".florwb"


def find_project(start: Path | str | None = None) -> Path:
    env = os.environ.get("FLORWB_PROJECT")
    if env:
        return Path(env).resolve()
    here = Path(start if start is not None else os.getcwd()).resolve()
    if here.is_file():
        here = here.parent
    git_top: Path | None = None
    for folder in (here, *here.parents):
        if (folder / STORE_DIRNAME).is_dir():
            return folder
        if git_top is None and (folder / ".git").exists():
            git_top = folder
    return git_top if git_top is not None else here


def store_dir(project: Path) -> Path:
    return project / STORE_DIRNAME


def journal_dir(project: Path) -> Path:
    return store_dir(project) / "journal"


def checkpoint_dir(project: Path) -> Path:
    return store_dir(project) / "checkpoints"
