"""Workbench: the replay loop from the statement matrix: ⏎ on a
propagatable cell plans exactly that statement for that version's runs, the plan lets the
user leave runs out, ⏎ on a past replay opens its details; and the working-tree column
does not mark a never-recorded statement as recorded."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest_app import (
    Seen,
    copy_demo,
    loaded,
    make_app,
    pending_known,
    plan_shown,
    shown,
    wait_until,
)
from textual.widgets import DataTable

from florwb.screens.replay_detail import ReplayDetailScreen
from florwb.screens.replay_plan import ReplayPlanScreen
from florwb.ui.format import short_run
from florwb.ui.messages import ReplayEnded, ReplaysLoaded
from florwb.widgets.code_diff import DiffView
from florwb_engine.statements import WORKING
from florwb_engine.store import Store


@pytest.fixture
def demo(tmp_path: Path) -> Path:
    return copy_demo(tmp_path)


async def test_enter_on_a_propagatable_cell_replays_that_statement_for_chosen_runs(demo: Path):
    runs = Store(demo).run_rows()
    app, seen = make_app(demo), Seen()
    async with app.run_test(size=(100, 30), message_hook=seen) as pilot:
        await loaded(pilot)
        await pilot.press("2")
        pane = app.query_one("#statements-pane")
        await wait_until(pilot, lambda: pane.data is not None, timeout=60, what="the matrix")
        data = pane.data
        # the working tree column: weight_norm is there, but no run has it yet
        text = await shown(pilot)
        row = next(line for line in text.splitlines() if line.lstrip().startswith("weight_norm"))
        assert "new" in row and row.count("● ") == 0
        assert data.cells[("weight_norm", WORKING)].status == "in tree"
        version = next(
            v
            for v in data.versions
            if data.cells.get(("weight_norm", v))
            and data.cells[("weight_norm", v)].status == "propagatable"
        )
        table = app.query_one("#matrix", DataTable)
        table.focus()
        table.move_cursor(row=data.names.index("weight_norm"), column=pane.order.index(version) + 1)
        since = seen.mark()
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, ReplayPlanScreen), what="plan")
        plan_screen = app.screen
        text = await plan_shown(pilot, seen, since, timeout=90)
        mine = [r for r in runs if r.version == version]
        assert plan_screen.names == ["weight_norm"]
        assert sorted(plan_screen.run_ids) == sorted(r.run_id for r in mine)
        assert {r.run_id for r in plan_screen.plan.runs} == {r.run_id for r in mine}
        assert "2 of 2 runs to replay" in text
        # space leaves the first run out; the plan says so; space on it again takes it back
        left_out = plan_screen.plan.runs[0].run_id
        await pilot.press("space")  # the plan is shown again at once: nothing to re-plan
        text = await shown(pilot)
        assert "1 of 2 runs to replay" in text
        # the summary's "1 excluded" may wrap inside the modal: the state says it exactly
        assert plan_screen.excluded == {left_out} and "excluded by you" in text
        await pilot.press("space")
        assert "2 of 2 runs to replay" in await shown(pilot)  # back in
        await pilot.press("space")
        assert "1 of 2 runs to replay" in await shown(pilot)  # excluded again
        await pilot.press("enter")
        await wait_until(
            pilot,
            lambda: not app.replay_running and seen.of(ReplayEnded),
            timeout=180,
            what="the replay's end",
        )
        assert [m.result.status for m in seen.of(ReplayEnded)][-1] == "finished"
    got = Store(demo).query(
        "SELECT DISTINCT run_id FROM logs WHERE name = 'weight_norm' AND source != 'record'"
    )
    kept = {r.run_id for r in mine} - {left_out}
    assert set(got["run_id"]) == kept


async def test_enter_on_a_past_replay_opens_its_runs_statuses_and_errors(demo: Path):
    app, seen = make_app(demo), Seen()
    async with app.run_test(size=(100, 30), message_hook=seen) as pilot:
        await loaded(pilot)
        await pending_known(pilot, "weight_norm")
        since = seen.mark()
        await pilot.press("g", "j", "space", "r")
        (run_id,) = app.marked_runs
        await plan_shown(pilot, seen, since, timeout=90)
        await pilot.press("enter")
        end = await seen.wait(pilot, ReplayEnded, timeout=180, what="the replay's end")
        await wait_until(pilot, lambda: not app.replay_running, what="the replay's end")
        # read back after it ended (a read while it ran would list it running)
        await seen.wait(
            pilot,
            ReplaysLoaded,
            lambda m: [r.status for r in m.replays] == ["finished"],
            since=seen.after(end),
            timeout=60,
            what="the replay listed",
        )
        text = await shown(pilot)
        assert "Past replays: 1" in text
        assert "r plans the next one" in text and "c cancels" not in text  # nothing to cancel
        (replay_id,) = Store(demo).query("SELECT replay_id FROM replays")["replay_id"]
        past = app.query_one("#past-replays", DataTable)
        # sensible widths the first time the table shows: the whole replay id fits
        widths = {str(c.key.value): c.get_render_width(past) for c in past.columns.values()}
        assert widths["replay"] >= len(replay_id) and widths["names"] >= len("weight_norm")
        assert replay_id in text
        await pilot.press("p", "enter")
        await wait_until(pilot, lambda: isinstance(app.screen, ReplayDetailScreen), what="detail")
        text = await shown(pilot)  # composed from the replay's row: nothing to load
        assert "runs" in text and replay_id in text
        line = next(line for line in text.splitlines() if short_run(run_id) in line)
        assert "ready" in line and "finished" in line
        assert "weight_norm" in text
        rows = Store(demo).query(f"SELECT count(*) AS n FROM logs WHERE source = '{replay_id}'")[
            "n"
        ][0]
        assert f"{int(rows):,}" in line
        await pilot.press("escape")
        await wait_until(pilot, lambda: not isinstance(app.screen, ReplayDetailScreen))


async def test_slash_in_the_statements_tab_searches_the_diff(demo: Path):
    app = make_app(demo, watch=False)
    async with app.run_test(size=(100, 30)) as pilot:
        await loaded(pilot)
        await pilot.press("2")
        pane = app.query_one("#statements-pane")
        await wait_until(pilot, lambda: pane.data is not None, timeout=60, what="the matrix")
        assert "diff version" in await shown(pilot)  # drawn with the matrix
        diff = pane.query_one(DiffView)
        await pilot.press("slash", *"flor.")
        await wait_until(pilot, lambda: len(diff.matches) >= 2, what="matches")
        expected = [i for i, line in enumerate(diff.text.plain.split("\n")) if "flor." in line]
        assert [m[0] for m in diff.matches] == expected  # every line that has it
        await pilot.press("enter")
        text = await shown(pilot)
        assert "match 1 of" in text  # the counter
        assert f"of {len(diff.matches)}" in text
        await pilot.press("n", "n")
        await wait_until(pilot, lambda: diff.current == 2 % len(diff.matches), what="n twice")
        await pilot.press("N")
        await wait_until(pilot, lambda: diff.current == 1, what="N")
        # the current match is drawn in its own style
        line = diff.query_one("#diff").content
        assert any("bright_yellow" in str(span.style) for span in line.spans)
