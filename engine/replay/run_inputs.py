"""Whether the files a run read outside its snapshot still hold what it read.

The plan compares each left-out file the run fingerprinted (versions/inputs.py) with the
working tree: unchanged files are read in place; a changed file whose run bytes git still
holds is restored into the replay's copy of the code; any other changed file is named in
the plan and the run's replayed values are marked at risk, never passed off as exact.

Which project files the run read and which it created is known where the run recorded it
(record/file_access.py, the `run_files` table): a file the run created is hidden from the
replay (absent, as at the run's start: a script that resumes from its own `snapshot.pt`
must not resume from the run's last one), a file the run only wrote is never an input
(no "changed since the run" for a `model.pt` it overwrote), and a file it read that the
snapshot and the fingerprints leave out is checked by its size and modification time then:
changed since, the values are at risk.
"""

from __future__ import annotations

import os
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from florwb_engine.versions.inputs import Input, has_blob, unchanged

READ, WRITTEN = "read", "written"  # record/file_access.py's first accesses


@dataclass(frozen=True)
class FileAccess:
    """A project file's first access by the run; size/mtime None: it did not exist."""

    path: str
    access: str
    size: int | None
    mtime_ns: int | None

    @property
    def created(self) -> bool:
        return self.access == WRITTEN and self.size is None


@dataclass
class InputCheck:
    restore: dict[str, str] = field(default_factory=dict)  # path -> git blob of the run's bytes
    at_risk: list[str] = field(default_factory=list)  # changed, and the run's bytes are gone
    notes: list[str] = field(default_factory=list)
    hide: list[str] = field(default_factory=list)  # created by the run: absent in the replay


def load(con: duckdb.DuckDBPyConnection, run_id: str) -> list[Input]:
    rows = con.execute(
        "SELECT path, size, mtime_ns, blob FROM run_inputs WHERE run_id = ? ORDER BY path",
        [run_id],
    ).fetchall()
    return [Input(path, int(size), int(mtime_ns), blob) for path, size, mtime_ns, blob in rows]


def load_files(con: duckdb.DuckDBPyConnection, run_id: str) -> list[FileAccess]:
    """The run's first accesses of project files (none for runs recorded before them)."""
    rows = con.execute(
        "SELECT path, access, size, mtime_ns FROM run_files WHERE run_id = ? ORDER BY path",
        [run_id],
    ).fetchall()
    return [FileAccess(path, access, size, mtime) for path, access, size, mtime in rows]


def check(
    project: Path,
    seen: list[Input],
    files: list[FileAccess] | None = None,
    snapshot: Collection[str] = (),
) -> InputCheck:
    """What the replay does about the files the run saw: fingerprinted left-out files
    (`seen`), and, where recorded, the files it read or created (`files`; `snapshot`: the
    paths the run's code version holds, which the replay has as they were)."""
    result = InputCheck()
    files = files or []
    written = {f.path for f in files if f.access == WRITTEN}
    for item in seen:
        if item.path in written:
            continue  # the run's own output, not something it read
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
    fingerprinted = {item.path for item in seen}
    snapshot = set(snapshot)
    for access in files:
        if access.created:
            if os.path.lexists(project / access.path):
                result.hide.append(access.path)
        elif access.access == READ and access.path not in fingerprinted | snapshot:
            _check_read(project, access, result)
    if result.hide:
        listed = ", ".join(result.hide[:3]) + (
            f" and {len(result.hide) - 3} more" if len(result.hide) > 3 else ""
        )
        result.notes.append(
            f"hides {listed}: the run created {'them' if len(result.hide) > 1 else 'it'}, "
            "so the replay starts without, as the run did"
        )
    return result


def _check_read(project: Path, access: FileAccess, result: InputCheck) -> None:
    """A read file no snapshot or fingerprint holds: the same size and time, or at risk."""
    try:
        st = os.stat(project / access.path)
    except OSError:
        now = None
    else:
        now = (st.st_size, st.st_mtime_ns)
    if now == (access.size, access.mtime_ns):
        return
    result.at_risk.append(access.path)
    what = "is gone" if now is None else "changed"
    result.notes.append(
        f"{access.path} {what} since the run read it and florwb kept no copy of it: "
        "the replayed values are at risk"
    )
