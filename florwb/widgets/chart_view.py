"""The chart's drawing: curves of several runs as one plotext line chart.

Drawing is split from showing. `draw_chart` turns a `ChartSpec` (plain data: the curves,
the x window, smoothing, log scale, the size and colors) into Rich text with plotext
(through textual-plotext's `Plot`, a figure object with no global state, so it can be
built on a worker thread); `ChartView` only shows the last drawing. Building a plotext
figure costs tens of milliseconds per thousand points, so each curve is first cut to
the x window and downsampled to a min and a max per screen column (florwb_engine.store.
curves.downsample): a spike one step wide still shows, and ten runs of ten thousand points
draw as fast as ten runs of a few hundred.

Recorded values are braille lines; values a replay computed are drawn with `•` and say
"replayed" in the legend, in the same color as their run. NaN and inf values break the
line where they were logged and are counted (`ChartDrawing.nan`/`inf`); a run with no
finite value is named (`no_finite`), never silently left out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from rich.text import Text
from textual.widget import Widget

from florwb.ui.format import short_run
from florwb_engine.store.curves import AXIS_LABELS, Curve, downsample_indices, smooth

RECORDED_MARKER = "braille"
REPLAYED_MARKER = "•"
Y_AXIS_CELLS = 12  # about what plotext's y tick labels and frame take from the width
# Distinct on dark and light backgrounds (textual-plotext's sequence, first ten).
COLORS = (
    (0, 130, 200),
    (60, 180, 75),
    (230, 25, 75),
    (255, 225, 25),
    (245, 130, 48),
    (145, 30, 180),
    (70, 240, 240),
    (240, 50, 230),
    (180, 225, 40),
    (250, 190, 212),
)
MISSING = "The chart needs textual-plotext (a dependency of florwb): pip install textual-plotext"


@dataclass(frozen=True)
class ChartSpec:
    """Everything one drawing depends on (a snapshot: the worker never reads the screen)."""

    curves: tuple[Curve, ...]
    labels: dict[str, str]  # run id -> legend text
    axis: str
    log_y: bool
    smoothing: float
    window: tuple[float, float]  # the x range shown, as fractions of the full range
    width: int
    height: int
    background: tuple[int, int, int] = (0, 0, 0)
    foreground: tuple[int, int, int] = (255, 255, 255)
    cursor: float | None = None  # x of the cursor's vertical line
    title: str | None = None  # a small multiple's metric name, drawn above its plot
    run_order: tuple[str, ...] = ()  # runs in color order (shared by a screen's charts)


@dataclass
class ChartDrawing:
    """A drawn chart and what it shows (tests and the status line read these).

    The legend is not drawn inside the plot (plotext puts it over the curves): `legend`
    and `colors` are for the screen's own legend bar, one entry per run in color order."""

    text: Text
    legend: list[str] = field(default_factory=list)
    colors: dict[str, tuple[int, int, int]] = field(default_factory=dict)  # run id -> rgb
    points: int = 0  # points handed to plotext, after downsampling
    x_range: tuple[float, float] | None = None
    hidden: int = 0  # values not drawn: not positive on a log scale
    nan: int = 0  # NaN values: the line breaks there
    inf: int = 0  # ±inf values: the line breaks there
    no_finite: list[str] = field(default_factory=list)  # run ids with no finite value at all
    smoothing: float = 0.0  # the smoothing these lines were drawn with
    log_y: bool = False
    cursor: float | None = None


def run_colors(run_ids: list[str]) -> dict[str, tuple[int, int, int]]:
    """One color per run, in the order given (every chart of a screen shares them)."""
    colors: dict[str, tuple[int, int, int]] = {}
    for run_id in run_ids:
        colors.setdefault(run_id, COLORS[len(colors) % len(COLORS)])
    return colors


def full_range(curves: tuple[Curve, ...] | list[Curve]) -> tuple[float, float] | None:
    finite = [c.x[np.isfinite(c.x)] for c in curves]
    finite = [x for x in finite if len(x)]
    if not finite:
        return None
    return float(min(x[0] for x in finite)), float(max(x[-1] for x in finite))


def window_range(full: tuple[float, float], window: tuple[float, float]) -> tuple[float, float]:
    lo, hi = full
    span = hi - lo
    return lo + window[0] * span, lo + window[1] * span


def draw_chart(spec: ChartSpec) -> ChartDrawing:
    """The chart as Rich text (call on a worker thread: plotext takes tens of ms)."""
    try:
        from textual_plotext import Plot
    except ImportError:
        return ChartDrawing(Text(MISSING, "bold"))
    full = full_range(spec.curves)
    colors = run_colors([*spec.run_order, *(c.run_id for c in spec.curves)])
    drawing = ChartDrawing(
        Text(), colors=colors, smoothing=spec.smoothing, log_y=spec.log_y, cursor=spec.cursor
    )
    finite_runs_seen: dict[str, bool] = {}
    for curve in spec.curves:
        bad = ~np.isfinite(curve.y)
        drawing.nan += int(np.isnan(curve.y).sum())
        drawing.inf += int(bad.sum()) - int(np.isnan(curve.y).sum())
        finite_runs_seen[curve.run_id] = finite_runs_seen.get(curve.run_id, False) or bool(
            (~bad).any()
        )
    drawing.no_finite = [r for r, seen in finite_runs_seen.items() if not seen]
    if full is None:
        drawing.text = Text("No values to draw for these runs.", "dim")
        return drawing
    lo, hi = window_range(full, spec.window)
    drawing.x_range = (lo, hi)
    plot = Plot()
    # plotext caps a figure at the terminal's size (80x24 when it cannot tell, as on a
    # worker thread); the public `limitsize` acts only on plotext's global figure, so
    # this figure object is told directly, as textual-plotext itself sizes its figures
    plot._limit_size(False, False)  # type: ignore[attr-defined]
    plot.plotsize(max(spec.width, 20), max(spec.height, 5))
    columns = max(spec.width - Y_AXIS_CELLS, 10)
    for curve in spec.curves:
        x, y = _shown(curve, spec, drawing, lo, hi, columns)
        if not np.isfinite(y).any():
            continue
        label = spec.labels.get(curve.run_id) or short_run(curve.run_id)
        if curve.replayed:
            label = f"{label} replayed"
        plot.plot(
            x.tolist(),
            y.tolist(),
            marker=REPLAYED_MARKER if curve.replayed else RECORDED_MARKER,
            color=colors[curve.run_id],
        )
        drawing.legend.append(label)
        drawing.points += int(np.isfinite(y).sum())
    if not drawing.points:
        drawing.text = Text("No values in this x range.", "dim")
        return drawing
    if hi > lo:
        plot.xlim(lo, hi)
    if spec.log_y:
        plot.yscale("log")
    if spec.cursor is not None and lo <= spec.cursor <= hi:
        plot.vline(spec.cursor, spec.foreground)
    if spec.title:
        plot.title(spec.title)
    plot.xlabel(AXIS_LABELS.get(spec.axis, spec.axis))
    plot.canvas_color(spec.background)
    plot.axes_color(spec.background)
    plot.ticks_color(spec.foreground)
    drawing.text = Text.from_ansi(plot.build())
    return drawing


def _shown(
    curve: Curve,
    spec: ChartSpec,
    drawing: ChartDrawing,
    lo: float,
    hi: float,
    columns: int,
) -> tuple[np.ndarray, np.ndarray]:
    """The curve's points to hand plotext: smoothed, downsampled over its drawable values,
    with a NaN put between two kept points that had a value not drawn between them
    (plotext breaks its line at a NaN: a NaN or inf the run logged, or a value ≤ 0 on a
    log scale, is a gap, not a line across it)."""
    finite = np.isfinite(curve.x)
    x, y = curve.x[finite], smooth(curve.y[finite], spec.smoothing)
    drawn = np.isfinite(y)
    if spec.log_y:
        drawing.hidden += int((drawn & (y <= 0)).sum())
        drawn &= y > 0
    at = np.flatnonzero(drawn)
    if not len(at):
        return np.zeros(0), np.zeros(0)
    picks = at[
        downsample_indices(x[at], y[at], lo, hi, columns, rows=4 * spec.height, log=spec.log_y)
    ]
    out_x, out_y = x[picks], y[picks]
    if len(at) < len(y) and len(picks) > 1:
        skipped = np.cumsum(~drawn)
        gaps = np.flatnonzero(skipped[picks[1:]] - skipped[picks[:-1]] > 0) + 1
        middle = (out_x[gaps - 1] + out_x[gaps]) / 2
        out_x = np.insert(out_x, gaps, middle)
        out_y = np.insert(out_y, gaps, np.nan)
    return out_x, out_y


def number(value: float) -> str:
    if not math.isfinite(value):
        return str(value)
    return f"{value:.4g}"


class ChartView(Widget):
    """Shows the last drawing; the chart screen hands it new ones (`show`)."""

    DEFAULT_CSS = "ChartView { width: 1fr; height: 1fr; }"

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.drawing: ChartDrawing | None = None
        self._placeholder = Text("Loading the curves…", "dim")

    def show(self, drawing: ChartDrawing) -> None:
        self.drawing = drawing
        self.refresh()

    def say(self, text: str) -> None:
        self.drawing = None
        self._placeholder = Text(text, "dim")
        self.refresh()

    def render(self) -> Text:
        return self.drawing.text if self.drawing is not None else self._placeholder
