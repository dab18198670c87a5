"""The replay plan: what a replay would re-execute and how long it should take, shown
before anything runs. Planning (propagating the statements into each version, reading the
recorded timings) happens in a worker; +/- re-plans for another number of workers; space
on a run leaves it out of the replay (or takes it back in) before anything starts."""

from __future__ import annotations

import copy
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import Button, DataTable, Static

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


EXCLUDED = "excluded by you (space takes it back)"


class PlanRunsTable(DataTable[object]):
    """The plan's runs, one row each; space includes or excludes the run under the cursor,
    ⏎ starts the replay (DataTable's select)."""

    BINDINGS = keys.bindings("plan_runs")

    def action_toggle_run(self) -> None:
        screen = self.screen
        if isinstance(screen, ReplayPlanScreen):
            screen.toggle_row(self.cursor_row)


def without_runs(plan: Any, excluded: set[str]) -> Any:
    """A copy of `plan` in which the `excluded` ready runs are skipped (their segments
    dropped, the estimate scheduled again over the rest); the plan itself is unchanged."""
    shown = copy.deepcopy(plan)
    for run in shown.runs:
        if run.run_id in excluded and run.status == "ready":
            run.status, run.reason, run.segments, run.estimate_s = "skip", EXCLUDED, [], 0.0
    from florwb_engine.replay.plan import estimate_of  # the planner loads libcst: on use

    shown.estimate_s = estimate_of(shown)
    return shown


class ReplayPlanScreen(ModalScreen[Any]):
    """Shows what a replay would do and how long it should take; returns the Plan to run
    and the fork server warmed up while the user read it."""

    BINDINGS = keys.bindings("plan")
    KEY_SCOPES = ("plan", "plan_runs")
    DEFAULT_CSS = """
    ReplayPlanScreen { align: center middle; }
    ReplayPlanScreen > Vertical { width: 78; max-width: 100%; height: auto; max-height: 100%;
        border: thick $accent; background: $surface; padding: 0 1; }
    ReplayPlanScreen #plan-title { text-style: bold; }
    ReplayPlanScreen #plan-body { height: auto; max-height: 14; }
    ReplayPlanScreen PlanRunsTable { height: auto; max-height: 12; }
    ReplayPlanScreen #plan-note { height: auto; max-height: 4; color: $text-muted; }
    ReplayPlanScreen #plan-estimate { margin-top: 1; }
    ReplayPlanScreen Horizontal { height: 3; align-horizontal: right; }
    ReplayPlanScreen Button { margin-left: 1; }
    """

    def __init__(
        self,
        project: Path,
        names: Sequence[str],
        run_ids: Sequence[str] | None,
        workers: int,
        hints: keys.KeyHints | None = None,
    ) -> None:
        super().__init__()
        self.project = project
        self.hints = hints or keys.KeyHints()
        self.names = list(names)
        self.run_ids = run_ids
        self.n_workers = workers
        self.plan: Any | None = None  # what Start runs: the planned one less the excluded runs
        self.planned: Any | None = None  # as the planner returned it
        self.excluded: set[str] = set()  # run ids the user left out (space)
        self.fork_server: Any | None = None  # the replay's warm fork server, once planning starts
        self.serial = 0
        self.start_when_planned = False  # Start pressed while planning: it starts once planned
        self.plan_error: str | None = None

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(f"Replay plan: {', '.join(self.names)}", id="plan-title", markup=False)
            with VerticalScroll(id="plan-body"):
                yield Static(
                    "Planning… (propagating the statements into each version)", id="plan-table"
                )
                yield PlanRunsTable(id="plan-runs", cursor_type="row", zebra_stripes=True)
            yield Static(id="plan-note")
            yield Static(id="plan-estimate")
            with Horizontal():
                yield Button(
                    f"Start {self.hints('plan.start')}",
                    id="plan-start",
                    variant="success",
                    disabled=True,
                )
                yield Button(f"Close {self.hints('plan.close')}", id="plan-close")

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
            self.plan_error, self.start_when_planned = planned.error, False
            table.update(Text(f"Cannot replay: {planned.error}", "bold red"))
            estimate.update("")
            return
        plan = planned.plan
        assert plan is not None  # no error: the planner returned a plan
        self.planned = plan
        table.display = False
        self._show_plan(focus=True)
        if self.start_when_planned:
            self.start_when_planned = False
            if plan.warnings:  # what the user must read first: shown, Start pressed again
                self.notify("read the warning, then start again", title="Replay plan")
            else:
                self.action_start()

    def _show_plan(self, focus: bool = False) -> None:
        """The planned runs less the excluded ones: table, estimate, Start."""
        if self.planned is None:
            return
        plan = self.plan = without_runs(self.planned, self.excluded)
        runs = self.query_one(PlanRunsTable)
        row = runs.cursor_row
        fill_plan_table(runs, plan)
        if row < runs.row_count:
            runs.move_cursor(row=row)
        ready = plan.ready()
        line = Text()
        line.append(f"estimate {fmt.duration(plan.estimate_s)}", "bold")
        more, fewer = self.hints("plan.more"), self.hints("plan.fewer")
        line.append(
            f" with {self.n_workers} worker{'s' if self.n_workers != 1 else ''} ({more}/{fewer})"
        )
        line.append(f" · {len(ready)} of {len(plan.runs)} runs to replay")
        segments = sum(len(r.segments) for r in ready)
        line.append(f" · {fmt.plural(segments, 'segment')}")
        if self.excluded:
            line.append(f" · {len(self.excluded)} excluded", "yellow")
        for note in getattr(plan, "notes", ()):  # fewer at once for the recorded threads
            line.append(f" · {note}", "yellow")
        for warning in getattr(plan, "warnings", ()):  # runs still recording
            line.append(f"\n⚠ {warning}", "bold yellow")
        line.append(f" · {self.hints('plan_runs.toggle')} include/exclude", "dim")
        self.query_one("#plan-estimate", Static).update(line)
        self.query_one("#plan-start", Button).disabled = not ready
        if focus:
            runs.focus()

    def toggle_row(self, row: int) -> None:
        """Space on a run: leave it out of the replay, or take it back in."""
        if self.planned is None or not 0 <= row < len(self.planned.runs):
            return
        run = self.planned.runs[row]
        if run.run_id in self.excluded:
            self.excluded.discard(run.run_id)
        elif run.status == "ready":
            self.excluded.add(run.run_id)
        else:
            self.notify(
                f"{fmt.short_run(run.run_id)} is not replayed: {run.reason or run.status}",
                title="Replay plan",
            )
            return
        self._show_plan()

    @on(DataTable.RowHighlighted, "#plan-runs")
    def _row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        """The whole reason and notes of the run under the cursor (the cell is one line)."""
        event.stop()
        plan = self.plan
        note = self.query_one("#plan-note", Static)
        if plan is None or not 0 <= event.cursor_row < len(plan.runs):
            note.update("")
            return
        run = plan.runs[event.cursor_row]
        said = [run.reason] if run.reason else []
        said += run.notes
        note.update(Text(f"{fmt.short_run(run.run_id)}: {'; '.join(said) or run.status}"))

    @on(DataTable.RowSelected, "#plan-runs")
    def _row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self.action_start()

    def action_start(self) -> None:
        if self.plan is not None and self.plan.ready():
            fork_server, self.fork_server = self.fork_server, None
            self.dismiss((self.plan, fork_server))
        elif self.planned is None and self.plan_error is None and not self.start_when_planned:
            self.start_when_planned = True  # still planning: the key is kept, not dropped
            self.query_one("#plan-table", Static).update(
                "Planning… (propagating the statements into each version) · "
                f"{self.hints('plan.start')} pressed: the replay starts once it is planned"
            )

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


def fill_plan_table(table: DataTable[object], plan: Any) -> None:
    """One row per run of `plan`: run, version, mode, segments, estimate, status / notes."""
    table.clear(columns=True)
    for title, width in (
        ("run", 6),
        ("version", 8),
        ("mode", 6),
        ("seg", 3),
        ("est.", 6),
        ("status / notes", None),
    ):
        table.add_column(title, key=title, width=width)
    for run in plan.runs:
        style = {"ready": "green", "skip": "yellow", "done": "dim"}.get(run.status, "")
        notes = run.reason or "; ".join(run.notes) or ""
        table.add_row(
            fmt.short_run(run.run_id),
            fmt.short_version(run.version),
            run.mode or "-",
            Text(str(len(run.segments)), justify="right"),
            Text(fmt.duration(run.estimate_s) if run.status == "ready" else "-", justify="right"),
            Text.assemble((run.status, style), (f" {notes}" if notes else "", "dim")),
            key=run.run_id,
        )
