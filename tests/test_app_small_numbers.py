"""Small things a user reads and trusts: a logged setting (`lr`) is not a metric to
minimise in a comparison, a recording run's status and time read whole, a killed run's
time is a bound, a name with six values draws six bars, the Query tab's first query names
a metric the project has, an export writes the rows shown, and the help can be searched.

The real app through Pilot (and the engine) on real recorded projects."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from conftest import recorded_project, run_py, write
from conftest_app import Seen, first_page, loaded, make_app, run_lines, shown, wait_until

from florwb.screens.export_result import ExportScreen
from florwb.screens.help import HelpScreen
from florwb.screens.run_compare import ComparisonLoaded, RunCompareScreen
from florwb.ui.messages import LiveUpdated, QueryExported
from florwb_engine.run_compare import compare_runs
from florwb_engine.store import Store
from florwb_engine.store.history_values import load_history_values

TRAIN = """
    import florwb as flor

    lr = flor.arg("lr", 0.1)
    loss = 1.0
    for epoch in flor.loop("epoch", range(6)):
        loss *= 1 - lr
        flor.log("lr", lr * 0.5 ** epoch)
        flor.log("loss", loss)
    for sample in flor.loop("sample", range(300)):
        flor.log("score", sample * lr)
"""

# Records 60 epochs (20 ms each) and waits in the 26th until `release` exists; `die` makes it kill
# itself there instead (a run that leaves no end).
HELD = """
    import os, pathlib, signal, sys, time
    import florwb as flor

    release = pathlib.Path("release")
    for epoch in flor.loop("epoch", range(60)):
        flor.log("loss", 1.0 / (epoch + 1))
        time.sleep(0.02)
        if epoch == 25:
            if "die" in sys.argv:
                time.sleep(0.3)  # the journal's flusher writes what came before
                os.kill(os.getpid(), signal.SIGKILL)
            deadline = time.monotonic() + 120
            while not release.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
"""


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> Path:
    root = recorded_project(tmp_path_factory.mktemp("numbers") / "project", TRAIN)
    run_py(root, "train.py", "--kwargs", "lr=0.05")
    return root


@pytest.fixture
def project(recorded: Path, tmp_path: Path) -> Path:
    target = tmp_path / "project"
    shutil.copytree(recorded, target, symlinks=True)
    return target


def test_a_logged_setting_has_no_best_in_a_comparison(recorded: Path) -> None:
    first, second = (r["run_id"] for r in Store(recorded).runs())
    comparison = compare_runs(recorded, Store(recorded), first, second)
    pairs = {p.name: p for p in comparison.metrics}
    assert pairs["lr"].higher_is_better is None and pairs["lr"].best == (None, None)
    assert pairs["loss"].higher_is_better is False
    assert pairs["loss"].best == (pytest.approx(0.9**6), pytest.approx(0.95**6))


async def test_the_comparison_screen_shows_lr_as_a_setting(recorded: Path) -> None:
    first, second = (r["run_id"] for r in Store(recorded).runs())
    app = make_app(recorded, poll_s=0)
    seen = Seen()
    async with app.run_test(size=(120, 36), message_hook=seen) as pilot:
        await loaded(pilot)
        # pushed by the app's own task: the screen's messages then reach the hook
        app.call_later(app.push_screen, RunCompareScreen(recorded, app.store, first, second))
        await seen.wait(pilot, ComparisonLoaded)
        text = await shown(pilot)
        (line,) = [row for row in text.splitlines() if "lr setting" in row]
        assert line.split()[-2:] == ["-", "-"]  # no best A, best B
        assert "loss ↓" in text


def test_six_values_of_a_name_are_six_sparkline_points(recorded: Path) -> None:
    """`lr` and `loss` are six values each, logged before 300 of `score`: by place in the
    whole run they would share two or three of the 24 buckets."""
    values = load_history_values(Store(recorded), "loss")
    for points in values.series.values():
        assert len(points) == 6
    lr = load_history_values(Store(recorded), "lr").series
    assert sorted(lr.values())[0] == pytest.approx([0.05 * 0.5**e for e in range(6)])


async def test_the_first_query_names_a_metric_the_project_has(recorded: Path) -> None:
    app = make_app(recorded, poll_s=0)
    seen = Seen()
    async with app.run_test(size=(100, 30), message_hook=seen) as pilot:
        await loaded(pilot)
        await pilot.press("4")
        await wait_until(pilot, lambda: app.query("#sql"), what="the query tab")
        editor = app.query_one("#sql")
        assert "'loss'" in editor.text and "'acc'" not in editor.text
        editor.focus()
        await pilot.press("ctrl+j")
        assert len((await first_page(pilot, seen)).rows) == 2
        assert "✓ 2 rows" in await shown(pilot)


async def test_an_export_writes_the_rows_shown_although_a_run_landed_since(
    project: Path,
) -> None:
    target = project.parent / "out.csv"
    sql = "SELECT run_id, name, value FROM logs WHERE name = 'loss' ORDER BY run_id, seq"
    app = make_app(project, poll_s=0)
    seen = Seen()
    async with app.run_test(size=(100, 30), message_hook=seen) as pilot:
        await loaded(pilot)
        await pilot.press("4")
        await wait_until(pilot, lambda: app.query("#sql"), what="the query tab")
        app.query_one("#query-pane").run_sql(sql)
        assert len((await first_page(pilot, seen)).rows) == 12
        assert "✓ 12 rows" in await shown(pilot)
        run_py(project, "train.py", "--kwargs", "lr=0.2")  # six more loss values
        await pilot.press("ctrl+e")
        await wait_until(pilot, lambda: isinstance(app.screen, ExportScreen), what="the dialog")
        assert "Export the result" in await shown(pilot)
        app.screen.query_one("#export-path").value = str(target)
        await pilot.press("enter")
        exported = await seen.wait(pilot, QueryExported)
        assert exported.rows == 12 and exported.path == str(target)
        assert "wrote 12 rows to" in await shown(pilot)
    written = duckdb.sql(f"SELECT count(*), count(DISTINCT run_id) FROM read_csv('{target}')")
    assert written.fetchall() == [(12, 2)]
    assert len(Store(project).query(sql)) == 18  # the catalog has the new run's too


async def test_help_finds_keys_by_words(recorded: Path) -> None:
    app = make_app(recorded, poll_s=0)
    async with app.run_test(size=(100, 40)) as pilot:
        await loaded(pilot)
        await pilot.press("question_mark")
        await wait_until(pilot, lambda: isinstance(app.screen, HelpScreen), what="the help")
        await pilot.press("slash")
        for char in "export":
            await pilot.press(char)
        text = await shown(pilot)  # the help filters as each key is typed
        assert "Export the result" in text
        assert "Next row" not in text and "Scroll down" not in text
        for char in " zzz":
            await pilot.press(char)
        assert "no key matches 'export zzz'" in await shown(pilot)
        await pilot.press("escape")  # clears the search
        assert "Next row" in await shown(pilot)
        await pilot.press("escape")
        await wait_until(pilot, lambda: not isinstance(app.screen, HelpScreen), what="closed")


async def test_a_recording_run_reads_whole_at_200_columns_and_a_killed_one_as_a_bound(
    project: Path,
) -> None:
    write(project / "held.py", HELD)
    subprocess.run([sys.executable, "held.py", "die"], cwd=project, timeout=120, check=False)
    holder = subprocess.Popen([sys.executable, "held.py"], cwd=project)
    try:
        app = make_app(project)
        seen = Seen()
        async with app.run_test(size=(200, 60), message_hook=seen) as pilot:
            await seen.wait(
                pilot,
                LiveUpdated,
                lambda m: any((r.done, r.total, r.loop) == (25, 60, "epoch") for r in m.live),
                timeout=60,
                what="the held run at epoch 25",
            )
            text = await shown(pilot)
            lines = run_lines(text)
            (live,) = [line for line in lines if "25/60 epoch" in line]
            assert live.split("25/60 epoch")[1].split()[0].endswith("s…")  # time so far
            (killed,) = [line for line in lines if " killed " in line]
            took = killed.split(" killed ")[1].split()[0]
            # at least its 25 recorded epochs of 20 ms each
            assert took.startswith("≥") and float(took[1:-1]) >= 0.5
    finally:
        (project / "release").touch()
        holder.wait(timeout=120)
    assert holder.returncode == 0
