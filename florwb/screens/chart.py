"""The chart view: a metric of several runs over one shared x axis, filling in live.

Pushed by `c` on the History tab (or the command palette) with the marked runs, or the
runs of the version under the cursor (only those the History filter shows). Reads go
through florwb_engine.store.curves on a thread worker; drawing (plotext) runs on another
(florwb.widgets.chart_view), so no key waits for either. x is steps, epochs or seconds of
training (`x` cycles), shared by every run; `l` toggles a log y scale, `s` cycles
smoothing 0 / 0.6 / 0.9 (TensorBoard's EMA), `+`/`-` narrow and widen the x range,
shift+arrows move it, `0` shows all of it. ← → move a cursor that reads each run's value,
step and wall time at its x; `/` finds a metric by fuzzy search; `g` shows a grid of
several metrics at once (small multiples, `[` `]` page), the picker's matches when a
search was made.

Drawing is coalesced: one draw runs at a time and, when it ends, draws only the newest
state asked for meanwhile, so a burst of keys costs two draws, not one per key, and the
last drawing always matches the status line. The legend is a bar of its own below the
plot (florwb.widgets.chart_legend), never drawn over the curves.

While a run records or a replay lands, the app calls `data_changed` on each reload of the
live monitor; the chart re-reads at most once per RELOAD_EVERY_S (the last change is never
dropped: a trailing read follows).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.color import Color
from textual.containers import Grid
from textual.message import Message
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import Footer, Header, Static
from textual.worker import Worker, WorkerState

from florwb.screens.metric_picker import MetricPicker, Picked
from florwb.ui import format as fmt
from florwb.ui import keys
from florwb.ui.messages import ChartDrawn, CurvesLoaded, GridDrawn
from florwb.ui.workers import run_in_thread
from florwb.widgets.chart_legend import LegendEntry, RunLabel, legend_text
from florwb.widgets.chart_view import (
    RECORDED_MARKER,
    REPLAYED_MARKER,
    ChartDrawing,
    ChartSpec,
    ChartView,
    draw_chart,
    full_range,
    run_colors,
    window_range,
)
from florwb_engine.store import Store
from florwb_engine.store.curves import AXES, AXIS_LABELS, Curve, Curves, load_curves

SMOOTHING = (0.0, 0.6, 0.9)
RELOAD_EVERY_S = 1.0
MIN_WINDOW = 1 / 256  # the narrowest x range, as a share of the whole
Y_AXIS_CELLS = 12  # the plot's columns taken by y tick labels (one cursor step: a column)


@dataclass(frozen=True)
class ChartState:
    """What the user chose; every key makes a new state."""

    metric: str | None
    axis: str = "step"
    log_y: bool = False
    smoothing: float = 0.0
    window: tuple[float, float] = (0.0, 1.0)
    cursor: float | None = None  # x of the cursor, None: no cursor
    grid: bool = False
    page: int = 0


@dataclass(frozen=True)
class Reading:
    """One run's point at the cursor: the last one at or before its x."""

    run_id: str
    label: str
    value: float | None  # None: the run has no point at or before the cursor
    step: float | None
    wall: float | None
    replayed: bool = False


def grid_shape(width: int, height: int) -> tuple[int, int]:
    """Columns and rows of the grid: cells stay readable (about 38 x 9 cells or more)."""
    return max(1, min(3, width // 38)), max(1, min(3, height // 9))


def legend_lines(height: int) -> int:
    return 2 if height < 45 else 3


class ChartScreen(Screen[None]):
    BINDINGS = keys.bindings("chart")
    KEY_SCOPES = ("chart",)
    DEFAULT_CSS = """
    ChartScreen #chart-status { height: 2; padding: 0 1; color: $text-muted; }
    ChartScreen ChartView { height: 1fr; }
    ChartScreen #chart-grid { height: 1fr; display: none; }
    ChartScreen.-grid #chart-grid { display: block; }
    ChartScreen.-grid #chart { display: none; }
    ChartScreen #chart-legend { height: auto; max-height: 3; padding: 0 1; }
    ChartScreen #chart-readout { height: auto; max-height: 4; padding: 0 1; display: none; }
    ChartScreen.-cursor #chart-readout { display: block; }
    """

    def __init__(
        self,
        store: Store,
        run_ids: list[str],
        labels: dict[str, RunLabel | str],
        metric: str | None,
        title: str,
        *,
        version: str | None = None,
    ) -> None:
        """`version`: chart every run of that version, also those started later.
        `labels`: each run's legend name (florwb.widgets.chart_legend.run_labels)."""
        super().__init__()
        self.store = store
        self.run_ids = list(run_ids)
        self.version = version
        self.labels = dict(labels)
        self.title_text = title
        self.state = ChartState(metric)
        self.curves: Curves | None = None
        self.drawing: ChartDrawing | None = None
        self.grid_drawings: list[tuple[str, ChartDrawing | None]] = []
        self.grid_names: list[str] | None = None  # the picker's matches; None: every name
        self.readings: list[Reading] = []
        self.loads = 0  # reads finished (tests wait on it)
        self.draws = 0  # drawings shown
        self._load_serial = 0  # the newest read asked for; older answers are dropped
        self._draw_serial = 0
        self._load_worker: Worker[Any] | None = None
        self._last_load = 0.0
        self._trailing: Timer | None = None
        self._draw_lock = threading.Lock()
        self._draw_job: Callable[[], Message] | None = None
        self._draw_busy = False

    def compose(self) -> ComposeResult:
        yield Header(icon=fmt.TITLE_ICON)
        yield Static(id="chart-status")
        yield ChartView(id="chart")
        yield Grid(id="chart-grid")
        yield Static(id="chart-legend")
        yield Static(id="chart-readout")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        self.sub_title = self.title_text
        # the plot's background and text colors come from the theme: redraw on a change
        self.app.theme_changed_signal.subscribe(self, lambda _theme: self.redraw())
        self.load()

    # --- reading ------------------------------------------------------------------------

    def load(self) -> None:
        """Read the curves of the state's metric and axis (in a worker); in the grid, the
        page's metrics, drawn in the same worker."""
        self._load_serial += 1
        serial, state = self._load_serial, self.state
        self._last_load = time.monotonic()
        if state.grid and self.curves is not None:
            self._load_grid(serial, state)
            return

        def work() -> None:
            curves = load_curves(
                self.store, self.run_ids, state.metric, state.axis, version=self.version
            )
            self.post_message(CurvesLoaded(serial, curves))

        self._load_worker = run_in_thread(
            self, work, group="curves", description="loading the curves"
        )

    @property
    def _loading(self) -> bool:
        """A read is under way (one that failed is over: the app showed why)."""
        worker = self._load_worker
        return worker is not None and worker.state in (WorkerState.PENDING, WorkerState.RUNNING)

    @on(CurvesLoaded)
    def _loaded(self, message: CurvesLoaded) -> None:
        message.stop()
        if message.serial != self._load_serial:
            return  # the user changed the metric or axis meanwhile: a newer read follows
        self.loads += 1
        curves: Curves = message.curves
        self.curves = curves
        if curves.metric != self.state.metric:
            self.state = replace(self.state, metric=curves.metric)
        if curves.metric is None:
            self.query_one(ChartView).say("These runs logged no numeric values.")
            self._status()
            return
        if self.state.grid:
            self.load()
            return
        self._read_cursor()
        self.redraw()

    def data_changed(self) -> None:
        """New rows may be in the store (a run recording, a replay landing): re-read, at
        most once per RELOAD_EVERY_S, and once more after the last change."""
        if self.curves is None and self._loading:
            return  # the first read is under way and will see them
        wait = self._last_load + RELOAD_EVERY_S - time.monotonic()
        if wait <= 0 and not self._loading:
            self.load()
        elif self._trailing is None:
            self._trailing = self.set_timer(max(wait, 0.1), self._trailing_load)

    def _trailing_load(self) -> None:
        self._trailing = None
        self.data_changed()

    # --- drawing ------------------------------------------------------------------------

    def _order(self) -> list[str]:
        """Runs in color order: those asked for, then any the version brought since."""
        order = list(self.run_ids)
        if self.curves is not None:
            order += [c.run_id for c in self.curves.curves if c.run_id not in order]
        return order

    def _spec(self, curves: Curves, width: int, height: int, title: str | None = None) -> ChartSpec:
        theme = self.app.theme_variables
        state = self.state
        order = self._order()
        return ChartSpec(
            curves=tuple(curves.curves),
            labels={r: self._label(r) for r in order},
            axis=curves.axis,
            log_y=state.log_y,
            smoothing=state.smoothing,
            window=state.window,
            width=width,
            height=height,
            background=Color.parse(theme.get("surface", "black")).rgb,
            foreground=Color.parse(theme.get("foreground", "white")).rgb,
            cursor=None if state.grid else state.cursor,
            title=title,
            run_order=tuple(order),
        )

    def _label(self, run_id: str) -> str:
        label = self.labels.get(run_id)
        if isinstance(label, RunLabel):
            return label.text(0)
        return label or fmt.short_run(run_id)

    def redraw(self) -> None:
        curves = self.curves
        if curves is None or curves.metric is None:
            return
        if self.state.grid:
            self.load()
            return
        view = self.query_one(ChartView)
        spec = self._spec(curves, view.size.width, view.size.height)
        drawn = replace(self.state, metric=curves.metric, axis=curves.axis)
        self._draw_serial += 1
        serial = self._draw_serial
        self._schedule(lambda: ChartDrawn(serial, draw_chart(spec), drawn))

    def _schedule(self, job: Callable[[], Message]) -> None:
        """Run `job` on the one drawing worker; a job asked for while it draws replaces
        any other waiting job (only the newest state is worth drawing)."""
        with self._draw_lock:
            self._draw_job = job
            if self._draw_busy:
                return
            self._draw_busy = True
        run_in_thread(self, self._draw_loop, group="draw", description="drawing the chart")

    def _draw_loop(self) -> None:
        try:
            while True:
                with self._draw_lock:
                    job, self._draw_job = self._draw_job, None
                    if job is None:
                        self._draw_busy = False
                        return
                self.post_message(job())
        except BaseException:
            with self._draw_lock:
                self._draw_busy = False
            raise

    @on(ChartDrawn)
    def _drawn(self, message: ChartDrawn) -> None:
        message.stop()
        self.drawing = message.drawing
        self.draws += 1
        self.query_one(ChartView).show(message.drawing)
        self._status()
        self._legend()

    def on_resize(self) -> None:
        self.redraw()

    def _status(self) -> None:
        state, curves = self.state, self.curves
        line = Text()
        if state.grid:
            names = self._grid_names()
            cells = self._cells()
            pages = max(1, -(-len(names) // cells))
            line.append(f"grid page {state.page + 1}/{pages}", "bold")
            line.append(f" · {fmt.plural(len(names), 'metric')}")
            if self.grid_names is not None:
                line.append(" matching the search")
        else:
            line.append(state.metric or "no metric", "bold")
        line.append(f" vs {AXIS_LABELS[state.axis]}")
        runs = len({c.run_id for c in curves.curves}) if curves else 0
        replayed = sum(c.replayed for c in curves.curves) if curves else 0
        line.append(f" · {fmt.plural(runs, 'run')}")
        if replayed:
            line.append(f" ({replayed} replayed)")
        line.append(f" · smoothing {state.smoothing:g}")
        line.append(" · log y" if state.log_y else " · linear y")
        full = full_range(curves.curves) if curves else None
        if full is not None and state.window != (0.0, 1.0):
            lo, hi = window_range(full, state.window)
            line.append(f" · x {fmt.number(lo, 4)}..{fmt.number(hi, 4)} (zoomed)")
        key = Text()
        key.append(f"{_glyph(RECORDED_MARKER)} recorded  {REPLAYED_MARKER} replayed", "")
        notes = []
        if curves is not None and curves.outside_loops:
            notes.append(f"{curves.outside_loops} values logged outside loops not drawn")
        if curves is not None and curves.withheld:
            notes.append(curves.withheld.note("florwb dataframe --diverged"))
        drawing = self.drawing
        if drawing is not None and not state.grid:
            if drawing.hidden:
                notes.append(f"{drawing.hidden} values ≤ 0 not drawn on the log scale")
            bad = [f"{drawing.nan} NaN"] if drawing.nan else []
            bad += [f"{drawing.inf} inf"] if drawing.inf else []
            if bad:
                notes.append(f"{' + '.join(bad)} values: lines break there")
            if drawing.no_finite:
                named = ", ".join(fmt.short_run(r) for r in drawing.no_finite)
                notes.append(f"no finite value, not drawn: {named}")
        if notes:
            key.append(" · " + " · ".join(notes), "yellow")
        self.query_one("#chart-status", Static).update(Text("\n").join([line, key]))

    def _legend(self) -> None:
        """The legend bar: every charted run in its color, abbreviated to fit."""
        curves = self.curves
        if curves is None:
            return
        order = self._order()
        present = {c.run_id for c in curves.curves}
        if self.state.grid:  # the cells' runs: every run asked for
            present |= set(self.run_ids)
        replayed = {c.run_id for c in curves.curves if c.replayed}
        colors = run_colors(order)
        entries = [
            LegendEntry(r, self.labels.get(r) or fmt.short_run(r), colors[r], r in replayed)
            for r in order
            if r in present
        ]
        bar = self.query_one("#chart-legend", Static)
        width = max(bar.size.width - 2, self.size.width - 2)
        bar.update(legend_text(entries, width, legend_lines(self.size.height)))

    # --- the cursor ---------------------------------------------------------------------

    def _window_x(self) -> tuple[float, float] | None:
        curves = self.curves
        full = full_range(curves.curves) if curves else None
        return None if full is None else window_range(full, self.state.window)

    def action_cursor(self, step: int) -> None:
        """Move the cursor one plot column (or to the next point, when further)."""
        window, curves = self._window_x(), self.curves
        if window is None or curves is None or self.state.grid:
            return
        lo, hi = window
        xs = np.unique(np.concatenate([c.x[(c.x >= lo) & (c.x <= hi)] for c in curves.curves]))
        if not len(xs):
            return
        cursor = self.state.cursor
        if cursor is None or not lo <= cursor <= hi:
            x = float(xs[-1] if step < 0 else xs[0])
        else:
            column = (hi - lo) / max(self.query_one(ChartView).size.width - Y_AXIS_CELLS, 10)
            if step > 0:
                ahead = xs[xs >= cursor + column * 0.999]
                x = float(ahead[0] if len(ahead) else xs[-1])
            else:
                behind = xs[xs <= cursor - column * 0.999]
                x = float(behind[-1] if len(behind) else xs[0])
        self.state = replace(self.state, cursor=x)
        self.add_class("-cursor")
        self._read_cursor()
        self.redraw()

    def _read_cursor(self) -> None:
        """Each run's last point at or before the cursor: value, step, wall time."""
        cursor, curves = self.state.cursor, self.curves
        readout = self.query_one("#chart-readout", Static)
        if cursor is None or curves is None:
            self.readings = []
            readout.update("")
            return
        readings = [_reading(c, cursor, self._label(c.run_id)) for c in curves.curves]
        self.readings = readings
        colors = run_colors(self._order())
        text = Text(no_wrap=False)
        text.append(f"at {AXIS_LABELS[self.state.axis]} {fmt.number(cursor, 5)}:", "bold")
        for r in readings:
            text.append("  ")
            text.append("━ ", style="rgb({},{},{})".format(*colors.get(r.run_id, (255, 255, 255))))
            text.append(fmt.short_run(r.run_id) + (" ↻" if r.replayed else "") + " ")
            if r.value is None:
                text.append("-", "dim")
                continue
            text.append(fmt.number(r.value, 4), "bold")
            step = "-" if r.step is None else fmt.number(r.step, 6)
            text.append(f" step {step} {fmt.duration(r.wall)}", "dim")
        readout.update(text)

    def action_back(self) -> None:
        if self.state.cursor is not None:  # the first escape clears the cursor
            self.state = replace(self.state, cursor=None)
            self.remove_class("-cursor")
            self._read_cursor()
            self.redraw()
            return
        self.dismiss(None)

    # --- the grid -----------------------------------------------------------------------

    def _grid_names(self) -> list[str]:
        if self.grid_names is not None:
            return self.grid_names
        return list(self.curves.metrics) if self.curves is not None else []

    def _cells(self) -> int:
        cols, rows = grid_shape(*self._grid_area())
        return cols * rows

    def _grid_area(self) -> tuple[int, int]:
        chart = self.query_one("#chart-grid")
        width = chart.size.width or self.size.width
        height = chart.size.height or max(self.size.height - 6, 5)
        return width, height

    def action_toggle_grid(self) -> None:
        grid = not self.state.grid
        page = 0
        names = self._grid_names()
        if grid and self.state.metric in names:
            page = names.index(self.state.metric) // self._cells()
        self.state = replace(self.state, grid=grid, page=page, cursor=None)
        self.remove_class("-cursor")
        self.set_class(grid, "-grid")
        self._status()
        if grid:
            self.load()
        else:
            self.redraw()

    def action_page(self, step: int) -> None:
        if not self.state.grid:
            return
        pages = max(1, -(-len(self._grid_names()) // self._cells()))
        page = min(max(self.state.page + step, 0), pages - 1)
        if page != self.state.page:
            self.state = replace(self.state, page=page)
            self._status()
            self.load()

    def _load_grid(self, serial: int, state: ChartState) -> None:
        """Read and draw the page's metrics in one worker (each cell a small chart)."""
        width, height = self._grid_area()
        cols, rows = grid_shape(width, height)
        names = self._grid_names()[state.page * cols * rows :][: cols * rows]
        cell_w, cell_h = width // cols, height // rows
        self._prepare_cells(cols, rows)
        run_ids, version = self.run_ids, self.version
        base = self.curves

        def work() -> None:
            out: list[tuple[str, ChartDrawing | None]] = []
            for name in names:
                curves = load_curves(self.store, run_ids, name, state.axis, version=version)
                if curves.metric != name or base is None:
                    out.append((name, None))
                    continue
                spec = self._spec(curves, cell_w, cell_h, title=name)
                out.append((name, draw_chart(spec)))
            self.post_message(GridDrawn(serial, out, state))

        self._load_worker = run_in_thread(
            self, work, group="curves", description="loading the chart grid"
        )

    def _prepare_cells(self, cols: int, rows: int) -> None:
        grid = self.query_one("#chart-grid", Grid)
        grid.styles.grid_size_columns = cols
        grid.styles.grid_size_rows = rows
        cells = list(grid.query(ChartView))
        if len(cells) != cols * rows:
            grid.remove_children()
            grid.mount_all([ChartView(id=f"chart-cell-{i}") for i in range(cols * rows)])

    @on(GridDrawn)
    def _grid_drawn(self, message: GridDrawn) -> None:
        message.stop()
        if message.serial != self._load_serial:
            return
        self.loads += 1
        self.grid_drawings = list(message.drawings)
        cells = list(self.query_one("#chart-grid", Grid).query(ChartView))
        for i, cell in enumerate(cells):
            if i >= len(self.grid_drawings):
                cell.say("")
                continue
            name, drawing = self.grid_drawings[i]
            if drawing is None:
                cell.say(f"{name}: no numeric values for these runs")
            else:
                cell.show(drawing)
        self.draws += 1
        self._status()
        self._legend()

    # --- keys ---------------------------------------------------------------------------

    def action_next_axis(self) -> None:
        axis = AXES[(AXES.index(self.state.axis) + 1) % len(AXES)]
        self.state = replace(self.state, axis=axis, window=(0.0, 1.0), cursor=None)
        self.remove_class("-cursor")
        self._status()
        self.load()

    def action_toggle_log(self) -> None:
        self.state = replace(self.state, log_y=not self.state.log_y)
        self._status()
        self.redraw()

    def action_next_smoothing(self) -> None:
        at = SMOOTHING.index(self.state.smoothing) if self.state.smoothing in SMOOTHING else 0
        self.state = replace(self.state, smoothing=SMOOTHING[(at + 1) % len(SMOOTHING)])
        self._status()
        self.redraw()

    def action_zoom(self, factor: float) -> None:
        """factor < 1 narrows the x range around its middle, > 1 widens it."""
        lo, hi = self.state.window
        middle, half = (lo + hi) / 2, max((hi - lo) * factor, MIN_WINDOW) / 2
        half = min(half, 0.5)
        lo, hi = middle - half, middle + half
        if lo < 0:
            lo, hi = 0.0, hi - lo
        if hi > 1:
            lo, hi = max(lo - (hi - 1), 0.0), 1.0
        self._set_window((lo, hi))

    def action_pan(self, share: float) -> None:
        """Move the x range by `share` of its own width (negative: left)."""
        lo, hi = self.state.window
        shift = (hi - lo) * share
        shift = max(-lo, min(shift, 1.0 - hi))
        self._set_window((lo + shift, hi + shift))

    def action_reset_zoom(self) -> None:
        self._set_window((0.0, 1.0))

    def _set_window(self, window: tuple[float, float]) -> None:
        if window == self.state.window:
            return
        self.state = replace(self.state, window=window)
        self._status()
        self.redraw()

    def action_metric(self, step: int) -> None:
        curves = self.curves
        if curves is None or not curves.metrics:
            return
        if self.state.grid:
            self.action_page(step)
            return
        names = curves.metrics
        at = names.index(self.state.metric) if self.state.metric in names else -1
        self._choose(names[(at + step) % len(names)])

    def _choose(self, metric: str) -> None:
        self.state = replace(self.state, metric=metric, window=(0, 1), cursor=None)
        self.remove_class("-cursor")
        self._status()
        self.load()

    def action_find_metric(self) -> None:
        curves = self.curves
        if curves is None or not curves.metrics:
            return

        def picked(choice: Picked | None) -> None:
            if choice is None:
                return
            self.grid_names = list(choice.matches) if choice.query.strip() else None
            if self.state.grid:
                names = self._grid_names()
                page = names.index(choice.metric) // self._cells() if choice.metric in names else 0
                self.state = replace(self.state, metric=choice.metric, page=page)
                self._status()
                self.load()
            else:
                self._choose(choice.metric)

        query = ""
        self.app.push_screen(MetricPicker(curves.metrics, self.state.metric, query), picked)


def _reading(curve: Curve, cursor: float, label: str) -> Reading:
    at = int(np.searchsorted(curve.x, cursor, "right")) - 1
    if at < 0:
        return Reading(curve.run_id, label, None, None, None, curve.replayed)
    step = None if curve.step is None else float(curve.step[at])
    wall = None if curve.wall is None else float(curve.wall[at])
    return Reading(curve.run_id, label, float(curve.y[at]), step, wall, curve.replayed)


def _glyph(marker: str) -> str:
    """How plotext's legend shows a marker."""
    return "⢕⢕" if marker == "braille" else marker * 2
