"""Workbench: opening a project, the version history, run detail.
Each step waits on the message that says it happened (the history or a run's detail
loaded, the pending statements read, a filter answered, a metric's values loaded) and
reads the screen once after it."""

from __future__ import annotations

import re
import sys
import textwrap
from pathlib import Path

import pytest
from conftest_app import (
    RUN_LINE,
    Seen,
    copy_demo,
    loaded,
    make_app,
    run_lines,
    screen_text,
    shown,
    wait_until,
)
from textual.worker import Worker, WorkerState

from florwb.cli_app import open_workbench
from florwb.panes.history import WhereAnswered
from florwb.screens.run_detail import RunDetailScreen
from florwb.ui.format import short_run, short_version
from florwb.ui.messages import MetricChanged, PendingChanged, RunDetailLoaded
from florwb_engine.store import Store


@pytest.fixture
def demo(tmp_path: Path) -> Path:
    return copy_demo(tmp_path)


def _header(text: str) -> str:
    return next(line for line in text.splitlines() if "started" in line and " run " in line)


def _runs(project: Path) -> list[dict]:
    return Store(project).runs()


async def _pending_read(pilot, seen: Seen, name: str) -> str:
    """The app read the working tree's scripts and found `name` pending (PendingChanged);
    the screen once it shows that."""
    await seen.wait(
        pilot,
        PendingChanged,
        lambda m: any(name in p.new for p in m.pending),
        timeout=60,
        what=f"{name} pending",
    )
    return screen_text(pilot.app)


async def _detail(pilot, seen: Seen, since: int) -> str:
    """The run detail screen on top has its run read (RunDetailLoaded): its screen."""
    await seen.wait(pilot, RunDetailLoaded, since=since, what="the run detail")
    assert isinstance(pilot.app.screen, RunDetailScreen)
    return screen_text(pilot.app)


async def test_opens_on_the_demo_with_versions_runs_args_status_and_sparklines(demo: Path):
    runs = _runs(demo)
    app, seen = make_app(demo), Seen()
    async with app.run_test(size=(80, 24), message_hook=seen) as pilot:
        text = await loaded(pilot)
        assert f"{len(runs)} runs · 2 versions" in text
        for version in {r["version"] for r in runs}:
            assert f"version {short_version(version)}" in text
        for run in runs:
            line = next(line for line in run_lines(text) if short_run(run["run_id"]) in line)
            assert "finished" in line
            assert f" {run['args']['lr']} " in line  # lr differs between runs: its column
            # batch_size (32), the same in every run: no column at 80 (a time may hold ":32")
            assert re.search(r"(?<![:\d])32(?!\d)", line) is None
            assert any(ch in line for ch in "▁▂▃▄▅▆▇█")  # the metric sparkline
        assert "acc" in _header(text)  # the chosen metric heads the sparkline column
        # the pending hindsight statement of the demo is announced
        assert "new in train.py: weight_norm" in await _pending_read(pilot, seen, "weight_norm")


async def test_keys_move_the_selection_and_the_summary_follows(demo: Path):
    app = make_app(demo)
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot)
        summarised = []
        for _ in range(6):
            text = await shown(pilot)
            summary = [line for line in text.splitlines() if line.startswith(" run 2")]
            summarised.append(summary[0].split()[1] if summary else None)
            await pilot.press("j")
        run_ids = {r["run_id"] for r in _runs(demo)}
        assert run_ids <= set(summarised)  # j visits every run
        await pilot.press("k", "k")
        await pilot.press("g")
        # the first row is the newest version's header: the summary names it in full
        runs = _runs(demo)
        newest = max(runs, key=lambda r: r["start_time"])["version"]
        text = await shown(pilot)
        assert f" version {newest}" in text  # the newest version's summary
        assert "⏎ log-statement diff" in text
        assert not any(line.startswith(" run 2") for line in text.splitlines())
        await pilot.press("down")
        text = await shown(pilot)
        assert any(line.startswith(" run 2") for line in text.splitlines())


async def test_filter_marks_and_metric(demo: Path):
    runs = _runs(demo)
    app, seen = make_app(demo), Seen()
    async with app.run_test(size=(80, 24), message_hook=seen) as pilot:
        await loaded(pilot)
        await pilot.press("slash", *"lr=0.05")
        answered = await seen.wait(
            pilot, WhereAnswered, lambda m: m.condition == "lr=0.05", what="the filter answered"
        )
        only = next(r for r in runs if r["args"]["lr"] == 0.05)
        assert answered.run_ids == {only["run_id"]}
        text = screen_text(app)
        assert len(run_lines(text)) == 1  # one run left
        assert short_run(only["run_id"]) in text
        await pilot.press("enter")  # keep the filter, back to the list
        await pilot.press("escape")  # clear it
        text = await shown(pilot)
        assert len(run_lines(text)) == len(runs)

        await pilot.press("g", "j", "space")  # mark the first run
        text = await shown(pilot)
        marked = [line for line in run_lines(text) if line.startswith("  *")]
        assert len(marked) == 1
        assert app.marked_runs and short_run(next(iter(app.marked_runs))) in marked[0]

        since = seen.mark()
        await pilot.press("m")  # next metric: loss
        changed = await seen.wait(pilot, MetricChanged, since=since, what="the next metric")
        assert changed.metric == "loss"
        assert "loss" in _header(screen_text(app))


async def test_enter_opens_run_detail_with_args_metrics_checkpoints_replays(demo: Path):
    app, seen = make_app(demo), Seen()
    async with app.run_test(size=(80, 24), message_hook=seen) as pilot:
        await loaded(pilot)
        await pilot.press("g", "j")
        run_id = app.query_one("#history-list").current.run.run_id
        since = seen.mark()
        await pilot.press("enter")
        text = await _detail(pilot, seen, since)
        assert app.screen.detail.run.run_id == run_id
        assert "Metrics" in text and "Args" in text
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
        text = await shown(pilot)
        assert "Replays (0)" in text
        await pilot.press("G")  # where time goes and the console tail end the detail
        text = await shown(pilot)
        assert "Console (" in text
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
    app, seen = make_app(project), Seen()
    async with app.run_test(size=(80, 24), message_hook=seen) as pilot:
        text = await loaded(pilot)
        assert "hint: waited on the data iterator" in text
        since = seen.mark()
        await pilot.press("enter")
        text = await _detail(pilot, seen, since)
        assert "Data loading" in text or "Metrics" in text
        for _ in range(10):
            await pilot.press("j")
        text = await shown(pilot)
        assert "try more DataLoader" in text


async def test_mouse_selects_rows_opens_detail_and_switches_tabs(demo: Path):
    app, seen = make_app(demo), Seen()
    async with app.run_test(size=(80, 24), message_hook=seen) as pilot:
        await loaded(pilot)
        # the banner about the pending statement moves the list down one line: wait for it
        text = await _pending_read(pilot, seen, "weight_norm")
        assert "r: replay past runs" in text
        lines = text.splitlines()
        row = next(i for i, line in enumerate(lines) if RUN_LINE.match(line))
        run_short = lines[row].split()[3]
        top = app.query_one("#history-list").region.y
        await pilot.click("#history-list", offset=(10, row - top))
        text = await shown(pilot)
        assert any(line.startswith(" run ") and run_short in line for line in text.splitlines())
        since = seen.mark()
        await pilot.double_click("#history-list", offset=(10, row - top))
        text = await _detail(pilot, seen, since)
        assert "Metrics" in text and run_short in app.screen.detail.run.run_id
        await pilot.press("escape")
        await loaded(pilot)
        await pilot.click("Tab#--content-tab-query")
        await wait_until(pilot, lambda: bool(app.query("#sql")), what="the query tab")
        assert app.query_one("#tabs").active == "query"
        assert "SQL" in await shown(pilot)


async def test_open_workbench_refuses_a_folder_without_runs(tmp_path: Path, capsys):
    assert open_workbench(tmp_path) == 1
    assert "no recorded runs" in capsys.readouterr().err


async def test_a_failing_worker_shows_one_error_and_the_app_goes_on(demo: Path):
    """Workers have no error handling of their own: the app's one Worker.StateChanged
    handler shows the failure in the error modal, and esc returns to a working app."""
    from florwb.screens.error import ErrorScreen

    app, seen = make_app(demo), Seen()
    async with app.run_test(size=(80, 24), message_hook=seen) as pilot:
        await loaded(pilot)
        app.push_screen(RunDetailScreen(app.store, "no-such-run"))
        failed = await seen.wait(
            pilot,
            Worker.StateChanged,
            lambda m: m.state is WorkerState.ERROR,
            what="the worker's failure",
        )
        assert failed.worker.description == "loading the run detail"
        await wait_until(pilot, lambda: isinstance(app.screen, ErrorScreen), what="error modal")
        text = await shown(pilot)
        assert "Error while loading the run detail" in text
        assert "unknown run 'no-such-run'" in text
        assert isinstance(app.screen, ErrorScreen)
        await pilot.press("escape", "escape")  # the error, then the empty detail screen
        text = await loaded(pilot)
        assert len(run_lines(text)) == len(_runs(demo))
