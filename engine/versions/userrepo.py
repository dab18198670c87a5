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
    """(toplevel, common_dir) of the work tree containing ``path``, or None.

    One git call per answer: rev-parse has no ``-z``, and a folder name may hold a newline,
    so two answers in one output could not be told apart."""
    cwd = _as_dir(path)
    if not cwd.is_dir():
        return None
    toplevel = _rev_parse(cwd, "--show-toplevel")
    if not toplevel:
        return None  # not a work tree, inside .git/, a bare repository, or unsafe ownership
    common_dir = _rev_parse(cwd, "--git-common-dir")
    if not common_dir:
        return None
    return Path(toplevel).resolve(), (cwd / common_dir).resolve()


def _rev_parse(cwd: Path, *args: str) -> str | None:
    """rev-parse's one answer, without only its final newline (the path itself may end in
    one); None when git fails or is missing."""
    try:
        proc = git(["rev-parse", *args], cwd=cwd, env=user_env(), check=False)
    except VersionError:
        return None
    if proc.returncode != 0:
        return None
    out = proc.stdout.decode("utf-8", "surrogateescape")
    return out[:-1] if out.endswith("\n") else out


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
    head = _rev_parse(project, "-q", "--verify", "HEAD^{commit}")
    head_tree = None
    if head:  # an argument, not a line of input: the folder's name may hold a newline
        spec = f"{head}:{rel}^{{tree}}" if rel else f"{head}^{{tree}}"
        head_tree = _rev_parse(project, "-q", "--verify", spec) or None
    head = head or None
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
