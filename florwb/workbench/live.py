"""How the workbench keeps up with the world while it is open (a WorkbenchApp mixin).

Two sources of change: journals growing (a run recording in another terminal, a replay
landing) are noticed by comparing journal sizes every poll (Toolong style: read only what
is new), and training scripts saved with new `flor.log` lines are noticed by a watchdog
observer within a second. Both end in thread workers that post messages.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

from rich.text import Text
from textual import work
from textual.widgets import Static

from florwb.screens.history import HistoryPane
from florwb.screens.replay import ReplayPane
from florwb.workbench import format as fmt
from florwb.workbench.messages import HistoryLoaded, LiveUpdated, PendingChanged, ScriptSaved
from florwb_engine.store import Store
from florwb_engine.store.queries import History, load_history, load_live
from florwb_engine.watch import JournalTail, PendingStatements, ScriptWatcher, pending_statements

if TYPE_CHECKING:
    from florwb.app import WorkbenchApp

RUNNING_POLL_EVERY = 3  # polls: re-read running runs this often even if journals are quiet
RELOAD_COST_FACTOR = 4  # wait this many times the last reload's duration before the next


class LiveWatch:
    """Polling, the script watcher and the pending-statement banner."""

    project: Path
    store: Store
    history: History | None
    pending: list[PendingStatements]
    live: list
    watch_scripts: bool
    _tail: JournalTail
    _watcher: ScriptWatcher | None
    _watched: set[Path]
    _polls: int
    _offered: set[str]
    _pending_seen: bool
    _next_reload: float = 0.0

    def poll(self: WorkbenchApp) -> None:
        self._polls += 1
        if time.monotonic() < self._next_reload:
            return  # a big project: reloading takes a while, so not every second
        running = bool(self.history and any(r.status == "running" for r in self.history.runs))
        self._poll(running and self._polls % RUNNING_POLL_EVERY == 0)

    @work(thread=True, exclusive=True, group="poll")
    def _poll(self: WorkbenchApp, force: bool) -> None:
        """Reload only when a journal grew (a run recording, a replay landing), or now and
        then while runs are marked running (a killed run's journal never grows again).
        Reloads are spaced by a few times what the last one cost, so a project with a
        thousand runs does not spend the machine on refreshing its history."""
        if not self._tail.changed() and not force:
            return
        began = time.monotonic()
        try:
            metric = self.history.metric if self.history else None
            history = load_history(self.store, metric)
            live = load_live(self.store) if any(r.status == "running" for r in history.runs) else []
        except Exception:
            return  # the next poll tries again; a busy store is normal here
        finally:
            self._next_reload = time.monotonic() + RELOAD_COST_FACTOR * (time.monotonic() - began)
        self.post_message(HistoryLoaded(history))
        self.post_message(LiveUpdated(live))

    def on_live_updated(self: WorkbenchApp, message: LiveUpdated) -> None:
        labels = {}
        for run in message.live:
            total = run.total if run.total is not None else "?"
            labels[run.run_id] = f"{run.done}/{total} {run.loop or ''}".strip()
        pane = self._pane(HistoryPane)
        if pane is None:
            return
        pane.list.set_live(labels)
        pane.refresh_summary()
        self.live = message.live
        if pane := self._pane(ReplayPane):
            pane.show_live(message.live)

    def _update_watch(self: WorkbenchApp, history: History) -> None:
        if not self.watch_scripts:
            return
        paths = {self.project / r.script for r in history.runs if r.script}
        paths = {p for p in paths if p.parent.is_dir()}
        if paths == self._watched:
            return
        if self._watcher is not None:
            self._watcher.stop()
        self._watched = paths
        if paths:
            self._watcher = ScriptWatcher(paths, lambda _path: self.post_message(ScriptSaved()))
            self._watcher.start()

    def on_script_saved(self: WorkbenchApp, _message: ScriptSaved) -> None:
        self.check_pending()
        self._statements_stale = True
        if self._active_tab() == "statements":
            self._load_statements()

    @work(thread=True, exclusive=True, group="pending")
    def check_pending(self: WorkbenchApp) -> None:
        history = self.history
        if history is None:
            return
        newest: dict[str, str | None] = {}
        for run in history.runs:  # oldest first: the last one wins
            if run.script:
                newest[run.script] = run.version or newest.get(run.script)
        found = []
        for script, version in newest.items():
            try:
                found.append(pending_statements(self.project, script, version))
            except Exception as exc:
                found.append(PendingStatements(script, version, (), error=fmt.one_line(exc)))
        self.post_message(PendingChanged(found))

    def on_pending_changed(self: WorkbenchApp, message: PendingChanged) -> None:
        self._pending_seen, first = True, not self._pending_seen
        self.pending = message.pending
        pane = self._pane(HistoryPane)
        if pane is None:
            return
        banner = self.query_one("#pending-banner", Static)
        new = [(p, n) for p in message.pending for n in p.new]
        if new:
            # the offer first, so a narrow terminal never cuts it off
            text = Text("● r: replay past runs", "bold")
            names = ", ".join(f"{n} L{p.lines.get(n, '?')}" for p, n in new)
            scripts = ", ".join(dict.fromkeys(p.script for p, _n in new))
            text.append(f" · new in {scripts}: ")
            text.append(names)
            banner.update(text)
            banner.add_class("-shown")
            fresh = [n for _p, n in new if n not in self._offered]
            if fresh and not first:  # the banner says it at startup; toast what is new
                self.notify(
                    f"New log statement {', '.join(fresh)}: press r to replay it for past runs",
                    title="Hindsight logging",
                    timeout=8,
                )
            self._offered.update(n for _p, n in new)
        else:
            errors = [p.error for p in message.pending if p.error]
            if errors:
                banner.update(Text(f"⚠ {errors[0]}", "yellow"))
                banner.add_class("-shown")
            else:
                banner.remove_class("-shown")
        pane.refresh_summary()
