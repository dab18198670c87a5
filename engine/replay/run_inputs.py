"""Whether the files a run read outside its snapshot still hold what it read.

The plan compares each left-out file the run fingerprinted (versions/inputs.py) with the
working tree: unchanged files are read in place; a changed file whose run bytes git still
holds is restored into the replay's copy of the code; any other changed file is named in
the plan and the run's replayed values are marked at risk, never passed off as exact.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from florwb_engine.versions.inputs import Input, has_blob, unchanged


@dataclass
class InputCheck:
    restore: dict[str, str] = field(default_factory=dict)  # path -> git blob of the run's bytes
    at_risk: list[str] = field(default_factory=list)  # changed, and the run's bytes are gone
    notes: list[str] = field(default_factory=list)


def load(con: duckdb.DuckDBPyConnection, run_id: str) -> list[Input]:
    rows = con.execute(
        "SELECT path, size, mtime_ns, blob FROM run_inputs WHERE run_id = ? ORDER BY path",
        [run_id],
    ).fetchall()
    return [Input(path, int(size), int(mtime_ns), blob) for path, size, mtime_ns, blob in rows]


def check(project: Path, seen: list[Input]) -> InputCheck:
    result = InputCheck()
    for item in seen:
        if unchanged(project, item):
            continue
        if item.blob is not None and has_blob(project, item.blob):
            result.restore[item.path] = item.blob
            result.notes.append(
                f"{item.path} changed since the run: the replay reads the run's bytes "
                f"(git blob {item.blob[:10]})"
            )
        else:
            result.at_risk.append(item.path)
            why = "git does not hold" if item.blob else "it was too large to fingerprint"
            result.notes.append(
                f"{item.path} changed since the run and {why} the bytes it read: "
                "the replayed values are at risk"
            )
    return result
