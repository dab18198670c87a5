"""Workbench: help from the key table, command palette, themes, 80x24 at 256 colors;
and the layering rules the workbench depends on."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import textual.constants
from conftest_app import (
    Seen,
    copy_demo,
    loaded,
    make_app,
    run_lines,
    screen_text,
    shown,
    wait_until,
)
from textual.binding import Binding
from textual.command import CommandPalette
from textual.screen import Screen

from florwb.app import WorkbenchApp
from florwb.panes.history import HistoryPane, WhereAnswered
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
from florwb.ui.messages import ReplaysLoaded, StatementTableLoaded
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
        await wait_until(pilot, lambda: isinstance(app.screen, HelpScreen), what="help")
        seen = await shown(pilot)  # the help's body laid out, not only its title
        assert "Keys (esc closes" in seen
        for _ in range(24):  # scroll through the whole help
            await pilot.press("pagedown")
            seen += await shown(pilot)
        for entries in keys.KEYS.values():
            for key in entries:
                assert key.id in seen, key.id
                assert key.description in seen, key.description
        await pilot.press("escape")
        await wait_until(pilot, lambda: not isinstance(app.screen, HelpScreen), what="closed")
        assert "Keys (esc closes" not in await shown(pilot)


async def test_command_palette_reaches_every_action(demo: Path):
    app, seen = make_app(demo), Seen()
    async with app.run_test(size=(80, 24), message_hook=seen) as pilot:
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
        since = seen.mark()
        await pilot.press("ctrl+p")
        await pilot.press(*"SQL query")
        await palette_hit(pilot, seen, "SQL query", since)
        await pilot.press("enter")
        await wait_until(pilot, lambda: bool(app.query("#sql")), what="the query tab")
        assert app.query_one("#tabs").active == "query"
        text = await shown(pilot)
        assert "SQL" in text and "run" in text
        # and one that acts on a pane: marks via the palette
        since = seen.mark()
        await pilot.press("ctrl+p")
        await pilot.press(*"Mark run or version")
        await palette_hit(pilot, seen, "Mark run or version", since)
        await pilot.press("enter")
        await wait_until_marked(pilot, app)


async def palette_hit(pilot, seen: Seen, title: str, since: int) -> None:
    """The command palette opened after `since` highlights a hit titled `title` (its
    search runs in a worker), and shows it."""
    await seen.wait(
        pilot,
        CommandPalette.OptionHighlighted,
        lambda m: title in str(m.highlighted_event.option.prompt),
        since=since,
        what=f"the palette's hit {title}",
    )
    assert title in await shown(pilot)


async def wait_until_marked(pilot, app) -> None:
    await wait_until(
        pilot, lambda: bool(app.marked_runs or app.marked_versions), what="the palette's mark"
    )
    assert app.query_one("#tabs").active == "history"


async def test_themes_change_and_the_screen_stays_readable(demo: Path):
    app, seen = make_app(demo), Seen()
    async with app.run_test(size=(80, 24), message_hook=seen) as pilot:
        await loaded(pilot)
        since = seen.mark()
        await pilot.press("ctrl+t")
        await pilot.press(*"textual-light")
        await palette_hit(pilot, seen, "textual-light", since)
        await pilot.press("enter")
        await wait_until(pilot, lambda: app.theme == "textual-light", what="the theme")
        await wait_until(
            pilot, lambda: not isinstance(app.screen, CommandPalette), what="the picker closed"
        )
        text = await shown(pilot)
        assert "version " in text
        assert "started" in text and "lr" in text  # the run table's header


async def test_readable_at_80x24_with_256_colors(demo: Path, monkeypatch):
    """At 80x24 every tab shows its own content uncut: the tab row, the footer's keys, the
    history's whole run line, the diff's columns, the replay's sections, the query's help."""
    monkeypatch.setattr(textual.constants, "COLOR_SYSTEM", "256")
    app, seen = make_app(demo), Seen()
    async with app.run_test(size=(80, 24), message_hook=seen) as pilot:
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
        await seen.wait(pilot, StatementTableLoaded, what="the statement table")
        text = await shown(pilot)
        assert "working tree" in text and "→ L" in text
        assert "✗ cannot place" in text  # the legend's last entry: the title is not cut
        row = next(line for line in text.splitlines() if line.strip().startswith("weight_norm"))
        assert row.count("→ L") == 2 and re.search(
            r"\+ L\d+ new", row
        )  # both versions and the tree fit
        await pilot.press("3")
        await seen.wait(pilot, ReplaysLoaded, what="the past replays")
        text = await shown(pilot)
        assert "Past replays" in text
        assert "Press r to plan one for the pending log statements." in text
        assert "Recording now: none" in text
        await pilot.press("4")
        await wait_until(pilot, lambda: bool(app.query("#sql")), what="the query tab")
        text = await shown(pilot)
        assert "SQL" in text
        assert "^⏎ run · esc stop/leave · ^e export · F9 schema · ^↑^↓ history · F8 list" in text


async def test_help_and_palette_follow_the_active_keymap(demo: Path):
    """Rebinding `history.filter` to `f`: f opens the filter, and the help and the palette
    say f, not /."""
    app, messages = make_app(demo), Seen()
    async with app.run_test(size=(80, 24), message_hook=messages) as pilot:
        await loaded(pilot)
        app.set_keymap({"history.filter": "f"})
        await pilot.press("question_mark")
        await wait_until(pilot, lambda: isinstance(app.screen, HelpScreen), what="help")
        seen = await shown(pilot)
        assert "Keys (esc closes" in seen
        while "history.filter" not in seen:
            await pilot.press("pagedown")
            seen = await shown(pilot)
        line = next(line for line in seen.splitlines() if "history.filter" in line)
        assert line.split()[1] == "f", line  # the help's key column (after the border)
        assert "/" not in line, line
        await pilot.press("escape")
        await wait_until(pilot, lambda: not isinstance(app.screen, HelpScreen), what="closed")
        assert "Keys (esc closes" not in await shown(pilot)
        commands = {c.title: c.help for c in app.get_system_commands(app.screen)}
        assert "key f · history.filter" in commands["Filter runs"]
        footer = screen_text(app).splitlines()[-1]
        assert "f filter" in footer and "/ filter" not in footer
        await pilot.press("f", *"lr=0.05")
        answered = await messages.wait(
            pilot, WhereAnswered, lambda m: m.condition == "lr=0.05", what="the filter answered"
        )
        assert answered.run_ids is not None and len(answered.run_ids) == 1
        text = await shown(pilot)
        assert len(run_lines(text)) == 1
        assert "lr=0.05" in text
        assert app.query_one(HistoryPane).text_filter == "lr=0.05"
        await pilot.press("enter")  # keep the filter, back to the list
        assert app.query_one("#history-list").has_focus
        await pilot.press("slash")  # no longer bound: the filter box stays closed
        await pilot.pause()
        assert app.query_one("#history-list").has_focus
        assert app.query_one(HistoryPane).text_filter == "lr=0.05"
