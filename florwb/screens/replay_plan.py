"""The replay plan: what a replay would re-execute and how long it should take, shown
before anything runs. Planning (propagating the statements into each version, reading the
recorded timings) happens in a worker; +/- re-plans for another number of workers."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.table import Table
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from florwb.ui import format as fmt
from florwb.ui import keys
from florwb.ui.workers import run_in_thread

# More workers than cores only slow a replay down (they take turns on the cores).
MAX_WORKERS = max(os.cpu_count() or 1, 1)


@dataclass
class PlanReady(Message):
    """The planner's answer (a Plan, or why there is none) for request `serial`."""

    plan: Any | None
    error: str | None
    serial: int


class ReplayPlanScreen(ModalScreen[Any]):
    """Shows what a replay would do and how long it should take; returns the Plan to run
    and the fork server warmed up while the user read it."""

    BINDINGS = keys.bindings("plan")
    DEFAULT_CSS = """
    ReplayPlanScreen { align: center middle; }
    ReplayPlanScreen > Vertical { width: 78; max-width: 100%; height: auto; max-height: 100%;
        border: thick $accent; background: $surface; padding: 0 1; }
    ReplayPlanScreen #plan-title { text-style: bold; }
    ReplayPlanScreen #plan-body { height: auto; max-height: 14; }
    ReplayPlanScreen #plan-estimate { margin-top: 1; }
    ReplayPlanScreen Horizontal { height: 3; align-horizontal: right; }
    ReplayPlanScreen Button { margin-left: 1; }
    """

    def __init__(
        self, project: Path, names: Sequence[str], run_ids: Sequence[str] | None, workers: int
    ) -> None:
        super().__init__()
        self.project = project
        self.names = list(names)
        self.run_ids = run_ids
        self.n_workers = workers
        self.plan: Any | None = None
        self.fork_server: Any | None = None  # the replay's warm fork server, once planning starts
        self.serial = 0

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(f"Replay plan: {', '.join(self.names)}", id="plan-title", markup=False)
            with VerticalScroll(id="plan-body"):
                yield Static(
                    "Planning… (propagating the statements into each version)", id="plan-table"
                )
            yield Static(id="plan-estimate")
            with Horizontal():
                yield Button("Start ⏎", id="plan-start", variant="success", disabled=True)
                yield Button("Close esc", id="plan-close")

    def on_mount(self) -> None:
        self._replan()

    def _replan(self) -> None:
        self.serial += 1
        self.query_one("#plan-start", Button).disabled = True
        self._plan(self.serial, self.n_workers)

    def _plan(self, serial: int, workers: int) -> None:
        def work() -> None:
            from florwb_engine.replay import PlanError, plan_replay, warm_workers

            if self.fork_server is None:  # imports what the scripts need while the user reads
                self.fork_server = warm_workers(self.project, self.names)
            try:
                plan = plan_replay(self.project, self.names, run_ids=self.run_ids, workers=workers)
            except PlanError as exc:  # why this replay cannot run: said in the plan
                self.post_message(PlanReady(None, str(exc), serial))
                return
            self.post_message(PlanReady(plan, None, serial))

        run_in_thread(self, work, group="plan", description="planning the replay")

    @on(PlanReady)
    def _planned(self, planned: PlanReady) -> None:
        planned.stop()
        if planned.serial != self.serial:
            return
        table = self.query_one("#plan-table", Static)
        estimate = self.query_one("#plan-estimate", Static)
        if planned.error:
            self.plan = None
            table.update(Text(f"Cannot replay: {planned.error}", "bold red"))
            estimate.update("")
            return
        plan = planned.plan
        assert plan is not None  # no error: the planner returned a plan
        self.plan = plan
        table.update(plan_table(plan))
        ready = plan.ready()
        line = Text()
        line.append(f"estimate {fmt.duration(plan.estimate_s)}", "bold")
        line.append(f" with {plan.workers} worker{'s' if plan.workers != 1 else ''} (+/-)")
        line.append(f" · {len(ready)} of {len(plan.runs)} runs to replay")
        segments = sum(len(r.segments) for r in ready)
        line.append(f" · {fmt.plural(segments, 'segment')}")
        estimate.update(line)
        self.query_one("#plan-start", Button).disabled = not ready
        if ready:
            self.query_one("#plan-start", Button).focus()

    def action_start(self) -> None:
        if self.plan is not None and self.plan.ready():
            fork_server, self.fork_server = self.fork_server, None
            self.dismiss((self.plan, fork_server))

    def action_close(self) -> None:
        self.dismiss(None)

    def on_unmount(self) -> None:
        if self.fork_server is not None:  # closed without starting: nothing runs on it
            self.fork_server.close()
            self.fork_server = None

    def action_workers(self, step: int) -> None:
        wanted = self.n_workers + step
        workers = max(1, min(MAX_WORKERS, wanted))
        if wanted > MAX_WORKERS:
            self.notify(
                f"{fmt.plural(MAX_WORKERS, 'worker')} at most: this machine has "
                f"{fmt.plural(MAX_WORKERS, 'core')}, and more workers than cores would only "
                "take turns on them.",
                title="Workers",
            )
        if workers != self.n_workers:
            self.n_workers = workers
            self._replan()

    @on(Button.Pressed, "#plan-start")
    def _start(self) -> None:
        self.action_start()

    @on(Button.Pressed, "#plan-close")
    def _close(self) -> None:
        self.action_close()


def plan_table(plan: Any) -> Table:
    table = Table(box=None, padding=(0, 1), show_edge=False, header_style="bold", expand=True)
    table.add_column("run", no_wrap=True)
    table.add_column("version", no_wrap=True)
    table.add_column("mode", no_wrap=True)
    table.add_column("seg", justify="right")
    table.add_column("est.", justify="right", no_wrap=True)
    table.add_column("status / notes", ratio=1, no_wrap=True, overflow="ellipsis")
    for run in plan.runs:
        style = {"ready": "green", "skip": "yellow", "done": "dim"}.get(run.status, "")
        notes = run.reason or "; ".join(run.notes) or ""
        table.add_row(
            fmt.short_run(run.run_id),
            fmt.short_version(run.version),
            run.mode or "-",
            str(len(run.segments)),
            fmt.duration(run.estimate_s) if run.status == "ready" else "-",
            Text.assemble((run.status, style), (f" {notes}" if notes else "", "dim")),
        )
    return table
