"""Record the exact code of a run as a version id, without touching the user's repository.

Called from a background thread at every run start, so it must be quick on an unchanged
project (the private index's stat cache makes a repeat snapshot a handful of git calls) and
safe to run from several training processes at once (the store's file lock).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from florwb_engine import settings

from ._git import VersionError
from .object_store import changed_paths, write_tree
from .select import (
    SkippedFile,
    git_candidates,
    select_files,
    walk_candidates,
)
from .userrepo import STORE_DIRNAME, read_user_repo

__all__ = ["Snapshot", "snapshot"]

MAX_BYTES_ENV = settings.SNAPSHOT_MAX_BYTES.name
MAX_FILES_ENV = settings.SNAPSHOT_MAX_FILES.name


@dataclass(frozen=True)
class Snapshot:
    """One recorded code version and the git context it was taken in."""

    version: str  # tree hash in the private store: identical trees share an id
    n_files: int
    n_bytes: int
    skipped: tuple[SkippedFile, ...]
    git_head: str | None  # the user's HEAD commit; None without commits or outside git
    git_branch: str | None  # None when detached or outside git
    git_dirty: bool | None  # snapshot content differs from HEAD; None outside git
    in_git: bool


def _limit(explicit: int | None, var: settings.Var[int]) -> int:
    if explicit is not None:
        value = explicit
    else:
        try:
            value = settings.read(var)
        except settings.SettingError as exc:
            raise VersionError(str(exc)) from None
    if value < 0:
        raise VersionError(f"snapshot limit {var.name} must not be negative")
    return value


def snapshot(
    project_root: Path,
    store_dir: Path,
    *,
    max_file_bytes: int | None = None,
    max_files: int | None = None,
) -> Snapshot:
    """Store the project's current code in the private store and describe it.

    Files: tracked + untracked-not-ignored inside git, a filtered folder walk outside it;
    ``<store_dir>`` and any ``.florwb/`` are never included. Limits default to 2 MiB per file
    (env ``FLORWB_SNAPSHOT_MAX_BYTES``) and 20,000 files (env ``FLORWB_SNAPSHOT_MAX_FILES``).
    """
    project = Path(project_root).resolve()
    store = Path(store_dir).resolve()
    if not project.is_dir():
        raise VersionError(f"project folder does not exist: {project}")
    byte_cap = _limit(max_file_bytes, settings.SNAPSHOT_MAX_BYTES)
    file_cap = _limit(max_files, settings.SNAPSHOT_MAX_FILES)
    excluded = [f"{STORE_DIRNAME}/"]
    if store.is_relative_to(project) and store != project:
        excluded.append(store.relative_to(project).as_posix() + "/")

    repo = read_user_repo(project)
    if repo is not None:
        tracked, untracked = git_candidates(project)
    else:
        tracked, untracked = set(), walk_candidates(project)
    selection = select_files(
        project,
        tracked,
        untracked,
        max_file_bytes=byte_cap,
        max_files=file_cap,
        in_git=repo is not None,
        excluded_prefixes=tuple(excluded),
    )
    version = write_tree(store, project, selection.paths)

    dirty: bool | None = None
    if repo is not None:
        if repo.head is None:
            dirty = bool(selection.paths or selection.skipped)  # nothing committed yet
        elif repo.head_tree is None:
            dirty = bool(selection.paths)  # the project folder is not in HEAD at all
        else:
            changed = changed_paths(store, repo.head_tree, version, repo.common_dir / "objects")
            if changed is not None:
                left_out = {s.path for s in selection.skipped}
                dirty = any(
                    p not in left_out and not p.startswith(tuple(excluded)) for p in changed
                )
    return Snapshot(
        version=version,
        n_files=len(selection.paths),
        n_bytes=selection.n_bytes,
        skipped=tuple(selection.skipped),
        git_head=repo.head if repo else None,
        git_branch=repo.branch if repo else None,
        git_dirty=dirty,
        in_git=repo is not None,
    )
