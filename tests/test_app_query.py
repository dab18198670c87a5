"""Workbench: the query tab. Each step waits on the message that says
it happened (a page arrived, the count, the failure) and reads the screen once after it."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest_app import (
    Seen,
    copy_demo,
    first_page,
    loaded,
    make_app,
    query_failed,
    query_tab,
    rows_added,
    run_query,
    screen_text,
    shown,
    wait_until,
)

from florwb.screens.query_history import QueryHistoryPicker, query_history_path
from florwb.screens.text_view import TextViewScreen
from florwb.ui.messages import QueryCounted
from florwb_engine.store import Store


@pytest.fixture
def demo(tmp_path: Path) -> Path:
    return copy_demo(tmp_path)


async def test_list_valued_numeric_columns_render_as_sparklines(demo: Path):
    app, seen = make_app(demo), Seen()
    async with app.run_test(size=(80, 24), message_hook=seen) as pilot:
        await query_tab(pilot)
        await run_query(
            pilot,
            "SELECT run_id, list(value ORDER BY epoch, step) AS loss FROM logs "
            "WHERE name = 'loss' GROUP BY run_id ORDER BY run_id",
        )
        page = await first_page(pilot, seen)
        assert len(page.rows) == 4
        await rows_added(pilot)
        text = await shown(pilot)
        assert "✓ 4 rows" in text
        runs = Store(demo).query("SELECT run_id FROM runs ORDER BY run_id")["run_id"]
        for run_id in runs:
            line = next(line for line in text.splitlines() if run_id in line)
            assert any(ch in line for ch in "▁▂▃▄▅▆▇█")
            assert "n=" in line
        assert "double[]" in text


async def test_large_results_show_the_first_page_and_say_how_many(demo: Path):
    app, seen = make_app(demo), Seen()
    async with app.run_test(size=(80, 24), message_hook=seen) as pilot:
        pane = await query_tab(pilot)
        await run_query(pilot, "SELECT range AS i, range * 2 AS j FROM range(2500000)")
        page = await first_page(pilot, seen)
        assert len(page.rows) == 1000
        counted = await seen.wait(pilot, QueryCounted, lambda m: m.serial == pane.serial)
        assert counted.total == 2_500_000
        assert "rows 1–1,000 of 2,500,000" in screen_text(app)
        # the page is added to the table in chunks, after the label that counts it
        await rows_added(pilot)
        table = app.query_one("#results")
        assert table.row_count == 1000 and len(table.raw_rows) == 1000


async def test_bad_sql_opens_an_error_and_the_app_goes_on(demo: Path):
    app, seen = make_app(demo), Seen()
    async with app.run_test(size=(80, 24), message_hook=seen) as pilot:
        await query_tab(pilot)
        await run_query(pilot, "SELEC nonsense FROM nowhere")
        failed = await query_failed(pilot, seen)
        assert "Parser Error" in failed.detail
        assert isinstance(app.screen, TextViewScreen)
        text = screen_text(app)
        assert "Query failed" in text and "Parser Error" in text
        await pilot.press("escape")
        await wait_until(pilot, lambda: not isinstance(app.screen, TextViewScreen))
        text = await shown(pilot)
        assert "Query failed" not in text
        assert "✗" in text and "syntax error" in text
        since = seen.mark()
        await run_query(pilot, "DELETE FROM runs")
        failed = await query_failed(pilot, seen, since)
        assert "read-only" in failed.detail and "read-only" in screen_text(app)
        await pilot.press("escape")
        assert len(Store(demo).runs()) == 4  # nothing was deleted
        await run_query(pilot, "SELECT count(*) AS n FROM runs")
        page = await first_page(pilot, seen)  # a good query after
        assert page.rows == [(4,)] and "✓ 1 row" in screen_text(app)


async def test_query_history_is_kept_and_browsable(demo: Path):
    app, seen = make_app(demo), Seen()
    async with app.run_test(size=(80, 24), message_hook=seen) as pilot:
        await query_tab(pilot)
        await run_query(pilot, "SELECT 1 AS first_query")
        assert (await first_page(pilot, seen)).rows == [(1,)]
        await run_query(pilot, "SELECT 2 AS second_query")
        assert (await first_page(pilot, seen)).rows == [(2,)]
        editor = app.query_one("#sql")
        await pilot.press("ctrl+up")
        assert editor.text == "SELECT 2 AS second_query"
        await pilot.press("ctrl+up")
        assert editor.text == "SELECT 1 AS first_query"
        await pilot.press("ctrl+down")
        assert editor.text == "SELECT 2 AS second_query"
        await pilot.press("f8")
        await wait_until(
            pilot, lambda: isinstance(app.screen, QueryHistoryPicker), what="history list"
        )
        text = await shown(pilot)
        assert "Query history" in text
        assert "first_query" in text and "second_query" in text
        await pilot.press("down", "enter")
        await wait_until(pilot, lambda: not isinstance(app.screen, QueryHistoryPicker))
        assert editor.text == "SELECT 1 AS first_query"
    saved = query_history_path(demo).read_text()
    assert "first_query" in saved and "second_query" in saved
    # a new session starts with the same history
    app = make_app(demo)
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot)
        await pilot.press("4", "ctrl+up")
        assert app.query_one("#sql").text == "SELECT 2 AS second_query"
        assert "second_query" in await shown(pilot)
