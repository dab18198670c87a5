"""Workbench: the history's numbers are the store's numbers (issue 14, defect 3)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest_app import copy_demo, loaded, make_app, wait_for

from florwb.ui import format as fmt
from florwb.ui.format import short_run
from florwb_engine.store import Store


@pytest.fixture
def demo(tmp_path: Path) -> Path:
    return copy_demo(tmp_path)


async def test_summary_min_and_max_are_over_all_values_not_the_sparkline_sample(demo: Path):
    app = make_app(demo)
    async with app.run_test(size=(100, 30)) as pilot:
        await loaded(pilot)
        await pilot.press("g", "j")
        history = app.history
        assert history is not None
        while history.metric != "loss":  # per step: far more values than sparkline points
            before = history.metric
            await pilot.press("m")
            await wait_for(pilot, lambda t, b=before: app.history.metric != b, what="metric")
        run = app.marked_runs or {app.query_one("#history-list").current.run.run_id}
        (run_id,) = run
        frame = Store(demo).query(
            "SELECT min(value) AS lo, max(value) AS hi FROM logs "
            f"WHERE name = 'loss' AND source = 'record' AND run_id = '{run_id}'"
        )
        lo, hi = float(frame["lo"][0]), float(frame["hi"][0])
        text = await wait_for(pilot, lambda t: f"run {run_id}" in t and "min " in t)
        assert f"min {fmt.number(lo)}  max {fmt.number(hi)}" in text
        assert short_run(run_id) in text
