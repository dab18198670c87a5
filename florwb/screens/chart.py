"""The chart view: a metric of several runs over one shared x axis, filling in live.

Pushed by `c` on the History tab (or the command palette) with the marked runs, or the
runs of the version under the cursor. Reads go through florwb_engine.store.curves on a
thread worker; drawing (plotext) runs on another (florwb.widgets.chart_view), so no key
waits for either. x is steps, epochs or seconds of training (`x` cycles), shared by every
run; `l` toggles a log y scale, `s` cycles smoothing 0 / 0.6 / 0.9 (TensorBoard's EMA),
`+`/`-` narrow and widen the x range, the arrows move it, `0` shows all of it.

While a run records or a replay lands, the app calls `data_changed` on each reload of the
live monitor; the chart re-reads at most once per RELOAD_EVERY_S (the last change is never
dropped: a trailing read follows).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.color import Color
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import Footer, Header, Static
from textual.worker import Worker, WorkerState

from florwb.ui import format as fmt
from florwb.ui import keys
from florwb.ui.messages import ChartDrawn, CurvesLoaded
from florwb.ui.workers import run_in_thread
from florwb.widgets.chart_view import (
    RECORDED_MARKER,
    REPLAYED_MARKER,
    ChartDrawing,
    ChartSpec,
    ChartView,
    draw_chart,
    full_range,
    window_range,
)
from florwb_engine.store import Store
from florwb_engine.store.curves import AXES, AXIS_LABELS, Curves, load_curves

SMOOTHING = (0.0, 0.6, 0.9)
RELOAD_EVERY_S = 1.0
MIN_WINDOW = 1 / 256  # the narrowest x range, as a share of the whole


@dataclass(frozen=True)
class ChartState:
    """What the user chose; every key makes a new state."""

    metric: str | None
    axis: str = "step"
    log_y: bool = False
    smoothing: float = 0.0
    window: tuple[float, float] = (0.0, 1.0)


class ChartScreen(Screen[None]):
    BINDINGS = keys.bindings("chart")
    DEFAULT_CSS = """
    ChartScreen #chart-status { height: 2; padding: 0 1; color: $text-muted; }
    ChartScreen ChartView { height: 1fr; }
    """

    def __init__(
        self,
        store: Store,
        run_ids: list[str],
        labels: dict[str, str],
        metric: str | None,
        title: str,
        *,
        version: str | None = None,
    ) -> None:
        """`version`: chart every run of that version, also those started later."""
        super().__init__()
        self.store = store
        self.run_ids = list(run_ids)
        self.version = version
        self.labels = dict(labels)
        self.title_text = title
        self.state = ChartState(metric)
        self.curves: Curves | None = None
        self.drawing: ChartDrawing | None = None
        self.loads = 0  # reads finished (tests wait on it)
        self._load_serial = 0  # the newest read asked for; older answers are dropped
        self._draw_serial = 0
        self._drawn_serial = 0
        self._load_worker: Worker[Any] | None = None
        self._last_load = 0.0
        self._trailing: Timer | None = None

    def compose(self) -> ComposeResult:
        yield Header(icon=fmt.TITLE_ICON)
        yield Static(id="chart-status")
        yield ChartView(id="chart")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        self.sub_title = self.title_text
        # the plot's background and text colors come from the theme: redraw on a change
        self.app.theme_changed_signal.subscribe(self, lambda _theme: self.redraw())
        self.load()

    # --- reading ------------------------------------------------------------------------

    def load(self) -> None:
        """Read the curves of the state's metric and axis (in a worker)."""
        self._load_serial += 1
        serial, state = self._load_serial, self.state
        self._last_load = time.monotonic()

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

    def redraw(self) -> None:
        curves = self.curves
        if curves is None or curves.metric is None:
            return
        view = self.query_one(ChartView)
        theme = self.app.theme_variables
        spec = ChartSpec(
            curves=tuple(curves.curves),
            labels=self.labels,
            axis=curves.axis,
            log_y=self.state.log_y,
            smoothing=self.state.smoothing,
            window=self.state.window,
            width=view.size.width,
            height=view.size.height,
            background=Color.parse(theme.get("surface", "black")).rgb,
            foreground=Color.parse(theme.get("foreground", "white")).rgb,
        )
        self._draw_serial += 1
        serial = self._draw_serial

        def work() -> None:
            self.post_message(ChartDrawn(serial, draw_chart(spec)))

        run_in_thread(self, work, group="draw", description="drawing the chart")

    @on(ChartDrawn)
    def _drawn(self, message: ChartDrawn) -> None:
        message.stop()
        if message.serial < self._drawn_serial:
            return
        self._drawn_serial = message.serial
        self.drawing = message.drawing
        self.query_one(ChartView).show(message.drawing)
        self._status()

    def on_resize(self) -> None:
        self.redraw()

    def _status(self) -> None:
        state, curves = self.state, self.curves
        line = Text()
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
        if self.drawing is not None and self.drawing.hidden:
            notes.append(f"{self.drawing.hidden} values ≤ 0 not drawn on the log scale")
        if notes:
            key.append(" · " + " · ".join(notes), "yellow")
        self.query_one("#chart-status", Static).update(Text("\n").join([line, key]))

    # --- keys ---------------------------------------------------------------------------

    def action_back(self) -> None:
        self.dismiss(None)

    def action_next_axis(self) -> None:
        axis = AXES[(AXES.index(self.state.axis) + 1) % len(AXES)]
        self.state = replace(self.state, axis=axis, window=(0.0, 1.0))
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
        names = curves.metrics
        at = names.index(self.state.metric) if self.state.metric in names else -1
        self.state = replace(self.state, metric=names[(at + step) % len(names)], window=(0, 1))
        self._status()
        self.load()


def _glyph(marker: str) -> str:
    """How plotext's legend shows a marker."""
    return "⢕⢕" if marker == "braille" else marker * 2
