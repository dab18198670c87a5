"""`florwb instrument` as a user runs it: the diff, --write and its backup rule, refusals,
and an instrumented script run the plain way (`python train.py`) and listed by `florwb runs`.
"""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import git, run_py, write

from florwb_engine.store import Store

CORPUS = Path(__file__).parent / "instrument_corpus"


def _wired() -> bool:
    """Whether florwb.cli has the `instrument` subcommand (else use its module directly)."""
    from florwb.cli import build_parser

    try:
        with contextlib.redirect_stderr(io.StringIO()):
            build_parser().parse_args(["instrument", "train.py"])
    except SystemExit:
        return False
    return True


COMMAND = ["florwb.cli", "instrument"] if _wired() else ["florwb.cli_instrument"]


def instrument_cli(project: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", *COMMAND, *args],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _read(path: Path) -> str:
    with open(path, encoding="utf-8", newline="") as f:
        return f.read()


def _copy(case: str, project: Path, name: str = "train.py") -> Path:
    target = project / name
    target.write_text(_read(CORPUS / case / "train.py"))
    return target


def test_diff_applies_to_the_original_and_the_file_is_untouched(repo: Path) -> None:
    script = _copy("04_amp_gradscaler", repo)
    proc = instrument_cli(repo, "train.py")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("--- a/train.py\n+++ b/train.py\n")
    assert "+import florwb as flor\n" in proc.stdout
    assert _read(script) == _read(CORPUS / "04_amp_gradscaler" / "train.py")
    err = proc.stderr.splitlines()
    assert "train.py:19: flor.checkpointing(model=model, optimizer=optimizer, scaler=scaler)" in (
        "\n".join(err)
    )
    assert err[-1].startswith("train.py: instrumented: loops epoch, step; checkpointing")
    patch = repo.parent / "change.diff"
    patch.write_text(proc.stdout)
    git(repo, "apply", str(patch))
    assert _read(script) == _read(CORPUS / "04_amp_gradscaler" / "expected.py")


def test_write_on_a_committed_file_keeps_no_backup_and_runs_the_plain_way(repo: Path) -> None:
    script = _copy("05_grad_accumulation", repo)
    git(repo, "add", "train.py")
    git(repo, "commit", "-q", "-m", "train")
    proc = instrument_cli(repo, "train.py", "--write")
    assert proc.returncode == 0, proc.stderr
    assert "wrote train.py (git holds the original)" in proc.stderr
    assert _read(script) == _read(CORPUS / "05_grad_accumulation" / "expected.py")
    assert not (repo / "train.py.bak").exists()

    again = instrument_cli(repo, "train.py", "--write")
    assert again.returncode == 0 and again.stdout == ""
    assert again.stderr.strip() == "train.py: already instrumented, nothing to change"

    run_py(repo, "train.py", "--kwargs", "EPOCHS=1", env={"OMP_NUM_THREADS": "1"})
    (run,) = Store(repo).runs()
    assert run["status"] == "finished" and run["args"]["EPOCHS"] == 1
    assert run["n_checkpoints"] >= 1
    listed = subprocess.run(
        [sys.executable, "-m", "florwb.cli", "runs"], cwd=repo, capture_output=True, text=True
    )
    assert listed.returncode == 0 and run["run_id"] in listed.stdout


def test_write_on_an_uncommitted_file_keeps_a_backup_and_never_overwrites_one(repo: Path) -> None:
    script = _copy("02_main_function", repo)
    original = _read(script)
    proc = instrument_cli(repo, "train.py", "--write")
    assert proc.returncode == 0, proc.stderr
    assert "wrote train.py (original kept in train.py.bak)" in proc.stderr
    assert _read(repo / "train.py.bak") == original
    assert _read(script) == _read(CORPUS / "02_main_function" / "expected.py")

    other = _copy("03_custom_generator", repo)  # another script, the same backup name
    (repo / "train.py.bak").write_text("precious\n")
    proc = instrument_cli(repo, "train.py", "--write")
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1] == (
        "florwb: train.py.bak already exists; move it away and run again"
    )
    assert _read(other) == _read(CORPUS / "03_custom_generator" / "train.py")
    assert _read(repo / "train.py.bak") == "precious\n"


@pytest.mark.parametrize("case", ["19_while_else", "10_no_loop", "11_called_twice"])
def test_refusals_are_one_line_and_change_nothing(repo: Path, case: str) -> None:
    script = _copy(case, repo)
    before = _read(script)
    proc = instrument_cli(repo, "train.py", "--write")
    assert proc.returncode == 1
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("florwb: train.py: not instrumented: ")
    assert _read(script) == before
    assert not (repo / "train.py.bak").exists()


def test_partial_instrumentation_is_reported_line_by_line(repo: Path) -> None:
    _copy("12_partial", repo)
    proc = instrument_cli(repo, "train.py")
    assert proc.returncode == 0
    err = proc.stderr.splitlines()
    assert "train.py:7: not done: `seen` is also assigned" in "\n".join(err)
    assert 'train.py:22: inner training loop -> flor.loop("step", ...)' in err
    assert err[-1].endswith("1 thing(s) not done, see above")


def test_missing_unparsable_and_non_utf8_files_are_one_line_errors(repo: Path) -> None:
    write(repo / "broken.py", "for x in range(3)\n    pass\n")
    (repo / "latin.py").write_bytes("x = 'caf\xe9'\n".encode("latin-1"))
    for name, message in [
        ("missing.py", "florwb: missing.py: no such file: missing.py"),
        ("broken.py", "florwb: broken.py: does not parse: line 1: "),
        ("latin.py", "florwb: latin.py: latin.py is not UTF-8 text"),
    ]:
        proc = instrument_cli(repo, name)
        assert proc.returncode == 1, name
        assert len(proc.stderr.splitlines()) == 1
        assert proc.stderr.startswith(message), proc.stderr


def test_usage_error_exits_2(repo: Path) -> None:
    proc = instrument_cli(repo)
    assert proc.returncode == 2
    assert proc.stderr.startswith("usage: ") and "required: SCRIPT" in proc.stderr


def test_cli_module_does_not_load_libcst_until_used() -> None:
    code = "import sys, florwb.cli_instrument; print('libcst' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
