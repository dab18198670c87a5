"""Typed journal events: every type has its handler, each reads back as written, and a
journal whose events are the untyped dicts florwb wrote before these types still ingests,
field for field, with a newer writer's event kind and fields skipped and said."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from conftest import florwb

from florwb_engine import journal
from florwb_engine import journal_events as ev
from florwb_engine.journal import ENTRY_SHIFT, JournalWriter, pack_logs, pack_timings
from florwb_engine.store.ingest import HANDLERS


def test_every_event_type_has_one_handler() -> None:
    assert set(HANDLERS) == set(ev.KINDS.values())
    assert {ev.Start, ev.End, ev.Loop, ev.Console} <= set(HANDLERS)


# One of each type; a new event type adds its own sample here.
SAMPLES = [
    ev.Start("r1", script="t.py", argv=["t.py"], host="h", pid=7, time=1.5, rank={"rank": 1}),
    ev.Version("v1", n_files=2, inputs=[("a", 1, 2, "b")], git_dirty=False),
    ev.VersionError("no git"),
    ev.Arg("lr", 0.1),
    ev.Issues([["lost", "why", 3]]),
    ev.Files([["data.csv", "read", 10, 20]], dropped=1),
    ev.Lineage(name="m", call=2, parent="r0", iteration=4),
    ev.System(time=2.0, rank=0, values={"cpu_percent": 50.0}),
    ev.Checkpoint("epoch", 3, "ckpt", ctx_id=5, after_inner=1),
    ev.Loop(4, ("epoch", "step"), (2,), None),
    ev.Console([(0, 0, "stdout", "hi", 1)], [(0, 2)]),
    ev.End("finished", time=3.0, elapsed_s=1.5, world_size=2),
]


@pytest.mark.parametrize("event", SAMPLES, ids=lambda e: e.kind)
def test_an_event_reads_back_as_written(event: ev.Event) -> None:
    raw = event.to_dict()
    assert raw["kind"] == event.kind and None not in raw.values()  # None: left out
    assert ev.decode(raw) == event
    assert ev.decode({**raw, "field_of_a_newer_writer": 1}) == event


def test_a_missing_field_is_another_shape_and_an_unknown_kind_is_named() -> None:
    with pytest.raises(TypeError):
        ev.decode({"kind": "arg", "value": 1})
    assert ev.decode({"kind": "hologram", "x": 1}) == ev.Unknown("hologram")


def _old_journal(folder: Path, run_id: str, now: float) -> Path:
    """A journal as florwb wrote it before typed events: the dicts spelled out."""
    writer = JournalWriter(folder / f"{run_id}{journal.SUFFIX}")
    ctx = [(1 << ENTRY_SHIFT) | i for i in range(2)]
    start = {
        "kind": "start",
        "source": "record",
        "run_id": run_id,
        "script": "train.py",
        "argv": ["train.py", "--kwargs", "lr=0.5"],
        "cwd": ".",
        "host": "elsewhere",
        "pid": 1,
        "pid_ticks": 1,
        "python": "3.11.7",
        "time": now,
        "context": {"cpu_name": "CPU", "cpu_count": 4},
    }
    writer.append((None, None, [start]))
    events = [
        {
            "kind": "version",
            "version": "f" * 40,
            "n_files": 1,
            "n_bytes": 10,
            "skipped": [],
            "inputs": [["data.csv", 5, 6, "b" * 40]],
            "git_head": "a" * 40,
            "git_branch": "main",
            "git_dirty": False,
        },
        {"kind": "arg", "name": "lr", "value": 0.5, "added_later": True},
        {"kind": "loop", "entry": 1, "names": ["epoch"], "outer": [], "total": 2},
        {"kind": "files", "paths": [["data.csv", "read", 5, 6]], "dropped": 0},
        {
            "kind": "lineage",
            "call": 0,
            "name": "model",
            "parent": "older-run",
            "checkpoint": "model.pt",
            "checkpoint_kind": "save",
            "loop": "epoch",
            "iteration": 1,
            "path": "older-run/model.pt",
        },
        {"kind": "system", "time": now + 1, "rank": None, "values": {"cpu_percent": 12.5}},
        {"kind": "hologram", "depth": 3},
    ]
    logs = pack_logs(["loss", 0.5, ctx[0], "loss", 0.25, ctx[1]])
    timings = pack_timings([ctx[0], 0.01, 0.1, ctx[1], 0.02, 0.1])
    writer.append((logs, timings, events))
    events = [
        {
            "kind": "checkpoint",
            "loop": "epoch",
            "iteration": 1,
            "ctx_id": ctx[1],
            "path": "epoch-1.pt",
            "after_inner": 0,
            "bytes": 100,
            "snapshot_s": 0.01,
            "write_s": 0.02,
            "time": now + 2,
        },
        {"kind": "console", "lines": [(0, ctx[0], "stdout", "epoch 0", 1)], "more": []},
        {"kind": "issues", "counts": [["replaced", "complex value", 2]]},
        {
            "kind": "end",
            "status": "finished",
            "exception": None,
            "message": None,
            "time": now + 3,
            "elapsed_s": 3.0,
            "context": {"cpu_name": "CPU", "cpu_count": 4, "peak_rss_bytes": 1000},
        },
    ]
    writer.append((None, None, events))
    writer.close()
    return writer.path


def test_a_journal_of_untyped_events_still_ingests(tmp_path: Path) -> None:
    project = tmp_path / "p"
    folder = project / ".florwb" / "journal"
    now = time.time()
    path = _old_journal(folder, "20250101-000000-abcdef", now)
    runs = florwb(project, "runs", "--json")
    (run,) = json.loads(runs.stdout)
    assert (run["run_id"], run["status"], run["script"]) == (
        "20250101-000000-abcdef",
        "finished",
        "train.py",
    )
    assert run["argv"] == ["train.py", "--kwargs", "lr=0.5"] and run["args"] == {"lr": 0.5}
    assert (run["version"], run["git_branch"], run["duration_s"]) == ("f" * 40, "main", 3.0)
    assert run["context"]["peak_rss_bytes"] == 1000 and run["n_checkpoints"] == 1
    assert {(i["kind"], i["detail"], i["n"]) for i in run["issues"]} == {
        ("replaced", "complex value", 2),
        ("skipped", "events of unknown kind 'hologram'", 1),
    }
    assert runs.stderr.count("'hologram' (1)") == 1
    frame = json.loads(florwb(project, "dataframe", "loss", "--format", "json").stdout)
    assert [(row["epoch"], row["loss"]) for row in frame] == [(0, 0.5), (1, 0.25)]
    sql = (
        "SELECT (SELECT list(path) FROM run_files) AS files, "
        "(SELECT list(parent) FROM run_lineage) AS parents, "
        "(SELECT list(value) FROM system_rows) AS system, "
        "(SELECT list(text) FROM console) AS lines, "
        "(SELECT list(path) FROM run_inputs) AS inputs, "
        "(SELECT list(iteration) FROM checkpoints) AS checkpoints"
    )
    (row,) = json.loads(florwb(project, "query", sql, "--format", "json").stdout)
    assert row == {
        "files": ["data.csv"],
        "parents": ["older-run"],
        "system": [12.5],
        "lines": ["epoch 0"],
        "inputs": ["data.csv"],
        "checkpoints": [1],
    }
    assert path.exists()


def test_every_event_type_has_a_sample() -> None:
    assert {type(e) for e in SAMPLES} == set(ev.KINDS.values())
