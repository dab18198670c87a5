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
    loaded,
    make_app,
    pending_known,
    plan_ready,
    replays_read,
    wait_for,
    wait_until,
    write_held_run,
)

from florwb.ui.format import short_run
from florwb.ui.messages import LiveUpdated, ReplayProgressed
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
        await pilot.press("r")
        text = await plan_ready(pilot)
        assert "Replay plan: weight_norm" in text
        assert short_run(run_id) in text and "ready" in text
        await pilot.press("enter")  # confirm
        text = await wait_for(
            pilot, lambda t: "c cancels" in t or "r plans the next" in t, what="replay tab"
        )
        assert short_run(run_id) in text
        assert "ETA" in text or "finished" in text
        # the workbench answers while the replay runs
        await pilot.press("4")
        app.query_one("#query-pane").run_sql("SELECT 41 + 1 AS answer")
        await wait_for(pilot, lambda t: "42" in t, what="query during replay")
        assert app.replay_running or _replays(demo)["status"].iloc[-1] == "finished"
        await pilot.press("escape", "3")  # leave the editor, then the Replay tab
        await wait_until(pilot, lambda: not app.replay_running, timeout=120)
        await replays_read(pilot, seen, 1)
        text = await wait_for(pilot, lambda t: "rows" in t and "finished" in t)
        replays = _replays(demo)
        assert list(replays["status"]) == ["finished"]
        replay_id = replays["replay_id"].iloc[0]
        assert replay_id in text  # listed under past replays
        assert _replayed_rows(demo, replay_id) > 0
        await pilot.press("1")
        text = await wait_for(pilot, lambda t: "replayed" in t, what="replayed status")
        line = next(line for line in text.splitlines() if short_run(run_id) in line)
        assert "replayed" in line and "↻" in line
        # the log-statement diff now says the statement was replayed for that version
        await pilot.press("2")
        text = await wait_for(pilot, lambda t: "↻ replayed" in _row(t, "weight_norm"))
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
        await pilot.press("r")
        await plan_ready(pilot)
        await pilot.press("enter")
        await wait_until(
            pilot,
            lambda: any(m.progress.state == "running" for m in seen.of(ReplayProgressed)),
            what="a segment running",
        )
        await wait_for(pilot, lambda t: "● running" in t, what="replay running")
        await pilot.press("c")
        await wait_until(pilot, lambda: not app.replay_running, timeout=60)
        await replays_read(pilot, seen, 1)
        await wait_for(
            pilot, lambda t: "cancelled" in t and "Past replays: 1" in t, what="cancelled"
        )
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
            await wait_until(
                pilot,
                lambda: any(run.total == 8 for m in seen.of(LiveUpdated) for run in m.live),
                timeout=60,
                what="the run seen live",
            )
            text = await wait_for(
                pilot, lambda t: "epoch" in t and "/8" in t, timeout=60, what="live run"
            )
            line = next(line for line in text.splitlines() if "/8" in line)
            assert "●" in line  # running
            await pilot.press("3")
            text = await wait_for(pilot, lambda t: "Recording now: 1" in t, what="live bar")
            assert "/8" in text
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
        text = await wait_for(
            pilot, lambda t: "5 runs" in t and "/8" not in t, timeout=30, what="finished run"
        )
        assert Store(demo).query("SELECT status FROM runs WHERE script = 'slow.py'")[
            "status"
        ].tolist() == ["finished"]
