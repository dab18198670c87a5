"""The replay runner: runs one confirmed replay plan at a time, and cancels it.

A component with no screen of its own (a hidden widget). `start` runs
`florwb_engine.replay.execute` in a thread worker; its progress callbacks arrive from
executor threads and are forwarded as `ReplayProgressed` messages, so bars move while every
key still answers. `cancel` sets the executor's event: the engine stops the workers and
removes the replay's rows itself. `ReplayEnded` always follows `start`: with the result,
or with none when the executor raised (the app's worker handler shows why).
"""

from __future__ import annotations

import threading
from typing import Any

from textual.widget import Widget

from florwb.ui.messages import ReplayEnded, ReplayProgressed
from florwb.ui.workers import run_in_thread


class ReplayRunner(Widget):
    """Owns the running replay's cancel event; posts its progress and its end."""

    DEFAULT_CSS = "ReplayRunner { display: none; }"

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._cancel: threading.Event | None = None

    @property
    def running(self) -> bool:
        return self._cancel is not None

    def start(self, plan: Any, server: Any) -> None:
        """Execute `plan` (a florwb_engine.replay.Plan) on `server` (the fork server the
        plan screen warmed up, or None for a fresh one)."""
        cancel = self._cancel = threading.Event()
        replay_id = plan.replay_id

        def work() -> None:
            from florwb_engine.replay import execute

            def forward(progress: Any) -> None:
                self.post_message(ReplayProgressed(replay_id, progress))

            result = None
            try:
                result = execute(plan, on_progress=forward, cancel=cancel, server=server)
            finally:  # an exception goes on to the app's worker handler
                self.post_message(ReplayEnded(replay_id, result))

        run_in_thread(self, work, group="replay", description=f"running replay {replay_id}")

    def cancel(self) -> bool:
        """Ask the running replay to stop; False when none runs."""
        if self._cancel is None:
            return False
        self._cancel.set()
        return True

    def on_replay_ended(self, _message: ReplayEnded) -> None:
        """The replay is over; the message goes on to the app."""
        self._cancel = None

    def on_unmount(self) -> None:
        self.cancel()
