"""Fault-injection defects: hostile objects, odd project paths, damaged journals, a killed
recording, misnamed guard messages, a stepped-back clock, a full disk and a deleted store.
Each test records a real script in a real git repository and reads it back through the CLI.
"""

from __future__ import annotations

import json
import resource
import signal
import struct
import subprocess
import sys
from pathlib import Path

from conftest import florwb, git, recorded_project, run_py, write

from florwb.ui import format as fmt
from florwb_engine import journal
from florwb_engine.store import Store
from florwb_engine.store.history_values import load_series_values
from florwb_engine.store.queries import load_run_detail

HOSTILE = """
import florwb as flor
import torch

class Lazy:  # a lazy proxy: every attribute it lacks is a KeyError
    def __getattr__(self, name):
        raise KeyError(name)
    def __repr__(self):
        return "Lazy()"

class Remote:  # a remote handle whose connection is gone
    def __getattr__(self, name):
        raise ConnectionError("remote handle gone")

class Items:  # what flor.loop iterates, with the same kind of __getattr__
    def __iter__(self):
        return iter(range(2))
    def __len__(self):  # a lazy dataset that cannot say how long it is
        raise NotImplementedError
    def __getattr__(self, name):
        raise RuntimeError(name)

model = torch.nn.Linear(2, 1)
with flor.checkpointing(model=model, handle=Remote()):
    for epoch in flor.loop("epoch", Items()):
        flor.log("lazy", Lazy())
        flor.log("remote", Remote())
        flor.log("loss", float(epoch))
print("trained to the end")
"""


def test_a_getattr_that_raises_never_stops_training(tmp_path: Path) -> None:
    """`getattr(value, "layout", None)` absorbs only AttributeError: a proxy raising KeyError
    or ConnectionError from __getattr__ crashed flor.log. The value is kept as text, the
    checkpoint that cannot copy the handle is skipped and said once."""
    project = recorded_project(tmp_path, HOSTILE)
    frame = json.loads(
        florwb(project, "dataframe", "lazy", "remote", "loss", "--format", "json").stdout
    )
    assert [row["lazy"] for row in frame] == ["Lazy: Lazy()"] * 2
    assert [row["remote"].startswith("Remote: <__main__.Remote") for row in frame] == [True] * 2
    assert [row["loss"] for row in frame] == [0.0, 1.0]


def test_a_project_path_with_a_newline_gets_its_code_version(tmp_path: Path) -> None:
    """git's line output split on newlines lost the project's toplevel: no version, and
    replay skipped the run. A newline in the repository's folder and in the project's
    folder inside it."""
    outer = recorded_project(tmp_path / "top\nfolder", 'import florwb as flor\nflor.log("x", 1)\n')
    (run,) = json.loads(florwb(outer, "runs", "--json").stdout)
    assert run["version"] and run["git_head"] and run["message"] is None, run
    inner = recorded_project(tmp_path / "repo", "print(0)\n")
    project = inner / "sub\ndir"
    write(project / "train.py", 'import florwb as flor\nflor.log("x", 2)\n')
    git(inner, "add", "-A")
    git(inner, "commit", "-qm", "a project in a folder whose name holds a newline")
    run_py(project, "train.py")
    (run,) = json.loads(florwb(project, "runs", "--json").stdout)
    assert run["version"] and run["git_dirty"] is False and run["message"] is None, run


CHUNKS = """
import florwb as flor
from florwb_engine.record import runtime
for epoch in flor.loop("epoch", range(4)):
    flor.log("e", epoch)
    runtime.current().flush()  # a chunk per epoch
"""


def _journal(project: Path) -> Path:
    (path,) = (project / ".florwb" / "journal").glob("*.journal")
    for catalog in (project / ".florwb").glob("florwb.duckdb*"):
        catalog.unlink()  # read afresh from the damaged journal
    return path


def test_a_journal_that_lost_its_start_shows_its_run_from_what_is_left(tmp_path: Path) -> None:
    """Every reader printed a raw NOT NULL constraint error and the run was gone; doctor
    said the same text. Now the run is listed under its journal's name, with its values,
    and one line says what is missing."""
    project = recorded_project(tmp_path, CHUNKS)
    path = _journal(project)
    (start, *_rest) = journal.read_chunks(path, 0).chunks
    assert start.events[0]["kind"] == "start"
    path.write_bytes(path.read_bytes()[start.end :])
    runs = florwb(project, "runs", "--json")
    (run,) = json.loads(runs.stdout)
    assert run["run_id"] == path.name.removesuffix(".journal") and run["status"] == "finished"
    assert [i["kind"] for i in run["issues"]] == ["start lost"], run["issues"]
    assert runs.stderr.count("lost its start") == 1 and "Constraint" not in runs.stderr
    frame = json.loads(florwb(project, "dataframe", "e", "--format", "json").stdout)
    assert [row["e"] for row in frame] == [0, 1, 2, 3]  # the start chunk holds no values
    doctor = florwb(project, "doctor", check=False)
    assert doctor.returncode == 1 and f"journal {path.name}: lost its start" in doctor.stderr


def test_a_journal_overwritten_with_garbage_is_named_by_every_reader_and_doctor(
    tmp_path: Path,
) -> None:
    """The run vanished without a word and doctor said healthy."""
    project = recorded_project(tmp_path, CHUNKS)
    path = _journal(project)
    path.write_bytes(b"\xaa\x55\x13" * (path.stat().st_size // 3))
    runs = florwb(project, "runs", "--json")
    (run,) = json.loads(runs.stdout)
    assert run["run_id"] == path.name.removesuffix(".journal") and run["status"] == "unreadable"
    assert runs.stderr.count("no readable chunk") == 1, runs.stderr
    doctor = florwb(project, "doctor", check=False)
    assert doctor.returncode == 1, doctor.stdout
    assert f"journal {path.name}: unreadable from byte 0: no readable chunk" in doctor.stderr


TERMINATED = """
import os, signal
import florwb as flor
from florwb_engine.record import runtime

runtime.FLUSH_INTERVAL_S = 3600  # a starved flusher: it never runs before the signal
for epoch in flor.loop("epoch", range(3)):
    flor.log("e", epoch)
    if epoch == 1:  # what a launcher does to the other ranks when one dies
        os.kill(os.getpid(), signal.SIGTERM)
"""


def test_sigterm_writes_what_was_logged_and_still_ends_the_process(tmp_path: Path) -> None:
    """torchrun stops the surviving ranks with SIGTERM; its default action ended the process
    with everything logged since the flusher last ran lost (tests/test_ddp.py's killed rank
    came back without rank 0's values when the flusher had not run yet)."""
    project = tmp_path / "p"
    write(project / "train.py", TERMINATED)
    proc = run_py(project, "train.py", check=False)
    assert proc.returncode == -signal.SIGTERM, proc.stderr
    frame = json.loads(florwb(project, "dataframe", "e", "--format", "json").stdout)
    assert [row["e"] for row in frame] == [0, 1]
    (run,) = json.loads(florwb(project, "runs", "--json").stdout)
    assert run["status"] == "killed"


def test_bench_faults_survives_a_recording_killed_before_its_first_flush() -> None:
    """Readers create no `.florwb/`; the benchmark still expected one after every kill and
    stopped with a NoProject traceback when a recording died before it made one."""
    bench = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_faults.py"
    proc = subprocess.run(
        [sys.executable, str(bench), "--kinds", "recordings", "--trials", "2"]
        + ["--kill-after", "0,0", "--seed", "1"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    results = [line.split()[1:3] for line in proc.stdout.splitlines() if line.startswith("RESULT")]
    assert ["faults_values_lost", "0"] in results and ["faults_trials_recordings", "2"] in results


STEPPED_BACK = """
import time
import florwb as flor

flor.log("before", 1)
wall = time.time
time.time = lambda: wall() - 3600  # the wall clock steps back an hour (NTP, a VM resumed)
for epoch in flor.loop("epoch", range(2)):
    flor.log("e", epoch)
"""


def test_a_wall_clock_stepped_back_gives_no_negative_duration(tmp_path: Path) -> None:
    project = recorded_project(tmp_path, STEPPED_BACK)
    (run,) = json.loads(florwb(project, "runs", "--json").stdout)
    assert run["status"] == "finished"
    assert 0 <= run["duration_s"] < 600, run  # was about -3600


def test_refused_statements_are_named_by_their_own_kind(tmp_path: Path) -> None:
    """DuckDB files INSTALL under LOAD, CHECKPOINT under CALL, USE under SET and TRUNCATE
    under DELETE; a comment before EXPLAIN ANALYZE DELETE, or a DELETE inside a WITH,
    reached DuckDB's raw read-only error instead of the guard's message."""
    project = recorded_project(tmp_path, 'import florwb as flor\nflor.log("x", 1)\n')
    refused = {
        "INSTALL httpfs": "INSTALL",
        "CHECKPOINT": "CHECKPOINT",
        "USE memory": "USE",
        "TRUNCATE logs": "TRUNCATE",
        "-- why\nEXPLAIN ANALYZE DELETE FROM logs": "DELETE",
        "/* why */ EXPLAIN ANALYZE DELETE FROM logs": "DELETE",
        "WITH d AS (DELETE FROM logs RETURNING *) SELECT * FROM d": "DELETE",
        "WITH d AS (SELECT 1) DELETE FROM logs RETURNING *": "DELETE",
    }
    for sql, kind in refused.items():
        proc = florwb(project, "query", sql, check=False)
        assert proc.returncode != 0, sql
        assert f"queries are read-only: {kind} statements are not allowed" in proc.stderr, (
            sql,
            proc.stderr,
        )
    proc = florwb(project, "query", '-- a note\nSELECT "delete" FROM (SELECT 1 AS "delete")')
    assert proc.stdout.split()[-1] == "1"


MANY = """
import florwb as flor
for step in flor.loop("step", range(20000)):
    flor.log("x", step)
"""


def _file_size_limit(limit: int):
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))

    return apply


def test_a_reader_on_a_full_disk_says_so_in_one_line_and_fails(tmp_path: Path) -> None:
    """A reader whose catalog cannot be written printed DuckDB's raw `.wal` error once per
    journal and exited 0, serving the catalog as it was. The file size limit gives the
    same refusal a full disk does (EFBIG instead of ENOSPC), without a mount."""
    project = recorded_project(tmp_path, MANY)
    florwb(project, "runs")
    run_py(project, "train.py")  # a second run, not yet ingested
    proc = subprocess.run(
        [sys.executable, "-m", "florwb.cli", "runs"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=_file_size_limit(64 << 10),
    )
    assert proc.returncode == 1, proc.stdout
    (line,) = proc.stderr.splitlines()
    assert "catalog cannot be brought up to date: File too large" in line and ".wal" not in line
    assert len(json.loads(florwb(project, "runs", "--json").stdout)) == 2  # space again: all


def test_kwargs_for_a_dict_default_take_only_a_dict(tmp_path: Path) -> None:
    """A dict default took `abc` or `[1, 2]` silently: the script then failed far from the
    command line, or trained with a list where it expected a dict."""
    script = 'import florwb as flor\ncfg = flor.arg("cfg", {"lr": 0.1})\nflor.log("lr", cfg["lr"])'
    project = recorded_project(tmp_path, script)
    for given in ("abc", "[1, 2]"):
        proc = run_py(project, "train.py", "--kwargs", f"cfg={given}", check=False)
        assert proc.returncode == 2, proc.stderr
        assert f"--kwargs cfg={given}: expected a dict literal like the default" in proc.stderr
    run_py(project, "train.py", "--kwargs", "cfg={'lr': 0.5}")
    frame = json.loads(florwb(project, "dataframe", "lr", "--format", "json").stdout)
    assert [row["lr"] for row in frame] == [0.1, 0.5]


DELETES_STORE = """
import shutil
import florwb as flor
from florwb_engine.record import runtime

lr = flor.arg("lr", 0.1)
for epoch in flor.loop("epoch", range(4)):
    flor.log("e", epoch)
    runtime.current().flush()  # epochs 0 and 1 are in the journal when it goes
    if epoch == 1:
        shutil.rmtree(".florwb")
"""


def test_a_script_that_deletes_the_store_mid_run_is_told_and_keeps_the_rest(
    tmp_path: Path,
) -> None:
    """Everything after the deletion went into the deleted file, without a word."""
    project = tmp_path / "p"
    write(project / "train.py", DELETES_STORE)
    proc = run_py(project, "train.py")
    (said,) = [line for line in proc.stderr.splitlines() if "deleted" in line]
    assert "journal was deleted while it recorded" in said and "2 values" in said, said
    (run,) = json.loads(florwb(project, "runs", "--json").stdout)
    assert run["status"] == "finished" and run["args"] == {"lr": 0.1}
    assert [(i["kind"], i["detail"], i["n"]) for i in run["issues"]] == [
        ("lost", "journal deleted during the run", 2)
    ]
    frame = json.loads(florwb(project, "dataframe", "e", "--format", "json").stdout)
    assert [(row["epoch"], row["e"]) for row in frame] == [(2, 2), (3, 3)]


def test_a_journal_every_user_may_write_is_warned_about(tmp_path: Path) -> None:
    project = recorded_project(tmp_path, 'import florwb as flor\nflor.log("x", 1)\n')
    (path,) = (project / ".florwb" / "journal").glob("*.journal")
    path.chmod(0o666)
    runs = florwb(project, "runs")
    (line,) = [x for x in runs.stderr.splitlines() if path.name in x]
    assert "writable by every user" in line
    assert path.name not in florwb(project, "runs").stderr  # said when first read
    doctor = florwb(project, "doctor", check=False)
    assert doctor.returncode == 1 and "writable by every user" in doctor.stderr


NUMBERS = """
import florwb as flor
VALUES = [2**53 + 1, 12345678901234567890, -(2**63), 2**64 + 7, 0.1 + 0.2, -0.0,
          float("nan"), float("inf"), float("-inf"), 5e-324, 1.7976931348623157e308, 3]
for i in flor.loop("i", range(len(VALUES))):
    flor.log("v", VALUES[i])
"""
VALUES = [2**53 + 1, 12345678901234567890, -(2**63), 2**64 + 7, 0.1 + 0.2, -0.0]
VALUES += [float("nan"), float("inf"), float("-inf"), 5e-324, 1.7976931348623157e308, 3]


def _same(got: object, want: int | float) -> bool:
    """Bit for bit: an int's digits, a float's bits (the sign of -0.0, NaN)."""
    if isinstance(want, int):
        return type(got) is int and got == want
    return isinstance(got, float) and struct.pack("<d", got) == struct.pack("<d", want)


def _number(text: str) -> int | float:
    try:
        return int(text)
    except ValueError:
        return float(text)


def test_every_number_comes_back_as_logged(tmp_path: Path) -> None:
    """Ints past 2**53 (and past 2**63), floats to the bit, NaN, infinities and -0.0,
    through the dataframe, its JSON and CSV, and SQL, which says where it rounds."""
    project = recorded_project(tmp_path, NUMBERS)
    frame = json.loads(florwb(project, "dataframe", "v", "--format", "json").stdout)
    assert all(_same(_number(row["v"]), want) for row, want in zip(frame, VALUES, strict=True))
    csv = florwb(project, "dataframe", "v", "--format", "csv").stdout.splitlines()[1:]
    got = [_number(line.rsplit(",", 1)[1]) for line in csv]
    assert all(_same(g, want) for g, want in zip(got, VALUES, strict=True)), got
    values = Store(project).dataframe("v")["v"].tolist()  # what flor.dataframe returns
    assert all(_same(_number(v), want) for v, want in zip(values, VALUES, strict=True))
    sql = "SELECT value, text, vtype FROM logs ORDER BY seq"
    query = florwb(project, "query", sql, "--format", "json")
    rows = json.loads(query.stdout)
    exact = [_number(r["text"]) if r["text"] is not None else r["value"] for r in rows]
    assert all(_same(g, want) for g, want in zip(exact[:4], VALUES[:4], strict=True))
    assert "4 logged int(s) are past 2**53" in query.stderr
    assert "2**53" not in florwb(project, "query", "SELECT count(*) FROM logs").stderr


def test_the_workbench_shows_an_int_past_2_53_as_logged(tmp_path: Path) -> None:
    """The history's last, low and high and the run detail's read `value` (a DOUBLE): a
    step counter of 2**53 + 1 showed as 9.007e+15 (its digits lost), and a low or high of
    such ints as its rounded neighbour."""
    script = (
        "import florwb as flor\n"
        'for i in flor.loop("i", (3, 1, 2)):\n'
        '    flor.log("tokens", 2**53 + i)\n'
        'flor.log("big", 2**70)\n'
    )
    project = recorded_project(tmp_path, script)
    store = Store(project)
    (run_id,) = [run["run_id"] for run in store.runs()]
    series = load_series_values(store, "tokens")
    assert (series.last, series.low, series.high) == (
        {run_id: 2**53 + 2},
        {run_id: 2**53 + 1},  # rounded, the low read 2**53 and the high 2**53 + 4
        {run_id: 2**53 + 3},
    )
    detail = load_run_detail(store, run_id)
    assert {m.name: (m.last, m.low, m.high) for m in detail.metrics} == {
        "tokens": (2**53 + 2, 2**53 + 1, 2**53 + 3),
        "big": (2**70, 2**70, 2**70),
    }
    assert fmt.number(2**53 + 1) == "9,007,199,254,740,993"  # what the workbench draws
