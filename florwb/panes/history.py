"""The version-history tab: a header, the history list, a filter line and the run summary.

The app hands it each history the live monitor loads (`show`), the pending statements
(`set_pending`) and the runs recording now (`set_live`); the pane turns them into rows,
keeps the summary in step with the cursor, and loads another metric's series itself.
It tells the app where the cursor is (`VersionSelected`) and which metric it shows
(`MetricChanged`); the list's own messages (Opened, MarksChanged) go on to the app.
"""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Input, Static

from florwb.ui import format as fmt
from florwb.ui.messages import ChartRequested, MetricChanged, SeriesLoaded, VersionSelected
from florwb.ui.workers import run_in_thread
from florwb.widgets.history_list import Columns, HistoryList, HistoryRow, build_rows
from florwb.widgets.run_summary import RunSummary
from florwb_engine.store import Store
from florwb_engine.store.history_values import HistoryValues, load_series_values
from florwb_engine.store.queries import History
from florwb_engine.watch import PendingStatements


class HistoryPane(Vertical):
    """Versions with their runs; the highlighted row drives the other tabs."""

    DEFAULT_CSS = """
    HistoryPane #history-header { height: 1; color: $text-muted; text-style: bold; }
    HistoryPane #history-filter { height: 1; border: none; padding: 0 1; display: none; }
    HistoryPane #history-filter.-shown { display: block; }
    HistoryPane HistoryList { height: 1fr; }
    HistoryPane RunSummary { height: auto; max-height: 6; border-top: solid $primary-darken-2;
        padding: 0 1; }
    """

    def __init__(self, store: Store, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.store = store
        self.history: History | None = None
        self.pending: list[PendingStatements] = []
        self.text_filter = ""
        self.chosen_metric: str | None = None  # the metric the user cycled to, if any

    def compose(self) -> ComposeResult:
        yield Static(id="history-header")
        yield HistoryList(id="history-list")
        yield Input(
            placeholder="filter: words in run id, version, status, args", id="history-filter"
        )
        yield RunSummary("Loading the version history…", id="run-summary")

    @property
    def history_list(self) -> HistoryList:
        return self.query_one(HistoryList)

    def show(self, history: History) -> None:
        previous, chosen = self.history, self.chosen_metric
        if chosen is not None and history.metric != chosen:
            # a reload that began before the user cycled the metric: show the series on
            # screen until the chosen metric's fresh one arrives, instead of snapping back
            if previous is not None and previous.metric == chosen:
                _carry_series(previous, history)
            if any(m.name == chosen for m in history.metrics):
                self._load_series(chosen)
        self.history = history
        listing = self.history_list
        listing.set_series(history.series, history.last)
        differ = fmt.args_that_differ((r.script, r.args) for r in history.runs)
        listing.set_rows(build_rows(history, self.text_filter), differ)
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
            if isinstance(self.history, HistoryValues):
                self.history.low, self.history.high = message.low, message.high
        self.history_list.set_series(message.series, message.last)
        self._header()
        self.refresh_summary()
        self.post_message(MetricChanged(message.metric))

    def on_resize(self) -> None:
        self._header()

    def _header(self) -> None:
        history = self.history
        listing = self.history_list
        width = max(listing.content_width, 40)
        header = Columns.fit(width).header(history.metric if history else None, listing.scale)
        self.query_one("#history-header", Static).update(header)

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
        )

    @on(HistoryList.Highlighted)
    def _highlighted(self, event: HistoryList.Highlighted) -> None:
        self.refresh_summary(event.row)
        if event.row is not None:
            self.post_message(VersionSelected(event.row.version))

    @on(HistoryList.ChartAsked)
    def _chart_asked(self, message: HistoryList.ChartAsked) -> None:
        """The marked runs (and those of marked versions); none marked: the runs of the
        version under the cursor. Legends name each run by its id and differing args."""
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
        if not runs:
            self.notify("No runs to chart: mark runs with space, or move to a version.")
            return
        differ = listing.differ
        labels = {
            r.run_id: " ".join(
                part for part in (fmt.short_run(r.run_id), fmt.args_text(r.args, differ)) if part
            )
            for r in runs
        }
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
        if self.history is not None:
            self.history_list.set_rows(
                build_rows(self.history, self.text_filter), self.history_list.differ
            )
            self._header()
            self.refresh_summary()

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
            self.history_list.focus()


def _carry_series(source: History, target: History) -> None:
    """Give `target` the metric and the series `source` shows."""
    target.metric = source.metric
    target.series, target.last = source.series, source.last
    if isinstance(source, HistoryValues) and isinstance(target, HistoryValues):
        target.low, target.high = source.low, source.high


def _get(history: History, field: str, run_id: str | None) -> float | None:
    """The run's exact min (`low`) or max (`high`) of the metric, when loaded."""
    values = getattr(history, field, None)
    return values.get(run_id) if values and run_id else None
