"""Workbench: small defects: the filter that matches nothing, the
title icon, the Replay tab at rest."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest_app import (
    Seen,
    copy_demo,
    first_page,
    loaded,
    make_app,
    run_lines,
    shown,
    wait_until,
)
from textual.widgets import DataTable, ProgressBar

from florwb.app import TITLE_ICON
from florwb.panes.history import WhereAnswered
from florwb.panes.replay import ReplayPane
from florwb.ui.messages import PaneReady, RunDetailLoaded, StatementTableLoaded


@pytest.fixture
def demo(tmp_path: Path) -> Path:
    return copy_demo(tmp_path)


async def test_a_filter_that_matches_no_run_says_so(demo: Path):
    app = make_app(demo)
    seen = Seen()
    async with app.run_test(size=(100, 30), message_hook=seen) as pilot:
        await loaded(pilot)
        await pilot.press("slash", *"lr>5")  # a --where condition that selects no run
        answer = await seen.wait(pilot, WhereAnswered, lambda m: m.condition == "lr>5")
        assert answer.run_ids == set() and answer.error is None
        text = await shown(pilot)
        assert "No run matches" in text
        assert "lr>5" in text
        assert "No runs recorded yet" not in text
        assert run_lines(text) == []
        assert app.history is not None and len(app.history.runs) == 4


async def test_the_title_icon_is_a_plain_character(demo: Path):
    app = make_app(demo)
    async with app.run_test(size=(100, 30)) as pilot:
        text = await loaded(pilot)
        title = text.splitlines()[0]
        assert title.lstrip().startswith(TITLE_ICON)
        assert "⭘" not in title


async def test_the_replay_tab_at_rest_has_no_animated_bar(demo: Path):
    app = make_app(demo)
    seen = Seen()
    async with app.run_test(size=(100, 30), message_hook=seen) as pilot:
        await loaded(pilot)
        await pilot.press("3")
        await seen.wait(pilot, PaneReady, lambda m: isinstance(m.pane, ReplayPane))
        text = await shown(pilot)
        assert "No replay yet" in text
        assert "--%" not in text  # an indeterminate bar: it animates, costing idle CPU
        bars = app.query(ProgressBar)
        assert all(bar.total is not None for bar in bars if bar.display)


async def test_j_and_k_move_in_the_statement_matrix(demo: Path):
    app = make_app(demo)
    seen = Seen()
    async with app.run_test(size=(100, 30), message_hook=seen) as pilot:
        await loaded(pilot)
        await pilot.press("2")
        matrix = (await seen.wait(pilot, StatementTableLoaded)).table
        assert {"weight_norm", "loss"} <= set(matrix.names)
        table = app.query_one("#matrix", DataTable)
        table.focus()
        await pilot.press("g")
        await wait_until(pilot, lambda: table.cursor_coordinate.row == 0, what="first row")
        names = app.query_one("#statements-pane").data.names
        assert len(names) >= 2
        await pilot.press("j")
        await wait_until(pilot, lambda: table.cursor_coordinate.row == 1, what="j moved")
        await pilot.press("G")
        await wait_until(
            pilot, lambda: table.cursor_coordinate.row == len(names) - 1, what="G: last row"
        )
        await pilot.press("k")
        await wait_until(
            pilot, lambda: table.cursor_coordinate.row == len(names) - 2, what="k moved"
        )


async def test_capital_g_goes_to_the_end_of_run_detail_and_results(demo: Path):
    app = make_app(demo)
    seen = Seen()
    async with app.run_test(size=(80, 24), message_hook=seen) as pilot:
        await loaded(pilot)
        await pilot.press("g", "j", "enter")
        await seen.wait(pilot, RunDetailLoaded)
        assert "checkpoints" in (await shown(pilot)).lower()
        scroll = app.screen.query_one("#detail-scroll")
        await wait_until(pilot, lambda: scroll.max_scroll_y > 0, what="a detail to scroll")
        await pilot.press("G")
        await wait_until(pilot, lambda: scroll.scroll_y == scroll.max_scroll_y, what="G: end")
        await pilot.press("g")
        await wait_until(pilot, lambda: scroll.scroll_y == 0, what="g: top")
        await pilot.press("escape", "4")
        app.query_one("#query-pane").run_sql("SELECT range AS i FROM range(40)")
        assert len((await first_page(pilot, seen)).rows) == 40
        assert "40 rows" in await shown(pilot)
        results = app.query_one("#results", DataTable)
        results.focus()
        await pilot.press("G")
        await wait_until(pilot, lambda: results.cursor_coordinate.row == 39, what="G: last row")
        assert " 39 " in await shown(pilot)
        await pilot.press("g")
        await wait_until(pilot, lambda: results.cursor_coordinate.row == 0, what="g: first")
