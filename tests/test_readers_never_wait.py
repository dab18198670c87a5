"""Readers never wait on readers: a query streamed to a consumer that stops reading (its
stdout a pipe this test does not drain) holds a snapshot of the catalog, never the catalog,
so `florwb runs`, a dataframe read and the ingestion of a new recording go on while it is
stuck mid-stream, and what it leaves behind when it is killed is removed by the next reader.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import florwb, recorded_project, run_py
from test_store_busy import held

from florwb_engine.store import Store
from florwb_engine.store.snapshot import PREFIX

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
