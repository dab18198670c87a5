"""The version history: code versions with their runs beneath, one line each.

A Line API widget (like Toolong's log view): it renders only the visible lines, so a
project with thousands of runs scrolls and moves its cursor as fast as one with four, and
a version header can span the whole width (a DataTable cell cannot).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rich.cells import cell_len
from rich.style import Style
from rich.text import Text
from textual import events
from textual.geometry import Region, Size
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

from florwb.ui import format as fmt
from florwb.ui import keys
from florwb.widgets.sparkline import sparkline
from florwb_engine.store.queries import History, RunRow, VersionRow

UNVERSIONED = "(no version)"


@dataclass
class HistoryRow:
    """A line of the list: a version header, or one run of that version."""

    kind: str  # "version" | "run"
    version: str | None
    run: RunRow | None = None
    n_runs: int = 0
    info: VersionRow | None = None

    @property
    def key(self) -> str:
        return f"run:{self.run.run_id}" if self.run else f"version:{self.version}"


@dataclass(frozen=True)
class Columns:
    """Cell widths of a run line at a given widget width (the header uses them too)."""

    time: int
    run: int
    status: int
    args: int
    spark: int
    last: int

    @classmethod
    def fit(cls, width: int) -> Columns:
        spark = 12 if width < 100 else 20
        fixed = 5 + 11 + 1 + 6 + 1 + 10 + 1 + spark + 1 + 7
        return cls(11, 6, 10, max(width - fixed - 1, 8), spark, 7)

    def header(self, metric: str | None, scale: tuple[float, float] | None = None) -> Text:
        """`scale`: the one low..high every sparkline of the column is drawn against."""
        text = Text("     ")
        text.append(f"{'started':<{self.time}} ")
        text.append(f"{'run':<{self.run}} ")
        text.append(f"{'status':<{self.status}} ")
        text.append(f"{'args that differ':<{self.args}} ")
        label = metric or "metric"
        if metric and scale is not None:
            label += f" {fmt.number(scale[0], 3)}..{fmt.number(scale[1], 3)}"
        text.append(fmt.clip(label, self.spark + 1 + self.last).ljust(self.spark))
        return text


def shared_scale(series: dict[str, list[float]]) -> tuple[float, float] | None:
    """The low and high over every run's points: sparklines drawn against one scale can be
    compared row to row (each row scaled to itself would always span ▁ to █)."""
    finite = [v for points in series.values() for v in points if v == v and abs(v) != math.inf]
    return (min(finite), max(finite)) if finite else None


def run_status(run: RunRow) -> str:
    """What the history says about a run: replayed runs are marked as such."""
    if run.replays and run.status == "finished":
        return "replayed"
    return run.status


def build_rows(history: History, text_filter: str = "") -> list[HistoryRow]:
    """Newest version first, its runs newest first; `text_filter` keeps matching runs
    (every word must match the run id, version, status, script or args)."""
    words = text_filter.lower().split()
    by_version: dict[str, list[RunRow]] = {}
    for run in history.runs:
        by_version.setdefault(run.version or UNVERSIONED, []).append(run)
    info = {v.version: v for v in history.versions}

    def newest(version: str) -> float:
        starts = [r.start_time.timestamp() for r in by_version[version] if r.start_time]
        return max(starts, default=-math.inf)

    rows: list[HistoryRow] = []
    for version in sorted(by_version, key=newest, reverse=True):
        runs = [r for r in reversed(by_version[version]) if _matches(r, words)]
        if not runs:
            continue
        real = None if version == UNVERSIONED else version
        rows.append(HistoryRow("version", real, None, len(by_version[version]), info.get(version)))
        rows.extend(HistoryRow("run", real, r) for r in runs)
    return rows


def _matches(run: RunRow, words: list[str]) -> bool:
    if not words:
        return True
    hay = " ".join(
        [
            run.run_id,
            run.version or "",
            run_status(run),
            run.status,
            run.script or "",
            run.exception or "",
            fmt.args_text(run.args),
        ]
    ).lower()
    return all(w in hay for w in words)


class HistoryList(ScrollView, can_focus=True):
    """Versions and runs; j/k move, enter opens, space marks. Posts Highlighted on moves."""

    BINDINGS = keys.bindings("history")
    COMPONENT_CLASSES = {
        "history-list--version",
        "history-list--cursor",
        "history-list--marked",
        "history-list--dim",
        "history-list--spark",
    }
    DEFAULT_CSS = """
    HistoryList { background: $surface; }
    HistoryList > .history-list--version { color: $accent; text-style: bold; }
    HistoryList > .history-list--cursor { background: $block-cursor-blurred-background; }
    HistoryList:focus > .history-list--cursor {
        background: $block-cursor-background; color: $block-cursor-foreground;
    }
    HistoryList > .history-list--marked { color: $warning; text-style: bold; }
    HistoryList > .history-list--dim { color: $text-muted; }
    HistoryList > .history-list--spark { color: $secondary; }
    """

    cursor: reactive[int] = reactive(0, always_update=True, repaint=False)

    @dataclass
    class Highlighted(Message):
        row: HistoryRow | None

    @dataclass
    class Opened(Message):
        row: HistoryRow

    @dataclass
    class MarksChanged(Message):
        runs: frozenset[str]
        versions: frozenset[str]

    @dataclass
    class MetricStep(Message):
        step: int

    @dataclass
    class FilterRequested(Message):
        """The user asked for the filter box (`/`)."""

    @dataclass
    class ChartAsked(Message):
        """The user asked for the chart (`c`) with the cursor on `row`."""

        row: HistoryRow | None

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.rows: list[HistoryRow] = []
        self.series: dict[str, list[float]] = {}
        self.last: dict[str, float] = {}
        self.scale: tuple[float, float] | None = None
        self.differ: list[str] = []
        self.marked_runs: set[str] = set()
        self.marked_versions: set[str] = set()
        self.live: dict[str, str] = {}  # run id -> progress text for running runs
        self._cache: dict[int, Strip] = {}

    # --- data -----------------------------------------------------------------------------

    def set_rows(self, rows: list[HistoryRow], differ: list[str]) -> None:
        """Replace the lines, keeping the cursor on the same run or version if still there."""
        current = self.current
        key = current.key if current else None
        self.rows = rows
        self.differ = differ
        self._cache.clear()
        self.virtual_size = Size(self.size.width, len(rows))
        index = next((i for i, r in enumerate(rows) if r.key == key), None)
        if index is None:
            index = next((i for i, r in enumerate(rows) if r.kind == "run"), 0)
        self.cursor = min(index, max(len(rows) - 1, 0))
        self.refresh()

    def set_series(self, series: dict[str, list[float]], last: dict[str, float]) -> None:
        self.series, self.last = series, last
        self.scale = shared_scale(series)
        self._cache.clear()
        self.refresh()

    def set_live(self, live: dict[str, str]) -> None:
        self.live = live
        self._cache.clear()
        self.refresh()

    @property
    def current(self) -> HistoryRow | None:
        return self.rows[self.cursor] if 0 <= self.cursor < len(self.rows) else None

    # --- cursor ---------------------------------------------------------------------------

    def validate_cursor(self, value: int) -> int:
        return max(0, min(value, len(self.rows) - 1)) if self.rows else 0

    def watch_cursor(self, old: int, new: int) -> None:
        self._cache.pop(old, None)
        self._cache.pop(new, None)
        self.refresh_lines(old)
        self.refresh_lines(new)
        self.scroll_to_region(Region(0, new, 1, 1), animate=False, force=True)
        self.post_message(self.Highlighted(self.current))

    def action_cursor_down(self) -> None:
        self.cursor += 1

    def action_cursor_up(self) -> None:
        self.cursor -= 1

    def action_page_down(self) -> None:
        self.cursor += max(self.size.height - 1, 1)

    def action_page_up(self) -> None:
        self.cursor -= max(self.size.height - 1, 1)

    def action_first(self) -> None:
        self.cursor = 0

    def action_last(self) -> None:
        self.cursor = len(self.rows) - 1

    def action_open(self) -> None:
        if self.current is not None:
            self.post_message(self.Opened(self.current))

    def action_mark(self) -> None:
        row = self.current
        if row is None:
            return
        if row.run is not None:
            self.marked_runs ^= {row.run.run_id}
        elif row.version is not None:
            self.marked_versions ^= {row.version}
        self._cache.clear()
        self.refresh()
        self._post_marks()
        if row.kind == "run":
            self.cursor += 1

    def action_unmark_all(self) -> None:
        self.marked_runs.clear()
        self.marked_versions.clear()
        self._cache.clear()
        self.refresh()
        self._post_marks()

    def action_filter(self) -> None:
        self.post_message(self.FilterRequested())

    def action_chart(self) -> None:
        self.post_message(self.ChartAsked(self.current))

    def action_next_metric(self) -> None:
        self.post_message(self.MetricStep(1))

    def action_previous_metric(self) -> None:
        self.post_message(self.MetricStep(-1))

    def _post_marks(self) -> None:
        self.post_message(
            self.MarksChanged(frozenset(self.marked_runs), frozenset(self.marked_versions))
        )

    def on_click(self, event: events.Click) -> None:
        index = event.y + int(self.scroll_offset.y)
        if 0 <= index < len(self.rows):
            self.cursor = index
            if event.chain >= 2:
                self.action_open()

    # --- rendering ------------------------------------------------------------------------

    def notify_style_update(self) -> None:
        """A theme change restyles every line: drop the rendered ones."""
        super().notify_style_update()
        self._cache.clear()

    def on_resize(self, event: events.Resize) -> None:
        self.virtual_size = Size(event.size.width, len(self.rows))
        self._cache.clear()

    @property
    def content_width(self) -> int:
        """The width left of the scrollbar: a line as wide as the widget would lose its
        last cells (the last-value column) under the scrollbar once the runs outgrow it."""
        return self.scrollable_content_region.width

    def render_line(self, y: int) -> Strip:
        index = int(self.scroll_offset.y) + y
        width = self.content_width
        if index >= len(self.rows):
            return Strip.blank(width, self.rich_style)
        strip = self._cache.get(index)
        if strip is None or strip.cell_length != width:
            strip = self._render_row(index, width)
            self._cache[index] = strip
        return strip

    def _style(self, name: str) -> Style:
        """A component's foreground only: the full style resolves theme colors such as
        `$text-muted` ("auto 60%") against the background, which a partial style cannot,
        and dropping its background lets the cursor row keep its own."""
        full = self.get_component_rich_style(f"history-list--{name}")
        return Style(color=full.color, bold=full.bold, italic=full.italic)

    def _render_row(self, index: int, width: int) -> Strip:
        row = self.rows[index]
        text = self._version_text(row, width) if row.kind == "version" else self._run_text(row)
        base = self.rich_style
        if index == self.cursor:
            cursor = self.get_component_rich_style("history-list--cursor")
            base = base + cursor
            if cursor.color is not None:  # one readable foreground on the cursor bar
                text.stylize(Style(color=cursor.color))
        text.truncate(width, pad=True)
        segments = list(text.render(self.app.console))
        strip = Strip(segments, cell_len(text.plain)).apply_style(base)
        return strip.crop_extend(0, width, base)

    def _version_text(self, row: HistoryRow, width: int) -> Text:
        marked = row.version in self.marked_versions
        text = Text("* " if marked else "▾ ", style=self._style("marked") if marked else "")
        text.append(f"version {fmt.short_version(row.version)}", self._style("version"))
        details = [fmt.plural(row.n_runs, "run")]
        if row.info is not None:
            details.append(f"first seen {fmt.clock(row.info.first_seen)}")
            if row.info.n_files is not None:
                files = fmt.plural(row.info.n_files, "file")
                details.append(f"{files}, {fmt.size(row.info.n_bytes)}")
        text.append("  " + " · ".join(details), self._style("dim"))
        return text

    def _run_text(self, row: HistoryRow) -> Text:
        run = row.run
        assert run is not None
        cols = Columns.fit(self.content_width)
        marked = run.run_id in self.marked_runs
        status = run_status(run)
        style = fmt.STATUS_STYLES.get(status, "")
        text = Text("  ")
        text.append("*" if marked else " ", self._style("marked"))
        text.append(fmt.STATUS_ICONS.get(status, "?") + " ", style)
        text.append(f"{fmt.clock(run.start_time):<{cols.time}} ", self._style("dim"))
        text.append(f"{fmt.short_run(run.run_id):<{cols.run}} ", "bold" if marked else "")
        label = self.live.get(run.run_id, status)
        text.append(f"{fmt.clip(label, cols.status):<{cols.status}} ", style)
        args = fmt.args_text(run.args, self.differ) or "-"
        text.append(f"{fmt.clip(args, cols.args):<{cols.args}} ")
        points = self.series.get(run.run_id)
        low, high = self.scale if self.scale is not None else (None, None)
        spark = sparkline(points, cols.spark, low, high) if points else ""
        text.append(f"{spark:<{cols.spark}} ", self._style("spark"))
        last = self.last.get(run.run_id)
        text.append(f"{fmt.number(last, 4):>{cols.last}}" if last is not None else "")
        return text
