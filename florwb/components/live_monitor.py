"""The live monitor: keeps the workbench up to date with the world while it is open.

A component with no screen of its own (a hidden widget, so it can own timers and post
messages that bubble to the app). Two sources of change: journals appearing or growing (a
run recording in another terminal, a replay landing) are noticed by comparing journal
sizes every poll (Toolong style: nothing is read unless something is new), and training
scripts saved with new `flor.log` lines are noticed by a watchdog observer within a second.
Both end in thread workers that post `HistoryLoaded`, `LiveUpdated` and `PendingChanged`.

It owns what that needs: the journal sizes, the script watcher, the metric the history is
loaded with and the reload pacing. It never touches other widgets.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

from textual import on
from textual.widget import Widget

from florwb.ui.messages import (
    HistoryLoaded,
    LiveUpdated,
    PendingChanged,
    ScriptSaved,
    StoreFreed,
    StoreWaiting,
)
from florwb.ui.workers import run_in_thread
from florwb_engine.store import Store, StoreBusy
from florwb_engine.store.db import LockFreedListener, LockWaitListener, lock_waits_reported
from florwb_engine.store.history_values import (
    load_history_values,
    load_series_values,
    refresh_runs,
    with_values,
)
from florwb_engine.store.name_coverage import names_lacking
from florwb_engine.store.queries import History, load_live
from florwb_engine.watch import JournalSizes, PendingStatements, ScriptWatcher, pending_statements

RUNNING_POLL_EVERY = 3  # polls: re-read running runs this often even if journals are quiet
RELOAD_COST_FACTOR = 4  # wait this many times the last whole reload's duration
LIVE_REFRESH_S = 2.0  # at most this often, the rows of the runs recording are read again
# ... and spaced so that following them takes at most this share of a core (CPU time of
# the read, ingestion of their new rows included): the idle workbench stays under 1%
FOLLOW_SHARE = 0.01
BUSY_RETRY_S = 1.0  # a reload that found the catalog held past the lock wait tries again


def waiting_line(holder: str, waited_s: float) -> str:
    """What the workbench says while another process holds the catalog."""
    return f"The catalog is held by {holder}; retrying… {waited_s:.0f} s"


class LiveMonitor(Widget):
    """Loads the history, polls the journals, watches the scripts, finds pending statements."""

    DEFAULT_CSS = "LiveMonitor { display: none; }"

    def __init__(
        self,
        project: Path,
        store: Store,
        *,
        poll_s: float = 1.0,
        watch_scripts: bool = True,
        follow_share: float = FOLLOW_SHARE,
        id: str | None = None,
    ) -> None:
        super().__init__(id=id)
        self.project = project
        self.store = store
        self.poll_s = poll_s
        self.follow_share = follow_share
        self.watch_scripts = watch_scripts
        self.history: History | None = None  # the newest history this monitor loaded
        self.metric: str | None = None  # the sparkline metric reloads keep
        self._busy_since: float | None = None
        self._poll_was_busy = False
        self.holder = "another process"  # who held the catalog when a connection last waited
        self._sizes = JournalSizes(project)
        self._watcher: ScriptWatcher | None = None
        self._watched: set[Path] = set()
        self._watching = False
        self._polls = 0
        self._polling = False  # a poll's worker is reading
        self._values_loading = False  # the first load is reading the history's values
        self._next_reload = 0.0

    def on_mount(self) -> None:
        if self.poll_s > 0:
            self.set_interval(self.poll_s, self._poll)

    def on_unmount(self) -> None:
        if self._watcher is not None:
            self._watcher.stop()

    # --- the history ----------------------------------------------------------------------

    def reload(self, *, initial: bool = False) -> None:
        """Read the history now (in a worker); posts HistoryLoaded. While another process
        holds the catalog, posts StoreWaiting (who holds it, for how long) and keeps
        retrying, instead of a loading message that never changes."""
        metric = self.metric
        if self._busy_since is None:
            self._busy_since = time.monotonic()
        began = self._busy_since  # retries after a busy catalog keep counting from the first

        def work() -> None:
            if initial:
                self._sizes.changed()  # the poll then reports only what is new after this
            try:
                with lock_waits_reported(self._say_waiting(began), self._say_freed()):
                    # the first frame lists the runs before their values are scanned
                    history = load_history_values(self.store, metric, values=not initial)
                    listed = history.values_pending and history.metric is not None
                    if listed and history.metric is not None:
                        self._values_loading = True  # no poll replaces it meanwhile
                        self.post_message(HistoryLoaded(history))
                        values = load_series_values(self.store, history.metric)
                        history = with_values(history, values)
            except StoreBusy:
                self.post_message(StoreWaiting(self.holder, time.monotonic() - began))
                self.call_later(self._retry_reload, initial)
                return
            finally:
                self._values_loading = False
            self._busy_since = None
            # after the listed history, only the values are new
            self.post_message(HistoryLoaded(history, values_only=listed))

        run_in_thread(self, work, group="history", description="loading the history")

    def _say_waiting(self, began: float) -> LockWaitListener:
        def said(holder: str, _waited_s: float) -> None:
            self.holder = holder
            self.post_message(StoreWaiting(holder, time.monotonic() - began))

        return said

    def _say_freed(self, waits: list[float] | None = None) -> LockFreedListener:
        """The holder is gone: said at once (and the time waited kept in `waits`)."""

        def freed(waited_s: float) -> None:
            if waits is not None:
                waits.append(waited_s)
            self.post_message(StoreFreed())

        return freed

    def _retry_reload(self, initial: bool) -> None:
        self.set_timer(BUSY_RETRY_S, lambda: self.reload(initial=initial))

    @on(HistoryLoaded)
    def _loaded(self, message: HistoryLoaded) -> None:
        """Keep what the next poll and check need; the message goes on to the app."""
        self.history = message.history
        if self.metric is None:  # the loader's default; a metric the user chose stays
            self.metric = message.history.metric
        changed = not (message.runs_only or message.values_only)
        if self._watching and changed:  # runs recording add no script
            self._update_watch()
            self.check_pending()

    def _poll(self) -> None:
        self._polls += 1
        if time.monotonic() < self._next_reload:
            return  # a big project: reloading takes a while, so not every second
        if self._polling or self._values_loading or self.history is None:
            return  # the last read is still going (the first load too): one at a time
        self._polling = True
        history = self.history
        running = {r.run_id for r in history.runs if r.status == "running"} if history else set()
        force = (bool(running) and self._polls % RUNNING_POLL_EVERY == 0) or self._poll_was_busy
        metric = self.metric

        def work() -> None:
            """Reload only when a journal grew, or now and then while runs are marked
            running (a killed run's journal never grows again). When only the journals of
            runs recording grew, only their rows are read again (refresh_runs); reads are
            spaced by a multiple of what the last one cost, so a project with a thousand
            runs and one recording does not spend the machine on refreshing its history."""
            try:
                read()
            finally:
                self._polling = False

        def read() -> None:
            changes = self._sizes.changes()
            if changes == set() and not force:
                return
            began, cpu = time.monotonic(), time.process_time()
            waits: list[float] = []  # time spent waiting on another process: not our cost
            live_only = (
                history is not None
                and not self._poll_was_busy
                and changes is not None
                and bool(running)
                and all(any(name.startswith(f"{r}.") for r in running) for name in changes)
            )
            try:
                with lock_waits_reported(self._say_waiting(began), self._say_freed(waits)):
                    fresh = None
                    if live_only and history is not None and metric == history.metric:
                        fresh = refresh_runs(self.store, history, running)
                    whole = fresh is None
                    if fresh is None:
                        fresh = load_history_values(self.store, metric)
                    recording = any(r.status == "running" for r in fresh.runs)
                    live = load_live(self.store) if recording else []
            except StoreBusy:
                self._poll_was_busy = True  # the next poll retries what this one saw change
                waits.append(time.monotonic() - began)  # it all went on waiting
                return
            finally:
                if live_only:
                    spent = (time.process_time() - cpu) / self.follow_share
                    self._next_reload = time.monotonic() + max(spent, LIVE_REFRESH_S)
                else:
                    cost = time.monotonic() - began - sum(waits)
                    self._next_reload = time.monotonic() + RELOAD_COST_FACTOR * max(cost, 0.0)
            self._poll_was_busy = False
            self.post_message(HistoryLoaded(fresh, runs_only=not whole))
            self.post_message(LiveUpdated(live))

        run_in_thread(self, work, group="poll", description="refreshing the history")

    # --- the scripts ----------------------------------------------------------------------

    def start_watching(self) -> None:
        """Watch the recorded scripts from now on (after the first frame: the observer and
        the pending check import and read files, which would compete with drawing it)."""
        self._watching = True
        self._update_watch()
        self.check_pending()

    @property
    def watcher_ready(self) -> bool:
        """True once a save of any recorded script will be noticed."""
        return self._watcher is not None and self._watcher.ready.is_set()

    def _update_watch(self) -> None:
        if not self.watch_scripts or self.history is None:
            return
        paths = {self.project / r.script for r in self.history.runs if r.script}
        paths = {p for p in paths if p.parent.is_dir()}
        if paths == self._watched:
            return
        if self._watcher is not None:
            self._watcher.stop()
            self._watcher = None
        self._watched = paths
        if paths:
            self._watcher = ScriptWatcher(paths, self._saved)
            self._watcher.start()

    def _saved(self, _path: Path) -> None:
        """On the observer's thread: hand over to the event loop."""
        self.post_message(ScriptSaved())

    @on(ScriptSaved)
    def _script_saved(self) -> None:
        """Look for new statements; the message goes on to the app (the diff is stale)."""
        self.check_pending()

    def check_pending(self) -> None:
        """Compare each script on disk with its newest recorded version (in a worker)."""
        history = self.history
        if history is None:
            return
        newest: dict[str, str | None] = {}
        for run in history.runs:  # oldest first: the last one wins
            if run.script:
                newest[run.script] = run.version or newest.get(run.script)

        def work() -> None:
            found = [
                self._lacking(pending_statements(self.project, s, v), history)
                for s, v in newest.items()
            ]
            self.post_message(PendingChanged(found))

        run_in_thread(self, work, group="pending", description="reading the training scripts")

    @staticmethod
    def _lacking(pending: PendingStatements, history: History) -> PendingStatements:
        """What a replay can still fill in: the working tree's names that some run of the
        script lacks (recorded or replayed counts as having it), in script order. So the
        offer goes once every run has them, and stays after a cancelled replay."""
        if pending.error:
            return pending
        lacking = set(
            names_lacking(history.finished, history.having, pending.script, pending.working)
        )
        new = tuple(n for n in pending.working if n in lacking)
        return replace(pending, new=new)
