"""The chart view (issue 14, build 1): the marked runs' curves on one axis, recorded and
replayed told apart, the axis and log keys, and a run recording live filling it in.
Real app on the demo project, a real replay and a real recording subprocess."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest_app import (
    copy_demo,
    loaded,
    make_app,
    screen_text,
    wait_for,
    wait_until,
    write_held_run,
)

from florwb.screens.chart import ChartScreen
from florwb.ui import format as fmt
from florwb.ui.format import short_run
from florwb.widgets.chart_view import REPLAYED_MARKER
from florwb_engine.store import Store
from florwb_engine.store.curves import load_curves


@pytest.fixture
def demo(tmp_path: Path) -> Path:
    return copy_demo(tmp_path)


def _chart(app) -> ChartScreen:
    screen = app.screen
    assert isinstance(screen, ChartScreen), type(screen).__name__
    return screen


async def _open_chart(pilot, *keys: str) -> ChartScreen:
    await pilot.press(*keys, "c")
    await wait_until(
        pilot,
        lambda: isinstance(pilot.app.screen, ChartScreen) and pilot.app.screen.drawing is not None,
        what="the chart drawn",
    )
    return _chart(pilot.app)


async def test_chart_legend_names_the_marked_runs_only(demo: Path):
    app = make_app(demo)
    async with app.run_test(size=(120, 36)) as pilot:
        await loaded(pilot)
        listing = app.query_one("#history-list")
        first, second = listing.rows[1].run, listing.rows[2].run  # the newest version's runs
        chart = await _open_chart(pilot, "space", "space")
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
    app = make_app(demo)
    async with app.run_test(size=(120, 36)) as pilot:
        await loaded(pilot)
        chart = await _open_chart(pilot)  # nothing marked: the version under the cursor
        assert chart.state.axis == "step"
        assert "vs steps done" in screen_text(app)
        steps_range = chart.drawing.x_range
        await pilot.press("x")
        await wait_until(
            pilot,
            lambda: chart.curves.axis == "epoch" and chart.drawing.x_range != steps_range,
            what="the epoch axis",
        )
        text = await wait_for(pilot, lambda t: "vs epochs done" in t, what="axis in the status")
        assert chart.drawing.x_range[1] <= 6  # the demo's runs have at most 6 epochs
        assert steps_range[1] > 6
        await pilot.press("l")
        text = await wait_for(pilot, lambda t: "log y" in t, what="log scale")
        assert chart.state.log_y
        await pilot.press("plus")
        text = await wait_for(pilot, lambda t: "(zoomed)" in t, what="narrowed x range")
        lo, hi = chart.drawing.x_range
        assert hi - lo < 6 / 2 + 1e-9
        await pilot.press("s")
        await wait_for(pilot, lambda t: "smoothing 0.6" in t, what="smoothing")
        assert "linear y" not in text
        before = chart.drawing
        app.theme = "textual-light"  # the plot's colors follow the theme
        await wait_until(pilot, lambda: chart.drawing is not before, what="redrawn for the theme")


async def test_replayed_values_are_told_apart_from_recorded(demo: Path):
    done = subprocess.run(
        [sys.executable, "-m", "florwb.cli", "replay", "weight_norm", "--yes"],
        cwd=demo,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr
    app = make_app(demo)
    async with app.run_test(size=(120, 36)) as pilot:
        await loaded(pilot)
        chart = await _open_chart(pilot)
        while chart.state.metric != "weight_norm":
            loads = chart.loads
            await pilot.press("m")
            await wait_until(pilot, lambda n=loads: chart.loads > n, what="the next metric")
        await wait_until(
            pilot,
            lambda: chart.curves.metric == "weight_norm" and "replayed" in chart.drawing.legend[0],
            what="the replayed curves drawn",
        )
        assert all(c.replayed for c in chart.curves.curves)
        text = screen_text(app)
        plot_lines = [line for line in text.splitlines() if "│" in line or "┤" in line]
        assert any(REPLAYED_MARKER in line for line in plot_lines)  # drawn with •
        # the legend bar (below the plot, not over it) marks each replayed run with ↻
        legend = str(app.screen.query_one("#chart-legend").render())
        assert legend.count("↻") == len(chart.curves.curves)
        assert not any("↻" in line for line in plot_lines)
        # the recorded metric of the same runs is drawn as recorded lines, no "replayed"
        await pilot.press("M")
        await wait_until(
            pilot,
            lambda: (
                chart.curves.metric == "loss" and "replayed" not in " ".join(chart.drawing.legend)
            ),
            what="the recorded loss",
        )
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
    app = make_app(demo)
    async with app.run_test(size=(120, 36)) as pilot:
        await loaded(pilot)
        proc = subprocess.Popen([sys.executable, "slow.py"], cwd=demo)
        try:
            await wait_until(
                pilot,
                lambda: (
                    app.history is not None and any(r.script == "slow.py" for r in app.history.runs)
                ),
                timeout=60,
                what="the live run listed",
            )
            listing = app.query_one("#history-list")
            live = next(r for r in app.history.runs if r.script == "slow.py")
            await wait_until(
                pilot,
                lambda: any(row.run and row.run.run_id == live.run_id for row in listing.rows),
                what="the live run's row",
            )
            listing.cursor = next(
                i for i, row in enumerate(listing.rows) if row.run and row.run.run_id == live.run_id
            )
            chart = await _open_chart(pilot, "space")
            await wait_until(
                pilot,
                lambda: chart.curves.metric == "metric" and chart.curves.points == 3,
                timeout=60,
                what="the three values logged so far",
            )
            drawn_before = chart.drawing.points
        finally:
            (demo / "release").touch()
        proc.wait(timeout=60)
        assert proc.returncode == 0
        await wait_until(
            pilot,
            lambda: chart.curves.points == 8 and chart.drawing.points > drawn_before,
            timeout=60,
            what="the rest of the run charted",
        )
        assert [c.run_id for c in chart.curves.curves] == [live.run_id]
        assert chart.curves.curves[0].y.tolist()[-1] == pytest.approx(1 / 8)


async def test_the_command_palette_opens_the_chart(demo: Path):
    app = make_app(demo)
    async with app.run_test(size=(120, 36)) as pilot:
        await loaded(pilot)
        await pilot.press("ctrl+p")
        await pilot.press(*"Chart marked runs")
        await wait_for(pilot, lambda t: "Chart marked runs" in t, what="palette hit")
        await pilot.press("enter")
        await wait_until(
            pilot,
            lambda: isinstance(app.screen, ChartScreen) and app.screen.drawing is not None,
            what="the chart from the palette",
        )
        version = app.query_one("#history-list").current.version
        expected = {r.run_id for r in app.history.runs if r.version == version}
        assert {c.run_id for c in _chart(app).curves.curves} == expected


async def test_query_sparklines_share_one_scale_per_column_and_say_so(demo: Path):
    """Row a (0..2) drawn against the column's 0..20 stays low; row b reaches the top."""
    app = make_app(demo)
    async with app.run_test(size=(120, 30)) as pilot:
        await loaded(pilot)
        await pilot.press("4")
        editor = app.query_one("#sql")
        editor.load_text(
            "SELECT 'row_a' AS k, [0.0, 1.0, 2.0] AS s "
            "UNION ALL SELECT 'row_b', [0.0, 10.0, 20.0] ORDER BY k"
        )
        editor.focus()
        await pilot.press("ctrl+j")
        text = await wait_for(pilot, lambda t: "✓ 2 rows" in t, what="results")
        assert "one scale 0..20" in text
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
