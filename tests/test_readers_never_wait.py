"""Readers never wait on readers: a query streamed to a consumer that stops reading (its
stdout a pipe this test does not drain) holds a snapshot of the catalog, never the catalog,
so `florwb runs`, a dataframe read and the ingestion of a new recording go on while it is
stuck mid-stream, and what it leaves behind when it is killed is removed by the next reader.
A dataframe holds no catalog while it pivots either, and readers that wait for the catalog
at once are served by one ingestion that began after they asked, never by an earlier one.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import florwb, recorded_project, run_py, write
from test_store_busy import held

from florwb_engine.store import Store, snapshot, verdicts
from florwb_engine.store.db import lock_waits_reported
from florwb_engine.store.snapshot import INGESTS, PREFIX

SCRIPT = """
import florwb as flor
lr = flor.arg("lr", 0.1)
for epoch in flor.loop("epoch", range(3)):
    flor.log("loss", lr / (1 + epoch))
flor.commit()
"""
LOCK_WAIT = {"FLORWB_LOCK_WAIT_S": "20"}  # a reader that did wait fails, not hangs


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("FLORWB_LOCK_WAIT_S", LOCK_WAIT["FLORWB_LOCK_WAIT_S"])
    root = recorded_project(tmp_path / "project", SCRIPT)
    florwb(root, "runs")  # ingested
    return root


@contextmanager
def stuck_reader(project: Path) -> Iterator[subprocess.Popen]:
    """`florwb query ... --format csv` writing 50 million rows into a pipe nobody reads
    past its first lines: it blocks in the middle of its result."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "florwb.cli",
            "query",
            "SELECT * FROM range(50000000)",
            "--format",
            "csv",
        ],
        cwd=project,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, **LOCK_WAIT},
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"range\n"
        assert proc.stdout.readline() == b"0\n"  # it streams, and nobody reads on
        yield proc
    finally:
        proc.kill()
        proc.wait(timeout=60)


def _snapshots(project: Path) -> list[str]:
    return sorted(p.name for p in (project / ".florwb").glob(PREFIX + "*"))


def test_a_reader_stuck_mid_stream_keeps_no_reader_or_ingestion_waiting(project: Path):
    with stuck_reader(project) as stuck:
        with held(project):  # a write lock at the first try: nothing holds the catalog
            pass
        runs = florwb(project, "runs", env=LOCK_WAIT)
        assert runs.stderr == ""  # no "is locked by" notice: it never waited
        assert runs.stdout.count("finished") == 1
        frame = Store(project).dataframe("loss")
        assert list(frame["loss"]) == pytest.approx([0.1, 0.05, 0.1 / 3])
        run_py(project, "train.py", "--kwargs", "lr=0.2")  # a new recording lands
        assert Store(project).ingest().journals == 1
        assert florwb(project, "runs", env=LOCK_WAIT).stdout.count("finished") == 2
        assert stuck.poll() is None  # all of that while it was still mid-result
        assert stuck.stdout is not None and stuck.stdout.readline() == b"1\n"
        # it reads the catalog as it was when it started, in a file of its own
        mine = {n.rsplit(".", 1)[0] for n in _snapshots(project) if f".{stuck.pid}-" in n}
        assert len(mine) == 1  # its links (the result's, the notes' after it) to one copy
        stuck.send_signal(signal.SIGKILL)
        stuck.wait(timeout=60)
    assert _snapshots(project)  # a killed reader's link stays behind...
    out = florwb(project, "query", "SELECT count(*) AS n FROM runs", "--format", "csv")
    assert out.stdout == "n\n2\n"
    assert _snapshots(project) == []  # ...until the next reader removes it


def test_every_page_of_an_open_result_comes_from_the_catalog_as_it_was(project: Path):
    from florwb_engine.store.result_stream import ResultStream

    stream = ResultStream(Store(project), "SELECT run_id FROM runs, range(3000)")
    first = stream.fetch(1000)
    assert len(first) == 1000 and stream.is_open
    run_py(project, "train.py", "--kwargs", "lr=0.2")
    assert florwb(project, "runs", env=LOCK_WAIT).stdout.count("finished") == 2
    rest = stream.fetch(10_000)
    assert stream.exhausted and not stream.is_open
    assert len(first) + len(rest) == 3000  # one run's rows: the catalog when it started
    assert _snapshots(project) == []


def test_a_dataframe_holds_no_catalog_while_it_pivots(
    project: Path, monkeypatch: pytest.MonkeyPatch
):
    pivoting, go_on = threading.Event(), threading.Event()
    withheld = verdicts.withheld

    def paused(*args, **kwargs):  # the pivot stops in the middle until the test says so
        pivoting.set()
        assert go_on.wait(120)
        return withheld(*args, **kwargs)

    monkeypatch.setattr(verdicts, "withheld", paused)
    frames = []
    reader = threading.Thread(target=lambda: frames.append(Store(project).dataframe("loss")))
    reader.start()
    try:
        assert pivoting.wait(120)
        with held(project):  # a write lock at the first try: the pivot holds no catalog
            pass
        run_py(project, "train.py", "--kwargs", "lr=0.2")  # a new recording lands
        runs = florwb(project, "runs", env=LOCK_WAIT)
        assert runs.stderr == "" and runs.stdout.count("finished") == 2
    finally:
        go_on.set()
        reader.join(120)
    (frame,) = frames  # the catalog as it was when the dataframe began
    assert list(frame["loss"]) == pytest.approx([0.1, 0.05, 0.1 / 3])


# A reader in a process of its own that stops, holding the catalog, until told to go on:
# `before` its ingestion begins, or `after` it (before its snapshot is taken).
PAUSED_READER = """
import sys
from florwb_engine.store import Store

class Paused(Store):
    def _prepare(self, con):
        if sys.argv[2] == "after":
            super()._prepare(con)
        print("holding", flush=True)
        sys.stdin.readline()
        if sys.argv[2] == "before":
            super()._prepare(con)

print(len(Paused(sys.argv[1]).run_rows()), flush=True)
"""


@contextmanager
def paused_reader(project: Path, where: str) -> Iterator[subprocess.Popen]:
    proc = subprocess.Popen(
        [sys.executable, "-c", PAUSED_READER, str(project), where],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "holding\n"
        yield proc
    finally:
        proc.kill()
        proc.wait(timeout=60)


def _ingestions_begun(project: Path) -> int:
    return json.loads((project / ".florwb" / INGESTS).read_text())["began"]


def _runs_read_while_waiting(project: Path) -> tuple[threading.Thread, threading.Event, list]:
    """`run_rows` on a thread of this process, and an event set once it waits on the lock."""
    waiting, found = threading.Event(), []

    def read() -> None:
        with lock_waits_reported(lambda holder, waited_s: waiting.set()):
            found.append(Store(project).run_rows())

    reader = threading.Thread(target=read)
    reader.start()
    return reader, waiting, found


def test_readers_waiting_at_once_share_the_ingestion_that_began_after_they_asked(
    project: Path,
):
    run_py(project, "train.py", "--kwargs", "lr=0.2")  # a journal still to ingest
    begun = _ingestions_begun(project)
    with paused_reader(project, "before") as other:
        reader, waiting, found = _runs_read_while_waiting(project)
        assert waiting.wait(120)  # it asked while the other held the catalog
        assert other.stdin is not None
        other.stdin.write("go on\n")
        other.stdin.flush()
        assert other.stdout is not None and other.stdout.readline() == "2\n"
        reader.join(120)
    (runs,) = found
    assert [r.status for r in runs] == ["finished", "finished"]
    assert _ingestions_begun(project) == begun + 1  # two readers, one ingestion


def test_a_reader_is_never_served_by_an_ingestion_that_began_before_it_asked(
    project: Path,
):
    with paused_reader(project, "after") as other:  # it ingested: one run
        run_py(project, "train.py", "--kwargs", "lr=0.2")  # then a second run ends
        reader, waiting, found = _runs_read_while_waiting(project)
        assert waiting.wait(120)
        assert other.stdin is not None
        other.stdin.write("go on\n")
        other.stdin.flush()
        assert other.stdout is not None and other.stdout.readline() == "1\n"
        reader.join(120)
    (runs,) = found  # the run that ended before it asked is there
    assert [r.status for r in runs] == ["finished", "finished"]


# A recording that logs a step each time it reads a line, and ends at "stop".
LIVE = """
import sys
import florwb as flor
for step in flor.loop("step", range(1000)):
    flor.log("loss", 1.0 / (1 + step))
    print("logged", step, flush=True)
    if sys.stdin.readline().strip() == "stop":
        break
flor.commit()
"""


def _until(condition, what: str) -> None:
    deadline = time.monotonic() + 120
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def _live_status(project: Path) -> str | None:
    return next((r.status for r in Store(project).run_rows() if r.script == "live.py"), None)


def test_a_reader_is_served_at_once_while_only_a_live_recording_appended(
    project: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(snapshot, "FRESH_S", 600.0)  # how old it may be is not tested here
    write(project / "live.py", LIVE)
    journals = project / ".florwb" / "journal"
    before = set(journals.glob("*.journal"))
    live = subprocess.Popen(
        [sys.executable, "live.py"], cwd=project, stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        assert live.stdin is not None and live.stdout is not None
        assert live.stdout.readline() == b"logged 0\n"
        _until(lambda: _live_status(project) == "running", "the live run in the catalog")
        store = Store(project)
        with store.pinned():  # someone reads the latest snapshot
            (journal,) = set(journals.glob("*.journal")) - before
            size = journal.stat().st_size
            live.stdin.write(b"next\n")
            live.stdin.flush()
            assert live.stdout.readline() == b"logged 1\n"
            _until(lambda: journal.stat().st_size > size, "the live run's next flush")
            with held(project):  # the catalog is held: a reader that needs it would wait
                assert _live_status(project) == "running"
            live.stdin.write(b"stop\n")
            live.stdin.flush()
            assert live.wait(timeout=120) == 0
            # its writer is gone: the snapshot no longer serves, the reader ingests the end
            assert _live_status(project) == "finished"
    finally:
        live.kill()
        live.wait(timeout=60)
