"""Workbench: opening a project, the version history, run detail (issue 4, points 1-2)."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
from conftest_app import (
    RUN_LINE,
    copy_demo,
    loaded,
    make_app,
    run_lines,
    screen_text,
    wait_for,
)

from florwb.cli_app import open_workbench
from florwb.ui.format import short_run, short_version
from florwb_engine.store import Store


@pytest.fixture
def demo(tmp_path: Path) -> Path:
    return copy_demo(tmp_path)


def _header(text: str) -> str:
    return next(line for line in text.splitlines() if "started" in line and " run " in line)


def _runs(project: Path) -> list[dict]:
    return Store(project).runs()


async def test_opens_on_the_demo_with_versions_runs_args_status_and_sparklines(demo: Path):
    runs = _runs(demo)
    app = make_app(demo)
    async with app.run_test(size=(80, 24)) as pilot:
        text = await loaded(pilot)
        assert f"{len(runs)} runs · 2 versions" in text
        for version in {r["version"] for r in runs}:
            assert f"version {short_version(version)}" in text
        for run in runs:
            line = next(line for line in run_lines(text) if short_run(run["run_id"]) in line)
            assert "finished" in line
            assert f" {run['args']['lr']} " in line  # lr differs between runs: its column
            assert "32" not in line  # batch_size, the same in every run: not at 80 columns
            assert any(ch in line for ch in "▁▂▃▄▅▆▇█")  # the metric sparkline
        assert "acc" in _header(text)  # the chosen metric heads the sparkline column
        # the pending hindsight statement of the demo is announced
        await wait_for(pilot, lambda t: "new in train.py: weight_norm" in t, what="banner")


async def test_keys_move_the_selection_and_the_summary_follows(demo: Path):
    app = make_app(demo)
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot)
        shown = []
        for _ in range(6):
            text = screen_text(app)
            summary = [line for line in text.splitlines() if line.startswith(" run 2")]
            shown.append(summary[0].split()[1] if summary else None)
            await pilot.press("j")
        run_ids = {r["run_id"] for r in _runs(demo)}
        assert run_ids <= set(shown)  # j visits every run
        await pilot.press("k", "k")
        await pilot.press("g")
        # the first row is the newest version's header: the summary names it in full
        runs = _runs(demo)
        newest = max(runs, key=lambda r: r["start_time"])["version"]
        text = await wait_for(
            pilot, lambda t: f" version {newest}" in t, what="the newest version's summary"
        )
        assert "⏎ log-statement diff" in text
        assert not any(line.startswith(" run 2") for line in text.splitlines())
        await pilot.press("down")
        text = screen_text(app)
        assert any(line.startswith(" run 2") for line in text.splitlines())


async def test_filter_marks_and_metric(demo: Path):
    runs = _runs(demo)
    app = make_app(demo)
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot)
        await pilot.press("slash", *"lr=0.05")
        text = await wait_for(pilot, lambda t: len(run_lines(t)) == 1, what="one run left")
        only = next(r for r in runs if r["args"]["lr"] == 0.05)
        assert short_run(only["run_id"]) in text
        await pilot.press("enter")  # keep the filter, back to the list
        await pilot.press("escape")  # clear it
        text = await wait_for(pilot, lambda t: len(run_lines(t)) == len(runs))

        await pilot.press("g", "j", "space")  # mark the first run
        text = screen_text(app)
        marked = [line for line in run_lines(text) if line.startswith("  *")]
        assert len(marked) == 1
        assert app.marked_runs and short_run(next(iter(app.marked_runs))) in marked[0]

        await pilot.press("m")  # next metric: loss
        await wait_for(pilot, lambda t: "loss" in _header(t), what="metric loss")


async def test_enter_opens_run_detail_with_args_metrics_checkpoints_replays(demo: Path):
    app = make_app(demo)
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot)
        await pilot.press("g", "j")
        run_id = app.query_one("#history-list").current.run.run_id
        await pilot.press("enter")
        text = await wait_for(pilot, lambda t: "Metrics" in t and "Args" in t, what="detail")
        assert run_id in text
        assert "lr" in text and "momentum" in text
        assert "acc" in text and "loss" in text
        assert any(ch in text for ch in "▁▂▃▄▅▆▇█")
        checkpoints = Store(demo).query(
            f"SELECT count(*) AS n FROM checkpoints WHERE run_id = '{run_id}'"
        )["n"][0]
        assert f"Checkpoints ({checkpoints})" in text
        for _ in range(12):
            await pilot.press("j")
        text = screen_text(app)
        assert "Replays (0)" in text
        await pilot.press("G")  # where time goes and the console tail end the detail
        text = await wait_for(pilot, lambda t: "Console (" in t, what="the end of the detail")
        assert "waited on the data iterator" in text
        await pilot.press("escape")
        await loaded(pilot)


async def test_data_wait_hint_for_a_stalled_input_pipeline(tmp_path: Path):
    """A run whose iterator sleeps longer than its body gets the >20% hint."""
    project = tmp_path / "stall"
    project.mkdir()
    script = project / "train.py"
    script.write_text(
        textwrap.dedent(
            """
            import time
            import florwb as flor

            def slow():
                for i in range(6):
                    time.sleep(0.03)
                    yield i

            for epoch in flor.loop("epoch", slow()):
                flor.log("x", epoch * 1.0)
            flor.commit()
            """
        )
    )
    import subprocess

    subprocess.run([sys.executable, str(script)], cwd=project, check=True, timeout=120)
    app = make_app(project)
    async with app.run_test(size=(80, 24)) as pilot:
        text = await loaded(pilot)
        assert "hint: waited on the data iterator" in text
        await pilot.press("enter")
        text = await wait_for(pilot, lambda t: "Data loading" in t or "Metrics" in t)
        for _ in range(10):
            await pilot.press("j")
        text = screen_text(app)
        assert "try more DataLoader" in text


async def test_mouse_selects_rows_opens_detail_and_switches_tabs(demo: Path):
    app = make_app(demo)
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot)
        # the banner about the pending statement moves the list down one line: wait for it
        text = await wait_for(pilot, lambda t: "r: replay past runs" in t, what="banner")
        lines = text.splitlines()
        row = next(i for i, line in enumerate(lines) if RUN_LINE.match(line))
        run_short = lines[row].split()[3]
        top = app.query_one("#history-list").region.y
        await pilot.click("#history-list", offset=(10, row - top))
        text = screen_text(app)
        assert any(line.startswith(" run ") and run_short in line for line in text.splitlines())
        await pilot.double_click("#history-list", offset=(10, row - top))
        text = await wait_for(pilot, lambda t: "Metrics" in t, what="run detail")
        await pilot.press("escape")
        await loaded(pilot)
        await pilot.click("Tab#--content-tab-query")
        await wait_for(pilot, lambda t: "SQL" in t, what="query tab")
        assert app.query_one("#tabs").active == "query"


async def test_open_workbench_refuses_a_folder_without_runs(tmp_path: Path, capsys):
    assert open_workbench(tmp_path) == 1
    assert "no recorded runs" in capsys.readouterr().err


async def test_a_failing_worker_shows_one_error_and_the_app_goes_on(demo: Path):
    """Workers have no error handling of their own: the app's one Worker.StateChanged
    handler shows the failure in the error modal, and esc returns to a working app."""
    from florwb.screens.error import ErrorScreen
    from florwb.screens.run_detail import RunDetailScreen

    app = make_app(demo)
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot)
        app.push_screen(RunDetailScreen(app.store, "no-such-run"))
        text = await wait_for(
            pilot, lambda t: "Error while loading the run detail" in t, what="error modal"
        )
        assert "unknown run 'no-such-run'" in text
        assert isinstance(app.screen, ErrorScreen)
        await pilot.press("escape", "escape")  # the error, then the empty detail screen
        text = await loaded(pilot)
        assert len(run_lines(text)) == len(_runs(demo))
