"""Run detail: args, every logged name with a sparkline, checkpoints, replays, data wait.

Pushed over the workbench by enter in the history; loads in a worker and renders as a
few Rich tables in one scrollable column, which reads well at 80x24.
"""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Header, Static

from florwb.ui import format as fmt
from florwb.ui import keys
from florwb.ui.messages import ReplayRequested, RunDetailLoaded
from florwb.ui.workers import run_in_thread
from florwb.widgets.history_list import run_status
from florwb.widgets.run_summary import data_wait_line
from florwb.widgets.sparkline import sparkline
from florwb_engine.store import Store
from florwb_engine.store.queries import RunDetail, load_run_detail


def _section(title: str) -> Text:
    return Text(f"\n{title}", "bold underline")


def _table(*columns: str) -> Table:
    """A borderless table with one unwrapped column per name (metrics add their own)."""
    table = Table(box=None, padding=(0, 1), show_edge=False, header_style="bold")
    for column in columns:
        table.add_column(column, no_wrap=True)
    return table


def render_detail(detail: RunDetail) -> Group:
    run = detail.run
    status = run_status(run)
    head = Text()
    head.append(run.run_id, "bold")
    head.append(
        f"  {fmt.STATUS_ICONS.get(status, '?')} {status}", fmt.STATUS_STYLES.get(status, "")
    )
    if run.exception:
        head.append(f" ({run.exception}: {run.message or ''})", "red")
    facts = Text(
        f"version {fmt.short_version(run.version)} · {run.script or '?'} · started "
        f"{fmt.clock(run.start_time)} · {fmt.duration(run.duration_s)}",
        "dim",
    )
    parts: list = [head, facts]
    if detail.loop_name:
        total = detail.loop_total if detail.loop_total is not None else "?"
        parts.append(Text(f"{detail.loop_name} {detail.loop_done}/{total} iterations done", "dim"))

    parts.append(_section("Args"))
    if run.args:
        args = Table.grid(padding=(0, 2))
        args.add_column(style="cyan")
        args.add_column()
        for name, value in run.args.items():
            args.add_row(name, fmt.number(value, 6))
        parts.append(args)
    else:
        parts.append(Text("none", "dim"))

    parts.append(_section("Metrics"))
    if detail.metrics:
        metrics = _table()
        metrics.add_column("name", style="cyan", no_wrap=True, max_width=18)
        metrics.add_column("source", no_wrap=True, max_width=10)
        metrics.add_column("n", justify="right")
        metrics.add_column("last", justify="right")
        metrics.add_column("min", justify="right")
        metrics.add_column("max", justify="right")
        metrics.add_column("series", no_wrap=True, style="cyan")
        for m in detail.metrics:
            source = "recorded" if m.source == "record" else "↻ " + fmt.short_run(m.source)
            if m.points:
                values = (fmt.number(m.last), fmt.number(m.low), fmt.number(m.high))
                spark = sparkline(m.points, 20)
            else:
                values = (fmt.clip(m.text or "-", 12), "", "")
                spark = ""
            metrics.add_row(m.name, source, f"{m.n:,}", *values, spark)
        parts.append(metrics)
    else:
        parts.append(Text("nothing logged", "dim"))

    parts.append(_section(f"Checkpoints ({len(detail.checkpoints)})"))
    if detail.checkpoints:
        ckpt = _table("loop", "iteration", "size", "written", "file")
        for c in detail.checkpoints:
            ckpt.add_row(c.loop, str(c.iteration), fmt.size(c.bytes), fmt.clock(c.time), c.path)
        parts.append(ckpt)
    else:
        parts.append(Text("none (replay re-executes from the start)", "dim"))

    parts.append(_section(f"Replays ({len(detail.replays)})"))
    if detail.replays:
        replays = _table("replay", "status", "names", "rows", "started")
        for r in detail.replays:
            replays.add_row(
                r.replay_id, r.status or "?", r.names or "-", f"{r.rows:,}", fmt.clock(r.started)
            )
        parts.append(replays)
    else:
        parts.append(Text("none yet", "dim"))

    parts.append(_section("Data loading"))
    share = run.data_wait_share
    parts.append(Text(f"waited on the data iterator {fmt.percent(share)} of loop time"))
    hint = data_wait_line(share)
    if hint:
        parts.append(Text(hint, "bold yellow"))
    return Group(*parts)


class RunDetailScreen(Screen[None]):
    BINDINGS = keys.bindings("run")
    DEFAULT_CSS = """
    RunDetailScreen #detail-scroll { padding: 0 1; }
    """

    def __init__(self, store: Store, run_id: str) -> None:
        super().__init__()
        self.store = store
        self.run_id = run_id
        self.detail: RunDetail | None = None

    def compose(self) -> ComposeResult:
        yield Header(icon=fmt.TITLE_ICON)
        with VerticalScroll(id="detail-scroll"):
            yield Static(f"Loading run {self.run_id}…", id="detail")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        self.sub_title = f"run {self.run_id}"
        self.query_one("#detail-scroll").focus()
        self.load()

    def load(self) -> None:
        def work() -> None:
            self.post_message(RunDetailLoaded(load_run_detail(self.store, self.run_id)))

        run_in_thread(self, work, group="run-detail", description="loading the run detail")

    @on(RunDetailLoaded)
    def _loaded(self, message: RunDetailLoaded) -> None:
        self.detail = message.detail
        self.query_one("#detail", Static).update(render_detail(message.detail))

    def action_back(self) -> None:
        self.dismiss(None)

    def action_scroll_down(self) -> None:
        self.query_one("#detail-scroll", VerticalScroll).scroll_down(animate=False)

    def action_scroll_up(self) -> None:
        self.query_one("#detail-scroll", VerticalScroll).scroll_up(animate=False)

    def action_first(self) -> None:
        self.query_one("#detail-scroll", VerticalScroll).scroll_home(animate=False)

    def action_last(self) -> None:
        self.query_one("#detail-scroll", VerticalScroll).scroll_end(animate=False)

    def action_replay_run(self) -> None:
        self.post_message(ReplayRequested(run_ids=[self.run_id]))
