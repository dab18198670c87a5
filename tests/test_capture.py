"""Printed and logged lines of a run: teed to the terminal, kept with loop coordinates,
bounded, readable with flor.io / `florwb io`, and mined for metrics on request.

Everything runs as a user does: real training scripts in subprocesses, the real CLI,
the real DuckDB catalog."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import florwb, run_py, write

from florwb_engine.store import Store
from florwb_engine.store.console import read_io

SCRIPT = """
    import logging
    import sys
    import florwb as flor

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s %(message)s")
    log = logging.getLogger("trainer")
    print("before the run: the terminal only")
    lr = flor.arg("lr", 0.1)  # the run starts at the first florwb call
    print("starting")
    for epoch in flor.loop("epoch", range(2)):
        for step in flor.loop("step", range(3)):
            loss = 1.0 / (step + 1 + epoch)
            flor.log("loss", loss)
            print(f"loss: {loss:.4f} acc={0.5 + step / 10:.2f}")
            print("same line")
            print("same line")
            print("same line")
        for pct in range(0, 101, 25):
            sys.stderr.write(f"\\r{pct:3d}%|{'#' * (pct // 25)}")
        sys.stderr.write("\\n")
        log.info("epoch %d done", epoch)
        log.warning("careful")
    print("x" * 1500)
    print("\\x1b[31mred\\x1b[0m text")
    print("no newline at the end", end="")
"""


def _only_run(project: Path) -> str:
    runs = Store(project).runs()
    assert len(runs) == 1
    return runs[0]["run_id"]


@pytest.fixture
def recorded(repo: Path) -> tuple[Path, subprocess.CompletedProcess]:
    """The script run as a user does, its output read as bytes (a carriage return stays)."""
    write(repo / "train.py", SCRIPT)
    proc = subprocess.run(
        [sys.executable, "train.py"], cwd=repo, capture_output=True, timeout=180, check=True
    )
    return repo, proc


def test_terminal_gets_every_byte_and_lines_are_kept_with_coordinates(recorded) -> None:
    repo, proc = recorded
    # The terminal still sees everything, in order, as without florwb.
    assert proc.stdout.count(b"same line") == 18
    assert b"loss: 1.0000 acc=0.50" in proc.stdout
    assert b"\x1b[31mred\x1b[0m text" in proc.stdout
    assert proc.stdout.endswith(b"no newline at the end")
    assert b"\r 25%|#\r 50%|##" in proc.stderr
    assert b"INFO trainer epoch 0 done" in proc.stderr  # logging's own handler still writes
    frame = read_io(Store(repo), _only_run(repo))
    rows = [
        (r.epoch, r.step, r.channel, r.text, r.n)
        for r in frame.astype(object).where(frame.notna(), None).itertuples()
    ]
    assert rows[0] == (None, None, "stdout", "starting", 1)
    assert b"before the run" in proc.stdout and not any("before" in r[3] for r in rows)
    assert (0, 0, "stdout", "loss: 1.0000 acc=0.50", 1) in rows
    # a line repeated within one iteration is one row with its count; once per iteration
    assert rows.count((1, 2, "stdout", "same line", 3)) == 1
    assert sum(1 for r in rows if r[3] == "same line") == 6
    # a progress bar repainted with \r keeps its last state, at its epoch
    assert (0, None, "stderr", "100%|####", 1) in rows
    assert not any("25%" in r[3] for r in rows)
    # a logging record is kept once, with its level, not a second time as stderr
    assert (1, None, "info", "trainer: epoch 1 done", 1) in rows
    assert (1, None, "warning", "trainer: careful", 1) in rows
    assert not any("epoch 1 done" in r[3] for r in rows if r[2] == "stderr")
    # long lines are cut and say by how much; colours are dropped; the last partial line kept
    long = [r[3] for r in rows if r[3].startswith("xxx")]
    assert long == ["x" * 1000 + "… [500 more characters]"]
    assert (None, None, "stdout", "red text", 1) in rows
    assert rows[-1][3] == "no newline at the end"


def test_cli_io_grep_and_json(recorded) -> None:
    repo, _ = recorded
    run_id = _only_run(repo)
    out = florwb(repo, "io", run_id[:15]).stdout
    assert "epoch=1 step=2" in out and "same line  (×3)" in out
    assert "epoch=1              warning trainer: careful" in out
    grepped = florwb(repo, "io", run_id, "--grep", "^loss").stdout.strip().splitlines()
    assert len(grepped) == 6 and all("loss:" in line for line in grepped)
    rows = json.loads(florwb(repo, "io", run_id, "--grep", "careful", "--format", "json").stdout)
    assert [(r["epoch"], r["channel"], r["text"]) for r in rows] == [
        (0, "warning", "trainer: careful"),
        (1, "warning", "trainer: careful"),
    ]
    bad = florwb(repo, "io", run_id, "--grep", "(", check=False)
    assert bad.returncode == 1 and bad.stderr.startswith("florwb: --grep:")
    assert "Traceback" not in bad.stderr
    unknown = florwb(repo, "io", "nope", check=False)
    assert unknown.returncode == 1 and "unknown run 'nope'" in unknown.stderr


def test_extract_dry_run_then_store(recorded) -> None:
    repo, _ = recorded
    run_id = _only_run(repo)
    pattern = r"loss: (?P<text_loss>[0-9.]+) acc=(?P<acc>[0-9.]+)"
    dry = florwb(repo, "io", run_id, "--extract", pattern, "--dry-run").stdout
    assert "would store 12 values of text_loss, acc from 6 lines" in dry
    assert "epoch=1 step=2  acc" in dry
    assert "acc" not in Store(repo).names()  # a dry run stores nothing
    stored = florwb(repo, "io", run_id, "--extract", pattern).stdout
    assert "stored 12 values" in stored
    florwb(repo, "io", run_id, "--extract", pattern)  # again: replaces, never doubles
    frame = Store(repo).dataframe("loss", "text_loss", "acc")
    assert len(frame) == 6
    assert list(frame["acc"]) == [0.5, 0.6, 0.7, 0.5, 0.6, 0.7]
    assert (frame["text_loss"] - frame["loss"]).abs().max() < 1e-4
    # the run lists no replay for them, and counts them as values it did not record
    (run,) = Store(repo).run_rows()
    assert run.replays == [] and run.n_replayed == 12
    nothing = florwb(repo, "io", run_id, "--extract", "loss", check=False)
    assert nothing.returncode == 2 and "named group" in nothing.stderr
    lone = florwb(repo, "io", run_id, "--dry-run", check=False)
    assert lone.returncode == 2


@pytest.mark.parametrize("env", [{"FLORWB_CAPTURE": "0"}, {"FLOR_CAPTURE": "false"}])
def test_capture_off_by_env(repo: Path, env: dict) -> None:
    write(repo / "train.py", SCRIPT)
    proc = run_py(repo, "train.py", env=env)
    assert proc.stdout.count("same line") == 18
    run_id = _only_run(repo)
    assert read_io(Store(repo), run_id).empty
    assert Store(repo).dataframe("loss").shape[0] == 6  # the run is recorded as ever
    assert "no lines" in florwb(repo, "io", run_id).stdout


def test_line_cap_counts_an_issue_and_keeps_the_terminal(repo: Path) -> None:
    write(
        repo / "train.py",
        """
        import florwb as flor
        for step in flor.loop("step", range(50)):
            flor.log("x", step)
            print(f"line {step}")
        """,
    )
    proc = run_py(repo, "train.py", env={"FLORWB_CAPTURE_MAX_LINES": "20"})
    assert proc.stdout.count("line ") == 50
    assert proc.stderr.count("more than 20 lines") == 1
    run_id = _only_run(repo)
    frame = read_io(Store(repo), run_id)
    assert list(frame["text"]) == [f"line {i}" for i in range(20)]
    (run,) = Store(repo).runs()
    assert {"kind": "console capped", "n": 30} in [
        {"kind": i["kind"], "n": i["n"]} for i in run["issues"]
    ]


def test_killed_run_keeps_lines_flushed_before_the_kill(repo: Path) -> None:
    write(
        repo / "train.py",
        """
        import os, signal, sys, time
        import florwb as flor
        for step in flor.loop("step", range(3)):
            flor.log("x", step)
            print(f"step {step}", flush=True)
        from florwb_engine.record import runtime
        runtime.current().try_flush()  # what the flusher thread does every 50 ms
        os.kill(os.getpid(), signal.SIGKILL)
        """,
    )
    run_py(repo, "train.py", check=False)
    frame = read_io(Store(repo), _only_run(repo))
    assert list(frame["text"]) == ["step 0", "step 1", "step 2"]


def test_forked_children_and_logging_without_handlers(repo: Path) -> None:
    write(
        repo / "train.py",
        """
        import logging, os
        import florwb as flor
        for step in flor.loop("step", range(2)):
            flor.log("x", step)
            logging.getLogger("quiet").info("below the root's level: not output, not kept")
            logging.getLogger("loud").error("no handler: logging's last resort prints it")
            pid = os.fork()
            if pid == 0:
                print("from the child")
                os._exit(0)
            os.waitpid(pid, 0)
        """,
    )
    proc = run_py(repo, "train.py")
    assert proc.stdout.count("from the child") == 2
    assert proc.stderr.count("no handler") == 2
    frame = read_io(Store(repo), _only_run(repo))
    assert (
        list(zip(frame["channel"], frame["text"]))
        == [("error", "loud: no handler: logging's last resort prints it")] * 2
    )


def test_flor_io_in_the_script_and_set_capture_off(repo: Path) -> None:
    write(
        repo / "train.py",
        """
        import florwb as flor
        for step in flor.loop("step", range(2)):
            flor.log("x", step)
            print(f"hello {step}")
        flor.commit()
        df = flor.io(grep="hello")
        print("ROWS", list(df["text"]), list(df["step"]))
        """,
    )
    proc = run_py(repo, "train.py")
    assert "ROWS ['hello 0', 'hello 1'] [0, 1]" in proc.stdout
    write(
        repo / "quiet.py",
        """
        import florwb as flor
        flor.set_capture(False)
        for step in flor.loop("step", range(2)):
            flor.log("x", step)
            print(f"quiet {step}")
        """,
    )
    run_py(repo, "quiet.py")
    assert read_io(Store(repo), grep="quiet").empty


def test_a_store_of_schema_5_gains_the_console_and_keeps_its_runs(repo: Path) -> None:
    import duckdb

    write(repo / "train.py", "import florwb as flor\nflor.log('x', 1)\nprint('first')\n")
    run_py(repo, "train.py")
    assert Store(repo).runs()[0]["status"] == "finished"
    con = duckdb.connect(str(repo / ".florwb" / "florwb.duckdb"))
    con.execute("DROP VIEW console")
    con.execute("DROP TABLE console_rows")
    con.execute("UPDATE meta SET value = '5' WHERE key = 'schema_version'")
    con.close()
    (run,) = Store(repo).runs()  # migrated in place: the run is kept, its lines gone
    assert run["status"] == "finished"
    assert read_io(Store(repo)).empty
    run_py(repo, "train.py")
    frame = read_io(Store(repo))
    assert list(frame["text"]) == ["first"] and frame["run_id"][0] != run["run_id"]


def test_a_repeat_after_its_line_reached_the_journal_is_counted_on_that_row(repo: Path) -> None:
    write(
        repo / "train.py",
        """
        import florwb as flor
        from florwb_engine.record import runtime
        for step in flor.loop("step", range(2)):
            flor.log("x", step)
            print("waiting for data")
            runtime.current().try_flush()  # the line is in the journal now
            print("waiting for data")
            print("waiting for data")
        """,
    )
    run_py(repo, "train.py")
    frame = read_io(Store(repo))
    assert list(zip(frame["step"], frame["text"], frame["n"])) == [
        (0, "waiting for data", 3),
        (1, "waiting for data", 3),
    ]
