"""Typed messages of the workbench (the Harlequin pattern), each carrying only plain data.

Two kinds: what worker threads post when they have read the store or run the engine
(handlers on the event loop update the screen; workers never touch widgets), and what
panes and components post upward to ask for something (`VersionSelected`,
`ReplayRequested`, `CancelRequested`...). Panes never reach into the app: the app routes
these messages and hands each pane what it needs. A worker's failure needs no message: the
app's one `Worker.StateChanged` handler shows it.

Messages that say the state of something now (a replay segment's progress, the runs
recording, who holds the catalog) replace an older one of the same thing still waiting in
a queue (`can_replace`, as Toolong does): a burst costs one update, never a backlog.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from textual.message import Message
from textual.widget import Widget

from florwb_engine.statements import StatementTable
from florwb_engine.store.queries import History, LiveRun, ReplayRow, RunDetail
from florwb_engine.watch import PendingStatements


@dataclass
class HistoryLoaded(Message):
    history: History
    runs_only: bool = False  # only recording runs were read again (versions, scripts same)
    values_only: bool = False  # the last history again, now with its metric's values


@dataclass
class SeriesLoaded(Message):
    metric: str
    series: dict[str, list[float]]
    last: dict[str, float]
    low: dict[str, float] = field(default_factory=dict)  # exact, over all values
    high: dict[str, float] = field(default_factory=dict)


@dataclass
class LiveUpdated(Message):
    live: list[LiveRun]  # every run recording now: a newer list says all an older one did

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, LiveUpdated)


@dataclass
class PendingChanged(Message):
    """The working tree's scripts were (re)read: `pending` per script."""

    pending: list[PendingStatements]


class ScriptSaved(Message):
    """A watched training script was written (posted from the watchdog thread)."""


@dataclass
class RunDetailLoaded(Message):
    detail: RunDetail


@dataclass
class StatementTableLoaded(Message):
    """Statement x version cells, and the code of each version for the diff."""

    table: StatementTable


@dataclass
class QueryRows(Message):
    """A page of the Query tab's result: the first one (`first`) or one more."""

    serial: int
    stream: Any  # florwb_engine.store.result_stream.ResultStream
    rows: list[tuple]
    first: bool
    elapsed_s: float


@dataclass
class QueryCounted(Message):
    serial: int
    total: int | None


@dataclass
class QueryFailed(Message):
    """The query failed (`error` one line, `detail` DuckDB's whole message) or was
    stopped (`stopped`)."""

    serial: int
    error: str
    detail: str
    stopped: bool = False


@dataclass
class QueryExported(Message):
    path: str
    rows: int


@dataclass
class StoreWaiting(Message):
    """A connection waits on another process's lock (engine/store/db.py): who holds it."""

    holder: str
    waited_s: float
    serial: int = 0

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, StoreWaiting) and message.serial == self.serial


@dataclass
class StoreFreed(Message):
    """A connection that waited on another process's lock got the file: the holder is gone."""


@dataclass
class OutlineLoaded(Message):
    relations: list[Any]  # florwb_engine.store.catalog_outline.Relation


@dataclass
class ReplayPlanned(Message):
    plan: Any  # florwb_engine.replay.Plan


@dataclass
class ReplayProgressed(Message):
    replay_id: str
    progress: Any  # florwb_engine.replay.Progress: one segment's state, whole

    def can_replace(self, message: Message) -> bool:
        return (
            isinstance(message, ReplayProgressed)
            and message.replay_id == self.replay_id
            and (message.progress.run_id, message.progress.segment)
            == (self.progress.run_id, self.progress.segment)
        )


@dataclass
class ReplayEnded(Message):
    """The replay is over: `result` is its ReplayResult, None when the executor raised
    (the app's worker handler shows why)."""

    replay_id: str
    result: Any | None  # florwb_engine.replay.ReplayResult


@dataclass
class ReplaysLoaded(Message):
    replays: list[ReplayRow]


# --- requests that panes and screens post upward ------------------------------------------


@dataclass
class VersionSelected(Message):
    """The history's cursor is on a run or version of `version` (on a run: of `script`)."""

    version: str | None
    script: str | None = None


@dataclass
class MetricChanged(Message):
    """The history now shows `metric` in its sparklines (reloads keep it)."""

    metric: str


@dataclass
class ReplayRequested(Message):
    """Plan a replay of the pending statements; `run_ids` None means the marked runs;
    `names` None means every pending statement (the matrix's ⏎ names one)."""

    run_ids: Sequence[str] | None = None
    names: Sequence[str] | None = None


class CancelRequested(Message):
    """Cancel the running replay."""


@dataclass
class PaneReady(Message):
    """A lazily mounted pane is on screen and wants the data loaded before it existed."""

    pane: Widget


@dataclass
class ErrorReported(Message):
    """Something the user must read before going on (the app shows it in the error modal)."""

    title: str
    error: str


@dataclass
class ChartRequested(Message):
    """Open the chart view over these runs (the History tab's `c`)."""

    run_ids: list[str]
    labels: dict[str, Any]  # run id -> legend label (florwb.widgets.chart_legend.RunLabel)
    metric: str | None
    title: str
    version: str | None = None  # nothing marked: the version's runs, new ones included


@dataclass
class CurvesLoaded(Message):
    serial: int
    curves: Any  # florwb_engine.store.curves.Curves


@dataclass
class ChartDrawn(Message):
    """A drawing of `state` (florwb.screens.chart.ChartState, with the metric and axis of
    the curves drawn): the chart shows the user's choice once its state is the screen's."""

    serial: int
    drawing: Any  # florwb.widgets.chart_view.ChartDrawing
    state: Any = None


@dataclass
class GridDrawn(Message):
    """A page of the chart grid: one drawing per metric, in page order, of `state`."""

    serial: int
    drawings: list[Any]  # (metric, florwb.widgets.chart_view.ChartDrawing | None)
    state: Any = None
