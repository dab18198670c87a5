"""Workbench: the Query tab where it matters against harlequin: several statements, full
errors, paging through a result without loading it, the cell viewer, stopping a query, the
schema sidebar, completion, export.

Each step waits on the message that says it happened (a page arrived, the count, the
failure, the export) and reads the screen once after it, where what a person sees is
what is tested."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest
from conftest_app import (
    Seen,
    copy_demo,
    first_page,
    make_app,
    query_failed,
    query_tab,
    rows_added,
    run_query,
    screen_text,
    shown,
    wait_until,
)

from florwb.screens.export_result import ExportScreen
from florwb.screens.text_view import TextViewScreen
from florwb.ui.messages import (
    OutlineLoaded,
    QueryCounted,
    QueryExported,
    QueryFailed,
    QueryRows,
)
from florwb.widgets.results_table import ResultsTable
from florwb_engine.store import Store

RANGE_SQL = "SELECT range AS i, range * 2 AS j FROM range(2500000)"
ENDLESS_SQL = "SELECT count(*) AS n FROM range(100000000000) a, range(1000) b"


@pytest.fixture
def demo(tmp_path: Path) -> Path:
    return copy_demo(tmp_path)


async def _next_page(pilot, seen: Seen, since: int) -> None:
    """One more page of the query on screen arrived and is in the table."""
    pane = pilot.app.query_one("#query-pane")
    await seen.wait(
        pilot,
        QueryRows,
        lambda m: not m.first and m.serial == pane.serial,
        since=since,
        what="the next page",
    )
    await rows_added(pilot)


async def _export_to(pilot, target: Path) -> None:
    """^e, then the path typed into the dialog and ⏎."""
    app = pilot.app
    await pilot.press("ctrl+e")
    await wait_until(
        pilot,
        lambda: isinstance(app.screen, ExportScreen) and bool(app.screen.query("#export-path")),
        what="the export dialog",
    )
    assert "Export the result" in await shown(pilot)
    app.screen.query_one("#export-path").value = str(target)
    await pilot.press("enter")


async def test_several_statements_run_in_order_and_the_last_result_shows(demo: Path):
    app, seen = make_app(demo), Seen()
    async with app.run_test(size=(80, 24), message_hook=seen) as pilot:
        await query_tab(pilot)
        await run_query(pilot, "SELECT 1 AS first_one;\nSELECT count(*) AS n_runs FROM runs;")
        page = await first_page(pilot, seen)
        assert page.rows == [(4,)] and page.stream.columns == ["n_runs"]
        table = app.query_one("#results")
        assert table.columns_shown == ["n_runs"] and table.raw_rows == [(4,)]
        text = screen_text(app)
        assert "✓ 1 row" in text and "n_runs bigint" in text
        assert "unfinished result" not in text


async def test_an_error_keeps_duckdbs_whole_message_in_a_scrollable_view(demo: Path):
    app, seen = make_app(demo), Seen()
    async with app.run_test(size=(100, 30), message_hook=seen) as pilot:
        await query_tab(pilot)
        await run_query(pilot, "SELECT run_i FROM runs")
        failed = await query_failed(pilot, seen)
        assert not failed.stopped and "Candidate bindings" in failed.detail
        assert isinstance(app.screen, TextViewScreen)
        text = screen_text(app)
        assert "Query failed" in text and "Binder Error" in text
        lines = text.splitlines()
        sql_line = next(i for i, line in enumerate(lines) if "LINE 1: SELECT run_i" in line)
        # the pointer stays under the name it points at (no reflow)
        assert lines[sql_line + 1].index("^") == lines[sql_line].index("run_i")
        shown_text = app.screen.query_one("#textview-text").text
        assert '"run_id"' in shown_text and "LINE 1:" in shown_text
        await pilot.press("escape")
        await wait_until(pilot, lambda: not isinstance(app.screen, TextViewScreen), what="closed")
        text = await shown(pilot)
        assert "Query failed" not in text and "✗ Binder Error" in text


async def test_paging_walks_the_whole_result_without_loading_it(demo: Path):
    app, seen = make_app(demo), Seen()
    async with app.run_test(size=(80, 24), message_hook=seen) as pilot:
        pane = await query_tab(pilot)
        await run_query(pilot, RANGE_SQL)
        await first_page(pilot, seen)
        counted = await seen.wait(pilot, QueryCounted, lambda m: m.serial == pane.serial)
        assert counted.total == 2_500_000
        await rows_added(pilot)
        table = app.query_one("#results")
        assert table.row_count == 1000
        assert "rows 1–1,000 of 2,500,000" in screen_text(app)
        table.focus()
        since = seen.mark()
        await pilot.press("G")  # the last loaded row: the next page is fetched
        await _next_page(pilot, seen, since)
        assert table.row_count == 2000
        assert [r[0] for r in table.raw_rows] == list(range(2000))
        assert "rows 1–2,000 of 2,500,000" in screen_text(app)
        # the open result reads a snapshot: this process ingests into the catalog while it
        # stays open, and the next page carries on where it stopped
        stream = pane.stream
        Store(demo).ingest()
        assert stream.is_open and stream is pane.stream
        since = seen.mark()
        await pilot.press("G")
        await _next_page(pilot, seen, since)
        assert [r[0] for r in table.raw_rows] == list(range(3000))
        assert len(table.raw_rows) == 3000  # never the whole result
        assert "rows 1–3,000 of 2,500,000" in screen_text(app)


async def test_a_result_of_unknown_size_says_so_far(demo: Path):
    app, seen = make_app(demo), Seen()
    async with app.run_test(size=(100, 24), message_hook=seen) as pilot:
        await query_tab(pilot)
        await run_query(pilot, "SELECT range AS i FROM range(100000000000)")
        page = await first_page(pilot, seen)
        assert len(page.rows) == 1000 and not page.stream.exhausted
        text = screen_text(app)
        assert "rows 1–1,000" in text
        if "of 100,000,000,000" not in text:  # counting a hundred billion rows takes a while
            assert "1,000+ so far" in text


async def test_enter_on_a_cell_opens_its_whole_value(demo: Path):
    app, seen = make_app(demo), Seen()
    long_text = "".join(f"word{i} " for i in range(40)).strip()
    document = {"lr": 0.05, "layers": [64, 32], "optim": {"name": "sgd", "momentum": 0.9}}
    async with app.run_test(size=(100, 30), message_hook=seen) as pilot:
        await query_tab(pilot)
        await run_query(
            pilot, f"SELECT '{long_text}' AS long_text, '{json.dumps(document)}' AS doc"
        )
        await first_page(pilot, seen)
        text = screen_text(app)
        assert "✓ 1 row" in text
        assert long_text not in text and "word3 " in text  # cut in the table
        table = app.query_one("#results")
        table.focus()
        await pilot.press("enter")
        opened = await seen.wait(pilot, ResultsTable.CellOpened, what="the viewer")
        assert opened.column == "long_text" and opened.value == long_text
        assert isinstance(app.screen, TextViewScreen)
        assert app.screen.query_one("#textview-text").text == long_text
        text = screen_text(app)
        assert "long_text (varchar)" in text and "word39" in text
        since = seen.mark()
        await pilot.press("escape", "right", "enter")
        opened = await seen.wait(pilot, ResultsTable.CellOpened, since=since, what="the JSON")
        assert opened.column == "doc" and isinstance(app.screen, TextViewScreen)
        shown_text = app.screen.query_one("#textview-text").text
        assert json.loads(shown_text) == document
        assert '\n  "optim": {\n    "name": "sgd",' in shown_text  # pretty-printed
        assert "doc (varchar)" in screen_text(app)
        await pilot.press("escape")
        await wait_until(pilot, lambda: not isinstance(app.screen, TextViewScreen))


@pytest.mark.parametrize("key", ["escape", "ctrl+c"])
async def test_a_long_query_can_be_stopped(demo: Path, key: str):
    app, seen = make_app(demo), Seen()
    async with app.run_test(size=(80, 24), message_hook=seen) as pilot:
        pane = await query_tab(pilot)
        await run_query(pilot, ENDLESS_SQL)
        await wait_until(pilot, lambda: pane.stream is not None and pane.running, what="running")
        assert "running…" in await shown(pilot)
        await pilot.press(key)
        failed = await query_failed(pilot, seen)
        assert failed.stopped and not pane.running
        text = screen_text(app)
        assert "■ stopped" in text and "Query failed" not in text
        assert not isinstance(app.screen, TextViewScreen)
        await run_query(pilot, "SELECT 7 AS after_stop")
        page = await first_page(pilot, seen)
        assert page.rows == [(7,)]
        text = screen_text(app)
        assert "after_stop" in text and "✓ 1 row" in text


async def test_the_schema_sidebar_lists_tables_views_and_column_types(demo: Path):
    app, seen = make_app(demo), Seen()
    async with app.run_test(size=(120, 40), message_hook=seen) as pilot:
        await query_tab(pilot)
        assert "logs view" not in await shown(pilot)
        await pilot.press("f9")
        outline = await seen.wait(pilot, OutlineLoaded, what="the tables read")
        assert {"logs", "runs", "iterations"} <= {r.name for r in outline.relations}
        text = await shown(pilot)
        assert "logs view" in text and "runs table" in text and "iterations view" in text
        assert "value double" in text
        assert "run_id varchar" in text
        await pilot.press("f9")
        assert "logs view" not in await shown(pilot)


async def test_table_and_column_names_complete_with_tab(demo: Path):
    app, seen = make_app(demo), Seen()
    async with app.run_test(size=(100, 30), message_hook=seen) as pilot:
        await query_tab(pilot)
        await seen.wait(pilot, OutlineLoaded, what="the names")
        editor = app.query_one("#sql")
        editor.load_text("")
        editor.focus()
        await pilot.press(*"SELECT * FROM iter")
        await wait_until(pilot, lambda: editor.completing, what="the dropdown")
        assert editor.candidates[0] == "iterations"
        text = await shown(pilot)
        assert "iterations" in text  # the dropdown shows it: not yet in the editor
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
        # with the list closed, the arrows move the cursor and tab leaves the editor
        editor.load_text("SELECT 1\nFROM runs")
        editor.move_cursor((1, 4))
        await pilot.press("up")
        assert editor.cursor_location == (0, 4) and not editor.completing
        await pilot.press("tab")
        assert not editor.has_focus


@pytest.mark.parametrize("suffix", ["csv", "parquet", "json"])
async def test_ctrl_e_exports_the_result_where_the_user_asked(demo: Path, suffix: str):
    app, seen = make_app(demo), Seen()
    target = demo.parent / f"out.{suffix}"
    sql = "SELECT run_id, status FROM runs ORDER BY run_id"
    async with app.run_test(size=(100, 30), message_hook=seen) as pilot:
        await query_tab(pilot)
        await run_query(pilot, sql)
        page = await first_page(pilot, seen)
        assert len(page.rows) == 4
        await _export_to(pilot, target)
        done = await seen.wait(pilot, (QueryExported, QueryFailed), what="written")
        assert isinstance(done, QueryExported), done
        assert done.rows == 4 and done.path == str(target)
        assert "wrote 4 rows to" in screen_text(app)
    reader = {"csv": "read_csv", "parquet": "read_parquet", "json": "read_json"}[suffix]
    written = duckdb.sql(f"SELECT run_id, status FROM {reader}('{target}') ORDER BY run_id")
    assert written.fetchall() == [tuple(r) for r in Store(demo).query(sql).values.tolist()]


async def test_copy_inside_the_users_sql_is_still_refused(demo: Path):
    app, seen = make_app(demo), Seen()
    sneaky = demo.parent / "sneaky.csv"
    target = demo.parent / "asked.csv"
    async with app.run_test(size=(100, 30), message_hook=seen) as pilot:
        await query_tab(pilot)
        await run_query(pilot, f"COPY runs TO '{sneaky}'")
        failed = await query_failed(pilot, seen)
        assert "read-only" in failed.detail and "read-only" in screen_text(app)
        await pilot.press("escape")
        since = seen.mark()
        await _export_to(pilot, target)
        failed = await query_failed(pilot, seen, since)
        assert "COPY statements are not allowed" in failed.detail
        assert "COPY statements are not allowed" in screen_text(app)
        assert not seen.of(QueryExported)
    assert not sneaky.exists() and not target.exists()


async def test_queries_started_one_after_another_leave_nothing_holding_the_file(demo: Path):
    app, seen = make_app(demo), Seen()
    async with app.run_test(size=(80, 24), message_hook=seen) as pilot:
        pane = await query_tab(pilot)
        for n in range(5):  # each replaces the last before or after its first page
            pane.run_sql(f"SELECT range + {n} AS i FROM range(2500000)")
            await pilot.pause(0.02 * n)
        page = await first_page(pilot, seen)
        assert page.rows[0] == (4,)
        assert app.query_one("#results").raw_rows[0] == (4,)
        assert "rows 1–1,000" in screen_text(app)
        await pilot.press("escape")  # leaves the editor
        pane.run_sql("SELECT 1 AS small")  # the open result is closed, not kept
        page = await first_page(pilot, seen)
        assert page.rows == [(1,)]
        text = screen_text(app)
        assert "✓ 1 row" in text and "small" in text
        # nothing of this process still holds the catalog: another program can write it
        await wait_until(
            pilot, lambda: _writable(demo / ".florwb" / "florwb.duckdb"), what="the file free"
        )


def _writable(path: Path) -> bool:
    import subprocess
    import sys

    probe = f"import duckdb; duckdb.connect({str(path)!r}).close()"
    return subprocess.run([sys.executable, "-c", probe], capture_output=True).returncode == 0
