"""The history's rows: versions newest first, each with its runs beneath in the chosen sort
order, kept by the word filter or by the runs a `--where` condition selected; how a run's
status reads. Plain data: the history list draws these rows, the run summary describes one."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from florwb.ui import format as fmt
from florwb_engine.store.queries import History, RunRow, VersionRow

UNVERSIONED = "(no version)"


@dataclass
class HistoryRow:
    """A line of the list: a version header, or one run of that version."""

    kind: Literal["version", "run"]
    version: str | None
    run: RunRow | None = None
    n_runs: int = 0
    info: VersionRow | None = None
    git: tuple[str | None, str | None, bool | None] | None = None  # head, branch, dirty
    n_shown: int | None = None  # runs of the version the filter shows (None: no filter)

    @property
    def key(self) -> str:
        return f"run:{self.run.run_id}" if self.run else f"version:{self.version}"


def run_status(run: RunRow) -> str:
    """What the history says about a run: replayed runs are marked as such, and one whose
    latest replay diverged says so (its values are withheld, not shown as replayed)."""
    if run.status == "finished" and run.verdict == "diverged":
        return "diverged"
    if run.replays and run.status == "finished":
        return "replayed"
    return run.status


def took_text(run: RunRow) -> str:
    """The run's duration as the history, its summary and the run detail show it: `…`
    after a time still counting (recording), `≥` before a lower bound (killed)."""
    seconds, reading = run.took()
    text = fmt.duration(seconds)
    if seconds is None:
        return text
    if reading == "so far":
        return text + "…"
    if reading == "at least":
        return "≥" + text
    return text


# What the run table sorts by (`s` cycles, `S` reverses); arg columns add "arg:<name>".
SORT_KEYS = ("started", "run", "status", "final", "best")


def build_rows(
    history: History,
    text_filter: str = "",
    *,
    keep: set[str] | None = None,
    sort: tuple[str, bool] = ("started", True),
    value: Callable[[RunRow, str], Any] | None = None,
) -> list[HistoryRow]:
    """Newest version first; its runs in `sort` order (column key, descending), newest
    first by default. `text_filter` keeps matching runs (every word must match the run id,
    version, status, script or args); `keep`, when given, the runs a `--where` condition
    selected. `value(run, key)` reads a column's value for sorting (final, best, args)."""
    words = text_filter.lower().split() if keep is None else []
    by_version: dict[str, list[RunRow]] = {}
    for run in history.runs:
        by_version.setdefault(run.version or UNVERSIONED, []).append(run)
    info = {v.version: v for v in history.versions}

    def newest(version: str) -> float:
        starts = [r.start_time.timestamp() for r in by_version[version] if r.start_time]
        return max(starts, default=-math.inf)

    rows: list[HistoryRow] = []
    for version in sorted(by_version, key=newest, reverse=True):
        runs = [
            r
            for r in by_version[version]
            if _matches(r, words) and (keep is None or r.run_id in keep)
        ]
        runs = sort_runs(runs, sort, value)
        if not runs:
            continue
        real = None if version == UNVERSIONED else version
        git = version_git(by_version[version])
        shown = len(runs) if words or keep is not None else None
        rows.append(
            HistoryRow(
                "version", real, None, len(by_version[version]), info.get(version), git, shown
            )
        )
        rows.extend(HistoryRow("run", real, r) for r in runs)
    return rows


def version_git(runs: Sequence[RunRow]) -> tuple[str | None, str | None, bool | None] | None:
    """The git head, branch and dirty flag recorded with a version's newest run that has
    them (the user's commit the snapshot was taken from), as lazygit and tig show commits."""
    for run in reversed(runs):
        if run.git_head or run.git_branch:
            dirty = any(r.git_dirty for r in runs if r.git_head == run.git_head)
            return run.git_head, run.git_branch, dirty
    return None


def sort_runs(
    runs: list[RunRow],
    sort: tuple[str, bool],
    value: Callable[[RunRow, str], Any] | None = None,
) -> list[RunRow]:
    """`runs` (oldest first) in the order of column `sort[0]`, descending if `sort[1]`;
    runs without a value go last either way."""
    key, descending = sort
    if key == "started":
        return list(reversed(runs)) if descending else list(runs)

    def read(run: RunRow) -> Any:
        if key == "run":
            return run.run_id
        if key == "status":
            return run_status(run)
        return value(run, key) if value is not None else None

    present = [(read(r), i, r) for i, r in enumerate(runs)]
    have = [p for p in present if p[0] is not None and p[0] == p[0]]
    missing = [p[2] for p in present if p[0] is None or p[0] != p[0]]
    numbers = all(isinstance(v, (int, float)) for v, _i, _r in have)
    have.sort(key=lambda p: (p[0] if numbers else str(p[0]), p[1]), reverse=descending)
    return [r for _v, _i, r in have] + missing


def _matches(run: RunRow, words: list[str]) -> bool:
    if not words:
        return True
    hay = " ".join(
        [
            run.run_id,
            run.version or "",
            run_status(run),
            run.status,
            run.script or "",
            run.exception or "",
            fmt.args_text(run.args),
        ]
    ).lower()
    return all(w in hay for w in words)
