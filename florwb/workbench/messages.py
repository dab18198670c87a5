"""Typed messages that worker threads post to the screen (the Harlequin pattern).

Workers never touch widgets: they read the store or run the engine, then post one of these;
handlers on the event loop update the screen. Each carries only plain data.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from textual.message import Message

from florwb_engine.store.queries import History, LiveRun, QueryPage, ReplayRow, RunDetail
from florwb_engine.watch import PendingStatements


@dataclass
class HistoryLoaded(Message):
    history: History


@dataclass
class SeriesLoaded(Message):
    metric: str
    series: dict[str, list[float]]
    last: dict[str, float]


@dataclass
class LiveUpdated(Message):
    live: list[LiveRun]


@dataclass
class PendingChanged(Message):
    """The working tree's scripts were (re)read: `pending` per script."""

    pending: list[PendingStatements]


class ScriptSaved(Message):
    """A watched training script was written (posted from the watchdog thread)."""


@dataclass
class WorkFailed(Message):
    what: str
    error: str


@dataclass
class RunDetailLoaded(Message):
    detail: RunDetail


@dataclass
class MatrixLoaded(Message):
    """Statement x version cells, and the code of each version for the diff."""

    script: str
    versions: list[str]  # version ids in column order; "working tree" last
    names: list[str]
    cells: dict[tuple[str, str], tuple[str, int | None, str | None]]
    sources: dict[str, str]
    runs_per_version: dict[str, int]
    note: str | None = None
    log_lines: dict[str, set[int]] = field(default_factory=dict)  # version -> lines of logs


@dataclass
class QueryPageLoaded(Message):
    serial: int
    sql: str
    page: QueryPage
    elapsed_s: float


@dataclass
class QueryCounted(Message):
    serial: int
    total: int


@dataclass
class QueryFailed(Message):
    serial: int
    sql: str
    error: str


@dataclass
class ReplayPlanned(Message):
    plan: Any  # florwb_engine.replay.Plan


@dataclass
class ReplayProgressed(Message):
    replay_id: str
    progress: Any  # florwb_engine.replay.Progress


@dataclass
class ReplayEnded(Message):
    replay_id: str
    result: Any | None  # florwb_engine.replay.ReplayResult
    error: str | None = None


@dataclass
class ReplaysLoaded(Message):
    replays: list[ReplayRow]
