"""Replay from the screen says what will happen and what did: the plan screen's estimate
is the planner's, one replay has one duration on every screen (its row's start to end),
a launch of several processes counts their start, a run still recording is warned of, ⏎
pressed while planning starts the replay once planned, the Statements tab keeps its
cursor when the table is rebuilt, and `florwb replay` into a pipe prints a bounded log.

The real app through Pilot on the demo project (and the CLI in a subprocess)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from conftest import florwb, recorded_project, run_py
from conftest_app import (
    Seen,
    copy_demo,
    loaded,
    make_app,
    pending_known,
    shown,
    wait_until,
    write_held_run,
)

from florwb.panes.replay import ReplayPane
from florwb.screens.replay_detail import ReplayDetailScreen
from florwb.screens.replay_plan import ReplayPlanScreen
from florwb.ui import format as fmt
from florwb.ui.messages import StatementTableLoaded
from florwb_engine import replay as replay_package
from florwb_engine.contract.replay_spec import OUTER
from florwb_engine.record.ranks import TORCHRUN
from florwb_engine.replay import plan_replay
from florwb_engine.replay.cost import TORCH_IMPORT_S, launch_start_s, run_work
from florwb_engine.replay.facts import RunFacts
from florwb_engine.store import Store
from florwb_engine.store.queries import load_replays


@pytest.fixture
def demo(tmp_path: Path) -> Path:
    return copy_demo(tmp_path)


async def test_enter_while_planning_starts_once_planned_and_one_duration_everywhere(
    demo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # planning waits for the test's go: ⏎ is surely pressed while "Planning..." shows
    go = threading.Event()
    plan_now = replay_package.plan_replay

    def plan_on_go(*args: Any, **kwargs: Any) -> Any:
        go.wait(120)
        return plan_now(*args, **kwargs)

    monkeypatch.setattr(replay_package, "plan_replay", plan_on_go)
    app = make_app(demo)
    async with app.run_test(size=(100, 30)) as pilot:
        await loaded(pilot)
        await pending_known(pilot, "weight_norm")
        await pilot.press("g", "j", "space")
        await pilot.press("r")
        await wait_until(pilot, lambda: isinstance(app.screen, ReplayPlanScreen), what="plan")
        screen = app.screen
        assert screen.planned is None  # still planning: the key is kept, not dropped
        await pilot.press("enter")
        go.set()
        await wait_until(pilot, lambda: screen.planned is not None, timeout=60, what="planned")
        # the estimate shown (the plan less the runs left out: none) is the planner's
        await wait_until(pilot, lambda: screen.plan is not None, what="the plan shown")
        assert screen.plan.estimate_s == pytest.approx(screen.planned.estimate_s)
        await wait_until(pilot, lambda: app.screen is not screen, timeout=30, what="started")
        await wait_until(pilot, lambda: not app.replay_running, timeout=180, what="replayed")
        pane = app.query_one("#replay-pane", ReplayPane)
        # the pane draws its summary when it is handed the result
        await wait_until(pilot, lambda: pane.result is not None, what="the result shown")
        text = await shown(pilot)
        (replay,) = load_replays(app.store)
        took = fmt.duration((replay.ended - replay.started).total_seconds())
        assert f"finished in {took}" in text  # the Replay tab says the row's duration
        app.push_screen(ReplayDetailScreen(replay))  # composed from the row: nothing to load
        await wait_until(pilot, lambda: isinstance(app.screen, ReplayDetailScreen), what="detail")
        text = await shown(pilot)
        assert f"took {took}" in text


async def test_the_statements_tab_keeps_its_cursor_when_the_table_is_rebuilt(
    demo: Path,
) -> None:
    app, seen = make_app(demo), Seen()
    async with app.run_test(size=(100, 30), message_hook=seen) as pilot:
        await loaded(pilot)
        await pilot.press("2")
        tables = seen.of  # the pane handles a StatementTableLoaded as it is dispatched
        await seen.wait(pilot, StatementTableLoaded, what="the table built")
        text = await shown(pilot)
        assert "weight_norm" in text and "→" in text  # the matrix and its diff
        matrix = app.query_one("#matrix")
        await pilot.press("j", "j", "h")
        before = matrix.cursor_coordinate
        assert before.row == 2
        await pilot.press("1")
        run_py(demo, "train.py")  # a new run: the history and the statement table change
        await wait_until(pilot, lambda: len(app.history.runs) == 5, timeout=60, what="new run")
        built = len(tables(StatementTableLoaded))
        await pilot.press("2")
        await wait_until(
            pilot,
            lambda: len(tables(StatementTableLoaded)) > built,
            what="the table rebuilt",
        )
        first, last = tables(StatementTableLoaded)[0], tables(StatementTableLoaded)[-1]
        runs = [sum(m.table.runs_per_version.values()) for m in (first, last)]
        assert runs == [4, 5]  # rebuilt with the new run
        assert matrix.cursor_coordinate == before


def test_a_run_still_recording_is_planned_with_a_warning(demo: Path) -> None:
    import subprocess
    import sys

    script = write_held_run(demo, "0.5")
    holder = subprocess.Popen([sys.executable, script.name], cwd=demo)
    try:
        store = Store(demo)
        running: list[str] = []
        while not running and holder.poll() is None:  # its first epochs reach the catalog
            runs = store.query(
                "SELECT r.run_id FROM runs r JOIN logs l USING (run_id) WHERE r.status = "
                "'running' AND l.name = 'metric' GROUP BY ALL HAVING count(*) >= 3"
            )
            running = list(runs["run_id"])
        script.write_text(
            script.read_text().replace(
                '    flor.log("metric", 0.5)',
                '    flor.log("metric", 0.5)\n    flor.log("half", 0.25)',
            )
        )
        plan = plan_replay(demo, ["half"], run_ids=running)
        assert plan.warnings and "still recording" in plan.warnings[0]
        (run,) = plan.runs
        assert any("still recording" in note for note in run.notes)
    finally:
        (demo / "release").touch()
        holder.wait(timeout=120)


def test_a_torchrun_launch_counts_its_processes_start_in_the_estimate() -> None:
    facts = RunFacts(
        args={},
        main_loop="epoch",
        checkpoints={0: ("c0", 1000), 1: ("c1", 1000)},
        epoch_s={0: 1.0, 1: 1.0},
        inner_s={0: 0.9, 1: 0.9},
        wall_s=2.5,
        present=set(),
    )
    plain = run_work(OUTER, "epoch", facts)
    launch = {"launcher": TORCHRUN, "nproc": 2}
    launched = run_work(OUTER, "epoch", facts, launch=launch)
    assert not isinstance(plain, str) and not isinstance(launched, str)
    assert launched.prefix_s - plain.prefix_s == pytest.approx(launch_start_s(launch))
    assert launch_start_s(launch) >= 2 * TORCH_IMPORT_S  # the launcher and a rank at least


SLOW_EPOCHS = """
    import torch
    import florwb as flor

    net = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    with flor.checkpointing(model=net, optimizer=opt):
        for epoch in flor.loop("epoch", range(40)):
            loss = net(torch.ones(1, 2)).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
            flor.log("loss", loss.item())
"""


def test_replay_into_a_pipe_prints_two_progress_lines_per_segment(tmp_path: Path) -> None:
    root = recorded_project(tmp_path / "project", SLOW_EPOCHS)
    script = root / "train.py"
    script.write_text(
        script.read_text().replace(
            '        flor.log("loss", loss.item())',
            '        flor.log("loss", loss.item())\n        flor.log("bias", net.bias.item())',
        )
    )
    proc = florwb(root, "replay", "bias", "--yes", "--workers", "2")
    lines = [line for line in proc.stderr.splitlines() if " segment " in line]
    segments = {line.split(":")[0] for line in lines}
    assert segments and len(lines) <= 2 * len(segments)
    assert all(any(s in ln and "finished" in ln for ln in lines) for s in segments)
    rows = Store(root).query("SELECT count(*) AS n FROM logs WHERE name = 'bias'")["n"][0]
    assert rows == 40
