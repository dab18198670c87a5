"""Workbench: replay with plan, live progress and cancel; a run recording elsewhere shows
live progress."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest_app import (
    Seen,
    copy_demo,
    first_page,
    loaded,
    make_app,
    pending_known,
    plan_shown,
    rows_added,
    shown,
    wait_until,
    write_held_run,
)

from florwb.panes.replay import ReplayPane
from florwb.ui.format import short_run
from florwb.ui.history_rows import run_status
from florwb.ui.messages import (
    HistoryLoaded,
    LiveUpdated,
    ReplayEnded,
    ReplayProgressed,
    ReplaysLoaded,
    StatementTableLoaded,
)
from florwb_engine import project as projects
from florwb_engine.store import Store


@pytest.fixture
def demo(tmp_path: Path) -> Path:
    return copy_demo(tmp_path)


def _row(text: str, name: str) -> str:
    """The log-statement matrix row of `name` ('' while the matrix is not shown)."""
    return next((line for line in text.splitlines() if line.strip().startswith(name)), "")


def _replays(project: Path):
    return Store(project).query("SELECT replay_id, status FROM replays ORDER BY started")


def _replayed_rows(project: Path, replay_id: str) -> int:
    frame = Store(project).query(
        f"SELECT count(*) AS n FROM logs WHERE source = '{replay_id}' AND name = 'weight_norm'"
    )
    return int(frame["n"][0])


async def test_replay_plan_confirm_live_progress_and_results_in_the_store(demo: Path):
    app, seen = make_app(demo), Seen()
    async with app.run_test(size=(80, 24), message_hook=seen) as pilot:
        await loaded(pilot)
        await pending_known(pilot, "weight_norm")
        await pilot.press("g", "j", "space")  # mark one run: replay only that one
        (run_id,) = app.marked_runs
        since = seen.mark()
        await pilot.press("r")
        text = await plan_shown(pilot, seen, since)
        assert "Replay plan: weight_norm" in text
        assert short_run(run_id) in text and "ready" in text
        await pilot.press("enter")  # confirm
        pane = app.query_one("#replay-pane", ReplayPane)
        # the Replay tab is handed the plan as the replay starts (it may end at once)
        await wait_until(pilot, lambda: pane.plan is not None, what="the replay tab")
        text = await shown(pilot)
        assert "c cancels" in text or "r plans the next" in text
        assert short_run(run_id) in text
        assert "ETA" in text or "finished" in text
        # the workbench answers while the replay runs
        await pilot.press("4")
        app.query_one("#query-pane").run_sql("SELECT 41 + 1 AS answer")
        page = await first_page(pilot, seen)
        assert page.rows == [(42,)]
        await rows_added(pilot)
        assert "42" in await shown(pilot)  # query during replay
        assert app.replay_running or _replays(demo)["status"].iloc[-1] == "finished"
        await pilot.press("escape", "3")  # leave the editor, then the Replay tab
        end = await seen.wait(pilot, ReplayEnded, timeout=120, what="the replay's end")
        assert end.result is not None and end.result.status == "finished"
        # read back after it ended (a read while it ran would list it running)
        await seen.wait(
            pilot,
            ReplaysLoaded,
            lambda m: [r.status for r in m.replays] == ["finished"],
            since=seen.after(end),
            timeout=60,
            what="the finished replay read back",
        )
        text = await shown(pilot)
        assert "rows" in text and "finished" in text
        replays = _replays(demo)
        assert list(replays["status"]) == ["finished"]
        replay_id = replays["replay_id"].iloc[0]
        assert replay_id in text  # listed under past replays
        assert _replayed_rows(demo, replay_id) > 0
        await pilot.press("1")
        await seen.wait(
            pilot,
            HistoryLoaded,
            lambda m: any(
                r.run_id == run_id and run_status(r) == "replayed" for r in m.history.runs
            ),
            since=seen.after(end),
            what="the run read back replayed",
        )
        text = await shown(pilot)
        line = next(line for line in text.splitlines() if short_run(run_id) in line)
        assert "replayed" in line and "↻" in line
        # the log-statement diff now says the statement was replayed for that version
        await pilot.press("2")
        await seen.wait(
            pilot,
            StatementTableLoaded,
            lambda m: any(
                cell.status == "replayed"
                for (name, _version), cell in m.table.cells.items()
                if name == "weight_norm"
            ),
            since=seen.after(end),
            what="the matrix rebuilt with the replay",
        )
        text = await shown(pilot)
        assert "↻ replayed" in _row(text, "weight_norm")
        assert "→ L" in _row(text, "weight_norm")  # the other version: still propagatable


async def test_cancel_stops_the_workers_and_leaves_nothing_half_written(demo: Path):
    # The statement holds each replay worker for a minute, so the replay cannot finish
    # before the cancel reaches it however fast the machine is.
    script = demo / "train.py"
    held = 'flor.log("weight_norm", __import__("time").sleep(60) or '
    script.write_text(script.read_text().replace('flor.log("weight_norm", ', held))
    app, seen = make_app(demo), Seen()
    async with app.run_test(size=(80, 24), message_hook=seen) as pilot:
        await loaded(pilot)
        await pending_known(pilot, "weight_norm")
        since = seen.mark()
        await pilot.press("r")
        await plan_shown(pilot, seen, since)
        await pilot.press("enter")
        await seen.wait(
            pilot, ReplayProgressed, lambda m: m.progress.state == "running", what="running"
        )
        assert "● running" in await shown(pilot)
        await pilot.press("c")
        end = await seen.wait(pilot, ReplayEnded, timeout=60, what="the replay's end")
        assert end.result is not None and end.result.status == "cancelled"
        await seen.wait(
            pilot,
            ReplaysLoaded,
            lambda m: [r.status for r in m.replays] == ["cancelled"],
            since=seen.after(end),
            timeout=60,
            what="the cancelled replay read back",
        )
        text = await shown(pilot)
        assert "cancelled" in text and "Past replays: 1" in text
        replays = _replays(demo)
        assert list(replays["status"]) == ["cancelled"]
        replay_id = replays["replay_id"].iloc[0]
        # a run whose segments had all ended before the cancel is kept, whole; the others
        # leave nothing
        store = Store(demo)
        kept = store.query(
            f"SELECT run_id, count(*) AS n FROM logs WHERE source = '{replay_id}' "
            "AND name = 'weight_norm' GROUP BY run_id"
        )
        epochs = store.query(
            "SELECT run_id, count(*) AS n FROM logs WHERE source = 'record' AND name = 'acc' "
            "GROUP BY run_id"
        )
        whole = dict(zip(epochs["run_id"], epochs["n"], strict=True))
        assert all(n == whole[r] for r, n in zip(kept["run_id"], kept["n"], strict=True))
        assert len(kept) < 4
        if kept.empty:
            leftovers = list(projects.journal_dir(demo).glob(f"replay-{replay_id}-*"))
            assert leftovers == []


async def test_a_run_recording_in_another_terminal_shows_live_progress(demo: Path):
    """The run holds at epoch 3 of 8 until the test has seen it live (a file releases it),
    so what is checked while it records cannot race its end."""
    write_held_run(demo, "epoch * 0.5")
    app, seen = make_app(demo), Seen()
    async with app.run_test(size=(80, 24), message_hook=seen) as pilot:
        await loaded(pilot)
        proc = subprocess.Popen([sys.executable, "slow.py"], cwd=demo)
        try:
            await seen.wait(
                pilot,
                LiveUpdated,
                lambda m: any(run.total == 8 for run in m.live),
                timeout=60,
                what="the run seen live",
            )
            await wait_until(
                pilot,
                lambda: any(r.status == "running" for r in app.history.runs),
                timeout=60,
                what="the run listed running",
            )
            text = await shown(pilot)
            assert "epoch" in text
            line = next(line for line in text.splitlines() if "/8" in line)
            assert "●" in line  # running
            await pilot.press("3")
            text = await shown(pilot)
            assert "Recording now: 1" in text and "/8" in text
        finally:
            (demo / "release").touch()
            proc.wait(timeout=60)
        await pilot.press("1")
        await wait_until(
            pilot,
            lambda: (
                app.history is not None
                and len(app.history.runs) == 5
                and seen.of(LiveUpdated)[-1].live == []
            ),
            timeout=30,
            what="the run ended",
        )
        text = await shown(pilot)
        assert "5 runs" in text and "/8" not in text  # the run ended
        assert Store(demo).query("SELECT status FROM runs WHERE script = 'slow.py'")[
            "status"
        ].tolist() == ["finished"]
