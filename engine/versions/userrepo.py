"""Read-only facts about the user's git repository, plus the one permitted write.

Everything here runs git with ``GIT_OPTIONAL_LOCKS=0`` and only uses commands that never
write (``rev-parse``, ``cat-file``, ``symbolic-ref``, ``ls-files``, ``check-ignore``).
The single exception is :func:`ensure_excluded`, which appends one line to
``<git-common-dir>/info/exclude`` so the store folder stays out of ``git status`` without
editing the user's ``.gitignore`` (see DESIGN.md, "Store").
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ._git import VersionError, git, user_env

__all__ = ["STORE_DIRNAME", "UserRepo", "find_git_toplevel", "read_user_repo", "ensure_excluded"]

STORE_DIRNAME = ".florwb"

try:  # POSIX only; elsewhere concurrent ensure_excluded calls are merely unlikely to race.
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]


@dataclass(frozen=True)
class UserRepo:
    """Where a project sits in a git work tree, and what HEAD says about it."""

    toplevel: Path
    common_dir: Path  # shared .git folder (differs from the per-worktree git dir)
    prefix: str  # project folder relative to toplevel, POSIX, "" or ending in "/"
    head: str | None  # commit id; None in a repository without commits
    head_tree: str | None  # tree of the project folder in HEAD; None if absent
    branch: str | None  # None when HEAD is detached


def _as_dir(path: Path) -> Path:
    path = Path(path).resolve()
    return path if path.is_dir() else path.parent


def _locate(path: Path) -> tuple[Path, Path] | None:
    """(toplevel, common_dir) of the work tree containing ``path``, or None."""
    cwd = _as_dir(path)
    if not cwd.is_dir():
        return None
    try:
        proc = git(
            ["rev-parse", "--show-toplevel", "--git-common-dir"],
            cwd=cwd,
            env=user_env(),
            check=False,
        )
    except VersionError:
        return None  # git missing: there is no work tree we could read either
    lines = proc.stdout.decode("utf-8", "surrogateescape").splitlines()
    if proc.returncode != 0 or len(lines) < 2 or not lines[0]:
        return None  # not a work tree, inside .git/, a bare repository, or unsafe ownership
    return Path(lines[0]).resolve(), (cwd / lines[1]).resolve()


def find_git_toplevel(path: Path) -> Path | None:
    """Top folder of the git work tree containing ``path``; None outside one (or no git)."""
    found = _locate(path)
    return found[0] if found else None


def read_user_repo(project_root: Path) -> UserRepo | None:
    """Describe the repository tracking ``project_root``; None if git does not track it.

    A project inside a folder the enclosing repository ignores counts as untracked: its files
    would otherwise all be filtered out by ``--exclude-standard``.
    """
    project = _as_dir(project_root)
    found = _locate(project)
    if found is None:
        return None
    toplevel, common_dir = found
    env = user_env()
    rel = project.relative_to(toplevel).as_posix() if project != toplevel else ""
    if rel and git(["check-ignore", "-q", "."], cwd=project, env=env, check=False).returncode == 0:
        return None
    head = head_tree = None
    if "\n" not in rel:
        spec = f"HEAD:{rel}" if rel else "HEAD^{tree}"
        out = git(
            ["cat-file", "--batch-check"],
            cwd=project,
            env=env,
            input=f"HEAD^{{commit}}\n{spec}\n".encode(),
            check=False,
        ).stdout.decode("utf-8", "replace")
        parts = [line.split() for line in out.splitlines()]
        if len(parts) == 2 and len(parts[0]) == 3 and parts[0][1] == "commit":
            head = parts[0][0]
            if len(parts[1]) == 3 and parts[1][1] == "tree":
                head_tree = parts[1][0]
    ref = git(["symbolic-ref", "-q", "HEAD"], cwd=project, env=env, check=False)
    branch = None
    if ref.returncode == 0:
        name = ref.stdout.decode("utf-8", "surrogateescape").strip()
        branch = name.removeprefix("refs/heads/") or None
    return UserRepo(
        toplevel=toplevel,
        common_dir=common_dir,
        prefix=f"{rel}/" if rel else "",
        head=head,
        head_tree=head_tree,
        branch=branch,
    )


def ensure_excluded(project_root: Path) -> None:
    """Keep ``<project>/.florwb/`` out of git by listing it in ``.git/info/exclude``.

    Appends ``/<prefix>.florwb/`` only when that exact line is missing, so repeated calls
    change nothing. Worktrees and ``.git`` files are handled by writing to the common dir,
    which is where git reads ``info/exclude`` from. Outside git this does nothing.
    """
    project = _as_dir(project_root)
    found = _locate(project)
    if found is None:
        return
    toplevel, common_dir = found
    rel = project.relative_to(toplevel).as_posix() if project != toplevel else ""
    line = f"/{rel}/{STORE_DIRNAME}/" if rel else f"/{STORE_DIRNAME}/"
    exclude = common_dir / "info" / "exclude"
    if exclude.is_file() and _has_line(exclude.read_bytes(), line):
        return
    try:
        exclude.parent.mkdir(parents=True, exist_ok=True)
        with open(exclude, "a+b") as fh:
            if fcntl is not None:
                fcntl.flock(fh.fileno(), fcntl.LOCK_EX)  # another process may be appending
            fh.seek(0)
            content = fh.read()
            if _has_line(content, line):
                return
            sep = b"\n" if content and not content.endswith(b"\n") else b""
            fh.write(sep + line.encode("utf-8", "surrogateescape") + b"\n")
            fh.flush()
            os.fsync(fh.fileno())
    except OSError as exc:
        raise VersionError(f"cannot update {exclude}: {exc.strerror or exc}") from exc


def _has_line(content: bytes, line: str) -> bool:
    wanted = line.encode("utf-8", "surrogateescape")
    return any(existing.strip() == wanted for existing in content.splitlines())
