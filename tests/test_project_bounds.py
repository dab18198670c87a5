"""Where a project's store lives: readers never create one, and a git work tree is its own
project even below a folder that has a `.florwb/`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import git, run_py, write

SCRIPT = """
import florwb as flor
for epoch in flor.loop("epoch", range(2)):
    flor.log("loss", 1.0 / (epoch + 1))
"""


def _listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def _florwb(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "florwb.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_readers_outside_a_project_write_nothing(tmp_path):
    empty = tmp_path / "nothing-here"
    empty.mkdir()
    (empty / "notes.txt").write_text("hello\n")
    for args in (["runs"], ["runs", "--json"], ["query", "SELECT 1"], ["dataframe", "loss"]):
        proc = _florwb(empty, *args)
        assert proc.returncode == 1, (args, proc.stdout, proc.stderr)
        assert proc.stderr.count("\n") == 1 and "no florwb project" in proc.stderr, proc.stderr
        assert _listing(empty) == ["notes.txt"]
    code = (
        "import florwb as flor\n"
        "try:\n    flor.query('SELECT 1')\n"
        "except Exception as exc:\n    print(type(exc).__name__)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=empty, capture_output=True, text=True, timeout=120
    )
    assert proc.stdout.strip() == "NoProject", proc.stderr
    assert _listing(empty) == ["notes.txt"]


def test_a_git_work_tree_below_a_store_is_its_own_project(tmp_path):
    parent = tmp_path / "workspace"
    write(parent / "scratch.py", SCRIPT)
    run_py(parent, "scratch.py")  # not a git tree: the store goes in the folder itself
    assert (parent / ".florwb").is_dir()
    parent_runs = _florwb(parent, "runs", "--json").stdout

    child = parent / "model"
    child.mkdir()
    git(child, "init", "-q", "-b", "main")
    write(child / "train.py", SCRIPT)
    git(child, "add", "train.py")
    git(child, "commit", "-q", "-m", "train")
    run_py(child, "train.py")
    assert list((child / ".florwb" / "journal").glob("*.journal"))  # its own store
    assert ".florwb" in (child / ".git" / "info" / "exclude").read_text()
    child_runs = _florwb(child, "runs", "--json")
    assert child_runs.returncode == 0, child_runs.stderr
    assert '"script": "train.py"' in child_runs.stdout and "scratch.py" not in child_runs.stdout
    # the parent's store did not see the child's run; the child's subfolders resolve to it
    assert _florwb(parent, "runs", "--json").stdout == parent_runs
    (child / "src").mkdir()
    from_below = _florwb(child / "src", "runs", "--json")
    assert from_below.stdout == _florwb(child, "runs", "--json").stdout
