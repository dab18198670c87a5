"""The files a snapshot leaves out, identified by content, so a replay reads the run's bytes.

A tracked 3 MB `data.npy` is too large for the private version store; two runs that read
different contents of it get the same code version. At run start each left-out file is
fingerprinted (size, modification time and, within a hashing budget, its git blob id: the
SHA-1 git itself would give its bytes). At replay the file is compared with what the run
saw; when it changed, the run's bytes come from the user's git object database (read
only: `git cat-file`), which holds them whenever they were ever committed or staged, and
otherwise the plan says the file changed and the run's values are at risk.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ._git import git, user_env

HASH_BUDGET = 256 * 2**20  # bytes hashed at run start, over all left-out files
_CHUNK = 2**20


@dataclass(frozen=True)
class Input:
    """A left-out file as a run saw it (`blob` None: too large to hash at run start)."""

    path: str
    size: int
    mtime_ns: int
    blob: str | None

    def to_json(self) -> list:
        return [self.path, self.size, self.mtime_ns, self.blob]


def fingerprint(project: Path, paths: Iterable[str]) -> list[Input]:
    """Fingerprints of the regular files among `paths` (relative to `project`)."""
    found, hashed = [], 0
    for path in paths:
        try:
            st = os.stat(project / path)
        except OSError:
            continue
        if not os.path.isfile(project / path):
            continue  # submodules, nested repositories: their own versions, not data
        blob = None
        if hashed + st.st_size <= HASH_BUDGET:
            blob = blob_id(project / path)
            hashed += st.st_size
        found.append(Input(path, st.st_size, st.st_mtime_ns, blob))
    return found


def blob_id(path: Path) -> str | None:
    """git's object id of the file's bytes (None if it cannot be read)."""
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            digest = hashlib.sha1(b"blob %d\0" % size, usedforsecurity=False)
            while chunk := handle.read(_CHUNK):
                digest.update(chunk)
    except OSError:
        return None
    return digest.hexdigest()


def unchanged(project: Path, seen: Input) -> bool:
    """True when the file holds what the run read: same size and time, or same bytes."""
    try:
        st = os.stat(project / seen.path)
    except OSError:
        return False
    if st.st_size != seen.size:
        return False
    if st.st_mtime_ns == seen.mtime_ns:
        return True
    return seen.blob is not None and blob_id(project / seen.path) == seen.blob


def run_bytes(project: Path, blob: str) -> bytes | None:
    """The bytes of `blob` from the user's repository, if it holds them (read only)."""
    if len(blob) != 40 or any(c not in "0123456789abcdef" for c in blob):
        return None
    proc = git(["cat-file", "blob", blob], cwd=project, env=user_env(), check=False)
    return proc.stdout if proc.returncode == 0 else None


def has_blob(project: Path, blob: str) -> bool:
    if len(blob) != 40 or any(c not in "0123456789abcdef" for c in blob):
        return False
    proc = git(["cat-file", "-e", blob], cwd=project, env=user_env(), check=False)
    return proc.returncode == 0
