"""The florwb workbench: a Textual app over one project's catalog.

Four tabs (version history, log-statement diff, replay, query) and a run-detail screen.
The app composes components that own their state and routes their messages:

- `LiveMonitor` (florwb.components) loads the history, polls the journals and watches
  the training scripts; `ReplayRunner` runs a confirmed replay; `PendingBanner`
  (florwb.widgets) holds the statements that no run recorded yet.
- The panes (florwb.panes) are built with the store and the project, are handed data
  (`show`, `set_history`, ...) and post requests upward (`VersionSelected`,
  `ReplayRequested`, `CancelRequested`, ...). Nothing imports this module but the CLI.

All store reads and engine calls run in thread workers started through
florwb.ui.workers; a worker that raises ends in this app's one `Worker.StateChanged`
handler, which shows the error modal. The event loop only draws.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from pathlib import Path
from typing import Any

from rich.text import Text
from textual import on
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.lazy import Lazy
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Footer, Header, Static, TabbedContent, TabPane
from textual.worker import Worker, WorkerState

from florwb.components.live_monitor import FOLLOW_SHARE, LiveMonitor, waiting_line
from florwb.components.replay_runner import ReplayRunner
from florwb.panes.history import LOADING_HISTORY, HistoryPane
from florwb.panes.query import QueryPane
from florwb.panes.replay import ReplayPane
from florwb.panes.statements import StatementsPane
from florwb.screens.confirm import ConfirmScreen
from florwb.screens.error import ErrorScreen
from florwb.screens.help import HelpScreen
from florwb.screens.replay_plan import ReplayPlanScreen
from florwb.screens.run_detail import RunDetailScreen
from florwb.ui import format as fmt
from florwb.ui import keys
from florwb.ui.format import TITLE_ICON
from florwb.ui.messages import (
    CancelRequested,
    ChartRequested,
    ErrorReported,
    HistoryLoaded,
    LiveUpdated,
    MetricChanged,
    PaneReady,
    PendingChanged,
    ReplayEnded,
    ReplayProgressed,
    ReplayRequested,
    ScriptSaved,
    StoreFreed,
    StoreWaiting,
    VersionSelected,
)
from florwb.ui.palette import palette_entries
from florwb.widgets.history_list import HistoryList
from florwb.widgets.pending_banner import PendingBanner
from florwb_engine.errors import FlorwbError, format_traceback, log_exception
from florwb_engine.project import store_dir
from florwb_engine.store import Store
from florwb_engine.store.queries import History, LiveRun
from florwb_engine.watch import PendingStatements

TAB_FOCUS = {
    "history": "#history-list",
    "statements": "#matrix",
    "replay": "#replay-runs",
    "query": "#sql",
}


def _showing(pane: Widget) -> bool:
    """Whether a pane can take an update: attached, and still holding its widgets (the app's
    teardown removes a pane's children before the pane; a late message must not reach them)."""
    return pane.is_attached and bool(pane.children)


class WorkbenchApp(App[int]):
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
        follow_share: float = FOLLOW_SHARE,
        on_ready: Callable[[], None] | None = None,
    ) -> None:
        """`follow_share`: the share of a core that following the runs still recording
        may take (their rows are read again no more often than that allows)."""
        super().__init__()
        self.project = Path(project)
        self.store = Store(self.project)
        self.on_ready = on_ready
        self.keymap: dict[str, str] = {}  # binding id -> keys, as set_keymap was given
        self.key_hints = keys.KeyHints(lambda name: self.get_key_display(Binding(name, "")))
        self.workers_default = max(1, min(4, (os.cpu_count() or 2)))
        self._history: History | None = None
        self._holder_shown = False  # the title says who holds the catalog
        self._live: list[LiveRun] = []
        self._first_frame = False
        self._charts: set[Any] = set()  # the chart screens opened (ChartScreen)
        self._quit_when_replay_ends = False  # `q`, `y`: the replay is being cancelled
        # The components and panes, built here with what they need; compose places them.
        self._monitor = LiveMonitor(
            self.project,
            self.store,
            poll_s=poll_s,
            watch_scripts=watch,
            follow_share=follow_share,
            id="live-monitor",
        )
        self._runner = ReplayRunner(id="replay-runner")
        self._banner = PendingBanner(id="pending-banner")
        self._history_pane = HistoryPane(self.store, hints=self.key_hints, id="history-pane")
        self._statements = StatementsPane(
            self.project, self.store, hints=self.key_hints, id="statements-pane"
        )
        self._replay = ReplayPane(self.store, hints=self.key_hints, id="replay-pane")
        self._query = QueryPane(self.project, self.store, hints=self.key_hints, id="query-pane")

    # --- what tests, benchmarks and screenshots read ----------------------------------------

    @property
    def history(self) -> History | None:
        """The history shown now (None until the first load)."""
        return self._history

    @property
    def pending(self) -> list[PendingStatements]:
        return self._banner.pending

    @property
    def replay_running(self) -> bool:
        return self._runner.running

    @property
    def marked_versions(self) -> set[str]:
        return self._history_pane.history_list.marked_versions

    @property
    def marked_runs(self) -> set[str]:
        return self._history_pane.history_list.marked_runs

    # --- layout ---------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        # A plain character: Textual's default icon (⭘) is an empty box without a Nerd Font
        yield Header(icon=fmt.TITLE_ICON)
        yield self._monitor
        yield self._runner
        yield self._banner
        with TabbedContent(initial="history", id="tabs"):
            with TabPane("1 History", id="history"):
                yield self._history_pane
            # Hidden tabs mount after the first refresh, while the history is still loading
            with TabPane("2 Statements", id="statements"):
                yield Lazy(self._statements)
            with TabPane("3 Replay", id="replay"):
                yield Lazy(self._replay)
            with TabPane("4 Query", id="query"):
                yield Lazy(self._query)
        yield Footer(compact=True)

    def on_mount(self) -> None:
        self.title = "florwb"
        self.sub_title = self._summary_title()
        keymap, warning = keys.load_keymap()  # the user's file: the README's "rebind keys"
        if keymap:
            self.set_keymap(keymap)
        if warning:
            self.notify(warning, title="Keymap", severity="warning")
        self.query_one(HistoryList).focus()
        self._monitor.reload(initial=True)

    # --- failures: the one place ------------------------------------------------------------

    @on(Worker.StateChanged)
    def _worker_changed(self, event: Worker.StateChanged) -> None:
        """Every worker of the workbench runs on the app (florwb.ui.workers), so a failing
        one ends here: shown in the error modal, the app goes on. An expected failure
        (FlorwbError) is its one line; anything else is also written with its traceback
        to the project's error log, and the modal shows the traceback on demand."""
        if event.state is not WorkerState.ERROR:
            return
        error = event.worker.error
        doing = event.worker.description
        if error is None:
            self.show_error(f"Error while {doing}", "unknown error")
        elif isinstance(error, FlorwbError):
            self.show_error(error.title or f"Error while {doing}", error.one_line())
        else:
            self.show_unexpected(f"Error while {doing}", error)

    @on(ErrorReported)
    def _error_reported(self, message: ErrorReported) -> None:
        self.show_error(message.title, message.error)

    def show_error(
        self, title: str, text: str, *, details: str | None = None, logged: str | None = None
    ) -> None:
        if self._error_shown(title, text):
            return  # a poll failing again: one modal says it
        self.push_screen(ErrorScreen(title, text, self.key_hints, details=details, logged=logged))

    def _error_shown(self, title: str, text: str) -> bool:
        top = self.screen
        return isinstance(top, ErrorScreen) and (top.title_text, top.message) == (title, text)

    def show_unexpected(self, title: str, error: BaseException) -> None:
        """A failure florwb did not expect: its traceback goes to the error log first (the
        modal says where, or why it could not be written), then the modal shows its line."""
        text = fmt.one_line(error)
        if self._error_shown(title, text):
            return  # a poll failing again: logged when it was first shown
        try:
            path = log_exception(store_dir(self.project), title, error)
            logged = f"also in {path.relative_to(self.project)}"
        except OSError as exc:
            logged = f"not logged: {exc.strerror or exc}"
        self.show_error(title, text, details=format_traceback(error), logged=logged)

    @on(StoreWaiting)
    def _store_waiting(self, message: StoreWaiting) -> None:
        """Another process holds the catalog: said where the history
        shows, or in the title bar once it is on screen, until the history loads."""
        self.sub_title = waiting_line(message.holder, message.waited_s)
        self._holder_shown = True
        if self._history is None:
            self.query_one("#run-summary", Static).update(Text(self.sub_title, "yellow"))

    @on(StoreFreed)
    def _store_freed(self) -> None:
        """The holder let go: what was said about it goes at once, not with the next load."""
        if not self._holder_shown:
            return
        self._holder_shown = False
        self.sub_title = self._summary_title()
        if self._history is None:
            self.query_one("#run-summary", Static).update(LOADING_HISTORY)

    def _summary_title(self) -> str:
        history = self._history
        if history is None:
            return str(self.project)
        return (
            f"{self.project.name} · {fmt.plural(len(history.runs), 'run')} · "
            f"{fmt.plural(len(history.versions), 'version')}"
        )

    # --- the history ----------------------------------------------------------------------

    @on(HistoryLoaded)
    def _history_loaded(self, message: HistoryLoaded) -> None:
        history = message.history
        if not _showing(self._history_pane):  # the app is closing
            return
        self._history = history
        self._history_pane.show(history)
        running = {r.run_id for r in history.runs if r.status == "running"}
        if any(run.run_id not in running for run in self._live):
            # a run that ended keeps no progress label until the next live read
            self._show_live([run for run in self._live if run.run_id in running])
        self._holder_shown = False
        self.sub_title = self._summary_title()
        # runs recording, or values read after the list, change no version or statement
        if not (message.runs_only or message.values_only):
            self._statements.set_history(history)
            self._query.suggest_metric(history.metric)
            self._refresh_statements()
        self._chart_data_changed()
        if not self._first_frame:
            self._first_frame = True
            self.call_after_refresh(self._first_frame_shown)

    def _first_frame_shown(self) -> None:
        """Work that would compete with the first frame for the GIL starts only now:
        the watcher and the pending-statement check (imports libcst), past replays."""
        if self.on_ready is not None:
            self.on_ready()
        self._monitor.start_watching()
        if _showing(self._replay):
            self._replay.reload_replays()

    @on(ChartRequested)
    def _chart_requested(self, message: ChartRequested) -> None:
        from florwb.screens.chart import ChartScreen  # numpy and plotext: when first charted

        m = message
        chart = ChartScreen(self.store, m.run_ids, m.labels, m.metric, m.title, version=m.version)
        self._charts.add(chart)
        self.push_screen(chart)

    def _chart_data_changed(self) -> None:
        """An open chart fills in live: it re-reads (throttled) when the store changed."""
        for chart in self._charts.intersection(self.screen_stack):
            chart.data_changed()
        self._charts.intersection_update(self.screen_stack)

    @on(LiveUpdated)
    def _live_updated(self, message: LiveUpdated) -> None:
        self._show_live(message.live)

    def _show_live(self, live: list[LiveRun]) -> None:
        self._live = live
        labels = {}
        for run in live:
            total = run.total if run.total is not None else "?"
            labels[run.run_id] = f"{run.done}/{total} {run.loop or ''}".strip()
        if _showing(self._history_pane):
            self._history_pane.set_live(labels)
        if _showing(self._replay):
            self._replay.show_live(live)

    @on(PendingChanged)
    def _pending_changed(self, message: PendingChanged) -> None:
        if _showing(self._history_pane):
            self._banner.show(message.pending)
            self._history_pane.set_pending(message.pending)

    @on(ScriptSaved)
    def _script_saved(self) -> None:
        self._invalidate_statements()

    @on(MetricChanged)
    def _metric_changed(self, message: MetricChanged) -> None:
        self._monitor.metric = message.metric

    @on(VersionSelected)
    def _version_selected(self, message: VersionSelected) -> None:
        self._statements.select_version(message.version, message.script)

    @on(HistoryList.Opened)
    def _opened(self, message: HistoryList.Opened) -> None:
        row = message.row
        if row.run is not None:
            self.push_screen(RunDetailScreen(self.store, row.run.run_id))
        else:
            self._statements.select_version(row.version)
            self._invalidate_statements()
            self.action_show_tab("statements")

    @on(HistoryList.MarksChanged)
    def _marks_changed(self, message: HistoryList.MarksChanged) -> None:
        self._statements.set_marked_versions(set(message.versions))

    @on(PaneReady)
    def _pane_ready(self, message: PaneReady) -> None:
        """A lazily mounted pane: hand it what arrived before it existed."""
        if message.pane is self._statements:
            self._refresh_statements()
        elif message.pane is self._replay:
            self._replay.show_live(self._live)
            if self._first_frame:
                self._replay.reload_replays()

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
        if tab == "statements":
            self._refresh_statements()
        self._focus_tab(tab)

    def _focus_tab(self, tab: str) -> None:
        target = TAB_FOCUS.get(tab)
        if target:
            found = self.screen_stack[0].query(target)
            if found:
                found.first().focus()

    def _invalidate_statements(self) -> None:
        self._statements.invalidate()
        self._refresh_statements()

    def _refresh_statements(self) -> None:
        """The diff rebuilds only while its tab is shown; otherwise when it is next shown."""
        if _showing(self._statements) and self._active_tab() == "statements":
            self._statements.refresh_if_stale()

    # --- replay ---------------------------------------------------------------------------

    def action_replay(self) -> None:
        self._plan_replay(None)

    @on(ReplayRequested)
    def _replay_requested(self, message: ReplayRequested) -> None:
        self._plan_replay(message.run_ids, message.names)

    def _plan_replay(
        self, run_ids: Iterable[str] | None, only: Iterable[str] | None = None
    ) -> None:
        if self.replay_running:
            cancel = self.key_hints("replay.cancel")
            self.notify(f"A replay is running; see the Replay tab ({cancel} cancels it).")
            self.action_show_tab("replay")
            return
        names = list(only) if only else self._banner.names
        if not names:
            self.notify(
                "No new log statements: add a flor.log line to the training script and save.",
                title="Nothing to replay",
            )
            return
        chosen = list(run_ids) if run_ids else sorted(self.marked_runs)
        screen = ReplayPlanScreen(
            self.project, names, chosen or None, self.workers_default, self.key_hints
        )
        self.push_screen(screen, self._plan_confirmed)

    def _plan_confirmed(self, confirmed: Any) -> None:
        if confirmed is None:
            return
        plan, server = confirmed
        if len(self.screen_stack) > 1:
            self.pop_screen()
        if _showing(self._replay):
            self._replay.start(plan)
        self.action_show_tab("replay")
        self._runner.start(plan, server)

    @on(ReplayProgressed)
    def _replay_progressed(self, message: ReplayProgressed) -> None:
        if _showing(self._replay):
            self._replay.progress(message.progress)
        self._chart_data_changed()

    @on(ReplayEnded)
    def _replay_ended(self, message: ReplayEnded) -> None:
        if self._quit_when_replay_ends:  # cancelled on the way out: its rows are removed now
            self.exit()
            return
        if _showing(self._replay):
            self._replay.ended(message.result)
            self._replay.reload_replays()
        status = message.result.status if message.result else "failed"
        if status == "finished":
            self.notify(f"Replay {message.replay_id}: {status}")
        else:
            self.notify(f"Replay {message.replay_id}: {status}", severity="warning")
        self._monitor.reload()
        self._invalidate_statements()

    @on(CancelRequested)
    def _cancel_requested(self) -> None:
        if self._runner.cancel():
            self.notify("Cancelling: stopping the workers and removing the replay's rows…")
        else:
            self.notify("No replay is running.")

    # --- app actions ----------------------------------------------------------------------

    async def action_quit(self) -> None:
        """`q` asks first while a replay runs: quitting cancels it."""
        if not self.replay_running or self._quit_when_replay_ends:  # a second q: now
            await super().action_quit()
            return
        if isinstance(self.screen, ConfirmScreen):
            return

        def answered(yes: bool | None) -> None:
            if yes:  # quit once the replay has stopped its workers and removed its rows
                self._quit_when_replay_ends = True
                self._runner.cancel()
                self.notify("Cancelling the replay, then quitting… (q again quits at once)")

        self.push_screen(
            ConfirmScreen(
                "A replay is running",
                f"Quit and cancel it? {self.key_hints('confirm.yes')} quits (the replay is "
                f"cancelled), {self.key_hints('confirm.no')} goes on.",
                self.key_hints,
            ),
            answered,
        )

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen(self.keymap))

    def action_reload(self) -> None:
        monitor = self._monitor
        monitor.reload()
        monitor.check_pending()
        if _showing(self._replay):
            self._replay.reload_replays()
        self._invalidate_statements()

    # --- keys: the keymap in force, the palette -------------------------------------------

    def set_keymap(self, keymap: Mapping[str, str]) -> None:
        """Textual's, and kept so that help and the palette show the keys in force."""
        self.keymap = dict(keymap)
        self.key_hints.keymap = self.keymap
        super().set_keymap(dict(keymap))

    def update_keymap(self, keymap: Mapping[str, str]) -> None:
        self.keymap = {**self.keymap, **keymap}
        self.key_hints.keymap = self.keymap
        super().update_keymap(dict(keymap))

    def get_key_display(self, binding: Binding) -> str:
        """`enter` reads `⏎` wherever it is bound, also after a keymap rebinds it."""
        return keys.KEY_DISPLAY.get(binding.key) or super().get_key_display(binding)

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        """Every action of the key table with its key in force, then Textual's own."""
        on_main = screen is self.screen_stack[0]

        def display(name: str) -> str:
            return self.get_key_display(Binding(name, ""))

        on_screen = keys.screen_scopes(screen)
        for entry in palette_entries(on_screen, on_main, self.keymap, display):
            run = partial(self._palette_run, entry.scope, entry.key.action)
            yield SystemCommand(entry.title, entry.help, run)
        yield from super().get_system_commands(screen)

    async def _palette_run(self, scope: str, action: str) -> None:
        _title, selector, tab = keys.SCOPES[scope]
        if tab is not None:
            self.query_one("#tabs", TabbedContent).active = tab
            self._focus_tab(tab)
        target: App[int] | Screen[Any] | Widget = self
        if scope in keys.screen_scopes(self.screen):
            target = self.screen
        elif scope in keys.SCREEN_SCOPES:
            return  # its screen closed while the palette was open
        if selector:
            matches = self.screen.query(selector)
            if not matches:
                return
            target = matches.first()
        await self.run_action(action, target)


__all__ = ["TITLE_ICON", "WorkbenchApp"]
