"""Where a project's florwb data lives.

Recording (inside a training script) and reading (CLI, app, notebooks) must agree on one
folder without any configuration, so both resolve the project the same way: walking up from
the folder, the first that has a `.florwb/` folder or is the top of a git work tree, else the
folder itself. A git work tree is its own project even when a folder above it has a
`.florwb/`: otherwise a store created higher up would capture every repository below it.
`FLORWB_PROJECT` overrides all of that.
"""

from __future__ import annotations

import os
from pathlib import Path

from florwb_engine import settings

STORE_DIRNAME = ".florwb"


def find_project(start: Path | str | None = None) -> Path:
    chosen = settings.read(settings.PROJECT)
    if chosen is not None:
        return chosen
    here = Path(start if start is not None else os.getcwd()).resolve()
    if here.is_file():
        here = here.parent
    for folder in (here, *here.parents):
        if (folder / STORE_DIRNAME).is_dir() or (folder / ".git").exists():
            return folder
    return here


def store_dir(project: Path) -> Path:
    return project / STORE_DIRNAME


def journal_dir(project: Path) -> Path:
    return store_dir(project) / "journal"


def checkpoint_dir(project: Path) -> Path:
    return store_dir(project) / "checkpoints"
