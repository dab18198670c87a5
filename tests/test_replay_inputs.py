"""A replay reads the bytes the run read, or says it cannot.

A tracked data file too large for the snapshot changes between two versions: both runs get
the same code version, yet each replay must read the file as its run did (git holds both
contents). A file git never held that changed since the run is named in the plan and the
run's replayed values are marked at risk.
"""

from __future__ import annotations

from pathlib import Path

from conftest import florwb, git, repo_state, run_py, write

from florwb_engine.replay import plan_replay
from florwb_engine.store import Store

TRAIN = """
import florwb as flor

total = 0.0
for epoch in flor.loop("epoch", range(2)):
    total += 1.0
    flor.log("total", total)
"""
ANCHOR = '    flor.log("total", total)\n'
READS = '    flor.log("{name}", int(open("{file}", "rb").read(1)))\n'
READ_SIZE = '    flor.log("size", len(open("cache.bin", "rb").read()))\n'
BIG = 3 * 2**20  # over the snapshot's 2 MiB per-file cap: left out, fingerprinted


def _runs(project: Path) -> list[str]:
    return list(Store(project).query("SELECT run_id FROM runs ORDER BY start_time")["run_id"])


def _replayed(project: Path, name: str) -> dict[str, set]:
    frame = Store(project).query(f"SELECT run_id, value FROM logs WHERE name = '{name}'")
    out: dict[str, set] = {}
    for run_id, value in zip(frame["run_id"], frame["value"], strict=True):
        out.setdefault(run_id, set()).add(int(value))
    return out


def test_each_run_replays_with_the_bytes_of_a_tracked_file_it_read(repo: Path):
    write(repo / "train.py", TRAIN)
    (repo / "data.bin").write_bytes(b"1" * BIG)
    git(repo, "add", "train.py", "data.bin")
    git(repo, "commit", "-q", "-m", "data v1")
    run_py(repo, "train.py")
    (repo / "data.bin").write_bytes(b"2" * BIG)
    git(repo, "commit", "-q", "-am", "data v2")
    run_py(repo, "train.py")
    first, second = _runs(repo)
    versions = Store(repo).query("SELECT DISTINCT version FROM runs")
    assert len(versions) == 1  # the data file is left out: one code version for both
    (repo / "train.py").write_text(
        TRAIN.replace(ANCHOR, ANCHOR + READS.format(name="data_value", file="data.bin"))
    )
    plan = plan_replay(repo, ["data_value"])
    notes = {run.run_id: " ".join(run.notes) for run in plan.runs}
    assert "data.bin changed since the run" in notes[first]
    assert "data.bin" not in notes[second]
    state = repo_state(repo)
    florwb(repo, "replay", "data_value", "--yes")
    assert _replayed(repo, "data_value") == {first: {1}, second: {2}}
    assert repo_state(repo) == state  # git was only read
    assert (repo / "data.bin").read_bytes()[:1] == b"2"


def test_a_changed_file_git_never_held_marks_the_values_at_risk(repo: Path):
    write(repo / "train.py", TRAIN)
    git(repo, "add", "train.py")
    git(repo, "commit", "-q", "-m", "v1")
    (repo / "cache.bin").write_bytes(b"\0" + b"3" * BIG)  # untracked binary: left out
    run_py(repo, "train.py")
    (run_id,) = _runs(repo)
    (repo / "cache.bin").write_bytes(b"\0" + b"4" * BIG)
    (repo / "train.py").write_text(
        TRAIN.replace(
            ANCHOR, ANCHOR + '    flor.log("size", len(open("cache.bin", "rb").read()))\n'
        )
    )
    plan = plan_replay(repo, ["size"])
    (run,) = plan.runs
    assert run.at_risk == ["cache.bin"]
    assert any(
        "cache.bin changed since the run" in note and "at risk" in note for note in run.notes
    )
    proc = florwb(repo, "replay", "size", "--yes")
    assert f"{run_id} values at risk: cache.bin changed since the run" in proc.stdout
    issues = Store(repo).query(
        f"SELECT detail FROM run_issues WHERE run_id = '{run_id}' AND kind = 'input changed'"
    )
    assert list(issues["detail"]) == ["cache.bin changed since the run"]
