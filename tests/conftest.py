"""Shared fixtures: real git repositories in temp folders and real training subprocesses."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

# Replays in tests start a fork server of their own (the shared one would outlive the test
# and a tmp project); tests of the shared server turn it on themselves.
os.environ.setdefault("FLORWB_FORKSERVER_IDLE_S", "0")
# One intra-op thread for the torch of every test and every script it starts: the tiny
# models here gain nothing from a second thread, and with two xdist workers on two cores
# each training's idle OpenMP threads spin against the other worker's (the 400-step
# checkpoint_density recordings took 1.5x to 8x the CPU time on two threads, the busier the
# machine the more). Tests of thread handling set their own variables.
os.environ.setdefault("OMP_NUM_THREADS", "1")

GIT_ENV = {
    "GIT_AUTHOR_NAME": "Test",
    "GIT_AUTHOR_EMAIL": "test@example.com",
    "GIT_COMMITTER_NAME": "Test",
    "GIT_COMMITTER_EMAIL": "test@example.com",
}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args],
        cwd=repo,
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, **GIT_ENV},
    ).stdout


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip())
    return path


def run_py(project: Path, script: str, *args: str, check: bool = True, env=None, timeout=180):
    """Run a training script the way a user does: `python script.py ...` in the project."""
    proc = subprocess.run(
        [sys.executable, script, *args],
        cwd=project,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=timeout,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"{script} failed ({proc.returncode}):\n{proc.stderr}")
    return proc


def torchrun_node(project: Path, port: int, nnodes: int = 2) -> subprocess.Popen:
    """One node of a `torchrun --nnodes` launch of train.py in `project`, one process,
    meeting the other nodes at a c10d rendezvous on this machine's `port` (wait with
    `communicate`; stderr is piped)."""
    return subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", f"--nnodes={nnodes}"]
        + ["--nproc-per-node=1", "--rdzv-backend=c10d", f"--rdzv-endpoint=localhost:{port}"]
        + ["train.py"],
        cwd=project,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )


def florwb(project: Path, *args: str, check: bool = True, env=None):
    proc = subprocess.run(
        [sys.executable, "-m", "florwb.cli", *args],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, **(env or {})},
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"florwb {args} failed ({proc.returncode}):\n{proc.stderr}")
    return proc


def recorded_project(
    root: Path,
    script: str,
    *args: str,
    files: dict[str, str] | None = None,
    env: dict[str, str] | None = None,
) -> Path:
    """`root` made a git repository holding `script` as train.py (and `files`, e.g. a
    .gitignore), committed and recorded once with `args` and `env` (for module-scoped
    fixtures that only read the run)."""
    write(root / "train.py", script)
    for name, text in (files or {}).items():
        write(root / name, text)
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "init")
    run_py(root, "train.py", *args, env=env)
    return root


def repo_state(repo: Path) -> dict:
    """Everything about the user's repository florwb promises not to change."""
    return {
        "status": git(repo, "status", "--porcelain"),
        "head": subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True
        ).stdout,
        "branch": git(repo, "branch", "-a", "-v"),
        "refs": git(repo, "for-each-ref"),
        "log": subprocess.run(
            ["git", "log", "--all", "--oneline"], cwd=repo, capture_output=True, text=True
        ).stdout,
        "index": hashlib.sha256((repo / ".git" / "index").read_bytes()).hexdigest()
        if (repo / ".git" / "index").exists()
        else None,
    }


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keep each module whose tests share a module-scoped fixture (a recorded project, a
    Ray cluster, a built wheel) on one xdist worker, so that fixture is built once per run
    instead of once per worker that happens to get one of its tests.

    The marks act under `--dist loadgroup` (pyproject's addopts); every other test is
    handed out one at a time. xdist starts the groups first, largest first, so the shared
    setups overlap with the single tests instead of trailing at the end. Runs before
    xdist's own hook, which turns the marks into the groups."""
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        if info is None or item.get_closest_marker("xdist_group"):
            continue
        shared = any(defs[-1].scope == "module" for defs in info.name2fixturedefs.values() if defs)
        if shared:
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """An empty git repository with one commit, like a user's project."""
    root = tmp_path / "project"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    write(root / "README.md", "# project\n")
    git(root, "add", "README.md")
    git(root, "commit", "-q", "-m", "init")
    return root
