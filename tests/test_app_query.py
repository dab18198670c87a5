"""Workbench: the query tab (issue 4, point 6)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest_app import copy_demo, loaded, make_app, screen_text, wait_for, wait_until

from florwb.screens.query_history import query_history_path
from florwb_engine.store import Store


@pytest.fixture
def demo(tmp_path: Path) -> Path:
    return copy_demo(tmp_path)


async def _run(pilot, sql: str) -> None:
    editor = pilot.app.query_one("#sql")
    editor.load_text(sql)
    editor.focus()
    await pilot.press("ctrl+j")


async def test_list_valued_numeric_columns_render_as_sparklines(demo: Path):
    app = make_app(demo)
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot)
        await pilot.press("4")
        await _run(
            pilot,
            "SELECT run_id, list(value ORDER BY epoch, step) AS loss FROM logs "
            "WHERE name = 'loss' GROUP BY run_id ORDER BY run_id",
        )
        text = await wait_for(pilot, lambda t: "✓ 4 rows" in t, what="results")
        runs = Store(demo).query("SELECT run_id FROM runs ORDER BY run_id")["run_id"]
        for run_id in runs:
            line = next(line for line in text.splitlines() if run_id in line)
            assert any(ch in line for ch in "▁▂▃▄▅▆▇█")
            assert "n=" in line
        assert "double[]" in text


async def test_large_results_show_the_first_page_and_say_how_many(demo: Path):
    app = make_app(demo)
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot)
        await pilot.press("4")
        await _run(pilot, "SELECT range AS i, range * 2 AS j FROM range(2500000)")
        await wait_for(pilot, lambda t: "rows 1–1,000 of 2,500,000" in t, what="count")
        table = app.query_one("#results")
        # the page is added to the table in chunks, after the label that counts it
        await wait_until(pilot, lambda: table.row_count >= 1000, what="the page added")
        assert table.row_count == 1000 and len(table.raw_rows) == 1000


async def test_bad_sql_opens_an_error_and_the_app_goes_on(demo: Path):
    app = make_app(demo)
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot)
        await pilot.press("4")
        await _run(pilot, "SELEC nonsense FROM nowhere")
        text = await wait_for(pilot, lambda t: "Query failed" in t, what="error modal")
        assert "Parser Error" in text
        await pilot.press("escape")
        text = await wait_for(pilot, lambda t: "Query failed" not in t)
        assert "✗" in text and "syntax error" in text
        await _run(pilot, "DELETE FROM runs")
        text = await wait_for(pilot, lambda t: "read-only" in t, what="refusal")
        await pilot.press("escape")
        assert len(Store(demo).runs()) == 4  # nothing was deleted
        await _run(pilot, "SELECT count(*) AS n FROM runs")
        text = await wait_for(pilot, lambda t: "✓ 1 row" in t, what="a good query after")


async def test_query_history_is_kept_and_browsable(demo: Path):
    app = make_app(demo)
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot)
        await pilot.press("4")
        await _run(pilot, "SELECT 1 AS first_query")
        await wait_for(pilot, lambda t: "✓ 1 row" in t)
        await _run(pilot, "SELECT 2 AS second_query")
        await wait_for(pilot, lambda t: "second_query" in t)
        editor = app.query_one("#sql")
        await pilot.press("ctrl+up")
        assert editor.text == "SELECT 2 AS second_query"
        await pilot.press("ctrl+up")
        assert editor.text == "SELECT 1 AS first_query"
        await pilot.press("ctrl+down")
        assert editor.text == "SELECT 2 AS second_query"
        await pilot.press("f8")
        text = await wait_for(pilot, lambda t: "Query history" in t, what="history list")
        assert "first_query" in text and "second_query" in text
        await pilot.press("down", "enter")
        await wait_for(pilot, lambda t: "Query history" not in t)
        assert editor.text == "SELECT 1 AS first_query"
    saved = query_history_path(demo).read_text()
    assert "first_query" in saved and "second_query" in saved
    # a new session starts with the same history
    app = make_app(demo)
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot)
        await pilot.press("4", "ctrl+up")
        assert app.query_one("#sql").text == "SELECT 2 AS second_query"
        assert "second_query" in screen_text(app)
