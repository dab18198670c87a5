"""Workbench: help from the key table, command palette, themes, 80x24 at 256 colors
(issue 4, point 7); and the layering rules the workbench depends on."""

from __future__ import annotations

from pathlib import Path

import pytest
import textual.constants
from conftest_app import copy_demo, loaded, make_app, screen_text, wait_for
from textual.binding import Binding

from florwb.app import WorkbenchApp
from florwb.panes.query import QueryPane
from florwb.panes.replay import ReplayPane
from florwb.panes.statements import StatementsPane
from florwb.screens.replay_plan import ReplayPlanScreen
from florwb.screens.run_detail import RunDetailScreen
from florwb.ui import keys
from florwb.widgets.history_list import HistoryList

BOUND = {
    "app": WorkbenchApp,
    "history": HistoryList,
    "statements": StatementsPane,
    "replay": ReplayPane,
    "query": QueryPane,
    "run": RunDetailScreen,
    "plan": ReplayPlanScreen,
}


@pytest.fixture
def demo(tmp_path: Path) -> Path:
    return copy_demo(tmp_path)


def test_every_binding_comes_from_the_key_table_with_an_id():
    ids = [key.id for entries in keys.KEYS.values() for key in entries]
    assert len(ids) == len(set(ids))
    for scope, owner in BOUND.items():
        bindings = [b for b in owner.BINDINGS if isinstance(b, Binding)]
        assert {b.id for b in bindings} == {k.id for k in keys.KEYS[scope]}, scope
        for binding in bindings:
            scope_of, key = keys.find(binding.id)
            assert scope_of == scope and binding.action == key.action
            method = key.action.split("(")[0]
            assert hasattr(owner, f"action_{method}"), f"{owner.__name__}.action_{method}"


async def test_question_mark_shows_help_generated_from_the_bindings(demo: Path):
    app = make_app(demo)
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot)
        await pilot.press("question_mark")
        text = await wait_for(pilot, lambda t: "Keys (esc closes" in t, what="help")
        seen = text
        for _ in range(12):  # scroll through the whole help
            await pilot.press("pagedown")
            seen += screen_text(app)
        for entries in keys.KEYS.values():
            for key in entries:
                assert key.id in seen, key.id
                assert key.description in seen, key.description
        await pilot.press("escape")
        await wait_for(pilot, lambda t: "Keys (esc closes" not in t)


async def test_command_palette_reaches_every_action(demo: Path):
    app = make_app(demo)
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot)
        titles = {command.title for command in app.get_system_commands(app.screen)}
        for scope, entries in keys.KEYS.items():
            if scope in ("run", "plan"):
                continue  # offered while those screens are open
            for key in entries:
                if key.palette:
                    assert key.description in titles, key.id
        assert "Theme" in titles
        # drive one through the palette UI
        await pilot.press("ctrl+p")
        await pilot.press(*"SQL query")
        await wait_for(pilot, lambda t: "SQL query" in t, what="palette hit")
        await pilot.press("enter")
        await wait_for(pilot, lambda t: "SQL" in t and "run" in t, what="query tab")
        assert app.query_one("#tabs").active == "query"
        # and one that acts on a pane: marks via the palette
        await pilot.press("ctrl+p")
        await pilot.press(*"Mark run or version")
        await wait_for(pilot, lambda t: "Mark run or version" in t)
        await pilot.press("enter")
        await wait_until_marked(pilot, app)


async def wait_until_marked(pilot, app) -> None:
    for _ in range(100):
        await pilot.pause(0.05)
        if app.marked_runs or app.marked_versions:
            assert app.query_one("#tabs").active == "history"
            return
    raise AssertionError("the palette's mark action did not mark anything")


async def test_themes_change_and_the_screen_stays_readable(demo: Path):
    app = make_app(demo)
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot)
        await pilot.press("ctrl+t")
        await pilot.press(*"textual-light")
        await pilot.pause(0.3)
        await pilot.press("enter")
        await wait_for(pilot, lambda t: "version " in t)
        assert app.theme == "textual-light"
        text = screen_text(app)
        assert "args that differ" in text


async def test_readable_at_80x24_with_256_colors(demo: Path, monkeypatch):
    monkeypatch.setattr(textual.constants, "COLOR_SYSTEM", "256")
    app = make_app(demo)
    async with app.run_test(size=(80, 24)) as pilot:
        text = await loaded(pilot)
        assert app.console.color_system == "256"
        lines = text.splitlines()
        assert len(lines) == 24 and max(len(line) for line in lines) <= 80
        # every column of a run line fits: status, run, args that differ, sparkline, value
        run_line = next(line for line in lines if "finished" in line)
        assert "lr=" in run_line and run_line.rstrip()[-1].isdigit()
        for tab in "234":
            await pilot.press(tab)
            await pilot.pause(0.3)
            assert len(screen_text(app).splitlines()) == 24
