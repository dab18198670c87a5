"""Two marked runs side by side: their versions (with the git head, branch and dirty flag
recorded), the args that differ, the final and best value of every metric both logged
with the change, and the code that differs between their versions (searchable: `/`, `n`,
`N`).

Pushed by `c` in the history with exactly two runs marked; the comparison is read by the
engine (florwb_engine.run_compare) in a worker.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Footer, Header, Static

from florwb.ui import format as fmt
from florwb.ui import keys
from florwb.ui.history_rows import run_status, took_text
from florwb.ui.workers import run_in_thread
from florwb.widgets.code_diff import DiffView, render_diff
from florwb_engine.run_compare import MetricPair, RunComparison, compare_runs
from florwb_engine.store import Store
from florwb_engine.store.runs import RunRow


@dataclass
class ComparisonLoaded(Message):
    comparison: RunComparison


def git_text(run: RunRow) -> Text:
    """`3f2a1b9 (main) *dirty`, as lazygit and tig show a commit; '-' when not in git."""
    text = Text()
    if run.git_head:
        text.append(run.git_head[:7], "yellow")
    if run.git_branch:
        text.append(f" ({run.git_branch})", "green")
    if run.git_dirty:
        text.append(" *dirty", "red")
    return text if text.plain else Text("not in a git repository", "dim")


def _delta(value: float | None, higher_is_better: bool | None) -> Text:
    if value is None:
        return Text("-", "dim")
    if value == 0:
        return Text("0", "dim")
    if higher_is_better is None:
        return Text(f"{value:+.4g}")
    better = (value > 0) == higher_is_better
    return Text(f"{value:+.4g}", "green" if better else "red")


def render_header(comparison: RunComparison) -> Table:
    table = Table(box=None, padding=(0, 1), show_edge=False, header_style="bold", expand=False)
    table.add_column("", style="dim", no_wrap=True, min_width=7)
    table.add_column("A", no_wrap=True)
    table.add_column("B", no_wrap=True)
    a, b = comparison.first, comparison.second
    table.add_row("run", *(Text(r.run_id, "bold") for r in (a, b)))
    scripts = a.script != b.script  # the script's name only where it differs
    table.add_row(
        "version",
        *(
            Text.assemble(
                f"{fmt.short_version(r.version)} ",
                git_text(r),
                f" · {r.script or '?'}" if scripts else "",
            )
            for r in (a, b)
        ),
    )
    table.add_row(
        "started",
        *(
            Text.assemble(_status(r), f" {fmt.clock(r.start_time)} · {took_text(r)}")
            for r in (a, b)
        ),
    )
    if a.started_from or b.started_from:  # flor.load_checkpoint: where training started
        table.add_row(
            "from",
            *(Text(", ".join(r.parents) or "its own initialisation", "dim") for r in (a, b)),
        )
    return table


def _status(run: RunRow) -> Text:
    status = run_status(run)
    return Text(f"{fmt.STATUS_ICONS.get(status, '?')} {status}", fmt.STATUS_STYLES.get(status, ""))


def render_args(comparison: RunComparison) -> Text:
    """`args  epochs 6 → 5 · lr 0.1 → 0.05 (2 other args equal)`: one wrapped line."""
    text = Text("args that differ  ", "bold")
    if not comparison.args:
        text.append(f"none ({fmt.plural(comparison.same_args, 'arg')} equal)", "dim")
        return text
    for index, (name, first, second) in enumerate(comparison.args):
        if index:
            text.append(" · ", "dim")
        text.append(f"{name} ", "bold")
        text.append(fmt.number(first) if first is not None else "unset")
        text.append(" → ", "dim")
        text.append(fmt.number(second) if second is not None else "unset")
    if comparison.same_args:
        text.append(f"  ({comparison.same_args} other equal)", "dim")
    return text


def render_metrics(comparison: RunComparison) -> Group | Text:
    if not comparison.metrics:
        return Text("no numeric metric logged by both runs", "dim")
    table = Table(box=None, padding=(0, 1), show_edge=False, header_style="bold")
    table.add_column("metric", no_wrap=True)
    for title in ("final A", "final B", "Δ final", "best A", "best B", "Δ best"):
        table.add_column(title, justify="right", no_wrap=True)
    for pair in comparison.metrics:
        table.add_row(*_metric_cells(pair))
    only = []
    if comparison.only_first:
        only.append(f"only A: {', '.join(comparison.only_first)}")
    if comparison.only_second:
        only.append(f"only B: {', '.join(comparison.only_second)}")
    parts: list[Table | Text] = [table]
    if only:
        parts.append(Text(" · ".join(only), "dim"))
    if comparison.withheld:
        parts.append(Text(comparison.withheld.note("florwb dataframe --diverged"), "yellow"))
    return Group(*parts)


def _metric_cells(pair: MetricPair) -> list[Text | str]:
    if pair.higher_is_better is None:  # a setting (lr...): values, no best, no verdict
        return [
            Text.assemble(pair.name, (" setting", "dim")),
            fmt.number(pair.final[0]),
            fmt.number(pair.final[1]),
            _delta(pair.final_delta, None),
            "-",
            "-",
            "",
        ]
    way = "↑" if pair.higher_is_better else "↓"
    return [
        Text.assemble(pair.name, (f" {way}", "dim")),
        fmt.number(pair.final[0]),
        fmt.number(pair.final[1]),
        _delta(pair.final_delta, pair.higher_is_better),
        fmt.number(pair.best[0]),
        fmt.number(pair.best[1]),
        _delta(pair.best_delta, pair.higher_is_better),
    ]


def render_code(comparison: RunComparison) -> Text:
    """Every file that differs between the two versions, as one searchable diff."""
    a, b = comparison.first, comparison.second
    if a.version == b.version:
        return Text(f"same code version {fmt.short_version(a.version)}: no code differs", "dim")
    if comparison.note:
        return Text(comparison.note, "yellow")
    if not comparison.files:
        return Text("the two versions hold the same files", "dim")
    text = Text()
    for diff in comparison.files:
        if diff.note:
            text.append(f"{diff.path}: {diff.note}\n", "dim")
            continue
        text.append_text(
            render_diff(
                diff.old or "",
                diff.new or "",
                old_name=f"{diff.path} @ A {fmt.short_version(a.version)}"
                + (" (absent)" if diff.old is None else ""),
                new_name=f"{diff.path} @ B {fmt.short_version(b.version)}"
                + (" (absent)" if diff.new is None else ""),
            )
        )
    if comparison.more_files:
        text.append(f"… and {fmt.plural(comparison.more_files, 'more file')}\n", "dim")
    return text


class RunCompareScreen(Screen[None]):
    """Run A (marked first in the list) against run B; Δ is B minus A."""

    BINDINGS = keys.bindings("compare")
    KEY_SCOPES = ("compare",)
    DEFAULT_CSS = """
    RunCompareScreen #compare-top { height: auto; max-height: 65%; padding: 0 1; }
    RunCompareScreen.-same-code #compare-top { max-height: 100%; }
    RunCompareScreen.-same-code DiffView { display: none; }
    RunCompareScreen #compare-diff-title { height: 1; text-style: bold; padding: 0 1;
        border-top: solid $primary-darken-2; height: 2; }
    RunCompareScreen DiffView { height: 1fr; min-height: 5; }
    """

    def __init__(
        self,
        project: Path,
        store: Store,
        first: str,
        second: str,
        hints: keys.KeyHints | None = None,
    ) -> None:
        super().__init__()
        self.hints = hints or keys.KeyHints()
        self.project = project
        self.store = store
        self.run_ids = (first, second)
        self.comparison: RunComparison | None = None

    def compose(self) -> ComposeResult:
        yield Header(icon=fmt.TITLE_ICON)
        with VerticalScroll(id="compare-top"):
            yield Static(
                f"Comparing {fmt.short_run(self.run_ids[0])} and {fmt.short_run(self.run_ids[1])}…",
                id="compare-summary",
            )
        yield Static(id="compare-diff-title")
        yield DiffView(hints=self.hints, id="compare-diff")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        first, second = self.run_ids

        def work() -> None:
            comparison = compare_runs(self.project, self.store, first, second)
            self.post_message(ComparisonLoaded(comparison))

        run_in_thread(self, work, group="compare", description="comparing two runs")

    @on(ComparisonLoaded)
    def _loaded(self, message: ComparisonLoaded) -> None:
        message.stop()
        comparison = self.comparison = message.comparison
        self.query_one("#compare-summary", Static).update(
            Group(
                render_header(comparison),
                render_args(comparison),
                Text("metrics both logged (Δ = B − A; green: better)", "bold"),
                render_metrics(comparison),
            )
        )
        files = len(comparison.files) + comparison.more_files
        same = comparison.first.version == comparison.second.version
        self.set_class(same, "-same-code")
        if same:
            self.query_one("#compare-diff-title", Static).update(
                Text(
                    f"same code version {fmt.short_version(comparison.first.version)}: "
                    "no code differs",
                    "dim",
                )
            )
            return
        self.query_one("#compare-diff-title", Static).update(
            Text.assemble(
                ("code ", "bold"),
                (
                    f"{fmt.short_version(comparison.first.version)} → "
                    f"{fmt.short_version(comparison.second.version)}",
                    "bold",
                ),
                (f"  {fmt.plural(files, 'file')} differing · d: focus · /: search · n/N", "dim"),
            )
        )
        self.query_one(DiffView).set_diff(render_code(comparison))

    def action_back(self) -> None:
        self.dismiss(None)

    def action_focus_diff(self) -> None:
        self.query_one(DiffView).focus_diff()
