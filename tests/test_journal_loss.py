"""Journal damage and loss that no reader may hide: a run whose start chunk is lost (while
its writer lives, after it was killed, once it ended), a journal deleted under a live run
while the catalog survives, and a catalog that could not be created on a full disk. Real
recordings in real git repositories, read back through the CLI.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

from conftest import florwb, recorded_project, run_py

from florwb_engine import journal

PAUSES = """
import os, signal, sys
import florwb as flor
from florwb_engine.record import runtime
for epoch in flor.loop("epoch", range(4)):
    flor.log("e", epoch)
    runtime.current().flush()  # a chunk per epoch
    if epoch == 1 and os.environ.get("PAUSE"):
        os.write(1, b"paused\\n")  # past the tee: nothing more is journaled meanwhile
        sys.stdin.readline()
    if epoch == 1 and os.environ.get("KILL"):
        os.kill(os.getpid(), signal.SIGKILL)
"""


def _journals(project: Path) -> set[Path]:
    return set((project / ".florwb" / "journal").glob("*.journal"))


def _paused(project: Path) -> tuple[subprocess.Popen, Path]:
    """A recording of PAUSES stopped after its second epoch, and its journal."""
    before = _journals(project)
    proc = subprocess.Popen(
        [sys.executable, "train.py"],
        cwd=project,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PAUSE": "1"},
    )
    assert proc.stdout is not None and proc.stdout.readline() == "paused\n"
    (path,) = _journals(project) - before
    return proc, path


def _resume(proc: subprocess.Popen) -> str:
    _out, err = proc.communicate("\n", timeout=120)
    assert proc.returncode == 0, err
    return err


def _lose_start(path: Path) -> None:
    """Garbage in the start chunk's body, written in place (a live writer appends on)."""
    start = journal.read_chunks(path, 0).chunks[0]
    assert start.events[0]["kind"] == "start"
    with open(path, "r+b") as f:
        f.seek(journal.HEADER_SIZE + 4)
        f.write(b"\xaa" * 16)


def _run(project: Path, run_id: str) -> tuple[dict, str]:
    proc = florwb(project, "runs", "--json")
    (run,) = [r for r in json.loads(proc.stdout) if r["run_id"] == run_id]
    return run, proc.stderr


def _values(project: Path, run_id: str) -> list:
    frame = json.loads(florwb(project, "dataframe", "e", "--format", "json").stdout)
    return [row["e"] for row in frame if row["run_id"] == run_id]


def test_a_run_whose_start_is_lost_is_running_while_its_writer_lives_then_ends(
    tmp_path: Path,
) -> None:
    """The run stayed `running` forever: its process was in the lost chunk. The journal's
    writer lock tells a live writer from a gone one."""
    project = recorded_project(tmp_path, PAUSES)
    proc, path = _paused(project)
    _lose_start(path)
    run_id = path.name.removesuffix(".journal")
    run, said = _run(project, run_id)
    assert run["status"] == "running", run
    assert sorted(i["kind"] for i in run["issues"]) == ["damaged", "start lost"]
    assert said.count("lost its start") == 1
    assert _values(project, run_id) == [0, 1]
    _resume(proc)
    run, said = _run(project, run_id)
    assert run["status"] == "finished" and "lost its start" not in said
    assert _values(project, run_id) == [0, 1, 2, 3]


def test_a_killed_run_whose_start_is_lost_reads_killed(tmp_path: Path) -> None:
    project = recorded_project(tmp_path, PAUSES)
    before = _journals(project)
    proc = run_py(project, "train.py", check=False, env={"KILL": "1"})
    assert proc.returncode == -9
    (path,) = _journals(project) - before
    _lose_start(path)
    run_id = path.name.removesuffix(".journal")
    run, said = _run(project, run_id)
    assert run["status"] == "killed" and said.count("lost its start") == 1, run
    assert _values(project, run_id) == [0, 1]
    doctor = florwb(project, "doctor", check=False)
    assert doctor.returncode == 1 and f"journal {path.name}: lost its start" in doctor.stderr


def test_a_journal_deleted_under_a_live_run_loses_nothing_the_catalog_read(
    tmp_path: Path,
) -> None:
    """The catalog had read the first journal to its end; the new one at the same path was
    read from that offset on (or its chunks skipped as seen): values after the deletion
    were dropped without a word."""
    project = recorded_project(tmp_path, PAUSES)
    proc, path = _paused(project)
    run_id = path.name.removesuffix(".journal")
    assert _values(project, run_id) == [0, 1]  # the catalog holds the first journal's rows
    path.unlink()
    err = _resume(proc)
    assert "journal was deleted while it recorded" in err
    run, said = _run(project, run_id)
    assert said.count("deleted and written anew") == 1, said
    assert run["status"] == "finished" and run["args"] == {}
    assert [(i["kind"], i["n"]) for i in run["issues"]] == [("restarted", 1)], run["issues"]
    assert _values(project, run_id) == [0, 1, 2, 3]
    query = florwb(
        project,
        "query",
        f"SELECT count(*) AS n, count(DISTINCT seq) AS seqs FROM logs WHERE run_id = '{run_id}'",
        "--format",
        "json",
    )
    assert json.loads(query.stdout) == [{"n": 4, "seqs": 4}]
    assert "deleted" not in florwb(project, "runs").stderr  # said once


def _file_size_limit(limit: int):
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))

    return apply


def test_a_catalog_that_cannot_be_created_on_a_full_disk_is_not_called_damaged(
    tmp_path: Path,
) -> None:
    """The first reader printed DuckDB's raw write error and left a 4 KiB file; the next
    reader called the catalog damaged and moved it aside. The file size limit refuses
    writes the way a full disk does (EFBIG instead of ENOSPC), without a mount."""
    project = recorded_project(tmp_path, PAUSES)
    catalog = project / ".florwb" / "florwb.duckdb"
    assert not catalog.exists()
    proc = subprocess.run(
        [sys.executable, "-m", "florwb.cli", "runs"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=_file_size_limit(4096),
    )
    assert proc.returncode == 1, proc.stdout
    (line,) = proc.stderr.splitlines()
    assert "the catalog cannot be created: File too large" in line, line
    assert not catalog.exists()
    again = florwb(project, "runs", "--json")
    assert "damaged" not in again.stderr and len(json.loads(again.stdout)) == 1
    # what a reader killed while creating it leaves: less than a catalog's header
    head = catalog.read_bytes()[:4096]
    for stale in project.joinpath(".florwb").glob("florwb.duckdb*"):
        stale.unlink()
    catalog.write_bytes(head)
    third = florwb(project, "runs", "--json")
    assert "damaged" not in third.stderr and "never created whole" in third.stderr
    assert len(json.loads(third.stdout)) == 1
    assert not list(project.joinpath(".florwb").glob("*.damaged-*"))
