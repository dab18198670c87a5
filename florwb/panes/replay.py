"""The Replay tab: live progress of the running replay (a bar per run, overall ETA), of
runs recording in another terminal, and the past replays.

It draws what it is handed: the app forwards the replay runner's messages
(florwb.components.replay_runner) as `start`, `progress` and `ended`, and the live
monitor's runs recording elsewhere as `show_live`; it reads its past replays itself. `c`
posts `CancelRequested`: the app owns no replay state, the runner does.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.widgets import DataTable, ProgressBar, Static

from florwb.ui import format as fmt
from florwb.ui import keys
from florwb.ui.messages import CancelRequested, PaneReady, ReplaysLoaded
from florwb.ui.workers import run_in_thread
from florwb_engine.replay.cost import remaining_s
from florwb_engine.store import Store
from florwb_engine.store.queries import LiveRun, ReplayRow, load_replays


class RunProgressRow(Horizontal):
    """One run of a replay (or a recording run): label, bar, state."""

    DEFAULT_CSS = """
    RunProgressRow { height: 1; }
    RunProgressRow .label { width: 24; }
    RunProgressRow ProgressBar { width: 1fr; }
    RunProgressRow ProgressBar Bar { width: 1fr; }
    RunProgressRow .state { width: 22; padding-left: 1; }
    """

    def __init__(self, label: str, total: float | None, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.label_text = label
        self.total = total
        self.done = 0.0
        self.state: Text | str = "waiting"

    def compose(self) -> ComposeResult:
        yield Static(self.label_text, classes="label", markup=False)
        yield ProgressBar(total=self.total, show_eta=False)
        yield Static(self.state, classes="state")

    def on_mount(self) -> None:
        """What `set_progress` kept while the row was being mounted."""
        self.query_one(ProgressBar).update(total=self.total, progress=self.done)
        self.query_one(".state", Static).update(self.state)

    def set_progress(self, done: float, total: float | None, state: Text | str) -> None:
        """Kept on the row, so progress that arrives before it is mounted is not lost."""
        self.done, self.total, self.state = done, total, state
        if not self.is_mounted:
            return
        self.query_one(ProgressBar).update(total=total, progress=done)
        self.query_one(".state", Static).update(state)


# The past replays' columns with widths fixed up front: filled while the tab was hidden,
# auto-sized columns come out ~6 cells wide the first time.
# They fit 80 columns with the cell padding: the whole replay id, the longest status.
PAST_COLUMNS = (
    ("replay", 20),
    ("status", 9),
    ("names", 13),
    ("rows", 6),
    ("started", 11),
    ("took", 6),
)


class PastReplaysTable(DataTable[object]):
    """The past replays; ⏎ opens the one under the cursor (runs, statuses, errors)."""

    BINDINGS = keys.bindings("past")

    @dataclass
    class OpenRequested(Message):
        replay_id: str

    def action_open_replay(self) -> None:
        if self.row_count == 0:
            return
        key = self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value
        if key is not None:
            self.post_message(self.OpenRequested(str(key)))


class ReplayPane(Vertical):
    """Live progress of the current replay and of runs recording elsewhere; past replays."""

    BINDINGS = keys.bindings("replay")
    DEFAULT_CSS = """
    ReplayPane #replay-title { height: auto; text-style: bold; }
    ReplayPane #replay-eta { height: 1; }
    ReplayPane #replay-overall { height: 1; display: none; }
    ReplayPane #replay-overall.-shown { display: block; }
    ReplayPane #replay-overall Bar { width: 1fr; }
    ReplayPane #replay-runs { height: 1fr; min-height: 3; }
    ReplayPane #live-title, ReplayPane #past-title { height: 1; text-style: bold;
        color: $text-muted; }
    ReplayPane #live-runs { height: auto; max-height: 5; }
    ReplayPane #past-replays { height: 6; }
    """

    def __init__(
        self, store: Store, *, hints: keys.KeyHints | None = None, id: str | None = None
    ) -> None:
        super().__init__(id=id)
        self.store = store
        self.hints = hints or keys.KeyHints()
        self.plan: Any | None = None
        self.segments: dict[tuple[str, int], tuple[int, int, str]] = {}
        self.started = 0.0
        self.running = False
        self.result: Any | None = None
        # The running replay's rows by run id. No widget ids: the rows of the previous
        # replay may still be being removed when the next one's are mounted.
        self.rows: dict[str, RunProgressRow] = {}
        self.replays: dict[str, ReplayRow] = {}  # the past replays listed, by id

    def compose(self) -> ComposeResult:
        yield Static(
            "No replay yet. Press r to plan one for the pending log statements.", id="replay-title"
        )
        yield Static(id="replay-eta")
        yield ProgressBar(total=1, id="replay-overall", show_eta=False)  # a total: no animation
        yield VerticalScroll(id="replay-runs")
        yield Static("Recording now: none", id="live-title")
        yield Vertical(id="live-runs")
        yield Static("Past replays", id="past-title")
        yield PastReplaysTable(id="past-replays", cursor_type="row", zebra_stripes=True)

    def on_mount(self) -> None:
        table = self.query_one("#past-replays", DataTable)
        for column, width in PAST_COLUMNS:
            table.add_column(column, key=column, width=width)
        self.set_interval(0.5, self._tick)
        self.post_message(PaneReady(self))  # for what arrived before it existed (Lazy)

    def reload_replays(self) -> None:
        """Read the past replays (in a worker)."""

        def work() -> None:
            self.post_message(ReplaysLoaded(load_replays(self.store)))

        run_in_thread(self, work, group="replays", description="loading replays")

    def on_replays_loaded(self, message: ReplaysLoaded) -> None:
        message.stop()
        self.show_replays(message.replays)

    # --- a replay -------------------------------------------------------------------------

    def start(self, plan: Any) -> None:
        self.plan = plan
        self.result = None
        self.running = True
        self.started = time.perf_counter()
        # shown from the first replay on: with no total it would animate (and cost CPU)
        self.query_one("#replay-overall", ProgressBar).add_class("-shown")
        self.segments = {
            (run.run_id, s.index): (0, max(s.last - s.first + 1, 1), "waiting")
            for run in plan.ready()
            for s in run.segments
        }
        box = self.query_one("#replay-runs", VerticalScroll)
        box.remove_children()
        self.rows = {}
        for run in plan.ready():
            total = sum(self.segments[(run.run_id, s.index)][1] for s in run.segments)
            label = f"{fmt.short_run(run.run_id)} {fmt.short_version(run.version)} {run.mode or ''}"
            self.rows[run.run_id] = RunProgressRow(label, total)
        box.mount_all(list(self.rows.values()))
        self.query_one("#replay-title", Static).update(
            Text(
                f"Replay {plan.replay_id}: {', '.join(plan.names)} on "
                f"{fmt.plural(len(plan.ready()), 'run')} · {fmt.plural(plan.workers, 'worker')}"
                f" · {self.hints('replay.cancel')} cancels"
            )
        )
        self._tick()

    def progress(self, progress: Any) -> None:
        key = (progress.run_id, progress.segment)
        self.segments[key] = (progress.done, max(progress.total, 1), progress.state)
        self._update_run(progress.run_id)
        self._tick()

    def _update_run(self, run_id: str) -> None:
        parts = [v for (r, _s), v in self.segments.items() if r == run_id]
        done = sum(p[0] for p in parts)
        total = sum(p[1] for p in parts)
        states = {p[2] for p in parts}
        if "failed" in states:
            state = Text("✗ failed", "red")
        elif "cancelled" in states:
            state = Text("◌ cancelled", "magenta")
        elif states == {"finished"}:
            state = Text("✓ done", "green")
        elif "running" in states:
            state = Text(f"● {done}/{total}", "yellow")
        else:
            state = Text("waiting", "dim")
        row = self.rows.get(run_id)
        if row is not None:
            row.set_progress(done, total, state)

    def _tick(self) -> None:
        if self.plan is None:
            return
        done = sum(v[0] for v in self.segments.values())
        total = sum(v[1] for v in self.segments.values()) or 1
        self.query_one("#replay-overall", ProgressBar).update(total=total, progress=done)
        if not self.running:
            return
        elapsed = time.perf_counter() - self.started
        left = remaining_s(elapsed, done, total, self.plan.estimate_s)
        if left is None:
            eta = "soon (past the estimate)"
        else:
            eta = fmt.duration(left[0]) + (" (estimate)" if left[1] else "")
        self.query_one("#replay-eta", Static).update(
            Text.assemble(
                ("● running ", "yellow"),
                f"{done}/{total} iterations · elapsed {fmt.duration(elapsed)} · ",
                ("ETA ", "bold"),
                (eta, "bold"),
            )
        )

    def ended(self, result: Any | None) -> None:
        """The replay is over; `result` None: it failed (the error modal says why)."""
        self.running = False
        self.result = result
        if self.plan is not None:  # nothing left to cancel: the title stops offering it
            title = self.query_one("#replay-title", Static)
            title.update(
                Text(
                    f"Replay {self.plan.replay_id}: {', '.join(self.plan.names)} on "
                    f"{fmt.plural(len(self.plan.ready()), 'run')} · "
                    f"{self.hints('app.replay')} plans the next one"
                )
            )
        eta = self.query_one("#replay-eta", Static)
        if result is None:
            eta.update(Text("✗ replay failed: see the error shown", "bold red"))
            return
        for run in result.runs:
            row = self.rows.get(run.run_id)
            if row is None:
                continue
            style = {"finished": "green", "diverged": "yellow", "cancelled": "magenta"}.get(
                run.status, "red"
            )
            detail = f" {run.rows:,} rows" if run.status in ("finished", "diverged") else ""
            if run.verdict is not None and run.verdict != run.status:
                detail += f" · {run.verdict}" + (" (strict re-run)" if run.strict else "")
            row.set_progress(row.done, row.total, Text(f"{run.status}{detail}", style))
        summary = Text()
        summary.append(f"{result.status} ", "bold")
        summary.append(f"in {fmt.duration(result.elapsed_s)}: ")  # the replay row's duration
        counts: dict[str, int] = {}
        for run in result.runs:
            counts[run.status] = counts.get(run.status, 0) + 1
        summary.append(", ".join(f"{n} {status}" for status, n in sorted(counts.items())))
        failed = [r for r in result.runs if r.error]
        if failed:
            summary.append(
                f" · {fmt.short_run(failed[0].run_id)}: {failed[0].error.splitlines()[-1]}", "red"
            )
        eta.update(summary)

    def action_cancel(self) -> None:
        self.post_message(CancelRequested())

    def action_focus_past(self) -> None:
        self.query_one("#past-replays").focus()

    # --- runs recording elsewhere, past replays --------------------------------------------

    def show_live(self, live: list[LiveRun]) -> None:
        box = self.query_one("#live-runs", Vertical)
        title = self.query_one("#live-title", Static)
        title.update(f"Recording now: {len(live) or 'none'}")
        present = {child.id for child in box.children}
        wanted = {f"live-{r.run_id}" for r in live}
        for child in list(box.children):
            if child.id not in wanted:
                child.remove()
        for run in live:
            row_id = f"live-{run.run_id}"
            if row_id not in present:
                row = RunProgressRow(
                    f"{fmt.short_run(run.run_id)} {run.loop or ''}", run.total, id=row_id
                )
                box.mount(row)
            else:
                row = box.query_one(f"#{row_id}", RunProgressRow)
            eta = f" ETA {fmt.duration(run.eta_s)}" if run.eta_s is not None else ""
            total = run.total if run.total is not None else "?"
            self.call_after_refresh(
                row.set_progress, run.done, run.total, Text(f"● {run.done}/{total}{eta}", "yellow")
            )

    def show_replays(self, replays: list[ReplayRow]) -> None:
        table = self.query_one("#past-replays", DataTable)
        row = table.cursor_row
        table.clear()
        self.replays = {r.replay_id: r for r in replays}
        for r in replays:
            took = (r.ended - r.started).total_seconds() if r.ended and r.started else None
            table.add_row(
                r.replay_id,
                r.status or "?",
                fmt.clip(r.names or "-", 13),
                f"{r.rows:,}",
                fmt.clock(r.started),
                fmt.duration(took),
                key=r.replay_id,
            )
        if 0 <= row < table.row_count:
            table.move_cursor(row=row)
        self.query_one("#past-title", Static).update(
            f"Past replays: {len(replays)}"
            + (
                f" ({self.hints('replay.past')} focuses, {self.hints('past.open')} details)"
                if replays
                else ""
            )
        )

    def on_past_replays_table_open_requested(self, message: PastReplaysTable.OpenRequested) -> None:
        message.stop()
        replay = self.replays.get(message.replay_id)
        if replay is not None:
            from florwb.screens.replay_detail import ReplayDetailScreen

            self.app.push_screen(ReplayDetailScreen(replay))
