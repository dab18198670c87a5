"""Damaged journals: every valid chunk is found, damage is said once, nothing counts twice.

One real recording (a subprocess) gives a journal of many chunks; each test copies it into a
fresh project, damages it the way a power cut, a torn write or a newer florwb would, and
reads it with the real store and CLI.
"""

from __future__ import annotations

import marshal
import os
import shutil
import socket
import struct
import zlib
from pathlib import Path

import duckdb
import pytest
from conftest import florwb, run_py, write

from florwb_engine import journal, processes
from florwb_engine.store import Store
from florwb_engine.store.schema import SCHEMA_VERSION

SCRIPT = """
import florwb as flor
from florwb_engine.record import runtime
for epoch in flor.loop("epoch", range(12)):
    flor.log("e", epoch)
    runtime.current().flush()  # a chunk per epoch
"""


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> Path:
    project = tmp_path_factory.mktemp("recorded")
    write(project / "train.py", SCRIPT)
    run_py(project, "train.py")
    return project


def _copy(recorded: Path, tmp_path: Path, name: str = "p") -> tuple[Path, Path]:
    """A fresh project holding the recorded journal (and no catalog yet)."""
    project = tmp_path / name
    (project / ".florwb" / "journal").mkdir(parents=True)
    (source,) = (recorded / ".florwb" / "journal").glob("*.journal")
    target = project / ".florwb" / "journal" / source.name
    shutil.copy(source, target)
    return project, target


def _chunks(path: Path) -> list[journal.Chunk]:
    scan = journal.read_chunks(path, 0)
    assert not scan.damaged and scan.error is None
    return scan.chunks


def _epochs(project: Path) -> list[int]:
    return [int(e) for e in Store(project).dataframe("e").e]


def test_the_recording_has_many_chunks(recorded, tmp_path):
    _project, path = _copy(recorded, tmp_path)
    chunks = _chunks(path)
    assert len(chunks) >= 6
    assert [c.seq for c in chunks] == list(range(len(chunks)))


def test_zeros_after_a_power_cut_hide_nothing_and_are_said_once(recorded, tmp_path):
    project, path = _copy(recorded, tmp_path)
    size = path.stat().st_size
    with open(path, "ab") as f:
        f.write(b"\0" * 4096)
    first = florwb(project, "runs")
    assert f"bytes {size}-{size + 4096} are damaged" in first.stderr
    assert "finished !" in first.stdout
    assert f"4096 damaged journal bytes skipped (journal bytes {size}-{size + 4096}" in first.stdout
    again = florwb(project, "runs")
    assert "damaged" not in again.stderr  # said once, by the read that found it
    assert _epochs(project) == list(range(12))


def test_a_torn_chunk_in_the_middle_keeps_every_later_chunk(recorded, tmp_path):
    project, path = _copy(recorded, tmp_path)
    chunks = _chunks(path)
    data = path.read_bytes()
    torn = next(c for c in chunks[2:] if c.logs)  # a chunk holding a value
    lost = journal.unpack_logs(torn.logs)[1]
    path.write_bytes(data[: torn.end - 7] + data[torn.end :])  # its last bytes never made it
    (run,) = Store(project).runs()
    assert run["status"] == "finished"
    assert _epochs(project) == [e for e in range(12) if e not in lost]
    (damage,) = [i for i in run["issues"] if i["kind"] == "damaged"]
    assert damage["detail"] == f"journal bytes {torn.offset}-{torn.end - 7}"


def test_garbage_between_chunks_loses_nothing(recorded, tmp_path):
    project, path = _copy(recorded, tmp_path)
    chunks = _chunks(path)
    data = path.read_bytes()
    cut = chunks[4].offset
    garbage = os.urandom(3000) + journal.MAGIC + os.urandom(100)  # even a false magic
    path.write_bytes(data[:cut] + garbage + data[cut:])
    assert _epochs(project) == list(range(12))
    (run,) = Store(project).runs()
    assert run["status"] == "finished"
    assert [i["n"] for i in run["issues"]] == [len(garbage)]


def test_a_chunk_written_twice_counts_once(recorded, tmp_path):
    project, path = _copy(recorded, tmp_path)
    chunks = _chunks(path)
    data = path.read_bytes()
    twice = next(c for c in chunks[1:] if c.logs)
    end_event = chunks[-1]
    # the same chunk again in place, and once more after the run ended
    doubled = data[: twice.end] + data[twice.offset : twice.end] + data[twice.end :]
    path.write_bytes(doubled + data[twice.offset : twice.end])
    assert _epochs(project) == list(range(12))
    assert Store(project).query("SELECT count(*) AS n FROM logs").n[0] == 12
    assert end_event.events[-1]["kind"] == "end"


def test_a_chunk_read_in_two_sessions_counts_once(tmp_path):
    """The duplicate arrives after its first copy was ingested, while the run still records."""
    project = tmp_path / "p"
    folder = project / ".florwb" / "journal"
    folder.mkdir(parents=True)
    pid = os.getpid()  # a live process: the run stays `running` between the reads
    start = {
        "kind": "start",
        "run_id": "live",
        "time": 1.0e9,
        "pid": pid,
        "host": socket.gethostname(),
        "pid_ticks": processes.start_ticks(pid),
    }
    chunks = [
        b"".join(
            journal.encode_chunk(
                (journal.pack_logs(["e", i, 0]), None, [start] if i == 0 else []), i
            )
        )
        for i in range(5)
    ]
    path = folder / "live.journal"
    path.write_bytes(b"".join(chunks[:3]))
    values = "SELECT value FROM logs ORDER BY seq"
    assert list(Store(project).query(values).value) == [0, 1, 2]
    path.write_bytes(b"".join(chunks[:3]) + chunks[2] + chunks[1] + b"".join(chunks[3:]))
    assert list(Store(project).query(values).value) == [0, 1, 2, 3, 4]
    assert Store(project).runs()[0]["status"] == "running"


def _frame(payload: tuple, seq: int, chunk_format: int = journal.CHUNK_FORMAT) -> bytes:
    """A chunk with valid checksums, possibly of another format."""
    head, *rest = journal.encode_chunk(payload, seq)
    fields = bytearray(head[:-4])
    fields[4] = chunk_format
    return bytes(fields) + struct.pack("<I", zlib.crc32(bytes(fields))) + b"".join(rest)


def test_a_chunk_of_a_newer_format_makes_only_its_run_unreadable(recorded, tmp_path):
    project, path = _copy(recorded, tmp_path)
    chunks = _chunks(path)
    data = path.read_bytes()
    cut = chunks[5]
    newer = _frame((None, None, [{"kind": "hologram"}]), cut.seq, chunk_format=7)
    path.write_bytes(data[: cut.offset] + newer + data[cut.offset :])
    write(project / "other.py", "import florwb as flor\nflor.log('e', 99)\n")
    run_py(project, "other.py")
    runs = florwb(project, "runs")
    assert runs.returncode == 0 and "Traceback" not in runs.stderr
    assert f"unreadable from here on: chunk format 7 at byte {cut.offset}" in runs.stderr
    bad, good = Store(project).runs()
    assert bad["status"] == "unreadable" and good["status"] == "finished"
    assert bad["message"] == f"chunk format 7 at byte {cut.offset} is not one this florwb reads"
    assert "journal unreadable from a chunk on" in runs.stdout
    frame = florwb(project, "dataframe", "e", "--format", "csv")
    assert frame.returncode == 0 and "Traceback" not in frame.stderr
    query = florwb(project, "query", "SELECT count(*) AS n FROM logs")
    assert query.returncode == 0
    before = [e for c in chunks[: cut.seq] if c.logs for e in journal.unpack_logs(c.logs)[1]]
    assert sorted(Store(project).dataframe("e").e.dropna().astype(int)) == sorted([*before, 99])


@pytest.mark.parametrize(
    "events",
    [
        [["kind", "loop"]],  # an event that is not a dict: caught by the reader
        [{"kind": "loop", "entry": 9}],  # a loop event without its names: caught by ingestion
        [{"kind": "arg", "value": 1}],  # an arg without a name
    ],
)
def test_an_event_of_another_shape_keeps_the_chunks_before_it(recorded, tmp_path, events):
    project, path = _copy(recorded, tmp_path)
    chunks = _chunks(path)
    data = path.read_bytes()
    cut = chunks[6]
    odd = _frame((None, None, events), cut.seq)
    path.write_bytes(data[: cut.offset] + odd + data[cut.offset :])
    runs = florwb(project, "runs")
    assert runs.returncode == 0 and "Traceback" not in runs.stderr
    assert "unreadable from here on" in runs.stderr
    (run,) = Store(project).runs()
    assert run["status"] == "unreadable"
    before = [e for c in chunks[: cut.seq] if c.logs for e in journal.unpack_logs(c.logs)[1]]
    assert _epochs(project) == before and len(before) >= 3


def test_a_journal_whose_start_is_unreadable_is_still_listed(tmp_path):
    project = tmp_path / "p"
    folder = project / ".florwb" / "journal"
    folder.mkdir(parents=True)
    (folder / "r-odd.journal").write_bytes(_frame((None, None, [{"kind": "start"}]), 0, 3))
    runs = florwb(project, "runs")
    assert runs.returncode == 0
    (run,) = Store(project).runs()
    assert run["run_id"] == "r-odd" and run["status"] == "unreadable"


def _legacy_chunk(payload: tuple) -> bytes:
    """A chunk as florwb wrote them before journal format 2 (no magic, no sequence)."""
    logs, timings, events = payload
    meta = marshal.dumps(([len(p) for p in logs] if logs else None, None, events), 4)
    crc = zlib.crc32(meta)
    for part in logs or ():
        crc = zlib.crc32(part, crc)
    body = len(meta) + sum(map(len, logs or ()))
    return struct.pack("<III", body, crc, len(meta)) + meta + b"".join(logs or ())


def test_journals_from_before_format_2_are_still_read(tmp_path):
    project = tmp_path / "p"
    folder = project / ".florwb" / "journal"
    folder.mkdir(parents=True)
    start = {"kind": "start", "run_id": "old", "time": 1.0e9, "host": "elsewhere"}
    data = _legacy_chunk((journal.pack_logs(["x", 1.5, 0]), None, [start]))
    data += _legacy_chunk((None, None, [{"kind": "end", "status": "finished", "time": 1.0e9}]))
    (folder / "old.journal").write_bytes(data)
    (run,) = Store(project).runs()
    assert run["status"] == "finished"
    assert list(Store(project).dataframe("x").x) == [1.5]


def test_a_store_of_schema_3_is_migrated(recorded, tmp_path):
    project, _path = _copy(recorded, tmp_path)
    assert len(Store(project).dataframe("e")) == 12
    with duckdb.connect(str(project / ".florwb" / "florwb.duckdb")) as con:  # as version 3 left it
        con.execute("DROP TABLE run_issues")
        con.execute("ALTER TABLE journals DROP COLUMN error")
        con.execute("ALTER TABLE journals DROP COLUMN next_chunk")
        con.execute("UPDATE meta SET value = '3' WHERE key = 'schema_version'")
    write(project / "other.py", "import florwb as flor\nflor.log('e', 99)\n")
    run_py(project, "other.py")
    assert len(Store(project).dataframe("e")) == 13
    version = Store(project).query("SELECT value FROM meta WHERE key = 'schema_version'")
    assert version.value[0] == str(SCHEMA_VERSION)
