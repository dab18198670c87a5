"""The command-line contract: exit codes and one-line errors for expected mistakes."""

from __future__ import annotations

import subprocess
import sys

from conftest import florwb, run_py, write


def test_usage_errors_and_missing_paths(tmp_path):
    missing = florwb(tmp_path, str(tmp_path / "nowhere"), check=False)
    assert missing.returncode == 1
    assert missing.stderr.strip() == f"florwb: {tmp_path / 'nowhere'}: no such file or folder"
    bogus = florwb(tmp_path, "bogus", "extra", check=False)
    assert bogus.returncode == 2 and "unknown command 'bogus'" in bogus.stderr
    word = florwb(tmp_path, "logs", check=False)  # a mistyped command, not a missing folder
    assert word.returncode == 2
    assert word.stderr.startswith("florwb: 'logs' is neither a command nor a folder here")
    assert "runs" in word.stderr and len(word.stderr.splitlines()) == 1
    empty = florwb(tmp_path, str(tmp_path), check=False)  # a folder with no runs
    assert empty.returncode == 1 and "no recorded runs" in empty.stderr
    assert "Traceback" not in missing.stderr + bogus.stderr + empty.stderr
    bad_workers = florwb(tmp_path, "replay", "x", "--workers", "0", check=False)
    assert bad_workers.returncode == 1 and "--workers must be at least 1" in bad_workers.stderr


def test_help_lists_every_command(tmp_path):
    out = florwb(tmp_path, "--help").stdout
    for command in ("runs", "query", "dataframe", "replay", "propagate", "instrument", "demo"):
        assert command in out


def test_python_dash_m_florwb_is_the_command(tmp_path):
    """A venv used without activating it has no `florwb` on PATH: `python -m florwb` is the
    same command, exit codes included."""
    ok = subprocess.run(
        [sys.executable, "-m", "florwb", "--help"], capture_output=True, text=True, cwd=tmp_path
    )
    assert ok.returncode == 0 and ok.stdout == florwb(tmp_path, "--help").stdout
    bogus = subprocess.run(
        [sys.executable, "-m", "florwb", "bogus", "extra"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert bogus.returncode == 2 and "unknown command 'bogus'" in bogus.stderr


def test_the_workbench_without_a_terminal_says_so_instead_of_spinning(repo):
    """`florwb` from a script, cron or a pipe: Textual there reads an input that never blocks
    and spun a core forever with nothing on screen."""
    write(repo / "train.py", 'import florwb as flor\nflor.log("x", 1)\n')
    run_py(repo, "train.py")
    proc = subprocess.run(
        [sys.executable, "-m", "florwb", str(repo)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert proc.stderr.startswith("florwb: the workbench needs a terminal"), proc.stderr
    assert len(proc.stderr.splitlines()) == 1 and proc.stdout == ""


def test_replay_while_todays_script_does_not_parse_says_so_in_the_plan(repo):
    """A script half-edited (a statement being typed) is no traceback: every run is
    skipped with the parse error, and the exit status says nothing was replayed."""
    write(
        repo / "train.py",
        'import florwb as flor\nfor e in flor.loop("epoch", range(2)):\n    flor.log("x", e)\n',
    )
    run_py(repo, "train.py")
    (repo / "train.py").write_text((repo / "train.py").read_text() + '    flor.log("y", e\n')
    proc = florwb(repo, "replay", "y", "--yes", check=False)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr + proc.stdout
    assert "today's train.py: does not parse: line 4" in proc.stdout
