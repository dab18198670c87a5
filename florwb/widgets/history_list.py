"""The version history: code versions with their runs beneath, one line each.

A Line API widget (like Toolong's log view): it renders only the visible lines, so a
project with thousands of runs scrolls and moves its cursor as fast as one with four, and
a version header can span the whole width (a DataTable cell cannot).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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
from florwb.ui.history_rows import HistoryRow, run_status, took_text
from florwb.ui.run_columns import Columns, shared_scale
from florwb.widgets.sparkline import sparkline
from florwb_engine.run_compare import best_is_max
from florwb_engine.store.queries import RunRow


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

    @dataclass
    class SortChanged(Message):
        """The sort column or direction changed: the rows must be rebuilt in that order."""

        sort: tuple[str, bool]

    @dataclass
    class CompareRequested(Message):
        """`v` with exactly two runs marked: compare them side by side."""

        run_ids: tuple[str, str]

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.rows: list[HistoryRow] = []
        self.series: dict[str, list[float]] = {}
        self.last: dict[str, float] = {}
        self.low: dict[str, float] = {}
        self.high: dict[str, float] = {}
        self.metric: str | None = None
        self.scale: tuple[float, float] | None = None
        self.values_pending = False  # the metric's values are still being read
        self.differ: list[str] = []
        self.arg_widths: dict[str, int] = {}  # arg column -> its widest value in cells
        self.common_args: list[str] = []  # args with one value in every run listed
        self.script_width = 0  # the script column's width; 0 when every run has one script
        self.sort: tuple[str, bool] = ("started", True)  # column key, descending
        self._columns: Columns | None = None
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
        names = {n for r in rows if r.run is not None for n in r.run.args}
        self.common_args = sorted(names - set(differ))
        scripts = {r.run.script or "" for r in rows if r.run is not None}
        self.script_width = max(map(cell_len, scripts), default=0) if len(scripts) > 1 else 0
        self.arg_widths = {
            name: max(
                (
                    cell_len(fmt.number(r.run.args[name], 3))
                    for r in rows
                    if r.run is not None and name in r.run.args
                ),
                default=1,
            )
            for name in [*differ, *self.common_args]
        }
        self._columns = None
        self._cache.clear()
        self.virtual_size = Size(self.size.width, len(rows))
        index = next((i for i, r in enumerate(rows) if r.key == key), None)
        if index is None:
            index = next((i for i, r in enumerate(rows) if r.kind == "run"), 0)
        self.cursor = min(index, max(len(rows) - 1, 0))
        self.refresh()

    def set_series(
        self,
        series: dict[str, list[float]],
        last: dict[str, float],
        low: dict[str, float] | None = None,
        high: dict[str, float] | None = None,
        metric: str | None = None,
    ) -> None:
        """The metric's sparkline points, exact final value, min and max per run id."""
        self.series, self.last = series, last
        self.low, self.high = low or {}, high or {}
        self._columns = None  # the final and best columns are as wide as their values
        self.metric = metric
        self.scale = shared_scale(series)
        self._cache.clear()
        self.refresh()

    def columns(self, width: int | None = None) -> Columns:
        """The columns at the list's width (cached until rows, metric or width change)."""
        width = self.content_width if width is None else width
        cached = self._columns
        if cached is None or self._columns_width != width:
            args = [(name, self.arg_widths.get(name, 1)) for name in self.differ]
            values = tuple(
                max(
                    (cell_len(fmt.number(v, 4)) for v in self._values(key).values()),
                    default=1,
                )
                for key in ("final", "best")
            )
            common = [(n, self.arg_widths.get(n, 1)) for n in self.common_args]
            cached = self._columns = Columns.fit(
                width,
                args,
                self.metric,
                values,  # type: ignore[arg-type]
                common,
                script=self.script_width,
                status=max((cell_len(label) for label in self.live.values()), default=0),
            )
            self._columns_width = width
        return cached

    _columns_width = -1

    def _values(self, key: str) -> dict[str, float]:
        if key == "final":
            return self.last
        return self.high if best_is_max(self.metric) else self.low

    def column_value(self, run: RunRow, key: str) -> Any:
        """A run's value in column `key`, for sorting."""
        if key == "final":
            return self.last.get(run.run_id)
        if key == "best":
            return (self.high if best_is_max(self.metric) else self.low).get(run.run_id)
        if key == "took":
            return run.took()[0]
        if key == "script":
            return run.script
        if key.startswith("arg:"):
            value = run.args.get(key[4:])
            return None if isinstance(value, bool) else value
        return None

    def sort_keys(self) -> list[str]:
        """The columns `s` cycles through, in their order on screen."""
        return [
            "started",
            "run",
            *(["script"] if self.script_width else []),
            "status",
            "took",
            *(f"arg:{n}" for n in self.differ),
            "final",
            "best",
        ]

    def set_live(self, live: dict[str, str]) -> None:
        widest = max((cell_len(label) for label in live.values()), default=0)
        if widest != max((cell_len(label) for label in self.live.values()), default=0):
            self._columns = None  # the status column fits the widest label
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

    def action_cycle_sort(self) -> None:
        keys_ = self.sort_keys()
        index = keys_.index(self.sort[0]) if self.sort[0] in keys_ else -1
        key = keys_[(index + 1) % len(keys_)]
        # numbers and times read best largest first; names in alphabetical order
        self.sort = (key, key not in ("run", "status") and not key.startswith("arg:"))
        self.post_message(self.SortChanged(self.sort))

    def action_reverse_sort(self) -> None:
        self.sort = (self.sort[0], not self.sort[1])
        self.post_message(self.SortChanged(self.sort))

    def action_compare(self) -> None:
        # in the order they are listed (A above B); a run the filter hides still counts
        listed = [r.run.run_id for r in self.rows if r.run and r.run.run_id in self.marked_runs]
        marked = listed + sorted(self.marked_runs - set(listed))
        if len(marked) != 2:
            self.notify(
                f"Mark exactly two runs (space) to compare them; {len(self.marked_runs)} marked.",
                title="Compare",
            )
            return
        self.post_message(self.CompareRequested((marked[0], marked[1])))

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
        self._columns = None
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
        if row.git is not None:
            head, branch, dirty = row.git
            text.append("  ")
            if head:
                text.append(head[:7], "yellow")
            if branch:
                text.append(f" ({branch})", "green")
            if dirty:
                text.append(" *dirty", "red")
        details = [fmt.plural(row.n_runs, "run")]
        if row.n_shown is not None and row.n_shown != row.n_runs:  # a filter is on
            details = [f"{row.n_shown:,} of {fmt.plural(row.n_runs, 'run')}"]
        if row.info is not None:
            details.append(f"first seen {fmt.clock(row.info.first_seen)}")
            if row.info.n_files is not None:
                files = fmt.plural(row.info.n_files, "file")
                details.append(f"{files}, {fmt.size(row.info.n_bytes)}")
        while details and cell_len(text.plain) + 2 + len(" · ".join(details)) > width:
            details.pop()  # whole facts, never one cut midway
        if details:
            text.append("  " + " · ".join(details), self._style("dim"))
        return text

    def _run_text(self, row: HistoryRow) -> Text:
        run = row.run
        assert run is not None
        cols = self.columns()
        marked = run.run_id in self.marked_runs
        status = run_status(run)
        style = fmt.STATUS_STYLES.get(status, "")
        text = Text("  ")
        text.append("*" if marked else " ", self._style("marked"))
        text.append(fmt.STATUS_ICONS.get(status, "?") + " ", style)
        for column in cols.columns:
            key = column.key
            if key == "started":
                text.append(cols.cell(column, fmt.clock(run.start_time)) + " ", self._style("dim"))
            elif key == "run":
                text.append(
                    cols.cell(column, fmt.short_run(run.run_id)) + " ", "bold" if marked else ""
                )
            elif key == "script":  # a pipeline's runs: which of its scripts each ran
                shown = fmt.clip(run.script or "", column.width)
                text.append(cols.cell(column, shown) + " ", self._style("dim"))
            elif key == "status":
                label = self.live.get(run.run_id, status)
                text.append(cols.cell(column, fmt.clip(label, column.width)) + " ", style)
            elif key == "took":
                text.append(cols.cell(column, took_text(run)) + " ", self._style("dim"))
            elif key.startswith("arg:"):
                name = key[4:]
                value = fmt.number(run.args[name], 3) if name in run.args else "-"
                text.append(cols.cell(column, value) + " ")
            elif key in ("final", "best"):
                value = self.column_value(run, key)
                shown = fmt.number(value, 4) if value is not None else ""
                text.append(cols.cell(column, shown) + " ", "bold" if key == "final" else "")
            elif key == "spark":
                points = self.series.get(run.run_id)
                low, high = self.scale if self.scale is not None else (None, None)
                spark = sparkline(points, column.width, low, high) if points else ""
                if not points and self.values_pending:
                    spark = "…"
                text.append(f"{spark:<{column.width}} ", self._style("spark"))
        return text
