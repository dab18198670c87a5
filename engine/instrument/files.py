"""Reading a script exactly as it is on disk and writing the instrumented one in place.

Bytes matter: the file is read and written with `newline=""` so CRLF files stay CRLF.
`--write` keeps a backup (`train.py.bak`) unless git already holds the exact original
(the file is tracked and has no uncommitted change), in which case `git checkout` or
`git diff` undoes or shows the change and a stray .bak file would only land in the user's
`git status` and in florwb's code snapshots.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

from florwb_engine.instrument.errors import InstrumentError
from florwb_engine.versions._git import VersionError, git, user_env


class BackupExists(InstrumentError):
    """A backup from an earlier --write is in the way; it is never overwritten."""


def read_script(path: Path) -> str:
    try:
        with open(path, encoding="utf-8", newline="") as f:
            return f.read()
    except FileNotFoundError:
        raise InstrumentError(f"no such file: {path}") from None
    except IsADirectoryError:
        raise InstrumentError(f"not a file: {path}") from None
    except UnicodeDecodeError:
        raise InstrumentError(f"{path} is not UTF-8 text") from None
    except OSError as exc:
        raise InstrumentError(f"cannot read {path}: {exc.strerror}") from None


def committed_unchanged(path: Path) -> bool:
    """Whether git tracks `path` and HEAD holds exactly what is on disk.

    Compares blob ids (`HEAD:./name` against `git hash-object` of the file) instead of
    `git diff`, which refreshes the index of a file with stale stat data: that writes the
    user's `.git/index` and fires their `post-index-change` hook. Only reading commands
    run here, with optional locks, hooks and fsmonitor off (versions._git.user_env)."""
    folder = path.resolve().parent
    env = user_env()
    try:
        tracked = git(
            ["ls-files", "--error-unmatch", "--", path.name], cwd=folder, env=env, check=False
        )
        if tracked.returncode != 0:
            return False
        head = git(
            ["rev-parse", "-q", "--verify", f"HEAD:./{path.name}"], cwd=folder, env=env, check=False
        )
        disk = git(["hash-object", "--", path.name], cwd=folder, env=env, check=False)
    except VersionError:  # no git
        return False
    if head.returncode != 0 or disk.returncode != 0:
        return False
    return head.stdout.strip() == disk.stdout.strip()


def write_instrumented(path: Path, original: str, code: str) -> Path | None:
    """Replace the script with `code` atomically; returns the backup written, if any."""
    backup: Path | None = None
    if not committed_unchanged(path):
        backup = path.with_name(path.name + ".bak")
        if backup.exists():
            raise BackupExists(f"{backup} already exists; move it away and run again")
        _atomic_write(backup, original, path)
    _atomic_write(path, code, path)
    return backup


def _atomic_write(target: Path, text: str, like: Path) -> None:
    mode = os.stat(like).st_mode & 0o7777 if like.exists() else 0o644
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
