"""florwb's private object store: a bare git repository at ``<store_dir>/versions.git``.

Why a separate repository instead of commits in the user's: recording must never change the
user's HEAD, branches, index or working tree (flordb's auto-commits onto ``flor.branch`` do).
Git is still the right tool for storage: content-addressed blobs deduplicate across runs and
the tree hash of a snapshot is a natural version id (identical trees are one version).

The private index (``versions.git/index``) doubles as a stat cache, so an unchanged file is
not re-read on the next snapshot. A ``flock`` on ``<store_dir>/versions.lock`` serialises
snapshots from concurrent training processes, which would otherwise race on that index.
"""

from __future__ import annotations

import os
import re
import tempfile
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from ._git import VersionError, git, private_env

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: threads are still serialised
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "REPO_DIRNAME",
    "write_tree",
    "changed_paths",
    "materialize",
    "read_file",
    "list_files",
]

REPO_DIRNAME = "versions.git"
_LOCK_NAME = "versions.lock"
_REF_PREFIX = "refs/florwb/"
# In-tree .gitattributes must not rewrite stored bytes (eol conversion, clean filters such as
# git-lfs) nor what we materialise (export-subst); info/attributes takes precedence over them.
_ATTRIBUTES = b"* -text -eol -filter -ident -working-tree-encoding -export-ignore -export-subst\n"
_VERSION_RE = re.compile(r"[0-9a-fA-F]{4,64}")
_thread_lock = threading.Lock()  # fallback where fcntl is missing


@contextmanager
def _locked(store_dir: Path) -> Iterator[None]:
    store_dir.mkdir(parents=True, exist_ok=True)
    if fcntl is None:  # pragma: no cover
        with _thread_lock:
            yield
        return
    fd = os.open(store_dir / _LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # per open file, so it also separates threads
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _init_repo(git_dir: Path) -> None:
    """Create the bare repository once (caller holds the lock)."""
    attributes = git_dir / "info" / "attributes"
    if (git_dir / "HEAD").is_file() and attributes.is_file():
        return
    git(
        ["-c", "init.defaultBranch=florwb", "init", "--bare", "-q", "--template=", str(git_dir)],
        cwd=git_dir.parent,
        env=private_env(git_dir),
    )
    attributes.parent.mkdir(parents=True, exist_ok=True)
    attributes.write_bytes(_ATTRIBUTES)


def _nul_join(paths: Sequence[str]) -> bytes:
    return b"".join(os.fsencode(p) + b"\0" for p in paths)


def _stage(git_dir: Path, project: Path, paths: Sequence[str]) -> str:
    env = private_env(git_dir, project)
    listed = git(["ls-files", "-z"], cwd=project, env=env).stdout
    current = {os.fsdecode(p) for p in listed.split(b"\0") if p}
    gone = sorted(current.difference(paths))
    if gone:  # before adding, so a file replaced by a folder of the same name is no conflict
        remove = ["update-index", "-z", "--force-remove", "--stdin"]
        git(remove, cwd=project, env=env, input=_nul_join(gone))
    if paths:
        # update-index skips files whose stat data matches the index: repeat snapshots are cheap
        add = ["update-index", "-z", "--add", "--remove", "--replace", "--stdin"]
        git(add, cwd=project, env=env, input=_nul_join(paths))
    return git(["write-tree"], cwd=project, env=env).stdout.decode().strip()


def write_tree(store_dir: Path, project: Path, paths: Sequence[str]) -> str:
    """Store exactly ``paths`` (relative to ``project``) and return their tree hash."""
    git_dir = store_dir / REPO_DIRNAME
    with _locked(store_dir):
        _init_repo(git_dir)
        # We hold the only lock on this index, so a leftover index.lock is from a killed run.
        (git_dir / "index.lock").unlink(missing_ok=True)
        try:
            tree = _stage(git_dir, project, paths)
        except VersionError:
            (git_dir / "index").unlink(missing_ok=True)  # a damaged cache; rebuild it once
            tree = _stage(git_dir, project, paths)
        if not (git_dir / _REF_PREFIX / tree).is_file():  # keeps the tree reachable (no gc)
            git(["update-ref", _REF_PREFIX + tree, tree], cwd=project, env=private_env(git_dir))
    return tree


def changed_paths(
    store_dir: Path, old_tree: str, new_tree: str, objects_dir: Path
) -> list[str] | None:
    """Paths whose content differs between a user-repo tree and a stored tree.

    The user's objects are only *read*, through ``GIT_ALTERNATE_OBJECT_DIRECTORIES`` for
    this one command; nothing is written to either repository. Mode-only changes are ignored.
    None if git cannot compare them (e.g. a SHA-256 user repository).
    """
    git_dir = store_dir / REPO_DIRNAME
    env = private_env(git_dir)
    env["GIT_ALTERNATE_OBJECT_DIRECTORIES"] = str(objects_dir)
    proc = git(
        ["diff-tree", "-r", "-z", "--raw", "--no-renames", old_tree, new_tree],
        cwd=store_dir,
        env=env,
        check=False,
    )
    if proc.returncode != 0:
        return None
    fields = proc.stdout.split(b"\0")
    changed = []
    for meta, path in zip(fields[0::2], fields[1::2], strict=False):
        parts = meta.split()
        if len(parts) >= 4 and parts[2] != parts[3]:
            changed.append(os.fsdecode(path))
    return changed


def _resolve(store_dir: Path, version: str) -> tuple[Path, str]:
    """(git_dir, full tree id) for a version id, or VersionError if it is not stored."""
    git_dir = Path(store_dir) / REPO_DIRNAME
    if not isinstance(version, str) or not _VERSION_RE.fullmatch(version):
        raise VersionError(f"not a version id: {version!r}")
    if not (git_dir / "HEAD").is_file():
        raise VersionError(f"unknown version {version}: no versions stored in {store_dir}")
    proc = git(
        ["rev-parse", "-q", "--verify", f"{version}^{{tree}}"],
        cwd=git_dir,
        env=private_env(git_dir),
        check=False,
    )
    if proc.returncode != 0:
        raise VersionError(f"unknown version {version}")
    return git_dir, proc.stdout.decode().strip()


def materialize(store_dir: Path, version: str, dest_dir: Path) -> None:
    """Write the files of ``version`` into ``dest_dir`` (created if needed) for replay.

    Uses a throw-away index, so neither the private index nor any working tree but
    ``dest_dir`` is touched. Existing files of the same names in ``dest_dir`` are
    overwritten; refusing a destination that contains the store protects the project itself.
    """
    git_dir, tree = _resolve(store_dir, version)
    dest = Path(dest_dir).resolve()
    if Path(store_dir).resolve().is_relative_to(dest):
        raise VersionError(f"refusing to materialize into {dest}: it contains the project")
    try:
        dest.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise VersionError(f"cannot create {dest}: {exc.strerror or exc}") from exc
    with tempfile.TemporaryDirectory(prefix="florwb-materialize-") as scratch:
        env = private_env(git_dir, dest)
        env["GIT_INDEX_FILE"] = str(Path(scratch) / "index")
        git(["read-tree", tree], cwd=dest, env=env)
        git(["checkout-index", "-a", "-f"], cwd=dest, env=env)


def read_file(store_dir: Path, version: str, path: str) -> bytes | None:
    """Bytes of one file of ``version`` (a symlink gives its target); None if absent."""
    git_dir, tree = _resolve(store_dir, version)
    rel = path.replace(os.sep, "/")
    while rel.startswith("./"):
        rel = rel[2:]
    rel = rel.strip("/")
    if not rel:
        return None
    # the path as an argument, not a line of --batch input: a file name may hold a newline
    proc = git(
        ["cat-file", "blob", f"{tree}:{rel}"],
        cwd=git_dir,
        env=private_env(git_dir),
        check=False,
    )
    return proc.stdout if proc.returncode == 0 else None  # missing, a folder, a submodule


def list_files(store_dir: Path, version: str) -> list[str]:
    """Every file path of ``version``, relative and POSIX, sorted."""
    git_dir, tree = _resolve(store_dir, version)
    out = git(["ls-tree", "-r", "-z", "--name-only", tree], cwd=git_dir, env=private_env(git_dir))
    return sorted(os.fsdecode(p) for p in out.stdout.split(b"\0") if p)


def differing_files(store_dir: Path, first: str, second: str) -> list[str]:
    """Paths whose content differs between two stored versions (added, removed or
    changed), relative and POSIX, sorted; both trees are in the private store."""
    git_dir, tree_a = _resolve(store_dir, first)
    _git_dir, tree_b = _resolve(store_dir, second)
    out = git(
        ["diff-tree", "-r", "-z", "--name-only", "--no-renames", tree_a, tree_b],
        cwd=git_dir,
        env=private_env(git_dir),
    )
    return sorted(os.fsdecode(p) for p in out.stdout.split(b"\0") if p)
