"""Workbench: help from the key table, command palette, themes, 80x24 at 256 colors;
and the layering rules the workbench depends on."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import textual.constants
from conftest_app import (
    copy_demo,
    loaded,
    make_app,
    run_lines,
    screen_text,
    shown,
    wait_for,
    wait_until,
)
from textual.binding import Binding
from textual.screen import Screen

from florwb.app import WorkbenchApp
from florwb.panes.history import HistoryPane
from florwb.panes.query import QueryPane
from florwb.panes.replay import PastReplaysTable, ReplayPane
from florwb.panes.statements import StatementsPane
from florwb.screens.chart import ChartScreen
from florwb.screens.confirm import ConfirmScreen
from florwb.screens.error import ErrorScreen
from florwb.screens.export_result import ExportScreen
from florwb.screens.help import HelpScreen
from florwb.screens.metric_picker import MetricPicker
from florwb.screens.query_history import QueryHistoryPicker
from florwb.screens.replay_detail import ReplayDetailScreen
from florwb.screens.replay_plan import PlanRunsTable, ReplayPlanScreen
from florwb.screens.run_compare import RunCompareScreen
from florwb.screens.run_detail import RunDetailScreen
from florwb.screens.text_view import TextViewScreen
from florwb.ui import keys
from florwb.widgets.code_diff import DiffView
from florwb.widgets.history_list import HistoryList
from florwb.widgets.matrix_table import MatrixTable
from florwb.widgets.results_table import ResultsTable
from florwb.widgets.sql_editor import SqlEditor

BOUND = {
    "app": WorkbenchApp,
    "history": HistoryList,
    "statements": StatementsPane,
    "replay": ReplayPane,
    "query": QueryPane,
    "run": RunDetailScreen,
    "plan": ReplayPlanScreen,
    "matrix": MatrixTable,
    "results": ResultsTable,
    "editor": SqlEditor,
    "textview": TextViewScreen,
    "export": ExportScreen,
    "chart": ChartScreen,
    "diff": DiffView,
    "plan_runs": PlanRunsTable,
    "past": PastReplaysTable,
    "compare": RunCompareScreen,
    "replay_detail": ReplayDetailScreen,
    "query_history": QueryHistoryPicker,
    "metric_picker": MetricPicker,
    "help": HelpScreen,
    "confirm": ConfirmScreen,
    "error": ErrorScreen,
}


@pytest.fixture
def demo(tmp_path: Path) -> Path:
    return copy_demo(tmp_path)


def test_every_binding_comes_from_the_key_table_with_an_id():
    ids = [key.id for entries in keys.KEYS.values() for key in entries]
    assert len(ids) == len(set(ids))
    assert set(BOUND) == set(keys.KEYS) == set(keys.SCOPES)  # every scope is checked below
    for scope, owner in BOUND.items():
        bindings = [b for b in owner.BINDINGS if isinstance(b, Binding)]
        assert {b.id for b in bindings} == {k.id for k in keys.KEYS[scope]}, scope
        for binding in bindings:
            scope_of, key = keys.find(binding.id)
            assert scope_of == scope and binding.action == key.action
            method = key.action.split("(")[0]
            assert hasattr(owner, f"action_{method}"), f"{owner.__name__}.action_{method}"


def test_each_screen_scope_is_held_by_one_screen_class():
    """The palette offers a modal screen's keys, and runs them, where the screen on top is
    an instance of the class whose KEY_SCOPES names the scope (not a class name's text)."""
    classes = set(BOUND.values())
    for scope in keys.SCOPES:
        holders = [c for c in classes if scope in getattr(c, "KEY_SCOPES", ())]
        if scope in keys.SCREEN_SCOPES:
            assert len(holders) == 1 and issubclass(holders[0], Screen), (scope, holders)
        else:
            assert holders == [], scope


async def test_question_mark_shows_help_generated_from_the_bindings(demo: Path):
    app = make_app(demo)
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot)
        await pilot.press("question_mark")
        await wait_for(pilot, lambda t: "Keys (esc closes" in t, what="help")
        seen = await shown(pilot)  # the help's body laid out, not only its title
        for _ in range(24):  # scroll through the whole help
            await pilot.press("pagedown")
            seen += await shown(pilot)
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
            if scope in keys.SCREEN_SCOPES:
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
    await wait_until(
        pilot, lambda: bool(app.marked_runs or app.marked_versions), what="the palette's mark"
    )
    assert app.query_one("#tabs").active == "history"


async def test_themes_change_and_the_screen_stays_readable(demo: Path):
    app = make_app(demo)
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot)
        await pilot.press("ctrl+t")
        await pilot.press(*"textual-light")
        await wait_for(pilot, lambda t: "textual-light" in t, what="the theme in the list")
        await pilot.press("enter")
        await wait_for(pilot, lambda t: "version " in t)
        assert app.theme == "textual-light"
        text = screen_text(app)
        assert "started" in text and "lr" in text  # the run table's header


async def test_readable_at_80x24_with_256_colors(demo: Path, monkeypatch):
    """At 80x24 every tab shows its own content uncut: the tab row, the footer's keys, the
    history's whole run line, the diff's columns, the replay's sections, the query's help."""
    monkeypatch.setattr(textual.constants, "COLOR_SYSTEM", "256")
    app = make_app(demo)
    async with app.run_test(size=(80, 24)) as pilot:
        text = await loaded(pilot)
        assert app.console.color_system == "256"
        lines = text.splitlines()
        tabs = next(line for line in lines if "1 History" in line)
        for label in ("2 Statements", "3 Replay", "4 Query"):
            assert label in tabs, label
        footer = lines[-1]
        for key in ("? help", "r replay", "q quit"):
            assert key in footer, footer
        # every column of a run line fits: status, run, args that differ, values, sparkline
        run_line = next(line for line in lines if "finished" in line)
        header = next(line for line in lines if "started" in line and " run " in line)
        assert " lr " in header and "hidden" not in header
        assert re.search(r" 0\.\d+ +0\.\d+ +[▁▂▃▄▅▆▇█]", run_line), run_line
        assert any(ch in run_line for ch in "▁▂▃▄▅▆▇█")
        await pilot.press("2")
        text = await wait_for(
            pilot, lambda t: "working tree" in t and "→ L" in t, what="the diff's columns"
        )
        assert "✗ cannot place" in text  # the legend's last entry: the title is not cut
        row = next(line for line in text.splitlines() if line.strip().startswith("weight_norm"))
        assert row.count("→ L") == 2 and re.search(
            r"\+ L\d+ new", row
        )  # both versions and the tree fit
        await pilot.press("3")
        text = await wait_for(pilot, lambda t: "Past replays" in t, what="the replay tab")
        assert "Press r to plan one for the pending log statements." in text
        assert "Recording now: none" in text
        await pilot.press("4")
        text = await wait_for(pilot, lambda t: "SQL" in t, what="the query tab")
        assert "^⏎ run · esc stop/leave · ^e export · F9 schema · ^↑^↓ history · F8 list" in text


async def test_help_and_palette_follow_the_active_keymap(demo: Path):
    """Rebinding `history.filter` to `f`: f opens the filter, and the help and the palette
    say f, not /."""
    app = make_app(demo)
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot)
        app.set_keymap({"history.filter": "f"})
        await pilot.press("question_mark")
        seen = await wait_for(pilot, lambda t: "Keys (esc closes" in t, what="help")
        while "history.filter" not in seen:
            await pilot.press("pagedown")
            seen = screen_text(app)
        line = next(line for line in seen.splitlines() if "history.filter" in line)
        assert line.split()[1] == "f", line  # the help's key column (after the border)
        assert "/" not in line, line
        await pilot.press("escape")
        await wait_for(pilot, lambda t: "Keys (esc closes" not in t, what="help closed")
        commands = {c.title: c.help for c in app.get_system_commands(app.screen)}
        assert "key f · history.filter" in commands["Filter runs"]
        footer = screen_text(app).splitlines()[-1]
        assert "f filter" in footer and "/ filter" not in footer
        await pilot.press("f", *"lr=0.05")
        text = await wait_for(pilot, lambda t: len(run_lines(t)) == 1, what="one run left")
        assert "lr=0.05" in text
        assert app.query_one(HistoryPane).text_filter == "lr=0.05"
        await pilot.press("enter")  # keep the filter, back to the list
        assert app.query_one("#history-list").has_focus
        await pilot.press("slash")  # no longer bound: the filter box stays closed
        await pilot.pause()
        assert app.query_one("#history-list").has_focus
        assert app.query_one(HistoryPane).text_filter == "lr=0.05"
