"""Run detail: args, every logged name once with a sparkline, where time went (host,
argv, git, device, peak memory, data wait per loop), checkpoints with the call that loads
one, replays, and the tail of what the run printed.

Pushed over the workbench by enter in the history; loads in a worker and renders as a
few Rich tables in one scrollable column, which reads well at 80x24. While the run still
records, it reloads every RELOAD_S so the console tail and the numbers follow it.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.table import Table
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.geometry import Size
from textual.screen import Screen
from textual.strip import Strip
from textual.timer import Timer
from textual.widget import Widget
from textual.widgets import Footer, Header, Input

from florwb.ui import format as fmt
from florwb.ui import keys
from florwb.ui.history_rows import run_status, took_text
from florwb.ui.messages import ReplayRequested, RunDetailLoaded
from florwb.ui.workers import run_in_thread
from florwb.widgets.run_summary import data_wait_line
from florwb.widgets.sparkline import sparkline
from florwb_engine.replay.cost import ranges
from florwb_engine.store import Store
from florwb_engine.store.lineage import describe
from florwb_engine.store.queries import MetricSeries, RunDetail, load_run_detail
from florwb_engine.store.run_ranks import RankRow
from florwb_engine.store.runs import RunRow
from florwb_engine.store.system_metrics import SystemSample

RELOAD_S = 1.0  # while the run records
# Metric rows drawn at once: Rich measures every row of a table on each layout, so a run
# with 10,000 names drawn whole would hold the screen for a minute; `/` finds the others.
METRIC_ROWS = 30
SPARK_WIDTH = 20  # a metric's sparkline at most, narrower where the screen is
TAIL_LINE_CHARS = 200  # a longer line is clipped in the tail; `florwb io` shows it whole
CHANNEL_STYLES = {"stdout": "", "stderr": "yellow", "warning": "yellow", "error": "red"}


def _section(title: str) -> Text:
    return Text(f"\n{title}", "bold underline")


def _table(*columns: str) -> Table:
    """A borderless table with one unwrapped column per name (metrics add their own)."""
    table = Table(box=None, padding=(0, 1), show_edge=False, header_style="bold")
    for column in columns:
        table.add_column(column, no_wrap=True)
    return table


def matching_metrics(
    metrics: list[MetricSeries], words: str, lowered: list[str] | None = None
) -> list[MetricSeries]:
    """The metrics whose name holds every word of `words` (case-insensitive); `lowered`:
    their names in lower case, made once per run detail rather than on every key."""
    wanted = words.lower().split()
    if not wanted:
        return metrics
    names = lowered if lowered is not None else [m.name.lower() for m in metrics]
    return [m for m, name in zip(metrics, names) if all(w in name for w in wanted)]


def render_detail(detail: RunDetail, find: str = "") -> Group:
    """The whole detail; the screen draws its three parts apart (render_head,
    render_metrics, render_rest), so finding a name redraws only the metrics."""
    return Group(render_head(detail), render_metrics(detail, find), render_rest(detail))


def render_head(detail: RunDetail) -> Group:
    """The run's status, where it started from, its progress and args."""
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
        f"{fmt.clock(run.start_time)} · {took_text(run)}",
        "dim",
    )
    parts: list = [head, facts]
    for start in run.started_from:  # flor.load_checkpoint: the checkpoints it started from
        parts.append(Text(f"started from {describe(start)}", "dim"))
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
    return Group(*parts)


def render_metrics(detail: RunDetail, find: str = "", lowered: list[str] | None = None) -> Group:
    """Every logged name once (those matching `find`, METRIC_ROWS at most)."""
    parts: list = [_section("Metrics")]
    found = matching_metrics(detail.metrics, find, lowered)
    if found:
        rows, points = [], []
        for m in found[:METRIC_ROWS]:
            source = _source_label(m.source, m.rechecked)
            if m.points:
                values = (fmt.number(m.last), fmt.number(m.low), fmt.number(m.high))
            else:
                values = (fmt.clip(m.text or "-", 12), "", "")
            rows.append((m.name, source, f"{m.n:,}", *values, "x" * SPARK_WIDTH * bool(m.points)))
            points.append(m.points)
        parts.append(MetricRows(rows, points))
        if len(found) > METRIC_ROWS or find:
            of = f" matching {find.strip()!r}" if find.strip() else ""
            parts.append(
                Text(
                    f"{min(len(found), METRIC_ROWS):,} of {len(found):,} names{of} shown"
                    f" ({len(detail.metrics):,} logged) · / finds a name",
                    "dim",
                )
            )
    elif find.strip():
        parts.append(Text(f"no name matches {find.strip()!r} · / changes it", "dim"))
    else:
        parts.append(Text("nothing logged", "dim"))
    if detail.withheld:
        parts.append(Text(detail.withheld.note("florwb dataframe NAME --diverged"), "yellow"))
    return Group(*parts)


class MetricRows:
    """The metric table, one line per name, laid out here rather than by a Rich Table,
    which measured and wrapped every cell of it on each key typed into the find box (most
    of that key's response): columns as wide as their widest cell (name and source
    capped), the numbers right-aligned; on a narrower screen the sparkline narrows first,
    then the widest of last, min and max (clipped with …), then the sparkline goes."""

    HEADERS = ("name", "source", "n", "last", "min", "max", "series")
    CAPS = (18, 13, None, None, None, None, None)
    RIGHT = frozenset({2, 3, 4, 5})
    STYLES = ("cyan", "", "", "", "", "", "cyan")
    SHRINK = (3, 4, 5)  # last, min, max: never below MIN_VALUE cells
    MIN_VALUE = 5
    MIN_SERIES = 8

    def __init__(
        self, rows: Sequence[tuple[str, ...]], points: list[list[float]] | None = None
    ) -> None:
        """`rows`: the cells of each name; `points`: its series, drawn as a sparkline as
        wide as the column gets (the last cell only holds that column's widest)."""
        self.rows = rows
        self.points = points

    def widths(self, width: int) -> list[int]:
        """Each column's cells at a screen `width` (one space either side of each)."""
        cells = [self.HEADERS, *self.rows]
        widths = [max(cell_len(row[i]) for row in cells) for i in range(len(self.HEADERS))]
        widths = [w if cap is None else min(w, cap) for w, cap in zip(widths, self.CAPS)]
        excess = sum(widths) + 2 * len(widths) - width
        excess = self._shrink(widths, (6,), self.MIN_SERIES, excess)  # the sparkline first
        excess = self._shrink(widths, self.SHRINK, self.MIN_VALUE, excess)
        if excess > 0:  # then it goes whole
            keep = widths[-1] - excess
            if keep < self.MIN_VALUE:
                excess -= widths[-1] + 2
                widths[-1] = 0
            else:
                widths[-1], excess = keep, 0
        # narrower still: every value clipped (…, never cut silently), then the labels
        excess = self._shrink(widths, self.SHRINK, 2, excess)
        self._shrink(widths, (0, 1), 4, excess)
        return widths

    @staticmethod
    def _shrink(widths: list[int], columns: tuple[int, ...], least: int, excess: int) -> int:
        """Take `excess` cells from the widest of `columns`, none below `least`; returns
        what is left to take."""
        while excess > 0:
            column = max(columns, key=lambda i: widths[i])
            if widths[column] <= least:
                break
            widths[column] -= 1
            excess -= 1
        return excess

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        widths = self.widths(options.max_width)
        lines = Text(no_wrap=True, overflow="crop")
        for index, row in enumerate([self.HEADERS, *self.rows]):
            if index:
                lines.append("\n")
            for column, (cell, width) in enumerate(zip(row, widths)):
                if not width:
                    continue
                if index and column == 6 and self.points is not None:
                    cell = sparkline(self.points[index - 1], width)
                shown = fmt.clip(cell, width)
                pad = " " * (width - cell_len(shown))
                shown = pad + shown if column in self.RIGHT else shown + pad
                lines.append(" ")
                lines.append(shown, "bold" if not index else self.STYLES[column])
                lines.append(" ")
        yield lines


def render_rest(detail: RunDetail) -> Group:
    """Checkpoints, replays, where time went, system figures and the console tail."""
    run = detail.run
    parts: list = [_section(f"Checkpoints ({len(detail.checkpoints)})")]
    parts.extend(Text(line, "dim") for line in restorable_lines(run, detail.loop_name))
    if detail.checkpoints:
        ckpt = _table("loop", "iteration", "size", "written", "file")
        for c in detail.checkpoints:
            ckpt.add_row(c.loop, str(c.iteration), fmt.size(c.bytes), fmt.clock(c.time), c.path)
        parts.append(ckpt)
        parts.append(Text("load the model as it was there:", "dim"))
        parts.append(Text(load_command(detail), "bold green"))
    else:
        parts.append(Text("none (replay re-executes from the start)", "dim"))

    parts.append(_section(f"Replays ({len(detail.replays)})"))
    if detail.replays:
        replays = _table("replay", "status", "verdict", "names", "rows", "started")
        for r in detail.replays:
            rows = f"{r.rows:,}" + (f" ({r.withheld:,} withheld)" if r.withheld else "")
            verdict = Text(r.verdict or "-", _VERDICT_STYLES.get(r.verdict or "", ""))
            replays.add_row(
                r.replay_id, r.status or "?", verdict, r.names or "-", rows, fmt.clock(r.started)
            )
        parts.append(replays)
        for r in detail.replays:
            if r.verdict == "diverged" and r.divergence:
                parts.append(
                    Text.assemble((f"{r.replay_id} diverged: ", "bold yellow"), r.divergence)
                )
            if r.missing:
                parts.append(
                    Text.assemble(
                        (f"{r.replay_id} missing: ", "bold yellow"),
                        f"{r.missing} (recorded, not replayed)",
                    )
                )
    else:
        parts.append(Text("none yet", "dim"))

    parts.extend(_where_time_goes(detail))
    parts.extend(_console(detail))
    return Group(*parts)


_VERDICT_STYLES = {"verified": "green", "unchecked": "dim", "diverged": "bold yellow"}


def _source_label(source: str, rechecked: int) -> str:
    if source == "record":
        label = "recorded"
    elif source == "extract":
        label = "extracted"
    else:
        label = "↻ " + fmt.short_run(source)
    return f"{label} ✓{rechecked}" if rechecked else label


RESTORABLE_SHOWN = 12  # ranges of iterations listed before the rest is cut to "…"


def restorable_lines(run: RunRow, loop: str | None) -> list[str]:
    """Which main-loop iterations a replay can restore instead of re-executing: the checkpoint
    policy's budget (or `every=`) decided them, and they decide what a replay costs."""
    if not run.restorable and not run.saved:
        return []
    where = f"{loop} iterations" if loop else "iterations"
    lines = [
        f"restorable {where}: {_iterations(run.restorable)} "
        f"({len(run.restorable)} of {run.main_iterations})"
    ]
    if run.saved:
        lines.append(
            f"own torch.save only at {where}: {_iterations(run.saved)} (restorable where the "
            "replay plan finds they hold the whole state)"
        )
    return lines


def _iterations(values: list[int]) -> str:
    """`0-3, 8, 12, …, 40`: runs of iterations as ranges, the middle cut when long."""
    if not values:
        return "none"
    parts = ranges(values).removeprefix("iterations ").split(", ")
    if len(parts) > RESTORABLE_SHOWN:
        parts = [*parts[: RESTORABLE_SHOWN - 1], "…", parts[-1]]
    return ", ".join(parts)


def load_command(detail: RunDetail) -> str:
    """The call that restores the run's latest checkpoint into live objects (pull.py):
    objects by their `flor.checkpointing` names, the loop's iteration as a keyword."""
    last = detail.checkpoints[-1]
    for c in detail.checkpoints:
        if (c.loop, c.iteration) > (last.loop, last.iteration) and c.loop == last.loop:
            last = c
    loop = last.loop if last.loop.isidentifier() else None
    where = f"{loop}={last.iteration}" if loop else f"iteration={last.iteration}"
    return f'flor.load_into("{detail.run.run_id}", model=..., optimizer=..., {where})'


def _context_lines(run: RunRow) -> list[Text]:
    """Host, argv, git and the device context (store/run_context.py), what is known."""
    lines = []
    host = Text()
    host.append("host    ", "cyan")
    host.append(run.host or "?")
    lines.append(host)
    argv = Text()
    argv.append("argv    ", "cyan")
    argv.append(" ".join(run.argv) if run.argv else "?")
    lines.append(argv)
    git = Text()
    git.append("git     ", "cyan")
    if run.git_head:
        git.append(f"{run.git_branch or '(detached)'} @ {run.git_head[:10]}")
        if run.git_dirty:
            git.append(" dirty", "yellow")
        elif run.git_dirty is not None:
            git.append(" clean", "green")
    else:
        git.append("not a git checkout", "dim")
    lines.append(git)
    ctx = run.context or {}
    device = Text()
    device.append("device  ", "cyan")
    kind = ctx.get("device_kind")
    name = ctx.get("device_name") or ctx.get("cpu_name")
    if kind or name:
        device.append(f"{kind}: {name or '?'}" if kind else str(name))
        if ctx.get("gpu_count"):
            device.append(f" · {ctx['gpu_count']} × {ctx.get('gpu_name') or 'GPU'}")
        elif ctx.get("cpu_count"):
            device.append(f" · {ctx['cpu_count']} cores")
        versions = [
            f"{label} {ctx[key]}"
            for label, key in (("torch", "torch_version"), ("CUDA", "cuda_version"))
            if ctx.get(key)
        ]
        if versions:
            device.append(" · " + ", ".join(versions), "dim")
    else:
        device.append("not recorded", "dim")
    lines.append(device)
    memory = []
    if ctx.get("peak_rss_bytes"):
        memory.append(f"host peak {fmt.size(ctx['peak_rss_bytes'])}")
    peaks = ctx.get("gpu_peak_bytes") or []
    if peaks:
        memory.append("GPU peak " + " / ".join(fmt.size(int(p)) for p in peaks))
    if ctx.get("energy_j") is not None:
        memory.append(f"energy {ctx['energy_j']:,.0f} J")
    if memory:
        line = Text()
        line.append("memory  ", "cyan")
        line.append(" · ".join(memory))
        lines.append(line)
    if ctx.get("energy_j") is None and ctx.get("energy_note"):
        line = Text()
        line.append("energy  ", "cyan")
        line.append(f"not measured: {ctx['energy_note']}", "dim")
        lines.append(line)
    return lines


def rank_lines(ranks: list[RankRow]) -> list[Text]:
    """Each rank of a multi-process run: how it ended (the one that failed first marked,
    the ones its launcher stopped said so) and its own memory and device."""
    lines = []
    for r in ranks:
        line = Text()
        line.append(f"rank {r.rank}  ", "cyan")
        style = {"finished": "green", "running": "yellow", "stopped": "dim"}.get(r.status, "red")
        line.append(r.status, style)
        if r.failed_first:
            line.append(" first", "bold red")
        if r.status == "stopped" and r.message:
            line.append(f" ({r.message.removeprefix('stopped ')})", "dim")
        elif r.exception:
            line.append(f" ({r.exception})", "red")
        if r.end_time is not None:
            said = "last wrote" if r.status == "killed" else "ended"
            line.append(f" · {said} {r.end_time:%H:%M:%S.%f}"[:-3], "dim")
        line.append(f" · {r.host or '?'} pid {r.pid or '?'}", "dim")
        ctx = r.context or {}
        if ctx.get("peak_rss_bytes"):
            line.append(f" · host peak {fmt.size(ctx['peak_rss_bytes'])}")
        peaks = ctx.get("gpu_peak_bytes") or []
        if peaks:
            line.append(" · GPU peak " + " / ".join(fmt.size(int(p)) for p in peaks))
        device = ctx.get("device_name") or ctx.get("cpu_name")
        if device:
            line.append(f" · {device}", "dim")
        lines.append(line)
    return lines


def system_lines(samples: list[SystemSample]) -> list[Text]:
    """Each rank's latest CPU, memory and GPU sample (record/system.py), or why none."""
    if not samples:
        return [Text("system  no samples (FLORWB_SYSTEM_SAMPLE_S=0, or too short a run)", "dim")]
    lines = []
    for sample in samples:
        v = sample.values
        parts = []
        if "cpu_percent" in v:
            parts.append(f"CPU {v['cpu_percent']:.0f}%")
        if "process_cpu_percent" in v:
            parts.append(f"process {v['process_cpu_percent']:.0f}%")
        if "memory_used_bytes" in v:
            used = fmt.size(int(v["memory_used_bytes"]))
            share = f" ({v['memory_percent']:.0f}%)" if "memory_percent" in v else ""
            parts.append(f"host memory {used}{share}")
        if "process_rss_bytes" in v:
            parts.append(f"RSS {fmt.size(int(v['process_rss_bytes']))}")
        gpu = 0
        while f"gpu{gpu}_util_percent" in v:
            parts.append(
                f"GPU{gpu} {v[f'gpu{gpu}_util_percent']:.0f}% "
                f"{fmt.size(int(v.get(f'gpu{gpu}_memory_used_bytes', 0)))} "
                f"{v.get(f'gpu{gpu}_power_w', 0):.0f} W"
            )
            gpu += 1
        line = Text()
        line.append("system  ", "cyan")
        if sample.rank is not None:
            line.append(f"rank {sample.rank}: ", "bold")
        line.append(" · ".join(parts))
        line.append(f"  at {sample.time:%H:%M:%S} (chart: system/…)", "dim")
        lines.append(line)
    return lines


def _where_time_goes(detail: RunDetail) -> list:
    """Where the run ran and where its loop time went ."""
    run = detail.run
    parts: list = [
        _section("Where time goes"),
        *_context_lines(run),
        *rank_lines(detail.ranks),
        *system_lines(detail.system),
    ]
    share = run.data_wait_share
    parts.append(Text(f"waited on the data iterator {fmt.percent(share)} of loop time"))
    if detail.loop_waits:
        waits = _table("loop", "data wait", "of its time", "loop time")
        for w in detail.loop_waits:
            waits.add_row(
                w.path, fmt.duration(w.wait_s), fmt.percent(w.share), fmt.duration(w.loop_s)
            )
        parts.append(waits)
    hint = data_wait_line(share, run.data_wait_s)
    if hint:
        parts.append(Text(hint, "bold yellow"))
    return parts


def _console(detail: RunDetail) -> list:
    """The last lines the run printed or logged (record/capture.py), oldest first."""
    total = detail.console_total
    shown = len(detail.console)
    title = f"Console ({total:,} lines" + (f", last {shown})" if total > shown else ")")
    parts: list = [_section(title)]
    if not detail.console:
        parts.append(Text("nothing printed (or FLORWB_CAPTURE=0)", "dim"))
        return parts
    lines = Table.grid(padding=(0, 1))
    lines.add_column(style="dim", no_wrap=True)
    lines.add_column(no_wrap=True)
    lines.add_column(overflow="fold")
    ranks = any(line.rank for line in detail.console)
    for line in detail.console:
        where = " ".join(f"{k}={v}" for k, v in line.where.items()) or "-"
        if ranks:
            where = f"rank {line.rank} {where}"
        text = Text(fmt.clip(line.text, TAIL_LINE_CHARS), CHANNEL_STYLES.get(line.channel, "cyan"))
        if line.n > 1:
            text.append(f" (×{line.n})", "dim")
        lines.add_row(where, line.channel, text)
    parts.append(lines)
    parts.append(Text(f"all of them: florwb io {detail.run.run_id}", "dim"))
    return parts


class RenderedOnce(Widget):
    """A Rich renderable drawn once per width: a Static renders its content twice after
    each change (once to measure its height, once to paint), which for the metric table of
    a run with thousands of names was most of a key's response."""

    DEFAULT_CSS = "RenderedOnce { height: auto; }"

    def __init__(self, renderable: RenderableType = "", *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.renderable = renderable
        self._strips: list[Strip] | None = None
        self._width = -1

    def update(self, renderable: RenderableType) -> None:
        self.renderable = renderable
        self._strips = None
        self.refresh(layout=True)

    def _lines(self, width: int) -> list[Strip]:
        if self._strips is None or width != self._width:
            console = self.app.console
            options = console.options.update(width=width, highlight=False)
            lines = console.render_lines(self.renderable, options, pad=False)
            self._strips = [Strip(line) for line in lines]
            self._width = width
        return self._strips

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return len(self._lines(width)) if width > 0 else 0

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        lines = self._lines(width)
        return lines[y] if y < len(lines) else Strip.blank(width)


class RunDetailScreen(Screen[None]):
    BINDINGS = keys.bindings("run")
    KEY_SCOPES = ("run",)
    DEFAULT_CSS = """
    RunDetailScreen #detail-scroll { padding: 0 1; }
    RunDetailScreen #metric-find { display: none; }
    RunDetailScreen #metric-find.-shown { display: block; }
    """

    def __init__(self, store: Store, run_id: str) -> None:
        super().__init__()
        self.store = store
        self.run_id = run_id
        self.detail: RunDetail | None = None
        self._lowered: list[str] = []  # the detail's metric names in lower case, for `/`
        self._reload: Timer | None = None

    def compose(self) -> ComposeResult:
        yield Header(icon=fmt.TITLE_ICON)
        with VerticalScroll(id="detail-scroll"):
            yield RenderedOnce(f"Loading run {self.run_id}…", id="detail")
            yield RenderedOnce(id="detail-metrics")
            yield RenderedOnce(id="detail-rest")
        yield Input(placeholder="find a metric name (words)", id="metric-find")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        self.sub_title = f"run {self.run_id}"
        self.query_one("#detail-scroll").focus()
        self.load()

    def load(self) -> None:
        def work() -> None:
            self.post_message(RunDetailLoaded(load_run_detail(self.store, self.run_id)))

        run_in_thread(self, work, group="run-detail", description="loading the run detail")

    def _show(self, *, metrics_only: bool = False) -> None:
        """Draw the detail; `metrics_only`: the find text changed, nothing else did (a run
        with thousands of names: its other parts are not measured and drawn again)."""
        if self.detail is None:
            return
        find = self.query_one("#metric-find", Input).value
        shown = render_metrics(self.detail, find, self._lowered)
        self.query_one("#detail-metrics", RenderedOnce).update(shown)
        if not metrics_only:
            self.query_one("#detail", RenderedOnce).update(render_head(self.detail))
            self.query_one("#detail-rest", RenderedOnce).update(render_rest(self.detail))

    @on(RunDetailLoaded)
    def _loaded(self, message: RunDetailLoaded) -> None:
        self.detail = message.detail
        self._lowered = [m.name.lower() for m in message.detail.metrics]
        self._show()
        live = message.detail.run.status == "running"
        if live and self._reload is None:  # follow the run while it records
            self._reload = self.set_interval(RELOAD_S, self.load)
        elif not live and self._reload is not None:
            self._reload.stop()
            self._reload = None

    @on(Input.Changed, "#metric-find")
    def _find_changed(self) -> None:
        self._show(metrics_only=True)

    @on(Input.Submitted, "#metric-find")
    def _find_done(self) -> None:
        self.query_one("#detail-scroll").focus()

    def action_find(self) -> None:
        box = self.query_one("#metric-find", Input)
        box.add_class("-shown")
        box.focus()

    def action_back(self) -> None:
        box = self.query_one("#metric-find", Input)
        if box.has_class("-shown"):  # esc closes the search first, then the screen
            box.remove_class("-shown")
            box.value = ""
            self.query_one("#detail-scroll").focus()
            return
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
