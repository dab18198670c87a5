"""A damaged catalog is rebuilt from the journals, leftovers of killed processes are removed,
`florwb doctor` says what it found, and a closed pipe ends the CLI quietly."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import florwb, git, run_py, write

SCRIPT = """
import florwb as flor
k = flor.arg("k", 0)
for epoch in flor.loop("epoch", range(5)):
    for step in flor.loop("step", range(2000)):
        flor.log("loss", k + epoch + step / 2000)
"""


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("repair") / "project"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    write(root / "train.py", SCRIPT)
    git(root, "add", "train.py")
    git(root, "commit", "-q", "-m", "train")
    for k in range(3):
        run_py(root, "train.py", "--kwargs", f"k={k}")
    florwb(root, "runs")
    return root


@pytest.fixture
def project(recorded: Path, tmp_path: Path) -> Path:
    """A private copy of the recorded project, to damage."""
    copy = tmp_path / "project"
    shutil.copytree(recorded, copy, symlinks=True)
    return copy


def _db(project: Path) -> Path:
    return project / ".florwb" / "florwb.duckdb"


def _damaged(project: Path) -> list[Path]:
    return sorted((project / ".florwb").glob("florwb.duckdb.damaged-*"))


def _run_ids(project: Path) -> list[str]:
    return sorted(r["run_id"] for r in json.loads(florwb(project, "runs", "--json").stdout))


def test_truncated_catalog_is_moved_aside_and_rebuilt(project: Path) -> None:
    runs = _run_ids(project)
    size = _db(project).stat().st_size
    os.truncate(_db(project), 12288)
    proc = florwb(project, "runs", "--json", check=False)
    assert proc.returncode == 0, proc.stderr
    assert sorted(r["run_id"] for r in json.loads(proc.stdout)) == runs
    notice = proc.stderr.strip().splitlines()
    assert len(notice) == 1 and "damaged" in notice[0] and "moved aside" in notice[0]
    (kept,) = _damaged(project)
    assert kept.stat().st_size == 12288 and size > 12288  # kept as it was, never deleted
    assert florwb(project, "runs").stderr == ""  # the next read is quiet


def test_corrupted_blocks_are_rebuilt_and_dataframe_works(project: Path) -> None:
    expected = florwb(project, "dataframe", "loss", "--format", "csv").stdout
    with open(_db(project), "r+b") as f:
        f.seek(12288)
        f.write(os.urandom(1 << 20))
    proc = florwb(project, "dataframe", "loss", "--format", "csv", check=False)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr and "moved aside" in proc.stderr
    assert proc.stdout == expected
    assert len(_damaged(project)) == 1
    assert len(_run_ids(project)) == 3


def test_doctor_on_a_healthy_project(project: Path) -> None:
    proc = florwb(project, "doctor")
    assert proc.stdout.splitlines()[-1] == "healthy"
    assert "3 runs" in proc.stdout and "1 versions present" in proc.stdout


def test_doctor_repairs_and_removes_leftovers(project: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    run_dir = next((project / ".florwb" / "checkpoints").glob("*"), None)
    if run_dir is None:
        run_dir = project / ".florwb" / "checkpoints" / "some-run"
        run_dir.mkdir(parents=True)
    leftover = run_dir / f".epoch-3.pt.{dead.pid}.tmp"
    leftover.write_bytes(b"\0" * 4096)  # what a run killed mid-write leaves
    replay_dir = project / ".florwb" / "replays" / "r-killed-before-its-row"
    (replay_dir / "code").mkdir(parents=True)
    with open(_db(project), "r+b") as f:  # a block no ordinary read touches may be hit
        f.seek(_db(project).stat().st_size // 2)
        f.write(os.urandom(1 << 16))
    proc = florwb(project, "doctor", check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "removed 2 leftover(s)" in proc.stdout
    assert proc.stdout.splitlines()[-1] in ("healthy after repairs", "healthy")
    assert not leftover.exists() and not replay_dir.exists()
    assert florwb(project, "doctor").stdout.splitlines()[-1] == "healthy"
    assert len(_run_ids(project)) == 3


def test_readers_remove_leftovers_of_killed_processes(project: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    folder = project / ".florwb" / "checkpoints" / "a-run"
    folder.mkdir(parents=True, exist_ok=True)
    stale = folder / f".epoch-1.pt.{dead.pid}.tmp"
    stale.write_bytes(b"x")
    live = folder / f".epoch-1.pt.{os.getpid()}.tmp"  # a process still writing it
    live.write_bytes(b"x")
    replay_dir = project / ".florwb" / "replays" / "r-gone"
    replay_dir.mkdir(parents=True)
    florwb(project, "runs")
    assert not stale.exists() and not replay_dir.exists()
    assert live.exists()


def test_doctor_reports_a_missing_version(project: Path) -> None:
    shutil.rmtree(project / ".florwb" / "versions.git" / "objects")
    (project / ".florwb" / "versions.git" / "objects").mkdir()
    proc = florwb(project, "doctor", check=False)
    assert proc.returncode == 1
    assert proc.stderr.count("\n") == 1 and "version store" in proc.stderr, proc.stderr


def test_doctor_outside_a_project(tmp_path: Path) -> None:
    proc = florwb(tmp_path, "doctor", check=False)
    assert proc.returncode == 1 and "no florwb project" in proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_closed_pipes_end_quietly(project: Path) -> None:
    cli = f"{sys.executable} -m florwb.cli"
    for command, first in (
        (f"{cli} query 'SELECT * FROM range(10000000)' --format csv | head -1", "range"),
        (
            f"{cli} dataframe loss --format csv | head -1",
            "run_id,version,start_time,epoch,step,loss",
        ),
        (f"{cli} dataframe loss --format json | head -1", "["),
        (f"{cli} runs --json | head -1", "["),
    ):
        proc = subprocess.run(
            command, shell=True, cwd=project, capture_output=True, text=True, timeout=300
        )
        assert proc.stdout.splitlines() == [first], command
        assert proc.stderr == "", (command, proc.stderr)
