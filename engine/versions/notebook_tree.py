"""A stored version with one more top-level file: a notebook run's executed cells.

Built with git plumbing in the private store (hash-object, ls-tree, mktree), so neither the
user's repository nor the private index (the snapshot's stat cache) is touched.
"""

from __future__ import annotations

from pathlib import Path

from ._git import git, private_env
from .object_store import _REF_PREFIX, REPO_DIRNAME, _locked


def with_file(store_dir: Path, project: Path, tree: str, name: str, text: str) -> str:
    """The tree id of `tree` with the top-level file `name` holding `text` (added or
    replaced), kept reachable like every snapshot."""
    if "/" in name or not name or name in (".", ".."):
        raise ValueError(f"not a top-level file name: {name!r}")
    git_dir = store_dir / REPO_DIRNAME
    env = private_env(git_dir)
    with _locked(store_dir):
        blob = git(
            ["hash-object", "-w", "--stdin"], cwd=project, env=env, input=text.encode()
        ).stdout.strip()
        listing = git(["ls-tree", "-z", tree], cwd=project, env=env).stdout
        entries = [e for e in listing.split(b"\0") if e and e.split(b"\t", 1)[1] != name.encode()]
        entries.append(b"100644 blob " + blob + b"\t" + name.encode())
        new = git(["mktree", "-z"], cwd=project, env=env, input=b"\0".join(entries) + b"\0")
        version = new.stdout.decode().strip()
        if not (git_dir / _REF_PREFIX / version).is_file():
            git(["update-ref", _REF_PREFIX + version, version], cwd=project, env=env)
    return version
