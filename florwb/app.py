"""The florwb workbench: a Textual app over one project's catalog.

Four tabs (version history, log-statement diff, replay, query) and a run-detail screen.
All store reads and engine calls happen in thread workers that post typed messages
(florwb.workbench.messages); the event loop only draws. A watchdog observer notices new
log statements in the training scripts, and a cheap poll of the journal folder notices
runs recording in another terminal. Those live parts, the replay controls and the command
palette are mixins in florwb.workbench (live, replay_control, palette).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from textual import on, work
from textual.app import App, ComposeResult
from textual.lazy import Lazy
from textual.widget import Widget
from textual.widgets import Footer, Header, Static, TabbedContent, TabPane

from florwb.screens.error import ErrorScreen
from florwb.screens.help import HelpScreen
from florwb.screens.history import HistoryPane
from florwb.screens.query import QueryPane
from florwb.screens.replay import ReplayPane
from florwb.screens.run_detail import RunDetailScreen
from florwb.screens.statements import StatementsPane
from florwb.widgets.history_list import HistoryList
from florwb.workbench import format as fmt
from florwb.workbench import keys
from florwb.workbench.live import LiveWatch
from florwb.workbench.messages import (
    HistoryLoaded,
    ReplaysLoaded,
    SeriesLoaded,
    WorkFailed,
)
from florwb.workbench.palette import PaletteCommands
from florwb.workbench.replay_control import ReplayControl
from florwb_engine.store import Store
from florwb_engine.store.queries import History, load_history, load_replays, load_series
from florwb_engine.watch import JournalTail, PendingStatements, ScriptWatcher

W = TypeVar("W", bound=Widget)


class WorkbenchApp(PaletteCommands, LiveWatch, ReplayControl, App[int]):
    """`WorkbenchApp(project).run()`; returns the exit code."""

    CSS_PATH = "app.tcss"
    TITLE = "florwb"
    BINDINGS = keys.bindings("app")

    def __init__(
        self,
        project: Path,
        *,
        watch: bool = True,
        poll_s: float = 1.0,
        on_ready: Callable[[], None] | None = None,
    ) -> None:
        super().__init__()
        self.project = Path(project)
        self.store = Store(self.project)
        self.watch_scripts = watch
        self.poll_s = poll_s
        self.on_ready = on_ready
        self.history: History | None = None
        self.pending: list[PendingStatements] = []
        self.selected_version: str | None = None
        self.replay_cancel: threading.Event | None = None
        self.replay_running = False
        self.workers_default = max(1, min(4, (os.cpu_count() or 2)))
        self._tail = JournalTail(self.project)
        self._watcher: ScriptWatcher | None = None
        self._watched: set[Path] = set()
        self._polls = 0
        self._ready_sent = False
        self._statements_stale = True
        self._offered: set[str] = set()
        self._pending_seen = False
        self.replays: list = []
        self.live: list = []

    def _pane(self, kind: type[W]) -> W | None:
        """A tab's pane, or None in the moment before it is mounted (tabs mount lazily)."""
        found = self.query(kind)
        return found.first() if found else None

    # --- layout ---------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(id="pending-banner")
        with TabbedContent(initial="history", id="tabs"):
            with TabPane("1 History", id="history"):
                yield HistoryPane(id="history-pane")
            # Hidden tabs mount after the first refresh, while the history is still loading
            with TabPane("2 Statements", id="statements"):
                yield Lazy(StatementsPane(id="statements-pane"))
            with TabPane("3 Replay", id="replay"):
                yield Lazy(ReplayPane(id="replay-pane"))
            with TabPane("4 Query", id="query"):
                yield Lazy(QueryPane(id="query-pane"))
        yield Footer(compact=True)

    def on_mount(self) -> None:
        self.title = "florwb"
        self.sub_title = str(self.project)
        self.query_one(HistoryList).focus()
        self.load_history(initial=True)
        if self.poll_s > 0:
            self.set_interval(self.poll_s, self.poll)

    def on_unmount(self) -> None:
        if self.replay_cancel is not None:
            self.replay_cancel.set()
        if self._watcher is not None:
            self._watcher.stop()

    # --- loading --------------------------------------------------------------------------

    @work(thread=True, exclusive=True, group="history")
    def load_history(self, initial: bool = False) -> None:
        metric = self.history.metric if self.history else None
        try:
            if initial:
                self._tail.changed()  # the poll then reports only what is new after this
            history = load_history(self.store, metric)
        except Exception as exc:
            self.post_message(WorkFailed("loading the history", fmt.one_line(exc)))
            return
        self.post_message(HistoryLoaded(history))

    @on(HistoryLoaded)
    def _history_loaded(self, message: HistoryLoaded) -> None:
        history = message.history
        pane = self._pane(HistoryPane)
        if pane is None:  # the app is closing
            return
        self.history = history
        pane.show(history)
        self.sub_title = (
            f"{self.project.name} · {fmt.plural(len(history.runs), 'run')} · "
            f"{fmt.plural(len(history.versions), 'version')}"
        )
        self._statements_stale = True
        if self._active_tab() == "statements":
            self._load_statements()
        if self._ready_sent:
            self._update_watch(history)
            self.check_pending()
        else:
            self._ready_sent = True
            self.call_after_refresh(self._first_frame_shown)

    def _first_frame_shown(self) -> None:
        """Work that would compete with the first frame for the GIL starts only now:
        the pending-statement check (imports libcst), the watcher, past replays."""
        if self.on_ready is not None:
            self.on_ready()
        if self.history is not None:
            self._update_watch(self.history)
        self.check_pending()
        self.load_replays()

    @work(thread=True, exclusive=True, group="series")
    def load_metric(self, metric: str) -> None:
        try:
            series, last = load_series(self.store, metric)
        except Exception as exc:
            self.post_message(WorkFailed("loading a metric", fmt.one_line(exc)))
            return
        self.post_message(SeriesLoaded(metric, series, last))

    @on(SeriesLoaded)
    def _series_loaded(self, message: SeriesLoaded) -> None:
        if pane := self._pane(HistoryPane):
            pane.show_series(message.metric, message.series, message.last)

    @on(HistoryList.MetricStep)
    def _metric_step(self, message: HistoryList.MetricStep) -> None:
        history = self.history
        if history is None:
            return
        numeric = [m.name for m in history.metrics if m.numeric]
        if not numeric:
            self.notify("No numeric metrics logged yet.")
            return
        index = numeric.index(history.metric) if history.metric in numeric else -1
        metric = numeric[(index + message.step) % len(numeric)]
        self.load_metric(metric)

    @work(thread=True, exclusive=True, group="replays")
    def load_replays(self) -> None:
        try:
            replays = load_replays(self.store)
        except Exception as exc:
            self.post_message(WorkFailed("loading replays", fmt.one_line(exc)))
            return
        self.post_message(ReplaysLoaded(replays))

    @on(ReplaysLoaded)
    def _replays_loaded(self, message: ReplaysLoaded) -> None:
        self.replays = message.replays
        if pane := self._pane(ReplayPane):
            pane.show_replays(message.replays)

    # --- tabs -----------------------------------------------------------------------------

    def _active_tab(self) -> str:
        return self.query_one("#tabs", TabbedContent).active

    def action_show_tab(self, tab: str) -> None:
        while len(self.screen_stack) > 1:
            self.pop_screen()
        self.query_one("#tabs", TabbedContent).active = tab
        self._focus_tab(tab)

    @on(TabbedContent.TabActivated, "#tabs")
    def _tab_activated(self, event: TabbedContent.TabActivated) -> None:
        tab = event.pane.id or ""
        if tab == "statements" and self._statements_stale:
            self._load_statements()
        self._focus_tab(tab)

    def _focus_tab(self, tab: str) -> None:
        target = {
            "history": "#history-list",
            "statements": "#matrix",
            "replay": "#replay-runs",
            "query": "#sql",
        }.get(tab)
        if target:
            found = self.query(target)
            if found:
                found.first().focus()

    def _load_statements(self) -> None:
        self._statements_stale = False
        if pane := self._pane(StatementsPane):
            pane.load()
        else:
            self._statements_stale = True

    @property
    def marked_versions(self) -> set[str]:
        return self.query_one(HistoryList).marked_versions

    @property
    def marked_runs(self) -> set[str]:
        return self.query_one(HistoryList).marked_runs

    @on(HistoryList.Opened)
    def _opened(self, message: HistoryList.Opened) -> None:
        row = message.row
        if row.run is not None:
            self.push_screen(RunDetailScreen(row.run.run_id))
        else:
            self.selected_version = row.version
            self._statements_stale = True
            self.action_show_tab("statements")

    @on(HistoryList.MarksChanged)
    def _marks_changed(self) -> None:
        if self._active_tab() == "statements":
            if pane := self._pane(StatementsPane):
                pane.show_diff()

    # --- app actions ----------------------------------------------------------------------

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def action_reload(self) -> None:
        self.load_history()
        self.load_replays()
        self.check_pending()
        self._statements_stale = True
        if self._active_tab() == "statements":
            self._load_statements()

    @on(WorkFailed)
    def _work_failed(self, message: WorkFailed) -> None:
        self.push_screen(ErrorScreen(f"Error while {message.what}", message.error))


__all__ = ["WorkbenchApp"]
