"""Which files of a project make up its code version.

Inside git we trust git's own view (tracked files plus untracked files that are not ignored),
so a snapshot matches what the user would commit. Outside git we walk the folder, skipping
the usual environment and cache folders. Either way, files that would bloat the store (large
files, binary untracked files, more files than a code folder plausibly has) are skipped and
every skip is reported, never silent.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from florwb_engine import settings

from ._git import git, user_env
from .userrepo import STORE_DIRNAME

__all__ = [
    "DEFAULT_MAX_FILE_BYTES",
    "DEFAULT_MAX_FILES",
    "SkippedFile",
    "Selection",
    "select_files",
    "git_candidates",
    "walk_candidates",
]

DEFAULT_MAX_FILE_BYTES = settings.SNAPSHOT_MAX_BYTES.default
DEFAULT_MAX_FILES = settings.SNAPSHOT_MAX_FILES.default
_BINARY_PROBE = 8192
_SKIP_DIRS = frozenset({"__pycache__", "node_modules"})


@dataclass(frozen=True)
class SkippedFile:
    """A file left out of a snapshot, and why (shown to the user as is)."""

    path: str
    size: int
    reason: str


@dataclass
class Selection:
    """Result of file selection: paths to store (relative, POSIX) and what was skipped."""

    paths: list[str] = field(default_factory=list)
    n_bytes: int = 0
    skipped: list[SkippedFile] = field(default_factory=list)


def _human(n: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            value = n / scale
            return f"{value:g} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{n} bytes"


def git_candidates(project: Path) -> tuple[set[str], set[str]]:
    """(tracked, untracked-not-ignored) paths under ``project``, relative to it.

    ``ls-files`` only reads the index and the working tree; run from ``project`` it lists
    paths relative to it and limited to it, which is what a sub-folder project needs.
    """
    env = user_env()
    cached = git(["ls-files", "-z", "--cached"], cwd=project, env=env).stdout
    others = git(
        ["ls-files", "-z", "--others", "--exclude-standard", f"--exclude={STORE_DIRNAME}/"],
        cwd=project,
        env=env,
    ).stdout
    return _split(cached), _split(others)


def _split(out: bytes) -> set[str]:
    return {os.fsdecode(p) for p in out.split(b"\0") if p}


def walk_candidates(project: Path) -> set[str]:
    """All files under a plain (non-git) project folder, minus environments and caches."""
    found: set[str] = set()
    stack = [(project, "")]
    while stack:
        folder, rel = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            name = entry.name
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                continue
            if is_dir:
                if name.startswith(".") or name in _SKIP_DIRS:
                    continue  # .git, .florwb, .venv, .ipynb_checkpoints, other hidden folders
                if os.path.exists(os.path.join(entry.path, "pyvenv.cfg")):
                    continue  # a virtual environment under any name (venv/, env/, ...)
                stack.append((Path(entry.path), f"{rel}{name}/"))
            else:
                found.add(f"{rel}{name}")
    return found


def select_files(
    project: Path,
    tracked: Iterable[str],
    untracked: Iterable[str],
    *,
    max_file_bytes: int,
    max_files: int,
    in_git: bool,
    excluded_prefixes: tuple[str, ...] = (f"{STORE_DIRNAME}/",),
) -> Selection:
    """Apply the caps to candidate paths; ``untracked`` files are also probed for binaries.

    Outside git (``in_git`` false) every file counts as untracked.

    Paths are sorted so that the file limit keeps a deterministic subset. Paths that vanished
    (a tracked file deleted in the working tree) are simply not part of the version.
    """
    tracked_set = set(tracked)
    result = Selection()
    pending: list[tuple[str, int, bool]] = []
    for raw in sorted(tracked_set.union(untracked)):
        path = raw.rstrip("/")
        if not path or path.startswith(excluded_prefixes) or path + "/" in excluded_prefixes:
            continue
        try:
            st = os.lstat(project / path)
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode):
            if os.path.lexists(project / path / ".git"):  # its code lives in another repo
                reason = "submodule" if path in tracked_set else "nested git repository"
                result.skipped.append(SkippedFile(path, 0, reason))
            continue  # else a tracked file became a folder: its files are listed themselves
        if not (stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)):
            result.skipped.append(SkippedFile(path, 0, "not a regular file"))
            continue
        if st.st_size > max_file_bytes:
            reason = f"larger than {_human(max_file_bytes)}"
            result.skipped.append(SkippedFile(path, st.st_size, reason))
            continue
        pending.append((path, st.st_size, stat.S_ISREG(st.st_mode) and path not in tracked_set))
    for path, size, probe in pending:
        if len(result.paths) >= max_files:
            result.skipped.append(SkippedFile(path, size, f"file limit ({max_files:,} files)"))
        elif probe and _looks_binary(project / path):
            reason = "binary untracked file" if in_git else "binary file"
            result.skipped.append(SkippedFile(path, size, reason))
        else:
            result.paths.append(path)
            result.n_bytes += size
    return result


def _looks_binary(path: Path) -> bool:
    """Git's own heuristic: a NUL byte in the first 8 KiB."""
    try:
        with open(path, "rb") as fh:
            return b"\0" in fh.read(_BINARY_PROBE)
    except OSError:
        return False
