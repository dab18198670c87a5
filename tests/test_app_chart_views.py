"""The chart at 80x24 over nine runs that differ in two args (one shared), one with NaN and
inf losses, one whose `broken` metric is NaN throughout: the legend, the History filter,
NaN/inf, values logged at an epoch's start, zoomed sparse series, smoothing keys, the
cursor, the fuzzy metric picker and the grid. Real recordings, the real app (Pilot)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import git, run_py, write
from conftest_app import (
    Seen,
    chart_drawn,
    loaded,
    make_app,
    open_chart,
    screen_text,
    shown,
    wait_until,
)

from florwb.panes.history import WhereAnswered
from florwb.screens.chart import ChartScreen
from florwb.screens.metric_picker import MetricPicker, fuzzy_rank
from florwb.ui.format import short_run
from florwb.widgets.chart_legend import LegendEntry, RunLabel, legend_text
from florwb_engine.store import Store

SCRIPT = """
import florwb as flor

lr = flor.arg("lr", 0.01)
hidden_width = flor.arg("hidden_width", 64)
seed = flor.arg("seed", 7)
for epoch in flor.loop("epoch", range(3)):
    flor.log("lr_now", lr / (epoch + 1))
    for step in flor.loop("step", range(4)):
        loss = 1.0 / (epoch * 4 + step + 1) + lr
        if lr == 0.6 and step == 1:
            loss = float("nan")
        if lr == 0.6 and step == 3:
            loss = float("inf")
        flor.log("loss", loss)
        flor.log("broken", float("nan") if lr == 0.9 else loss)
    flor.log("acc", 0.5 + epoch / 10 + lr)
flor.commit()
"""
LRS = (0.01, 0.02, 0.03, 0.06, 0.1, 0.2, 0.3, 0.6, 0.9)


@pytest.fixture(scope="module")
def nine(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("nine")
    write(root / "train.py", SCRIPT)
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "init")
    for i, lr in enumerate(LRS):
        run_py(root, "train.py", "--kwargs", f"lr={lr}", f"hidden_width={64 * (1 + i % 2)}")
    return root


def _lr_of(project: Path) -> dict[str, float]:
    return {r.run_id: float(r.args["lr"]) for r in Store(project).run_rows()}


async def _press(pilot, seen: Seen, chart: ChartScreen, *keys: str) -> None:
    """Press `keys` on the chart and wait for the drawing of the state they lead to."""
    since = seen.mark()
    await pilot.press(*keys)
    await chart_drawn(pilot, seen, chart, since)


async def _pick(pilot, seen: Seen, chart: ChartScreen, query: str) -> None:
    """Find a metric with the fuzzy picker (/) and wait for its chart."""
    since = seen.mark()
    await pilot.press("slash")
    await wait_until(pilot, lambda: isinstance(pilot.app.screen, MetricPicker), what="picker")
    await pilot.press(*query, "enter")
    await chart_drawn(pilot, seen, chart, since)


async def test_at_80x24_a_legend_below_the_plot_names_runs_by_what_differs(nine: Path):
    app, seen = make_app(nine), Seen()
    async with app.run_test(size=(80, 24), message_hook=seen) as pilot:
        await loaded(pilot)
        chart = await open_chart(pilot, seen, "j")  # nothing marked: the version's nine runs
        legend = chart.query_one("#chart-legend")
        plot = chart.query_one("#chart")
        text = str(legend.render())
        assert text.count("━") == 9  # every run, in two lines at 24 rows
        assert text.strip().count("\n") <= 1
        assert "seed" not in text  # the same in every run: not worth a legend's space
        # lr tells the runs apart: it comes first; at 80 columns the names are said once
        assert text.startswith("lr/hw:")
        for i, lr in enumerate(LRS):
            assert f"━ {lr:g}/{64 * (1 + i % 2)}" in text
        # the legend is outside the plot: their regions do not meet
        assert legend.region.y >= plot.region.y + plot.region.height
        assert legend.region.height >= 1
        legend_line = screen_text(app).splitlines()[legend.region.y]
        assert "━" in legend_line


def test_a_legend_abbreviates_step_by_step_and_says_what_it_left_out():
    labels = [
        RunLabel(f"r{i}", (("learning_rate", f"0.{i}"), ("hidden_width", str(64 * i))))
        for i in range(1, 10)
    ]
    entries = [LegendEntry(f"run{i}", label, (255, 0, 0)) for i, label in enumerate(labels)]
    wide = legend_text(entries, 400, 1).plain
    assert "learning_rate=0.1 hidden_width=64" in wide
    medium = legend_text(entries, 160, 1).plain
    assert "lr=0.1 hw=64" in medium and "learning_rate" not in medium
    narrow = legend_text(entries, 78, 2).plain  # 80x24: names said once, values only
    assert narrow.startswith("lr/hw:") and "━ 0.1/64" in narrow and "━ 0.9/576" in narrow
    assert all(len(line) <= 78 for line in narrow.splitlines())
    cut = legend_text(entries, 78, 1).plain  # one line: each label cut to the same length
    assert "━ 0.1…" in cut and "━ 0.9…" in cut and len(cut) <= 78
    tiny = legend_text(entries, 30, 1).plain
    assert "more" in tiny and len(tiny) <= 30


async def test_the_chart_honours_the_history_filter(nine: Path):
    lrs = _lr_of(nine)
    app, seen = make_app(nine), Seen()
    async with app.run_test(size=(80, 24), message_hook=seen) as pilot:
        await loaded(pilot)
        await pilot.press("slash", *"lr > 0.05", "enter")
        answered = await seen.wait(
            pilot,
            WhereAnswered,
            lambda m: m.condition == "lr > 0.05",
            what="the filter answered",
        )
        wanted = {r for r, lr in lrs.items() if lr > 0.05}
        assert answered.run_ids == wanted and answered.error is None
        # the version's header counts the runs the filter shows, not the version's 9
        assert "6 of 9 runs" in screen_text(app)
        await pilot.press("home")
        chart = await open_chart(pilot, seen)
        assert set(chart.run_ids) == wanted and len(wanted) == 6
        assert {c.run_id for c in chart.curves.curves} == wanted
        text = screen_text(app)
        assert "6 runs matching" in text  # the title says how many, not the version's 9
        assert "· 6 runs" in text


async def test_nan_and_inf_break_lines_are_counted_and_an_all_nan_run_is_named(nine: Path):
    lrs = _lr_of(nine)
    app, seen = make_app(nine), Seen()
    async with app.run_test(size=(120, 36), message_hook=seen) as pilot:
        await loaded(pilot)
        chart = await open_chart(pilot, seen, "j")
        await _pick(pilot, seen, chart, "loss")
        assert chart.drawing.nan == 3 and chart.drawing.inf == 3  # one each epoch
        text = screen_text(app)
        assert "3 NaN + 3 inf values: lines break there" in text
        await _pick(pilot, seen, chart, "broken")
        (all_nan,) = [r for r, lr in lrs.items() if lr == 0.9]
        assert chart.drawing.no_finite == [all_nan]
        text = screen_text(app)
        assert f"no finite value, not drawn: {short_run(all_nan)}" in text


async def test_a_value_logged_at_an_epochs_start_is_read_at_that_epoch(nine: Path):
    lrs = _lr_of(nine)
    app, seen = make_app(nine), Seen()
    async with app.run_test(size=(120, 36), message_hook=seen) as pilot:
        await loaded(pilot)
        chart = await open_chart(pilot, seen, "j")
        await _pick(pilot, seen, chart, "lr_now")
        await _press(pilot, seen, chart, "x")  # epochs done
        assert chart.curves.axis == "epoch"
        await _press(pilot, seen, chart, "right")  # the cursor's first stop: the first x
        assert chart.state.cursor == 0.0  # epoch 0's lr, at 0 epochs done
        readings = {r.run_id: r for r in chart.readings}
        assert set(readings) == set(lrs)
        for run_id, reading in readings.items():
            assert reading.value == pytest.approx(lrs[run_id])
            assert reading.step == 0 and reading.wall == 0.0
        await _press(pilot, seen, chart, "right")
        assert chart.state.cursor == 1.0 and chart.drawing.cursor == 1.0
        for r in chart.readings:
            assert r.value == pytest.approx(lrs[r.run_id] / 2)
            assert r.step == 4 and r.wall is not None and r.wall > 0
        readout = str(chart.query_one("#chart-readout").render())
        assert "at epochs done 1:" in readout and "step 4" in readout
        await _press(pilot, seen, chart, "escape")  # clears the cursor, stays on the chart
        assert chart.drawing.cursor is None
        assert isinstance(app.screen, ChartScreen) and chart.readings == []


async def test_a_zoomed_in_sparse_series_still_draws_lines(nine: Path):
    app, seen = make_app(nine), Seen()
    async with app.run_test(size=(120, 36), message_hook=seen) as pilot:
        await loaded(pilot)
        chart = await open_chart(pilot, seen, "j")
        await _pick(pilot, seen, chart, "acc")  # 3 points a run, at steps 4, 8, 12
        await _press(pilot, seen, chart, *["plus"] * 4)
        lo, hi = chart.drawing.x_range
        assert hi - lo < 1.0  # narrower than the gap between two points
        runs = len({c.run_id for c in chart.curves.curves})
        # each run hands plotext the points either side of the window: a line, not a dot
        assert chart.drawing.points >= 2 * runs


async def test_smoothing_keys_in_a_burst_leave_label_and_lines_alike(nine: Path):
    app, seen = make_app(nine), Seen()
    async with app.run_test(size=(120, 36), message_hook=seen) as pilot:
        await loaded(pilot)
        chart = await open_chart(pilot, seen, "j")
        await _press(pilot, seen, chart, "s", "s")
        assert chart.state.smoothing == 0.9 and chart.drawing.smoothing == 0.9
        assert "smoothing 0.9" in screen_text(app)
        await _press(pilot, seen, chart, "s", "s", "s", "s", "l")  # 0.9 -> 0 -> 0.6 -> 0.9 -> 0
        assert chart.drawing.smoothing == chart.state.smoothing == 0.0
        assert chart.drawing.log_y and chart.state.log_y


async def test_the_grid_shows_several_metrics_and_pages(nine: Path):
    app, seen = make_app(nine), Seen()
    async with app.run_test(size=(80, 24), message_hook=seen) as pilot:
        await loaded(pilot)
        chart = await open_chart(pilot, seen, "j")
        await _press(pilot, seen, chart, "g")
        names = chart.curves.metrics  # acc, broken, loss, lr_now
        first = [name for name, _d in chart.grid_drawings]
        assert first == names[: len(first)] and len(first) >= 2
        assert all(d is not None for _n, d in chart.grid_drawings)
        assert "grid page 1/" in screen_text(app)
        cells = chart.query("#chart-grid ChartView")
        assert len(cells) == len(first)
        if len(names) > len(first):
            await _press(pilot, seen, chart, "right_square_bracket")
            assert chart.state.page == 1
            assert [n for n, _d in chart.grid_drawings] == names[len(first) :][: len(first)]
        # a search narrows the grid to its matches
        await _pick(pilot, seen, chart, "lss")
        assert [n for n, _d in chart.grid_drawings] == ["loss"]


def test_fuzzy_rank_over_ten_thousand_names():
    names = [f"layer{i}/grad_norm" for i in range(5000)] + [
        f"layer{i}/weight_norm" for i in range(5000)
    ]
    names.append("loss")
    assert fuzzy_rank(names, "loss")[0] == "loss"
    matches = fuzzy_rank(names, "layer42/w")
    assert matches[0] == "layer42/weight_norm"
    scattered = fuzzy_rank(names, "l4999wn")
    assert scattered[0] == "layer4999/weight_norm"
    assert all("grad" not in m for m in fuzzy_rank(names, "wnorm")[:10])
    assert fuzzy_rank(names, "") == names
    assert fuzzy_rank(names, "zzz") == []


async def test_the_picker_lists_the_best_matches_and_counts_the_rest(nine: Path):
    app, seen = make_app(nine), Seen()
    async with app.run_test(size=(80, 24), message_hook=seen) as pilot:
        await loaded(pilot)
        names = [f"layer{i}/weight_norm" for i in range(10_000)]
        picker = MetricPicker(names)
        chosen: list = []
        app.push_screen(picker, chosen.append)
        await wait_until(pilot, lambda: app.screen is picker, what="the picker")
        assert "10,000 of 10,000 names (first 100 listed" in await shown(pilot)
        await pilot.press(*"ayer9999")
        await wait_until(pilot, lambda: picker.matches[:1] == ["layer9999/weight_norm"])
        await pilot.press("enter")
        await wait_until(pilot, lambda: bool(chosen), what="the choice")
        assert chosen[0].metric == "layer9999/weight_norm" and chosen[0].query == "ayer9999"


def test_points_per_run_stay_per_column_for_twelve_thousand_values():
    """9 runs x 12,000 points: each run hands plotext at most two points a plot column."""
    from florwb.widgets.chart_view import ChartSpec, draw_chart
    from florwb_engine.store.curves import Curve

    x = np.arange(1, 12_001, dtype=np.float64)
    curves = tuple(Curve(f"run-{i}", "record", x, np.sin(x / 300) + i, x, x / 10) for i in range(9))
    spec = ChartSpec(curves, {}, "step", False, 0.6, (0.0, 1.0), 120, 30)
    drawing = draw_chart(spec)
    assert 0 < drawing.points <= 9 * 2 * 120
    assert drawing.smoothing == 0.6 and len(drawing.colors) == 9
    # a NaN every 50 values: still two points a column at most, gaps where NaN fell
    holed = np.sin(x / 300)
    holed[::50] = np.nan
    curves = tuple(Curve(f"run-{i}", "record", x, holed + i, x, x / 10) for i in range(9))
    spec = ChartSpec(curves, {}, "step", False, 0.0, (0.0, 1.0), 120, 30)
    drawing = draw_chart(spec)
    assert drawing.nan == 9 * 240 and 0 < drawing.points <= 9 * 2 * 120
