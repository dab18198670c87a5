"""Where a replay puts the old code so that relative paths reach what they reached in the run.

The run read `../data/x.txt` from the project folder: `..` was the project's parent. A
replay runs the old version from a copy inside `.florwb/replays/<id>/`, where `..` is a
folder of the replay, and the file is not there. Moving the copy out of `.florwb/` is not
an option (replays write nowhere else), so the copy is placed at the project's own
absolute path inside a mirror: `<base>/<the project's absolute path>/`. Every folder
above it in the mirror stands for the real folder at that level and holds a symlink to
each real entry there except the one on the way down, so `..`, `../..`, ... from the copy
lead to the same entries as from the project: `../data` is a link to the real
`<parent>/data`, `../other_project/x` to the real one. Absolute paths are untouched, and
a working directory the run had in one of those parent folders maps into the mirror too.

What the old script writes through `..` goes where the run wrote it (the links point at the
real folders), as data files reached inside the project already do.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path


def mirrored_project(base: Path, project: Path) -> Path:
    """Create the mirror of `project`'s ancestry under `base`; the folder returned stands
    for the project (empty: the caller materialises the code into it). Called again on
    the same `base` (a Ray warm worker keeps its mirror between segments: thousands of
    links where the project sits in a crowded folder such as /tmp), it brings the mirror
    up to date: entries added since are linked, links to entries gone since and anything
    a script wrote into the mirror's folders are removed."""
    real = project.resolve()
    target = base.joinpath(*real.parts[1:])
    target.mkdir(parents=True, exist_ok=True)
    mirror = target
    while real.parent != real:
        _link_siblings(real.parent, mirror.parent, keep=real.name)
        real, mirror = real.parent, mirror.parent
    return target


def _link_siblings(real: Path, mirror: Path, keep: str) -> None:
    try:
        wanted = {entry.name: entry.path for entry in os.scandir(real) if entry.name != keep}
    except OSError:  # a folder we may pass through but not list: nothing to reach there
        wanted = {}
    for entry in os.scandir(mirror):
        if entry.name == keep:
            continue
        if entry.is_symlink() and wanted.pop(entry.name, None) is not None:
            continue  # linked before, to the same real entry
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(entry.path)
    for name, path in wanted.items():
        with contextlib.suppress(FileExistsError):
            os.symlink(path, mirror / name)


def mirrored_path(base: Path, path: Path) -> Path | None:
    """Where an absolute folder of the run is in the mirror, when the mirror recreated it
    (the project's ancestors); None for anything else."""
    mirrored = base.joinpath(*path.resolve().parts[1:])
    return mirrored if mirrored.is_dir() and not mirrored.is_symlink() else None
