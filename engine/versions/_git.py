"""Running the git CLI with controlled environments.

Two kinds of git commands exist in this package and they must never be confused:

* commands against the *user's* repository, which are strictly read-only and run with
  ``GIT_OPTIONAL_LOCKS=0`` so that git never opportunistically rewrites their index;
* commands against florwb's *private* bare repository, which get an explicit ``GIT_DIR``,
  ``GIT_WORK_TREE`` and ``GIT_INDEX_FILE`` so nothing can leak into the user's ``.git/``.

Both run with hooks and fsmonitor switched off through command-line-level config (which wins
over any repository's config): a read must not start a program the repository names (a
``post-index-change`` or ``reference-transaction`` hook, an fsmonitor daemon that writes into
``.git/``). The private store's own config is florwb's: anything planted in it is replaced
(see ``reset_private_config``).

Both start from the caller's environment with every repository-locating ``GIT_*`` variable
removed: a training script launched from a git hook (or with ``GIT_DIR`` exported) must not
redirect our commands at some other repository.
"""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = ["VersionError", "git", "user_env", "private_env"]


class VersionError(Exception):
    """An expected failure of code versioning, with a one-line message for the user."""


# Variables that would make git look at another repository, index, object store or config
# than the one we mean, or change how pathspecs are read.
_STRIPPED = frozenset(
    {
        "GIT_DIR",
        "GIT_WORK_TREE",
        "GIT_INDEX_FILE",
        "GIT_OBJECT_DIRECTORY",
        "GIT_ALTERNATE_OBJECT_DIRECTORIES",
        "GIT_COMMON_DIR",
        "GIT_NAMESPACE",
        "GIT_PREFIX",
        "GIT_QUARANTINE_PATH",
        "GIT_CONFIG",
        "GIT_CONFIG_PARAMETERS",
        "GIT_CONFIG_COUNT",
        "GIT_LITERAL_PATHSPECS",
        "GIT_GLOB_PATHSPECS",
        "GIT_NOGLOB_PATHSPECS",
        "GIT_ICASE_PATHSPECS",
        "GIT_INDEX_VERSION",
    }
)

_IDENTITY = {
    "GIT_AUTHOR_NAME": "florwb",
    "GIT_AUTHOR_EMAIL": "florwb@localhost",
    "GIT_COMMITTER_NAME": "florwb",
    "GIT_COMMITTER_EMAIL": "florwb@localhost",
}


def _base_env() -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in _STRIPPED and not k.startswith(("GIT_CONFIG_KEY_", "GIT_CONFIG_VALUE_"))
    }
    env["GIT_OPTIONAL_LOCKS"] = "0"
    env["GIT_TERMINAL_PROMPT"] = "0"
    env["LC_ALL"] = "C"
    env.pop("GIT_CONFIG_COUNT", None)
    for i, (key, value) in enumerate(_FORCED_CONFIG):
        env[f"GIT_CONFIG_KEY_{i}"] = key
        env[f"GIT_CONFIG_VALUE_{i}"] = value
    env["GIT_CONFIG_COUNT"] = str(len(_FORCED_CONFIG))
    return env


# Config that no repository can override: no hooks, no fsmonitor program or daemon, no
# untracked cache to refresh. Given as GIT_CONFIG_KEY_n/VALUE_n (command-line scope).
_FORCED_CONFIG = (
    ("core.hooksPath", os.devnull),
    ("core.fsmonitor", "false"),
    ("core.untrackedCache", "false"),
)

# What florwb's private repository's config holds; anything else found there is replaced.
PRIVATE_CONFIG = b"[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = true\n"


def reset_private_config(git_dir: Path) -> None:
    """Put florwb's own config back in the private store if something else is there: a
    config planted in `.florwb/versions.git` (an fsmonitor, an alias, an include) never
    takes effect. A read of about 100 bytes when nothing changed."""
    config = git_dir / "config"
    try:
        if config.read_bytes() == PRIVATE_CONFIG:
            return
    except FileNotFoundError:
        if not (git_dir / "HEAD").is_file():
            return  # not created yet: `git init` writes it
    tmp = git_dir / f"config.florwb-{os.getpid()}-{threading.get_ident()}.tmp"
    tmp.write_bytes(PRIVATE_CONFIG)
    os.replace(tmp, config)


def user_env() -> dict[str, str]:
    """Environment for read-only commands in the user's repository.

    The user's own config stays in effect (``core.excludesFile`` decides what is ignored).
    """
    return _base_env()


def private_env(git_dir: Path, work_tree: Path | None = None) -> dict[str, str]:
    """Environment for commands in florwb's private repository.

    Global and system config are ignored so that the user's filters, ``autocrlf`` or hooks
    cannot alter the bytes we store, and a neutral identity means no config is required.
    """
    env = _base_env()
    env.update(_IDENTITY)
    reset_private_config(git_dir)
    env["GIT_DIR"] = str(git_dir)
    env["GIT_INDEX_FILE"] = str(git_dir / "index")
    env["GIT_CONFIG_NOSYSTEM"] = "1"
    env["GIT_CONFIG_GLOBAL"] = os.devnull
    env["GIT_LITERAL_PATHSPECS"] = "1"
    if work_tree is not None:
        env["GIT_WORK_TREE"] = str(work_tree)
    return env


def git(
    args: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    input: bytes | None = None,
    check: bool = True,
) -> subprocess.CompletedProcess[bytes]:
    """Run ``git ARGS`` and capture its output as bytes.

    With ``check`` a non-zero exit becomes a :class:`VersionError` carrying git's last
    stderr line; without it the caller inspects ``returncode`` (used for yes/no queries).
    """
    try:
        proc = subprocess.run(
            ["git", *args],
            cwd=cwd,
            env=dict(env),
            input=input,
            stdin=None if input is not None else subprocess.DEVNULL,
            capture_output=True,
            check=False,
        )
    except FileNotFoundError as exc:
        if not Path(cwd).is_dir():
            raise VersionError(f"folder does not exist: {cwd}") from exc
        raise VersionError("git is not installed; it is needed to record code versions") from exc
    if check and proc.returncode != 0:
        lines = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        reason = lines[-1] if lines else f"exit status {proc.returncode}"
        raise VersionError(f"git {args[0]} failed: {reason}")
    return proc
