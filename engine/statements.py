"""The log-statement table of one script: which statement is where in which version.

The workbench's "Log-statement diff" tab shows it; a report or a notebook can build the
same table. It joins three sources: the runs (which script, which versions, how many runs
each), propagation's analysis of the recorded code (`statement_matrix`: where a statement
is, or would be inserted, or why it cannot be) and the store (which statements a replay
already filled in). Every cell is one of the statuses in `CellStatus`, so a cell never
promises a placement that replay would refuse.

Reading old versions and matching syntax trees is slow (libcst): call this from a worker.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from florwb_engine.record.notebook import is_notebook_script
from florwb_engine.store import Store
from florwb_engine.store.queries import replayed_names
from florwb_engine.watch.pending import recorded_source

WORKING = "working tree"  # the column of the script as it is on disk now
MAX_VERSIONS = 10  # recorded versions shown at most (the newest, and the one asked for)

CellStatus = Literal[
    "recorded",  # the version's runs logged it (present in its code)
    "replayed",  # a replay filled it in for the version's runs
    "propagatable",  # replay would insert it at `line`
    "cannot place",  # replay would refuse; `reason` says why
    "in tree",  # present in the working tree
    "absent",  # not in the working tree
]


@dataclass(frozen=True)
class Cell:
    status: CellStatus
    line: int | None = None
    reason: str | None = None


@dataclass
class StatementTable:
    """Statements x versions of `script` (versions in column order; WORKING last)."""

    script: str
    versions: list[str]
    names: list[str]
    cells: dict[tuple[str, str], Cell]
    sources: dict[str, str]  # version (or WORKING) -> code, for the diff
    runs_per_version: dict[str, int]
    note: str | None = None  # what could not be read, said once
    log_lines: dict[str, set[int]] = field(default_factory=dict)  # version -> log lines


def choose_script_and_versions(
    runs: Iterable[tuple[str | None, str | None]],
    version_order: Sequence[str],
    wanted: str | None = None,
    max_versions: int = MAX_VERSIONS,
    wanted_script: str | None = None,
) -> tuple[str, list[str], dict[str, int]] | None:
    """Which script to show and which of its versions: `runs` are (script, version) pairs,
    oldest first. The script is `wanted_script` when a run recorded it (several scripts can
    share a version), else the one `wanted` (a version) was recorded with, else the newest
    run's; versions follow `version_order`, the newest `max_versions`, keeping
    `wanted`. Returns (script, versions, runs per version), or None without scripts."""
    # notebook runs have no script to propagate statements into (record/notebook.py)
    listed = [(s, v) for s, v in runs if not is_notebook_script(s)]
    scripts = [script for script, _version in reversed(listed) if script]
    if not scripts:
        return None
    script = (
        wanted_script
        if wanted_script in scripts
        else next((s for s, v in reversed(listed) if v == wanted and s), scripts[0])
    )
    counts: dict[str, int] = {}
    for run_script, version in listed:
        if run_script == script and version:
            counts[version] = counts.get(version, 0) + 1
    chosen = [v for v in version_order if v in counts] + [
        v for v in counts if v not in version_order
    ]
    if len(chosen) > max_versions:
        keep = chosen[-max_versions:]
        if wanted in chosen and wanted not in keep:
            keep = [wanted, *keep[1:]]
        chosen = keep
    return script, chosen, counts


def statement_table(
    project: Path,
    store: Store,
    script: str,
    versions: Sequence[str],
    runs_per_version: dict[str, int] | None = None,
) -> StatementTable:
    """The table for `script` over recorded `versions` plus the working tree."""
    from florwb_engine.propagate import PropagationError, find_log_statements, statement_matrix

    counts = dict(runs_per_version or {})
    sources: dict[str, str] = {}
    missing = 0
    for version in versions:
        text = recorded_source(project, version, script)
        if text is None:
            missing += 1
            continue
        sources[version] = text
    working_path = project / script
    if working_path.is_file():
        sources[WORKING] = working_path.read_text(encoding="utf-8", errors="replace")
    note = f"{missing} versions without a code snapshot" if missing else None
    if not sources:
        return StatementTable(script, [], [], {}, {}, counts, note or "no code")
    reference = WORKING if WORKING in sources else list(sources)[-1]
    try:
        matrix = statement_matrix(sources, reference)
    except PropagationError as exc:
        # The working tree does not parse (mid-edit): compare the recorded versions only.
        sources.pop(WORKING, None)
        if not sources:
            raise
        note = f"working tree: {exc}"
        reference = list(sources)[-1]
        matrix = statement_matrix(sources, reference)
    replayed = replayed_names(store)
    cells: dict[tuple[str, str], Cell] = {}
    for name in matrix.names:
        for version in matrix.versions:
            cell = matrix.cell(name, version)
            status: CellStatus
            if version == WORKING:
                status = "in tree" if cell.status == "present" else "absent"
            elif cell.status == "present":
                status = "recorded"
            elif name in replayed.get(version, set()):
                status = "replayed"
            elif cell.status == "propagatable":
                status = "propagatable"
            else:
                status = "cannot place"
            cells[(name, version)] = Cell(status, cell.line, cell.reason)
    log_lines: dict[str, set[int]] = {}
    for version, source in sources.items():
        try:
            log_lines[version] = {s.line for s in find_log_statements(source)}
        except PropagationError:
            log_lines[version] = set()
    return StatementTable(
        script, list(matrix.versions), list(matrix.names), cells, sources, counts, note, log_lines
    )


__all__ = [
    "MAX_VERSIONS",
    "WORKING",
    "Cell",
    "CellStatus",
    "StatementTable",
    "choose_script_and_versions",
    "statement_table",
]
