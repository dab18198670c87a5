"""Workbench: the runs of a pipeline (several scripts of one project) show which script each
ran, in a `script` column that `s` sorts by; a project of one script shows no such column."""

from __future__ import annotations

from pathlib import Path

from conftest_app import Seen, copy_demo, loaded, make_app, shown

from florwb.ui.format import short_run
from florwb.ui.run_columns import Columns
from florwb.widgets.history_list import HistoryList
from florwb_engine.store import Store


def test_one_script_has_no_script_column_even_when_columns_drop() -> None:
    for width in (200, 60):
        fitted = Columns.fit(width, [("lr", 5)], "acc")
        assert "script" not in {c.key for c in fitted.columns}
        assert "script" not in fitted.hidden
    wide = Columns.fit(200, [("lr", 5)], "acc", script=len("featurize.py"))
    (script,) = [c for c in wide.columns if c.key == "script"]
    assert script.width == len("featurize.py")


async def test_runs_of_several_scripts_show_and_sort_by_script(tmp_path: Path):
    demo = copy_demo(tmp_path)
    store = Store(demo)
    runs = store.run_rows()
    infer = runs[1].run_id
    with store.session() as con:  # the second run came from the pipeline's infer.py
        con.execute("UPDATE runs SET script = 'infer.py' WHERE run_id = ?", [infer])
    app, seen = make_app(demo), Seen()
    async with app.run_test(size=(200, 50), message_hook=seen) as pilot:
        text = await loaded(pilot)
        header = next(line for line in text.splitlines() if "started" in line and "run" in line)
        assert "script" in header
        assert "infer.py" in next(row for row in text.splitlines() if short_run(infer) in row)
        listing = app.query_one("#history-list")
        while listing.sort[0] != "script":
            since = seen.mark()
            await pilot.press("s")
            await seen.wait(pilot, HistoryList.SortChanged, since=since, what="the next sort")
        descending = listing.sort[1]
        text = await shown(pilot)
        assert "script▼" in text or "script▲" in text
        version = [r for r in runs if r.version == runs[1].version]
        order = sorted(version, key=lambda r: text.index(short_run(r.run_id)))
        # infer.py sorts before train.py
        assert (order[-1] if descending else order[0]).run_id == infer
