"""The keys the chart, run comparison and chart screen added follow the active keymap like
the rest: rebound, the new key opens the view, the old one does nothing,
and the help, the palette and the chart's footer name the new key."""

from __future__ import annotations

from pathlib import Path

from conftest_app import copy_demo, loaded, make_app, screen_text, shown, wait_until
from textual.widgets import Input

from florwb.screens.chart import ChartScreen
from florwb.screens.error import ErrorScreen
from florwb.screens.help import HelpScreen, help_renderable
from florwb.screens.run_compare import RunCompareScreen
from florwb.ui import keys


def _help_line(app, key_id: str) -> str:
    """The help's row for one key id, as the help screen renders it."""
    from rich.console import Console

    console = Console(width=120, record=True, color_system=None)
    console.print(help_renderable(app, app.keymap))
    return next(line for line in console.export_text().splitlines() if key_id in line)


async def test_rebound_chart_and_compare_keys_work_and_are_listed(tmp_path: Path):
    app = make_app(copy_demo(tmp_path), watch=False)
    async with app.run_test(size=(120, 36)) as pilot:
        await loaded(pilot)
        app.set_keymap({"history.chart": "o", "history.compare": "V", "chart.log": "L"})
        assert _help_line(app, "history.chart").split()[0] == "o"
        assert _help_line(app, "history.compare").split()[0] == "V"
        commands = {c.title: c.help for c in app.get_system_commands(app.screen)}
        assert "key o · history.chart" in commands["Chart marked runs (or the version)"]
        assert "key V · history.compare" in commands["Compare the two marked runs"]

        await pilot.press("space", "space")  # two runs marked
        assert len(app.marked_runs) == 2
        await pilot.press("c", "v")  # no longer bound: nothing opens
        await pilot.pause()
        assert not isinstance(app.screen, (ChartScreen, RunCompareScreen))

        await pilot.press("V")
        await wait_until(pilot, lambda: isinstance(app.screen, RunCompareScreen), what="compare")
        await pilot.press("escape")
        await wait_until(pilot, lambda: app.screen is app.screen_stack[0], what="back")

        await pilot.press("o")
        await wait_until(
            pilot,
            lambda: isinstance(app.screen, ChartScreen) and app.screen.drawing is not None,
            what="the chart",
        )
        footer = (await shown(pilot)).splitlines()
        assert "L log" in footer[-1] and "l log" not in footer[-1]
        chart = app.screen
        assert isinstance(chart, ChartScreen)
        log_before = chart.state.log_y
        await pilot.press("l")  # the old key does nothing
        await pilot.pause()
        assert chart.state.log_y == log_before
        await pilot.press("L")
        await wait_until(pilot, lambda: chart.state.log_y != log_before, what="log scale toggled")
        assert "L log" in (await shown(pilot)).splitlines()[-1]


def test_key_hints_name_the_key_in_force():
    hints = keys.KeyHints()
    assert (hints("replay.cancel"), hints("history.open")) == ("c", "⏎")
    hints.keymap = {"replay.cancel": "x,ctrl+x", "history.open": "o"}
    assert (hints("replay.cancel"), hints("history.open")) == ("x", "o")


async def test_lines_that_name_a_key_follow_the_keymap(tmp_path: Path):
    """Text that names a key (the run summary's `⏎ details`, the version's `⏎ log-statement
    diff · ␣ mark`, the Query tab's key line) names the rebound key instead."""
    app = make_app(copy_demo(tmp_path), watch=False)
    async with app.run_test(size=(120, 36)) as pilot:
        await loaded(pilot)
        assert "⏎ details" in await shown(pilot)  # the run row's hint
        app.set_keymap({"history.open": "o", "history.mark": "x", "query.schema": "f10"})
        await pilot.press("j", "k")  # the summary is drawn anew
        assert "o details" in await shown(pilot)
        await pilot.press("g")  # the newest version's row
        text = await shown(pilot)
        assert "o log-statement diff · x mark" in text
        assert "⏎ log-statement diff" not in text
        await pilot.press("4")
        await wait_until(pilot, lambda: bool(app.query("#sql")), what="the query tab")
        text = await shown(pilot)
        assert "F10 schema" in text
        assert "F9 schema" not in text and "^⏎ run · esc stop/leave" in text


async def test_help_error_and_diff_search_name_the_rebound_keys(tmp_path: Path):
    """The help's title, the error's button and the diff search's placeholder named fixed
    keys (`esc closes`, `OK (esc)`, `n/N`) whatever the keymap said."""
    app = make_app(copy_demo(tmp_path), watch=False)
    async with app.run_test(size=(120, 36)) as pilot:
        await loaded(pilot)
        app.set_keymap(
            {"help.close": "x", "error.close": "z", "diff.next": "f", "diff.previous": "F"}
        )
        await pilot.press("question_mark")
        await wait_until(pilot, lambda: isinstance(app.screen, HelpScreen), what="the help")
        assert "Keys (x closes" in await shown(pilot)
        assert "help.close" in _help_line(app, "help.close")
        await pilot.press("escape")  # no longer bound: the help stays
        await pilot.pause()
        assert "Keys (x closes" in screen_text(app)
        await pilot.press("x")
        await wait_until(pilot, lambda: not isinstance(app.screen, HelpScreen), what="closed")
        assert "Keys (" not in await shown(pilot)

        app.show_error("Something failed", "the details")
        await wait_until(pilot, lambda: isinstance(app.screen, ErrorScreen), what="the error")
        assert "OK (z)" in await shown(pilot)
        await pilot.press("z")
        await wait_until(pilot, lambda: not isinstance(app.screen, ErrorScreen), what="closed")

        await pilot.press("2", "slash")  # the statements tab's search opens the diff's
        search = app.query_one("#diff-search", Input)
        await wait_until(pilot, lambda: search.has_focus, what="the diff's search")
        assert search.placeholder == "search the diff (⏎ jumps, f/F next/previous)"
