"""Workbench: the run table: args and a metric's final and best
value as sortable columns that use the width and drop whole columns when narrow, a filter
that takes `--where` conditions, version headers with the recorded git facts, and two
marked runs compared side by side with a searchable code diff."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest_app import Seen, copy_demo, loaded, make_app, run_lines, shown, wait_until

from florwb.panes.history import WhereAnswered
from florwb.screens.run_compare import ComparisonLoaded, RunCompareScreen
from florwb.ui.format import short_run, short_version
from florwb.widgets.code_diff import DiffView
from florwb.widgets.history_list import HistoryList
from florwb_engine.store import Store


@pytest.fixture
def demo(tmp_path: Path) -> Path:
    return copy_demo(tmp_path)


def _store_runs(project: Path) -> list:
    return Store(project).run_rows()


def _final_acc(project: Path) -> dict[str, float]:
    frame = Store(project).query(
        "SELECT run_id, arg_max(value, seq) AS final, max(value) AS best FROM logs "
        "WHERE name = 'acc' AND source = 'record' GROUP BY run_id"
    )
    return {r.run_id: (float(r.final), float(r.best)) for r in frame.itertuples()}


def _line(text: str, run_id: str) -> str:
    return next(line for line in text.splitlines() if short_run(run_id) in line)


async def test_run_table_shows_args_final_and_best_and_sorts(demo: Path):
    runs = _store_runs(demo)
    acc = _final_acc(demo)
    app, seen = make_app(demo), Seen()
    async with app.run_test(size=(200, 50), message_hook=seen) as pilot:
        text = await loaded(pilot)
        header = next(line for line in text.splitlines() if "started" in line and "run" in line)
        for column in ("lr", "epochs", "final", "best↑", "took"):
            assert column in header, column
        assert "hidden" not in header  # everything fits at 200 columns
        for run in runs:
            line = _line(text, run.run_id)
            final, best = acc[run.run_id]
            assert f"{final:.4g}" in line and f"{best:.4g}" in line
            assert f" {run.args['lr']:.3g} " in line
        # s cycles the sort column: to lr (ascending), then S reverses it
        listing = app.query_one("#history-list")
        while listing.sort[0] != "arg:lr":
            since = seen.mark()
            await pilot.press("s")
            await seen.wait(pilot, HistoryList.SortChanged, since=since, what="the next sort")
        assert listing.sort == ("arg:lr", False)
        text = await shown(pilot)
        assert "lr▲" in text
        for version in {r.version for r in runs}:
            mine = [r for r in runs if r.version == version]
            order = sorted(mine, key=lambda r: text.index(short_run(r.run_id)))
            assert [r.args["lr"] for r in order] == sorted(r.args["lr"] for r in mine)
        since = seen.mark()
        await pilot.press("S")
        changed = await seen.wait(pilot, HistoryList.SortChanged, since=since, what="reversed")
        assert changed.sort == ("arg:lr", True)
        text = await shown(pilot)
        assert "lr▼" in text
        for version in {r.version for r in runs}:
            mine = [r for r in runs if r.version == version]
            order = sorted(mine, key=lambda r: text.index(short_run(r.run_id)))
            assert [r.args["lr"] for r in order] == sorted(
                (r.args["lr"] for r in mine), reverse=True
            )


async def test_at_80_columns_whole_columns_drop_and_the_header_says_so(demo: Path):
    runs = _store_runs(demo)
    # a long string arg: it cannot fit, so its column goes
    long_value = "a-rather-long-dataset-path/that/does/not/fit/at/eighty/columns.npy"
    with Store(demo).session() as con:
        con.execute(
            "INSERT INTO args SELECT run_id, 'data', NULL, ?, 'str' FROM runs WHERE run_id = ?",
            [long_value, runs[0].run_id],
        )
    app = make_app(demo, watch=False)
    async with app.run_test(size=(80, 24)) as pilot:
        text = await loaded(pilot)
        header = next(line for line in text.splitlines() if "started" in line and "run" in line)
        assert "hidden" in header
        assert long_value[:10] not in text  # dropped whole, never cut mid-value
        for run in runs:  # the short args stay whole
            assert f" {run.args['lr']:.3g} " in _line(text, run.run_id)
        # wider: the column comes back whole
        await pilot.resize_terminal(200, 40)
        await wait_until(pilot, lambda: app.size == (200, 40), what="the terminal at 200")
        assert long_value in await shown(pilot)


async def test_filter_takes_a_where_condition_and_shows_errors_inline(demo: Path):
    runs = _store_runs(demo)
    wanted = {r.run_id for r in runs if r.args["lr"] > 0.05 and r.status == "finished"}
    assert 0 < len(wanted) < len(runs)
    app, seen = make_app(demo), Seen()

    async def answered(condition: str) -> WhereAnswered:
        return await seen.wait(
            pilot, WhereAnswered, lambda m: m.condition == condition, what=condition
        )

    async with app.run_test(size=(100, 30), message_hook=seen) as pilot:
        await loaded(pilot)
        condition = "lr > 0.05 and status = 'finished'"
        await pilot.press("slash", *condition)
        assert (await answered(condition)).run_ids == wanted
        text = await shown(pilot)
        assert len(run_lines(text)) == len(wanted)
        listed = {r.run_id for r in runs if short_run(r.run_id) in "\n".join(run_lines(text))}
        assert listed == wanted
        # a bad condition: DuckDB's reason under the filter line; it filters nothing
        await pilot.press("ctrl+u", *"lrr > 1")
        failed = await answered("lrr > 1")
        assert failed.run_ids is None and 'Referenced column "lrr" not found' in failed.error
        text = await shown(pilot)
        assert "✗" in text and 'Referenced column "lrr" not found' in text
        assert len(run_lines(text)) == len(runs) and "No run matches" not in text
        # nothing matches: said so, with the condition
        await pilot.press("ctrl+u", *"lr > 5")
        assert (await answered("lr > 5")).run_ids == set()
        text = await shown(pilot)
        assert "No run matches the condition" in text
        assert run_lines(text) == []
        # plain words filter as before (at once, in the pane: no query, no message)
        await pilot.press("ctrl+u", *short_run(runs[0].run_id))
        text = await shown(pilot)
        assert len(run_lines(text)) == 1
        assert short_run(runs[0].run_id) in run_lines(text)[0]
        assert "✗" not in text.split("\n", 6)[-1].splitlines()[0]


async def test_version_headers_show_the_recorded_git_head_branch_and_dirty_flag(demo: Path):
    runs = _store_runs(demo)
    with Store(demo).session() as con:  # one run recorded from a dirty tree
        con.execute("UPDATE runs SET git_dirty = true WHERE run_id = ?", [runs[-1].run_id])
    app = make_app(demo, watch=False)
    async with app.run_test(size=(100, 30)) as pilot:
        text = await loaded(pilot)
        for run in runs:
            assert run.git_head and run.git_branch
            header = next(
                line
                for line in text.splitlines()
                if f"version {short_version(run.version)}" in line
            )
            assert f"{run.git_head[:7]} ({run.git_branch})" in header
            assert ("*dirty" in header) == (run.version == runs[-1].version)


async def test_two_marked_runs_compare_side_by_side_with_a_searchable_diff(demo: Path):
    runs = _store_runs(demo)
    old = next(r for r in runs if r.version == runs[0].version)
    new = next(r for r in runs if r.version != runs[0].version)
    acc = _final_acc(demo)
    app, seen = make_app(demo, watch=False), Seen()
    async with app.run_test(size=(100, 30), notifications=True, message_hook=seen) as pilot:
        await loaded(pilot)
        await pilot.press("v")  # nothing marked: said, nothing opens
        assert "Mark exactly two runs" in await shown(pilot)
        assert not isinstance(app.screen, RunCompareScreen)
        listing = app.query_one("#history-list")
        for run in (old, new):
            listing.cursor = next(
                i for i, row in enumerate(listing.rows) if row.run and row.run.run_id == run.run_id
            )
            await pilot.press("space")
        assert app.marked_runs == {old.run_id, new.run_id}
        await pilot.press("v")
        loaded_ = await seen.wait(pilot, ComparisonLoaded, what="the comparison")
        assert isinstance(app.screen, RunCompareScreen)
        assert {loaded_.comparison.first.run_id, loaded_.comparison.second.run_id} == {
            old.run_id,
            new.run_id,
        }
        text = await shown(pilot)
        assert "metrics both logged" in text
        for run in (old, new):
            assert run.run_id in text
            assert run.git_head[:7] in text
        assert "lr" in text and "epochs" in text  # the args that differ
        first, second = app.screen.comparison.first, app.screen.comparison.second
        delta = acc[second.run_id][0] - acc[first.run_id][0]
        acc_line = next(line for line in text.splitlines() if line.strip().startswith("acc"))
        assert f"{delta:+.4g}" in acc_line
        assert f"{acc[first.run_id][0]:.4g}" in acc_line
        # the code diff of the two versions, searchable with / n N
        assert "train.py @ A" in text
        diff = app.screen.query_one(DiffView)
        await pilot.press("d", "slash", *"model")
        await wait_until(pilot, lambda: len(diff.matches) >= 2, what="matches")
        await pilot.press("enter")
        first_line = diff.current_line
        assert diff.current == 0
        assert "match 1 of" in await shown(pilot)
        await pilot.press("n")
        await wait_until(pilot, lambda: diff.current == 1, what="n")
        assert diff.current_line is not None and diff.current_line >= first_line
        await pilot.press("N")
        await wait_until(pilot, lambda: diff.current == 0, what="N")
        await pilot.press("escape")
        await wait_until(pilot, lambda: not isinstance(app.screen, RunCompareScreen), what="back")
