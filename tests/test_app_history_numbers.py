"""Workbench: the history's numbers are the store's numbers. The
screen is read once the history (or the next metric's values) arrived, never polled."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest_app import Seen, copy_demo, loaded, make_app, run_lines, shown

from florwb.panes.history import HistoryPane
from florwb.ui import format as fmt
from florwb.ui.format import short_run
from florwb.ui.messages import MetricChanged
from florwb.widgets.history_list import HistoryList
from florwb.widgets.sparkline import BLOCKS, sparkline
from florwb_engine.store import Store
from florwb_engine.store.history_values import (
    load_history_values,
    load_series_values,
    with_values,
)

BARS = set(BLOCKS)


@pytest.fixture
def demo(tmp_path: Path) -> Path:
    return copy_demo(tmp_path)


async def test_summary_min_and_max_are_over_all_values_not_the_sparkline_sample(demo: Path):
    app, seen = make_app(demo), Seen()
    async with app.run_test(size=(100, 30), message_hook=seen) as pilot:
        await loaded(pilot)
        await pilot.press("g", "j")
        history = app.history
        assert history is not None
        for _ in history.metrics:  # loss, per step: far more values than sparkline points
            if app.history.metric == "loss":
                break
            since = seen.mark()
            await pilot.press("m")
            changed = await seen.wait(pilot, MetricChanged, since=since, what="the next metric")
            assert app.history.metric == changed.metric
        assert app.history.metric == "loss"
        run = app.marked_runs or {app.query_one("#history-list").current.run.run_id}
        (run_id,) = run
        frame = Store(demo).query(
            "SELECT min(value) AS lo, max(value) AS hi FROM logs "
            f"WHERE name = 'loss' AND source = 'record' AND run_id = '{run_id}'"
        )
        lo, hi = float(frame["lo"][0]), float(frame["hi"][0])
        text = await shown(pilot)
        assert f"run {run_id}" in text
        assert f"min {fmt.number(lo)}  max {fmt.number(hi)}" in text
        assert short_run(run_id) in text


def _lines_of_runs(text: str, run_ids) -> dict[str, str]:
    return {
        r: next((line for line in text.splitlines() if short_run(r) in line), "") for r in run_ids
    }


async def test_last_value_column_is_not_cut_by_the_scrollbar(demo: Path):
    """At 100x15 the six rows outgrow the list: a scrollbar appears beside the lines."""
    app = make_app(demo)
    async with app.run_test(size=(100, 15)) as pilot:
        text = await loaded(pilot)
        history = app.history
        assert history is not None and history.metric
        listing = app.query_one("#history-list")
        assert listing.virtual_size.height > listing.scrollable_content_region.height
        assert run_lines(text)
        shown = [r.run_id for r in history.runs if short_run(r.run_id) in text]
        assert shown
        for run_id, line in _lines_of_runs(text, shown).items():
            assert fmt.number(history.last[run_id], 4) in line, line


async def test_sparklines_share_one_scale_within_the_column_and_say_so(demo: Path):
    app = make_app(demo)
    async with app.run_test(size=(120, 30)) as pilot:
        text = await loaded(pilot)
        history = app.history
        assert history is not None and history.metric
        finite = [v for points in history.series.values() for v in points if v == v]
        low, high = min(finite), max(finite)
        assert len(run_lines(text)) == 4
        assert f"{history.metric} {fmt.number(low, 3)}..{fmt.number(high, 3)}" in text
        width = 20  # the sparkline column at 120 columns
        lines = _lines_of_runs(text, [r.run_id for r in history.runs])
        for run_id, line in lines.items():
            assert sparkline(history.series[run_id], width, low, high) in line
        # each row scaled to itself would reach the top block in every row: not so here
        assert any("█" not in line for line in lines.values())


async def test_a_version_is_first_seen_when_its_first_run_started(demo: Path):
    """The store ingests a version later than its first run starts (here: a year later)."""
    import duckdb

    from florwb_engine.project import store_dir

    con = duckdb.connect(str(store_dir(demo) / "florwb.duckdb"))
    con.execute("UPDATE versions SET first_seen = first_seen + INTERVAL 400 DAY")
    con.close()
    app = make_app(demo)
    async with app.run_test(size=(120, 30)) as pilot:
        text = await loaded(pilot)
        history = app.history
        assert history is not None
        assert "first seen" in text  # the version headers
        for version in {r.version for r in history.runs}:
            first = min(r.start_time for r in history.runs if r.version == version)
            header = next(line for line in text.splitlines() if fmt.short_version(version) in line)
            assert f"first seen {fmt.clock(first)}" in header


async def test_the_history_is_listed_before_its_values_and_says_they_are_coming(demo: Path):
    """The first frame lists the runs without scanning the log rows; what the scan brings
    (sparklines, last, min, max) is said to be coming, not shown as missing, and is the
    same as what one whole read gives."""
    store = Store(demo)
    listed = load_history_values(store, values=False)
    whole = load_history_values(store)
    assert listed.values_pending and not whole.values_pending
    assert listed.metric == whole.metric is not None
    assert listed.series == listed.last == listed.low == listed.high == {}
    assert [r.run_id for r in listed.runs] == [r.run_id for r in whole.runs]
    read = with_values(listed, load_series_values(store, listed.metric))
    assert (read.series, read.last, read.low, read.high) == (
        whole.series,
        whole.last,
        whole.low,
        whole.high,
    )
    app = make_app(demo, poll_s=0)
    async with app.run_test(size=(100, 30)) as pilot:
        await loaded(pilot)
        pane = app.query_one(HistoryPane)
        pane.show(listed)
        text = await shown(pilot)
        assert "reading its values…" in text
        assert not any(set(line) & BARS for line in run_lines(text))  # no sparkline yet
        pane.show(read)
        text = await shown(pilot)
        assert "reading its values…" not in text
        run_id = app.query_one(HistoryList).current.run.run_id
        assert f"last {fmt.number(whole.last[run_id])}" in text
        assert any(set(line) & BARS for line in run_lines(text))
        (line,) = [line for line in run_lines(text) if short_run(run_id) in line]
        assert fmt.number(whole.last[run_id], 4) in line  # the final column fits its values
