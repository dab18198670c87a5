"""The chart view: the marked runs' curves on one axis, recorded and
replayed told apart, the axis and log keys, and a run recording live filling it in.
Real app on the demo project, a real replay and a real recording subprocess. Each key
waits on the drawing of the chart's new state (ChartDrawn) before what it shows is read."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest_app import (
    Seen,
    chart_drawn,
    copy_demo,
    first_page,
    loaded,
    make_app,
    open_chart,
    query_tab,
    run_query,
    screen_text,
    shown,
    wait_until,
    write_held_run,
)
from textual.command import CommandList

from florwb.screens.chart import ChartScreen
from florwb.ui import format as fmt
from florwb.ui.format import short_run
from florwb.ui.messages import ChartDrawn, CurvesLoaded, HistoryLoaded
from florwb.widgets.chart_view import REPLAYED_MARKER
from florwb_engine.store import Store
from florwb_engine.store.curves import load_curves


@pytest.fixture
def demo(tmp_path: Path) -> Path:
    return copy_demo(tmp_path)


async def _press(pilot, seen: Seen, chart: ChartScreen, *keys: str) -> None:
    """Press `keys` on the chart and wait for the drawing of the state they lead to."""
    since = seen.mark()
    await pilot.press(*keys)
    await chart_drawn(pilot, seen, chart, since)


async def test_chart_legend_names_the_marked_runs_only(demo: Path):
    app, seen = make_app(demo), Seen()
    async with app.run_test(size=(120, 36), message_hook=seen) as pilot:
        await loaded(pilot)
        listing = app.query_one("#history-list")
        first, second = listing.rows[1].run, listing.rows[2].run  # the newest version's runs
        chart = await open_chart(pilot, seen, "space", "space")
        assert app.marked_runs == {first.run_id, second.run_id}
        text = screen_text(app)
        others = {short_run(r.run_id) for r in app.history.runs} - {
            short_run(first.run_id),
            short_run(second.run_id),
        }
        for name in others:
            assert name not in text
        assert {c.run_id for c in chart.curves.curves} == {first.run_id, second.run_id}
        assert chart.drawing.points > 0
        # the lines are named by the args that differ between the two runs
        legend = str(app.screen.query_one("#chart-legend").render())
        for run in (first, second):
            assert f"lr={fmt.number(run.args['lr'], 3)}" in legend
        await pilot.press("escape")
        await wait_until(pilot, lambda: not isinstance(app.screen, ChartScreen), what="back")


async def test_axis_key_and_log_toggle_change_the_chart(demo: Path):
    app, seen = make_app(demo), Seen()
    async with app.run_test(size=(120, 36), message_hook=seen) as pilot:
        await loaded(pilot)
        chart = await open_chart(pilot, seen)  # nothing marked: the version under the cursor
        assert chart.state.axis == "step"
        assert "vs steps done" in screen_text(app)
        steps_range = chart.drawing.x_range
        await _press(pilot, seen, chart, "x")
        assert chart.curves.axis == "epoch" and chart.drawing.x_range != steps_range
        assert "vs epochs done" in screen_text(app)  # the axis in the status line
        assert chart.drawing.x_range[1] <= 6  # the demo's runs have at most 6 epochs
        assert steps_range[1] > 6
        await _press(pilot, seen, chart, "l")
        assert chart.state.log_y and chart.drawing.log_y
        assert "log y" in screen_text(app)
        await _press(pilot, seen, chart, "plus")
        assert "(zoomed)" in screen_text(app)  # a narrowed x range
        lo, hi = chart.drawing.x_range
        assert hi - lo < 6 / 2 + 1e-9
        await _press(pilot, seen, chart, "s")
        text = screen_text(app)
        assert "smoothing 0.6" in text and chart.drawing.smoothing == 0.6
        assert "linear y" not in text
        before = chart.drawing
        since = seen.mark()
        app.theme = "textual-light"  # the plot's colors follow the theme
        await chart_drawn(pilot, seen, chart, since)
        assert chart.drawing is not before


async def test_replayed_values_are_told_apart_from_recorded(demo: Path):
    done = subprocess.run(
        [sys.executable, "-m", "florwb.cli", "replay", "weight_norm", "--yes"],
        cwd=demo,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr
    app, seen = make_app(demo), Seen()
    async with app.run_test(size=(120, 36), message_hook=seen) as pilot:
        await loaded(pilot)
        chart = await open_chart(pilot, seen)
        for _ in chart.curves.metrics:
            if chart.state.metric == "weight_norm":
                break
            await _press(pilot, seen, chart, "m")
        assert chart.curves.metric == "weight_norm"
        assert "replayed" in chart.drawing.legend[0]
        assert all(c.replayed for c in chart.curves.curves)
        text = screen_text(app)
        plot_lines = [line for line in text.splitlines() if "│" in line or "┤" in line]
        assert any(REPLAYED_MARKER in line for line in plot_lines)  # drawn with •
        # the legend bar (below the plot, not over it) marks each replayed run with ↻
        legend = str(app.screen.query_one("#chart-legend").render())
        assert legend.count("↻") == len(chart.curves.curves)
        assert not any("↻" in line for line in plot_lines)
        # the recorded metric of the same runs is drawn as recorded lines, no "replayed"
        await _press(pilot, seen, chart, "M")
        assert chart.curves.metric == "loss"
        assert "replayed" not in " ".join(chart.drawing.legend)
        assert not any(c.replayed for c in chart.curves.curves)
    # the replay computed weight_norm after each epoch: its values sit where the recorded
    # acc (also logged after each epoch) sits, on every axis
    store = Store(demo)
    ids = [r.run_id for r in store.run_rows()]
    for axis in ("step", "epoch", "wall"):
        replayed = {
            c.run_id: c.x.tolist() for c in load_curves(store, ids, "weight_norm", axis).curves
        }
        recorded = {c.run_id: c.x.tolist() for c in load_curves(store, ids, "acc", axis).curves}
        assert replayed == recorded, axis


async def test_a_run_recording_live_adds_points(demo: Path):
    """The run holds after 3 epochs until the test has seen them charted (a file releases
    it), so the points before and after cannot race."""
    write_held_run(demo, "1.0 / (epoch + 1)")
    app, seen = make_app(demo), Seen()
    async with app.run_test(size=(120, 36), message_hook=seen) as pilot:
        await loaded(pilot)
        proc = subprocess.Popen([sys.executable, "slow.py"], cwd=demo)
        try:
            listed = await seen.wait(
                pilot,
                HistoryLoaded,
                lambda m: any(r.script == "slow.py" for r in m.history.runs),
                timeout=60,
                what="the live run listed",
            )
            live = next(r for r in listed.history.runs if r.script == "slow.py")
            listing = app.query_one("#history-list")
            listing.cursor = next(
                i for i, row in enumerate(listing.rows) if row.run and row.run.run_id == live.run_id
            )
            chart = await open_chart(pilot, seen, "space")
            read = await seen.wait(
                pilot,
                CurvesLoaded,
                lambda m: m.curves.metric == "metric" and m.curves.points == 3,
                timeout=60,
                what="the three values logged so far",
            )
            await seen.wait(pilot, ChartDrawn, since=seen.after(read), what="them drawn")
            drawn_before = chart.drawing.points
            assert drawn_before > 0
        finally:
            (demo / "release").touch()
        proc.wait(timeout=60)
        assert proc.returncode == 0
        read = await seen.wait(
            pilot,
            CurvesLoaded,
            lambda m: m.curves.points == 8,
            timeout=60,
            what="the rest of the run read",
        )
        await seen.wait(pilot, ChartDrawn, since=seen.after(read), what="the rest drawn")
        assert chart.curves.points == 8 and chart.drawing.points > drawn_before
        assert [c.run_id for c in chart.curves.curves] == [live.run_id]
        assert chart.curves.curves[0].y.tolist()[-1] == pytest.approx(1 / 8)


async def test_the_command_palette_opens_the_chart(demo: Path):
    app, seen = make_app(demo), Seen()
    async with app.run_test(size=(120, 36), message_hook=seen) as pilot:
        await loaded(pilot)
        await pilot.press("ctrl+p")
        await pilot.press(*"Chart marked runs")
        await wait_until(
            pilot,
            lambda: any(found.option_count for found in app.screen.query(CommandList)),
            what="the palette's hits",
        )
        assert "Chart marked runs" in await shown(pilot)
        since = seen.mark()
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, ChartScreen), what="the chart")
        chart = app.screen
        await chart_drawn(pilot, seen, chart, since)
        version = app.query_one("#history-list").current.version
        expected = {r.run_id for r in app.history.runs if r.version == version}
        assert {c.run_id for c in chart.curves.curves} == expected


async def test_query_sparklines_share_one_scale_per_column_and_say_so(demo: Path):
    """Row a (0..2) drawn against the column's 0..20 stays low; row b reaches the top."""
    app, seen = make_app(demo), Seen()
    async with app.run_test(size=(120, 30), message_hook=seen) as pilot:
        await query_tab(pilot)
        await run_query(
            pilot,
            "SELECT 'row_a' AS k, [0.0, 1.0, 2.0] AS s "
            "UNION ALL SELECT 'row_b', [0.0, 10.0, 20.0] ORDER BY k",
        )
        page = await first_page(pilot, seen)
        assert len(page.rows) == 2
        text = screen_text(app)
        assert "✓ 2 rows" in text and "one scale 0..20" in text
        rows = [line for line in text.splitlines() if "SELECT" not in line]  # not the editor
        row_a = next(line for line in rows if "row_a" in line)
        row_b = next(line for line in rows if "row_b" in line)
        assert "█" not in row_a and "▁" in row_a
        assert "█" in row_b


def test_without_textual_plotext_the_chart_says_how_to_install_it(monkeypatch):
    import numpy as np

    from florwb.widgets.chart_view import ChartSpec, draw_chart
    from florwb_engine.store.curves import Curve

    curve = Curve("run", "record", np.arange(3.0), np.arange(3.0))
    spec = ChartSpec((curve,), {}, "step", False, 0.0, (0.0, 1.0), 80, 20)
    assert draw_chart(spec).points == 3  # installed with florwb
    monkeypatch.setitem(sys.modules, "textual_plotext", None)  # as if not installed
    drawing = draw_chart(spec)
    assert "pip install textual-plotext" in drawing.text.plain and drawing.points == 0
