"""Workbench: small defects of issue 14 (point 8): the filter that matches nothing, the
title icon, the Replay tab at rest."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest_app import copy_demo, loaded, make_app, run_lines, wait_for
from textual.widgets import ProgressBar

from florwb.app import TITLE_ICON


@pytest.fixture
def demo(tmp_path: Path) -> Path:
    return copy_demo(tmp_path)


async def test_a_filter_that_matches_no_run_says_so(demo: Path):
    app = make_app(demo)
    async with app.run_test(size=(100, 30)) as pilot:
        await loaded(pilot)
        await pilot.press("slash", *"lr>0.05")
        text = await wait_for(pilot, lambda t: "No run matches" in t, what="no match")
        assert "lr>0.05" in text
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
    async with app.run_test(size=(100, 30)) as pilot:
        await loaded(pilot)
        await pilot.press("3")
        text = await wait_for(pilot, lambda t: "No replay yet" in t, what="the Replay tab")
        assert "--%" not in text  # an indeterminate bar: it animates, costing idle CPU
        bars = app.query(ProgressBar)
        assert all(bar.total is not None for bar in bars if bar.display)
