"""Files a run writes beside its journal (checkpoints, mirrored saves, start RNG states)
appear whole or not at all: written under a temp name, then renamed over the real one.

The temp name carries the writer's pid, so the next reader can tell a temp file of a dead
process (store/repair.remove_leftovers removes those) from one being written right now.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import IO


def temp_path(path: Path) -> Path:
    """Where `path` is written before its rename: `.NAME.PID.tmp` beside it."""
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def write_atomic(dest: Path, write: Callable[[IO[bytes]], object], *, durable: bool) -> None:
    """`write(file)` into `dest`'s temp file, then renamed over `dest`; `durable`: synced to
    the device before the rename (a checkpoint must survive a power cut once named). On any
    failure (a full disk) the temp file is removed, so nothing partial stays behind."""
    tmp = temp_path(dest)
    try:
        with open(tmp, "wb") as out:
            write(out)
            if durable:
                out.flush()
                os.fsync(out.fileno())
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def sync_folder(folder: Path) -> None:
    """Make the renames inside `folder` durable (the folder's entries, not only the files)."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
