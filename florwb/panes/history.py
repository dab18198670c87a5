"""The version-history tab: a header, the history list, a filter line and the run summary.

The app hands it each history the live monitor loads (`show`), the pending statements
(`set_pending`) and the runs recording now (`set_live`); the pane turns them into rows,
keeps the summary in step with the cursor, and loads another metric's series itself.
It tells the app where the cursor is (`VersionSelected`) and which metric it shows
(`MetricChanged`); the list's own messages (Opened, MarksChanged) go on to the app.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import Input, Static

from florwb.ui import format as fmt
from florwb.ui import keys
from florwb.ui.history_rows import HistoryRow, build_rows
from florwb.ui.messages import ChartRequested, MetricChanged, SeriesLoaded, VersionSelected
from florwb.ui.workers import run_in_thread
from florwb.widgets.chart_legend import run_labels
from florwb.widgets.history_list import HistoryList
from florwb.widgets.run_summary import RunSummary
from florwb_engine.store import Store
from florwb_engine.store.history_values import load_series_values
from florwb_engine.store.queries import History
from florwb_engine.store.run_selection import WhereError, is_condition, store_runs_where
from florwb_engine.store.runs import args_that_differ
from florwb_engine.watch import PendingStatements

LOADING_HISTORY = "Loading the version history…"


@dataclass
class WhereAnswered(Message):
    """The runs a `--where` filter selects, or why DuckDB cannot run it."""

    condition: str
    run_ids: set[str] | None
    error: str | None


class HistoryPane(Vertical):
    """Versions with their runs; the highlighted row drives the other tabs."""

    DEFAULT_CSS = """
    HistoryPane #history-header { height: 1; color: $text-muted; text-style: bold; }
    HistoryPane #history-filter { height: 1; border: none; padding: 0 1; display: none; }
    HistoryPane #history-filter.-shown { display: block; }
    HistoryPane #history-filter-error { height: auto; max-height: 3; color: $error;
        padding: 0 1; display: none; }
    HistoryPane #history-filter-error.-shown { display: block; }
    HistoryPane HistoryList { height: 1fr; }
    HistoryPane RunSummary { height: auto; max-height: 6; border-top: solid $primary-darken-2;
        padding: 0 1; }
    """

    def __init__(
        self, store: Store, *, hints: keys.KeyHints | None = None, id: str | None = None
    ) -> None:
        super().__init__(id=id)
        self.store = store
        self.hints = hints or keys.KeyHints()
        self.history: History | None = None
        self.pending: list[PendingStatements] = []
        self.text_filter = ""
        self.chosen_metric: str | None = None  # the metric the user cycled to, if any
        self.where_ids: set[str] | None = None  # the runs a --where filter selected
        self.where_error: str | None = None

    def compose(self) -> ComposeResult:
        yield Static(id="history-header")
        yield HistoryList(id="history-list")
        yield Input(
            placeholder="filter: words, or a condition: lr > 0.05 and status = 'finished'",
            id="history-filter",
        )
        yield Static(id="history-filter-error")
        yield RunSummary(LOADING_HISTORY, hints=self.hints, id="run-summary")

    @property
    def history_list(self) -> HistoryList:
        return self.query_one(HistoryList)

    def show(self, history: History) -> None:
        previous, chosen = self.history, self.chosen_metric
        if (
            previous is not None
            and history.runs is previous.runs
            and previous.values_pending
            and history.metric == previous.metric
        ):
            self._values_arrived(history)  # the same rows: only their values are new
            return
        if chosen is not None and history.metric != chosen:
            # a reload that began before the user cycled the metric: show the series on
            # screen until the chosen metric's fresh one arrives, instead of snapping back
            if previous is not None and previous.metric == chosen:
                _carry_series(previous, history)
            if any(m.name == chosen for m in history.metrics):
                self._load_series(chosen)
        self.history = history
        listing = self.history_list
        listing.values_pending = history.values_pending
        listing.set_series(history.series, history.last, history.low, history.high, history.metric)
        listing.differ = args_that_differ((r.script, r.args) for r in history.runs)
        self._rebuild()
        if is_condition(self.text_filter) and (
            previous is None
            or {r.run_id for r in previous.runs} != {r.run_id for r in history.runs}
        ):
            self._run_where(self.text_filter)  # new runs: does the condition select them?

    def _values_arrived(self, history: History) -> None:
        self.history = history
        listing = self.history_list
        listing.values_pending = history.values_pending
        listing.set_series(history.series, history.last, history.low, history.high, history.metric)
        if listing.sort[0] in ("final", "best"):
            self._rebuild()
        self._header()
        self.refresh_summary()

    def _rebuild(self) -> None:
        """The rows again from the history, the filter and the sort order."""
        history = self.history
        if history is None:
            return
        listing = self.history_list
        where = is_condition(self.text_filter)
        # a condition DuckDB refused filters nothing: its error shows, every run stays
        keep = None if not where or self.where_error else (self.where_ids or set())
        rows = build_rows(
            history,
            "" if where else self.text_filter,
            keep=keep,
            sort=listing.sort,
            value=listing.column_value,
        )
        listing.set_rows(rows, listing.differ)
        self._header()
        self.refresh_summary()

    def set_pending(self, pending: list[PendingStatements]) -> None:
        self.pending = pending
        self.refresh_summary()

    def set_live(self, labels: dict[str, str]) -> None:
        """Progress text of the runs recording now, by run id."""
        self.history_list.set_live(labels)
        self.refresh_summary()

    # --- the metric of the sparklines ------------------------------------------------------

    @on(HistoryList.MetricStep)
    def _metric_step(self, message: HistoryList.MetricStep) -> None:
        message.stop()
        history = self.history
        if history is None:
            return
        numeric = [m.name for m in history.metrics if m.numeric]
        if not numeric:
            self.notify("No numeric metrics logged yet.")
            return
        index = numeric.index(history.metric) if history.metric in numeric else -1
        self._load_series(numeric[(index + message.step) % len(numeric)])

    def _load_series(self, metric: str) -> None:
        def work() -> None:
            values = load_series_values(self.store, metric)
            self.post_message(
                SeriesLoaded(metric, values.series, values.last, values.low, values.high)
            )

        run_in_thread(self, work, group="series", description="loading a metric")

    @on(SeriesLoaded)
    def _series_loaded(self, message: SeriesLoaded) -> None:
        message.stop()
        self.chosen_metric = message.metric
        if self.history is not None:
            self.history.metric = message.metric
            self.history.series, self.history.last = message.series, message.last
            self.history.low, self.history.high = message.low, message.high
            self.history.values_pending = False
        self.history_list.values_pending = False
        self.history_list.set_series(
            message.series, message.last, message.low, message.high, message.metric
        )
        if self.history_list.sort[0] in ("final", "best"):
            self._rebuild()
        self._header()
        self.refresh_summary()
        self.post_message(MetricChanged(message.metric))

    def on_resize(self) -> None:
        self._header()

    def _header(self) -> None:
        history = self.history
        listing = self.history_list
        width = max(listing.content_width, 40)
        metric = history.metric if history else None
        header = listing.columns(width).header(metric, listing.scale, listing.sort)
        self.query_one("#history-header", Static).update(header)

    @on(HistoryList.SortChanged)
    def _sort_changed(self, message: HistoryList.SortChanged) -> None:
        message.stop()
        self._rebuild()

    @on(HistoryList.CompareRequested)
    def _compare(self, message: HistoryList.CompareRequested) -> None:
        message.stop()
        from florwb.screens.run_compare import RunCompareScreen

        first, second = message.run_ids
        self.app.push_screen(
            RunCompareScreen(self.store.project, self.store, first, second, self.hints)
        )

    def refresh_summary(self, row: HistoryRow | None = None) -> None:
        history = self.history
        if history is None:
            return
        row = row if row is not None else self.history_list.current
        run_id = row.run.run_id if row and row.run else None
        self.query_one(RunSummary).show(
            row,
            metric=history.metric,
            series=history.series.get(run_id) if run_id else None,
            last=history.last.get(run_id) if run_id else None,
            low=_get(history, "low", run_id),
            high=_get(history, "high", run_id),
            text_filter=self.text_filter if history.runs else "",
            pending=self.pending,
            live=self.history_list.live.get(run_id) if run_id else None,
            values_pending=history.values_pending,
        )

    @on(HistoryList.Highlighted)
    def _highlighted(self, event: HistoryList.Highlighted) -> None:
        self.refresh_summary(event.row)
        if event.row is not None:
            run = event.row.run
            self.post_message(VersionSelected(event.row.version, run.script if run else None))

    @on(HistoryList.ChartAsked)
    def _chart_asked(self, message: HistoryList.ChartAsked) -> None:
        """The marked runs (and those of marked versions); none marked: the runs of the
        version under the cursor (those the filter shows, when one is set). Legends name
        each run by what differs between the charted runs."""
        message.stop()
        history = self.history
        if history is None:
            return
        listing = self.history_list
        marked = listing.marked_runs
        versions = listing.marked_versions
        runs = [r for r in history.runs if r.run_id in marked or (r.version in versions)]
        title = f"{fmt.plural(len(runs), 'marked run')}"
        version = None  # nothing marked: the version's runs, also those started later
        if not runs and message.row is not None:
            version = message.row.version
            runs = [r for r in history.runs if r.version == version]
            title = f"version {fmt.short_version(version)}"
            if self.text_filter:  # the runs the filter shows, as many as the list says
                shown = {row.run.run_id for row in listing.rows if row.run is not None}
                runs = [r for r in runs if r.run_id in shown]
                version = None  # runs started later are not known to match
                title += f", {fmt.plural(len(runs), 'run')} matching {self.text_filter!r}"
        if not runs:
            self.notify("No runs to chart: mark runs with space, or move to a version.")
            return
        labels = run_labels(runs)
        run_ids = [r.run_id for r in runs]
        self.post_message(ChartRequested(run_ids, labels, history.metric, title, version))

    @on(HistoryList.FilterRequested)
    def _open_filter(self) -> None:
        box = self.query_one("#history-filter", Input)
        box.add_class("-shown")
        box.value = self.text_filter
        box.focus()

    @on(Input.Changed, "#history-filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        self.apply_filter(event.value)

    @on(Input.Submitted, "#history-filter")
    def _filter_done(self) -> None:
        self._close_filter()

    def apply_filter(self, text: str) -> None:
        self.text_filter = text.strip()
        if is_condition(self.text_filter):
            self._run_where(self.text_filter)  # the rows stay as they are until it answers
            return
        self.where_ids = None
        self._show_where_error(None)
        self._rebuild()

    def _run_where(self, condition: str) -> None:
        """Ask the store which runs the condition selects, with the CLI's own code."""

        def work() -> None:
            try:
                ids = {run.run_id for run in store_runs_where(self.store, condition)}
            except WhereError as exc:
                self.post_message(WhereAnswered(condition, None, str(exc)))
                return
            self.post_message(WhereAnswered(condition, ids, None))

        run_in_thread(self, work, group="where", description="filtering runs")

    @on(WhereAnswered)
    def _where_answered(self, message: WhereAnswered) -> None:
        message.stop()
        if message.condition != self.text_filter:
            return  # the user typed on
        self._show_where_error(message.error)
        self.where_ids = message.run_ids
        self._rebuild()

    def _show_where_error(self, error: str | None) -> None:
        self.where_error = error
        line = self.query_one("#history-filter-error", Static)
        line.set_class(error is not None, "-shown")
        reason = (error or "").removeprefix("bad --where: ")
        line.update(Text(f"✗ {reason}" if error else ""))

    def _close_filter(self) -> None:
        box = self.query_one("#history-filter", Input)
        if not self.text_filter:
            box.remove_class("-shown")
        self.history_list.focus()

    def key_escape(self) -> None:
        """Esc in the filter line clears the filter; in the list it clears a kept filter."""
        box = self.query_one("#history-filter", Input)
        if box.has_focus or self.text_filter:
            box.value = ""
            self.apply_filter("")
            box.remove_class("-shown")
            self._show_where_error(None)
            self.history_list.focus()


def _carry_series(source: History, target: History) -> None:
    """Give `target` the metric and the series `source` shows."""
    target.metric = source.metric
    target.series, target.last = source.series, source.last
    target.low, target.high = source.low, source.high


def _get(history: History, field: str, run_id: str | None) -> float | None:
    """The run's exact min (`low`) or max (`high`) of the metric, when loaded."""
    values = getattr(history, field, None)
    return values.get(run_id) if values and run_id else None
