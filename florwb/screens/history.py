"""The version-history tab: a header, the history list, a filter line and the run summary.

It holds no data of its own: the app loads the history in a worker and calls `show`; the
pane turns it into rows and keeps the summary in step with the cursor.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Input, Static

from florwb.widgets.history_list import Columns, HistoryList, HistoryRow, build_rows
from florwb.widgets.run_summary import RunSummary
from florwb.workbench import format as fmt
from florwb_engine.store.queries import History

if TYPE_CHECKING:
    from florwb.app import WorkbenchApp


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

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.history: History | None = None
        self.text_filter = ""

    @property
    def workbench(self) -> WorkbenchApp:
        return self.app  # type: ignore[return-value]

    def compose(self) -> ComposeResult:
        yield Static(id="history-header")
        yield HistoryList(id="history-list")
        yield Input(
            placeholder="filter: words in run id, version, status, args", id="history-filter"
        )
        yield RunSummary("Loading the version history…", id="run-summary")

    @property
    def list(self) -> HistoryList:
        return self.query_one(HistoryList)

    def show(self, history: History) -> None:
        self.history = history
        listing = self.list
        listing.series, listing.last = history.series, history.last
        differ = fmt.args_that_differ((r.script, r.args) for r in history.runs)
        listing.set_rows(build_rows(history, self.text_filter), differ)
        self._header()
        self.refresh_summary()

    def show_series(self, metric: str, series: dict, last: dict) -> None:
        if self.history is not None:
            self.history.metric, self.history.series, self.history.last = metric, series, last
        self.list.set_series(series, last)
        self._header()
        self.refresh_summary()

    def on_resize(self) -> None:
        self._header()

    def _header(self) -> None:
        history = self.history
        width = max(self.list.size.width, 40)
        header = Columns.fit(width).header(history.metric if history else None)
        self.query_one("#history-header", Static).update(header)

    def refresh_summary(self, row: HistoryRow | None = None) -> None:
        history = self.history
        if history is None:
            return
        row = row if row is not None else self.list.current
        run_id = row.run.run_id if row and row.run else None
        self.query_one(RunSummary).show(
            row,
            metric=history.metric,
            series=history.series.get(run_id) if run_id else None,
            last=history.last.get(run_id) if run_id else None,
            pending=self.workbench.pending,
            live=self.list.live.get(run_id) if run_id else None,
        )

    @on(HistoryList.Highlighted)
    def _highlighted(self, event: HistoryList.Highlighted) -> None:
        self.refresh_summary(event.row)
        if event.row is not None:
            self.workbench.selected_version = event.row.version

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
            self.list.set_rows(build_rows(self.history, self.text_filter), self.list.differ)
            self._header()
            self.refresh_summary()

    def _close_filter(self) -> None:
        box = self.query_one("#history-filter", Input)
        if not self.text_filter:
            box.remove_class("-shown")
        self.list.focus()

    def key_escape(self) -> None:
        """Esc in the filter line clears the filter; in the list it clears a kept filter."""
        box = self.query_one("#history-filter", Input)
        if box.has_focus or self.text_filter:
            box.value = ""
            self.apply_filter("")
            box.remove_class("-shown")
            self.list.focus()
