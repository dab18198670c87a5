"""Helpers shared by the benchmark scripts (run by hand, never by the test suite).

Every measurement runs in a throwaway git repository under the system temp dir, so neither
florwb's .florwb/ nor flordb's .flor/, branches and auto-commits ever land in this checkout.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
PYTHON = REPO / ".venv" / "bin" / "python"
if not PYTHON.exists():
    PYTHON = Path(sys.executable)
FLORDB_PATH = BENCH_DIR / ".env" / "flordb"  # made by benchmarks/flordb_env.sh
PYCACHE = BENCH_DIR / ".env" / "pycache"
BACKENDS = ("plain", "florwb", "flordb")

# flordb auto-commits into the repository it runs in; give git an identity through the
# environment instead of touching any git config.
_GIT_ENV = {
    "GIT_AUTHOR_NAME": "florwb-bench",
    "GIT_AUTHOR_EMAIL": "bench@example.invalid",
    "GIT_COMMITTER_NAME": "florwb-bench",
    "GIT_COMMITTER_EMAIL": "bench@example.invalid",
}


class BenchError(RuntimeError):
    """A benchmark subprocess failed; the message ends with the tail of its stderr."""


def flordb_available() -> bool:
    return (FLORDB_PATH / "flordb" / "__init__.py").is_file()


def usable_backends(requested: str) -> list[str]:
    """Parse a comma list of backends, dropping (with a note) flordb when it is not installed."""
    backends = [b.strip() for b in requested.split(",") if b.strip()]
    unknown = set(backends) - set(BACKENDS)
    if unknown:
        raise SystemExit(f"unknown backend(s) {sorted(unknown)}; choose from {BACKENDS}")
    if "flordb" in backends and not flordb_available():
        note(f"SKIP flordb: not installed in {FLORDB_PATH.relative_to(REPO)}")
        note("  create it once with: bash benchmarks/flordb_env.sh")
        backends.remove("flordb")
    return backends


def backend_env(backend: str, **extra: str) -> dict[str, str]:
    """Environment for a child process using `backend` (BENCH_FLOR) and its import path.

    flordb gets its own package folder first on PYTHONPATH, so its pinned dependencies win
    only in that process; torch still comes from .venv. Single-threaded math for stability.
    Bytecode is cached (under benchmarks/.env/pycache, not beside the sources) even where
    PYTHONDONTWRITEBYTECODE is set, so no backend pays for compiling its imports every run.
    """
    drop = ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(_GIT_ENV, BENCH_FLOR=backend, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    env["PYTHONPYCACHEPREFIX"] = str(PYCACHE)
    if backend == "flordb":
        env["PYTHONPATH"] = str(FLORDB_PATH)
    elif backend == "florwb":
        # this checkout's florwb, whatever the cwd; then the caller's path, which holds
        # florwb's dependencies and florwb_engine where no .venv has them (a GPU machine)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    env.update(extra)
    return env


def _git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "commit.gpgsign=false", *args],
        cwd=repo,
        env={**os.environ, **_GIT_ENV},
        check=True,
        stdout=subprocess.DEVNULL,
    )


@contextmanager
def temp_git_repo(*files: Path) -> Iterator[Path]:
    """A fresh git repo (branch main, one commit holding `files`) in a new temp dir.

    Yields the repo path; its parent is a scratch dir for side files (timings, results)
    that must not end up in the repo. Everything is removed afterwards.
    """
    root = Path(tempfile.mkdtemp(prefix="florwb-bench-"))
    repo = root / "repo"
    try:
        repo.mkdir()
        _git(repo, "init", "-q", "-b", "main")
        for f in files:
            shutil.copy2(f, repo / Path(f).name)
        _git(repo, "add", "-A")
        _git(repo, "commit", "-q", "--allow-empty", "-m", "benchmark project")
        yield repo
    finally:
        shutil.rmtree(root, ignore_errors=True)


def run_timed(cmd: list[str], cwd: Path, env: dict[str, str]) -> float:
    """Run `cmd` to completion and return its wall time in seconds.

    stdout goes to /dev/null (flordb echoes every logged value; a terminal would only be
    slower), stderr to a file (flordb's progress bars) whose tail is reported on failure.
    """
    with tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=err)
        elapsed = time.perf_counter() - start
        if proc.returncode != 0:
            err.seek(0)
            tail = err.read().decode(errors="replace").strip().splitlines()[-15:]
            raise BenchError(
                f"{' '.join(map(str, cmd))} exited {proc.returncode}:\n  " + "\n  ".join(tail)
            )
    return elapsed


def median(values: list[float]) -> float:
    return statistics.median(values)


def rotated(items: list[str], shift: int) -> list[str]:
    """`items` rotated by `shift`, so no backend always runs first in a round."""
    shift %= max(len(items), 1)
    return items[shift:] + items[:shift]


def note(message: str) -> None:
    """An informational line; only RESULT lines are meant for machines."""
    print(f"# {message}", flush=True)


def result(name: str, value: float, unit: str) -> None:
    text = f"{value:.0f}" if abs(value) >= 1000 else f"{value:.4g}"
    print(f"RESULT {name} {text} {unit}", flush=True)
