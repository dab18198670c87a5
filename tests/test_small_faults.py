"""Smaller defects: NULL strings in JSON, a bad --kwargs said once, ints that keep
their digits, and a replay plan that says a run is still recording."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from conftest import florwb, git, run_py, write

from florwb_engine.replay import plan_replay
from florwb_engine.store import Store


def _project(repo: Path, script: str) -> Path:
    write(repo / "train.py", script)
    git(repo, "add", "train.py")
    git(repo, "commit", "-q", "-m", "train")
    return repo


def test_json_output_writes_null_for_missing_strings(repo: Path) -> None:
    _project(
        repo,
        """
        import florwb as flor
        for epoch in flor.loop("epoch", range(3)):
            flor.log("note", None if epoch == 0 else f"epoch {epoch}")
        """,
    )
    run_py(repo, "train.py")
    frame = json.loads(florwb(repo, "dataframe", "note", "--format", "json").stdout)
    assert [row["note"] for row in frame] == [None, "epoch 1", "epoch 2"]
    rows = json.loads(
        florwb(
            repo,
            "query",
            "SELECT CASE WHEN range = 0 THEN NULL ELSE 'x' END AS s, "
            "CASE WHEN range = 0 THEN NULL ELSE 1.5 END AS f FROM range(2)",
            "--format",
            "json",
        ).stdout
    )
    # a NULL float is null too: `florwb query` writes Python rows, where NULL is not NaN
    # (tests/test_query_output_values.py)
    assert rows == [{"s": None, "f": None}, {"s": "x", "f": 1.5}]


def test_a_bad_kwarg_is_reported_once(repo: Path) -> None:
    _project(repo, 'import florwb as flor\nn = flor.arg("n", 3)\nflor.log("n", n)\n')
    proc = run_py(repo, "train.py", "--kwargs", "n=abc", check=False)
    assert proc.returncode == 2
    assert "--kwargs n=abc: expected int like the default 3" in proc.stderr
    assert "not used by any flor.arg" not in proc.stderr, proc.stderr
    # an unused one is still named
    proc = run_py(repo, "train.py", "--kwargs", "n=4", "m=1")
    assert "not used by any flor.arg: m" in proc.stderr


def test_big_int_args_keep_their_digits(repo: Path) -> None:
    _project(
        repo,
        """
        import florwb as flor
        big = flor.arg("big", 10**100)
        small = flor.arg("small", 2**53 + 1)
        flor.log("ok", 1)
        """,
    )
    run_py(repo, "train.py")
    run_py(repo, "train.py", "--kwargs", f"big={10**100 + 7}")
    runs = json.loads(florwb(repo, "runs", "--json").stdout)
    assert [r["args"]["big"] for r in runs] == [10**100, 10**100 + 7]
    assert {r["args"]["small"] for r in runs} == {2**53 + 1}
    frame = Store(repo).dataframe("big")
    assert sorted(frame["big"]) == [10**100, 10**100 + 7]


def test_replay_plan_says_a_run_is_still_recording(repo: Path) -> None:
    script = """
        import os
        import time
        import florwb as flor
        for epoch in flor.loop("epoch", range(2)):
            while not os.path.exists("go"):  # held until the test has planned
                time.sleep(0.01)
            flor.log("loss", float(epoch))
        """
    _project(repo, script)
    proc = subprocess.Popen(
        [sys.executable, "train.py"], cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if (repo / ".florwb").is_dir() and Store(repo).runs():
                break
            time.sleep(0.05)
        assert [r["status"] for r in Store(repo).runs()] == ["running"]
        logged = '            flor.log("loss", float(epoch))'
        today = script.replace(logged, logged + '\n            flor.log("twice", 2.0 * epoch)')
        write(repo / "train.py", today)
        plan = plan_replay(repo, ["twice"])
        (run,) = plan.runs
        assert run.status != "ready"
        assert run.reason is not None and "still recording" in run.reason, run.reason
    finally:
        (repo / "go").write_text("")
        proc.wait(timeout=120)
    assert proc.returncode == 0
