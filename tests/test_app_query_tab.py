"""Workbench: the Query tab where it matters against harlequin (issue 14, defect 6 and
build item 4): several statements, full errors, paging through a result without loading
it, the cell viewer, stopping a query, the schema sidebar, completion, export."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest
from conftest_app import copy_demo, loaded, make_app, screen_text, wait_for, wait_until

from florwb.screens.text_view import TextViewScreen
from florwb_engine.store import Store

RANGE_SQL = "SELECT range AS i, range * 2 AS j FROM range(2500000)"
ENDLESS_SQL = "SELECT count(*) AS n FROM range(100000000000) a, range(1000) b"


@pytest.fixture
def demo(tmp_path: Path) -> Path:
    return copy_demo(tmp_path)


async def _run(pilot, sql: str) -> None:
    editor = pilot.app.query_one("#sql")
    editor.load_text(sql)
    editor.focus()
    await pilot.press("ctrl+j")


async def _open_query_tab(pilot) -> None:
    await loaded(pilot)
    await pilot.press("4")
    await wait_until(pilot, lambda: pilot.app.query("#sql"), what="the query tab")


async def test_several_statements_run_in_order_and_the_last_result_shows(demo: Path):
    app = make_app(demo)
    async with app.run_test(size=(80, 24)) as pilot:
        await _open_query_tab(pilot)
        await _run(pilot, "SELECT 1 AS first_one;\nSELECT count(*) AS n_runs FROM runs;")
        text = await wait_for(pilot, lambda t: "✓ 1 row" in t, what="the last result")
        table = app.query_one("#results")
        assert table.columns_shown == ["n_runs"] and table.raw_rows == [(4,)]
        assert "n_runs bigint" in text
        assert "unfinished result" not in text


async def test_an_error_keeps_duckdbs_whole_message_in_a_scrollable_view(demo: Path):
    app = make_app(demo)
    async with app.run_test(size=(100, 30)) as pilot:
        await _open_query_tab(pilot)
        await _run(pilot, "SELECT run_i FROM runs")
        text = await wait_for(pilot, lambda t: "Candidate bindings" in t, what="the error")
        assert isinstance(app.screen, TextViewScreen)
        assert "Query failed" in text and "Binder Error" in text
        lines = text.splitlines()
        sql_line = next(i for i, line in enumerate(lines) if "LINE 1: SELECT run_i" in line)
        # the pointer stays under the name it points at (no reflow)
        assert lines[sql_line + 1].index("^") == lines[sql_line].index("run_i")
        shown = app.screen.query_one("#textview-text").text
        assert '"run_id"' in shown and "LINE 1:" in shown
        await pilot.press("escape")
        text = await wait_for(pilot, lambda t: "Query failed" not in t, what="closed")
        assert "✗ Binder Error" in text


async def test_paging_walks_the_whole_result_without_loading_it(demo: Path):
    app = make_app(demo)
    async with app.run_test(size=(80, 24)) as pilot:
        await _open_query_tab(pilot)
        await _run(pilot, RANGE_SQL)
        await wait_for(pilot, lambda t: "rows 1–1,000 of 2,500,000" in t, what="the count")
        table = app.query_one("#results")
        pane = app.query_one("#query-pane")
        assert table.row_count == 1000
        table.focus()
        await pilot.press("G")  # the last loaded row: the next page is fetched
        await wait_for(pilot, lambda t: "rows 1–2,000 of 2,500,000" in t, what="page 2")
        assert table.row_count == 2000
        assert [r[0] for r in table.raw_rows] == list(range(2000))
        # the open result reads a snapshot: this process ingests into the catalog while it
        # stays open, and the next page carries on where it stopped
        stream = pane.stream
        Store(demo).ingest()
        assert stream.is_open and stream is pane.stream
        await pilot.press("G")
        await wait_for(pilot, lambda t: "rows 1–3,000 of 2,500,000" in t, what="page 3")
        assert [r[0] for r in table.raw_rows] == list(range(3000))
        assert len(table.raw_rows) == 3000  # never the whole result


async def test_a_result_of_unknown_size_says_so_far(demo: Path):
    app = make_app(demo)
    async with app.run_test(size=(100, 24)) as pilot:
        await _open_query_tab(pilot)
        await _run(pilot, "SELECT range AS i FROM range(100000000000)")
        text = await wait_for(pilot, lambda t: "rows 1–1,000" in t, what="the first page")
        if "of 100,000,000,000" not in text:  # counting a hundred billion rows takes a while
            assert "1,000+ so far" in text


async def test_enter_on_a_cell_opens_its_whole_value(demo: Path):
    app = make_app(demo)
    long_text = "".join(f"word{i} " for i in range(40)).strip()
    document = {"lr": 0.05, "layers": [64, 32], "optim": {"name": "sgd", "momentum": 0.9}}
    async with app.run_test(size=(100, 30)) as pilot:
        await _open_query_tab(pilot)
        await _run(pilot, f"SELECT '{long_text}' AS long_text, '{json.dumps(document)}' AS doc")
        text = await wait_for(pilot, lambda t: "✓ 1 row" in t, what="the row")
        assert long_text not in text and "word3 " in text  # cut in the table
        table = app.query_one("#results")
        table.focus()
        await pilot.press("enter")
        text = await wait_for(pilot, lambda t: "long_text (varchar)" in t, what="the viewer")
        assert app.screen.query_one("#textview-text").text == long_text
        assert "word39" in text
        await pilot.press("escape", "right", "enter")
        await wait_for(pilot, lambda t: "doc (varchar)" in t, what="the JSON cell")
        shown = app.screen.query_one("#textview-text").text
        assert json.loads(shown) == document
        assert '\n  "optim": {\n    "name": "sgd",' in shown  # pretty-printed
        await pilot.press("escape")
        await wait_until(pilot, lambda: not isinstance(app.screen, TextViewScreen))


@pytest.mark.parametrize("key", ["escape", "ctrl+c"])
async def test_a_long_query_can_be_stopped(demo: Path, key: str):
    app = make_app(demo)
    async with app.run_test(size=(80, 24)) as pilot:
        await _open_query_tab(pilot)
        await _run(pilot, ENDLESS_SQL)
        pane = app.query_one("#query-pane")
        await wait_until(pilot, lambda: pane.stream is not None and pane.running, what="running")
        await wait_for(pilot, lambda t: "running…" in t, what="running")
        await pilot.press(key)
        text = await wait_for(pilot, lambda t: "■ stopped" in t, what="stopped")
        assert "Query failed" not in text
        await _run(pilot, "SELECT 7 AS after_stop")
        await wait_for(pilot, lambda t: "after_stop" in t and "✓ 1 row" in t, what="next query")


async def test_the_schema_sidebar_lists_tables_views_and_column_types(demo: Path):
    app = make_app(demo)
    async with app.run_test(size=(120, 40)) as pilot:
        await _open_query_tab(pilot)
        assert "logs view" not in screen_text(app)
        await pilot.press("f9")
        text = await wait_for(pilot, lambda t: "logs view" in t, what="the sidebar")
        assert "runs table" in text and "iterations view" in text
        assert "value double" in text
        assert "run_id varchar" in text
        await pilot.press("f9")
        await wait_for(pilot, lambda t: "logs view" not in t, what="hidden again")


async def test_table_and_column_names_complete_with_tab(demo: Path):
    app = make_app(demo)
    async with app.run_test(size=(100, 30)) as pilot:
        await _open_query_tab(pilot)
        pane = app.query_one("#query-pane")
        await wait_until(pilot, lambda: pane.outline is not None, what="the names")
        editor = app.query_one("#sql")
        editor.load_text("")
        editor.focus()
        await pilot.press(*"SELECT * FROM iter")
        text = await wait_for(pilot, lambda t: "iterations" in t, what="the dropdown")
        assert editor.completing and editor.candidates[0] == "iterations"
        await pilot.press("tab")
        assert editor.text == "SELECT * FROM iterations"
        assert not editor.completing
        await pilot.press(*" WHERE run_")
        await wait_until(pilot, lambda: editor.completing, what="column names")
        assert "run_id" in editor.candidates
        index = editor.candidates.index("run_id")
        await pilot.press(*["down"] * index, "tab")
        assert editor.text == "SELECT * FROM iterations WHERE run_id"
        await pilot.press(*" = 'x' AND ep", "escape")  # esc closes the list only
        assert not editor.completing and editor.has_focus
        assert editor.text.endswith("AND ep")
        assert "iterations" in text
        # with the list closed, the arrows move the cursor and tab leaves the editor
        editor.load_text("SELECT 1\nFROM runs")
        editor.move_cursor((1, 4))
        await pilot.press("up")
        assert editor.cursor_location == (0, 4) and not editor.completing
        await pilot.press("tab")
        assert not editor.has_focus


@pytest.mark.parametrize("suffix", ["csv", "parquet", "json"])
async def test_ctrl_e_exports_the_result_where_the_user_asked(demo: Path, suffix: str):
    app = make_app(demo)
    target = demo.parent / f"out.{suffix}"
    sql = "SELECT run_id, status FROM runs ORDER BY run_id"
    async with app.run_test(size=(100, 30)) as pilot:
        await _open_query_tab(pilot)
        await _run(pilot, sql)
        await wait_for(pilot, lambda t: "✓ 4 rows" in t, what="the result")
        await pilot.press("ctrl+e")
        await wait_for(pilot, lambda t: "Export the result" in t, what="the dialog")
        field = app.screen.query_one("#export-path")
        field.value = str(target)
        await pilot.press("enter")
        await wait_for(pilot, lambda t: "wrote 4 rows to" in t, what="written")
    reader = {"csv": "read_csv", "parquet": "read_parquet", "json": "read_json"}[suffix]
    written = duckdb.sql(f"SELECT run_id, status FROM {reader}('{target}') ORDER BY run_id")
    assert written.fetchall() == [tuple(r) for r in Store(demo).query(sql).values.tolist()]


async def test_copy_inside_the_users_sql_is_still_refused(demo: Path):
    app = make_app(demo)
    sneaky = demo.parent / "sneaky.csv"
    target = demo.parent / "asked.csv"
    async with app.run_test(size=(100, 30)) as pilot:
        await _open_query_tab(pilot)
        await _run(pilot, f"COPY runs TO '{sneaky}'")
        await wait_for(pilot, lambda t: "read-only" in t, what="refused")
        await pilot.press("escape")
        await pilot.press("ctrl+e")
        await wait_for(pilot, lambda t: "Export the result" in t, what="the dialog")
        app.screen.query_one("#export-path").value = str(target)
        await pilot.press("enter")
        await wait_for(pilot, lambda t: "COPY statements are not allowed" in t, what="refused")
    assert not sneaky.exists() and not target.exists()


async def test_queries_started_one_after_another_leave_nothing_holding_the_file(demo: Path):
    app = make_app(demo)
    async with app.run_test(size=(80, 24)) as pilot:
        await _open_query_tab(pilot)
        pane = app.query_one("#query-pane")
        for n in range(5):  # each replaces the last before or after its first page
            pane.run_sql(f"SELECT range + {n} AS i FROM range(2500000)")
            await pilot.pause(0.02 * n)
        await wait_for(pilot, lambda t: "rows 1–1,000" in t, what="the last query's page")
        assert app.query_one("#results").raw_rows[0] == (4,)
        await pilot.press("escape")  # leaves the editor
        pane.run_sql("SELECT 1 AS small")  # the open result is closed, not kept
        await wait_for(pilot, lambda t: "✓ 1 row" in t and "small" in t, what="small")
        # nothing of this process still holds the catalog: another program can write it
        await wait_until(
            pilot, lambda: _writable(demo / ".florwb" / "florwb.duckdb"), what="the file free"
        )


def _writable(path: Path) -> bool:
    import subprocess
    import sys

    probe = f"import duckdb; duckdb.connect({str(path)!r}).close()"
    return subprocess.run([sys.executable, "-c", probe], capture_output=True).returncode == 0
