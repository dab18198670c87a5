"""Planning, running and cancelling a replay from the workbench (a WorkbenchApp mixin).

`r` opens the plan (florwb.screens.replay_plan), confirming runs `florwb_engine.replay.execute`
in a thread worker; its progress callbacks arrive from executor threads and are forwarded
as messages, so bars move while every key still answers. Cancel sets the executor's
event: the engine stops the workers and removes the replay's rows itself.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from textual import work

from florwb.screens.replay import ReplayPane
from florwb.screens.replay_plan import ReplayPlanScreen
from florwb.workbench import format as fmt
from florwb.workbench.messages import ReplayEnded, ReplayProgressed
from florwb_engine.watch import PendingStatements

if TYPE_CHECKING:
    from florwb.app import WorkbenchApp


class ReplayControl:
    """The replay action, the executor worker and its messages."""

    project: Path
    pending: list[PendingStatements]
    replay_cancel: threading.Event | None
    replay_running: bool
    workers_default: int

    def pending_names(self: WorkbenchApp) -> list[str]:
        return list(dict.fromkeys(n for p in self.pending for n in p.new))

    def action_replay(self: WorkbenchApp, run_ids: Sequence[str] | None = None) -> None:
        if self.replay_running:
            self.notify("A replay is running; see the Replay tab (c cancels it).")
            self.action_show_tab("replay")
            return
        names = self.pending_names()
        if not names:
            self.notify(
                "No new log statements: add a flor.log line to the training script and save.",
                title="Nothing to replay",
            )
            return
        chosen = list(run_ids) if run_ids else sorted(self.marked_runs)
        screen = ReplayPlanScreen(self.project, names, chosen or None, self.workers_default)
        self.push_screen(screen, self._plan_confirmed)

    def _plan_confirmed(self: WorkbenchApp, confirmed: Any) -> None:
        if confirmed is None:
            return
        plan, workers = confirmed
        if len(self.screen_stack) > 1:
            self.pop_screen()
        self.replay_running = True
        self.replay_cancel = threading.Event()
        if pane := self._pane(ReplayPane):
            pane.start(plan)
        self.action_show_tab("replay")
        self._execute(plan, self.replay_cancel, workers)

    @work(thread=True, exclusive=True, group="replay")
    def _execute(self: WorkbenchApp, plan: Any, cancel: threading.Event, workers: Any) -> None:
        from florwb_engine.replay import execute

        def forward(progress: Any) -> None:
            self.post_message(ReplayProgressed(plan.replay_id, progress))

        try:
            result = execute(plan, on_progress=forward, cancel=cancel, server=workers)
        except Exception as exc:
            self.post_message(ReplayEnded(plan.replay_id, None, fmt.one_line(exc)))
            return
        self.post_message(ReplayEnded(plan.replay_id, result))

    def on_replay_progressed(self: WorkbenchApp, message: ReplayProgressed) -> None:
        if pane := self._pane(ReplayPane):
            pane.progress(message.progress)

    def on_replay_ended(self: WorkbenchApp, message: ReplayEnded) -> None:
        self.replay_running = False
        self.replay_cancel = None
        if pane := self._pane(ReplayPane):
            pane.ended(message.result, message.error)
        status = message.result.status if message.result else "failed"
        severity = "information" if status == "finished" else "warning"
        self.notify(f"Replay {message.replay_id}: {status}", severity=severity)
        self.load_history()
        self.load_replays()
        self._statements_stale = True
        if self._active_tab() == "statements":
            self._load_statements()

    def cancel_replay(self: WorkbenchApp) -> None:
        if self.replay_cancel is None:
            self.notify("No replay is running.")
            return
        self.replay_cancel.set()
        self.notify("Cancelling: stopping the workers and removing the replay's rows…")
