"""Workbench: log-statement diff and live watch of the working tree."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest_app import (
    Seen,
    copy_demo,
    loaded,
    make_app,
    pending_known,
    shown,
    wait_until,
)

from florwb.components.live_monitor import LiveMonitor
from florwb.screens.replay_plan import ReplayPlanScreen
from florwb.ui.format import short_version
from florwb.ui.messages import StatementTableLoaded
from florwb_engine import versions
from florwb_engine.propagate import statement_matrix
from florwb_engine.store import Store


@pytest.fixture
def demo(tmp_path: Path) -> Path:
    return copy_demo(tmp_path)


def _versions(project: Path) -> list[str]:
    frame = Store(project).query("SELECT version FROM versions ORDER BY first_seen")
    return list(frame["version"])


def _matrix_line(text: str, name: str) -> str:
    return next(line for line in text.splitlines() if line.strip().startswith(name + " "))


def _has_row(text: str, name: str) -> bool:
    return any(line.strip().startswith(name + " ") for line in text.splitlines())


async def test_matrix_of_statements_by_version_and_code_diff(demo: Path):
    old, new = _versions(demo)
    sources = {v: versions.read_file(demo / ".florwb", v, "train.py").decode() for v in (old, new)}
    sources["tree"] = (demo / "train.py").read_text()
    expected = statement_matrix(sources, "tree")
    app = make_app(demo)
    seen = Seen()
    async with app.run_test(size=(80, 24), message_hook=seen) as pilot:
        await loaded(pilot)
        await pilot.press("2")
        await seen.wait(pilot, StatementTableLoaded)
        text = await shown(pilot)
        assert _has_row(text, "weight_norm") and "diff version" in text
        assert f"{short_version(old)} (2)" in text and f"{short_version(new)} (2)" in text
        assert "working tree" in text
        row = _matrix_line(text, "weight_norm")
        assert row.count("→") == 2  # propagatable into both recorded versions
        assert expected.cell("weight_norm", old).status == "propagatable"
        assert f"→ L{expected.cell('weight_norm', new).line}" in row
        assert "+ L" in row and "new" in row  # in the working tree, no run has it yet
        loss = _matrix_line(text, "loss")
        assert loss.count("● L") == 3  # recorded everywhere
        # the diff of the newest version against the working tree highlights the new line
        assert "+++ train.py @ working tree" in text
        added = next(line for line in text.splitlines() if "weight_norm" in line and "◆+" in line)
        assert added
        # moving the cursor explains the cell
        await pilot.press("down")  # second statement row
        text = await shown(pilot)
        assert " in version " in text or " in working tree" in text


async def test_cannot_place_shows_the_reason_and_marked_version_is_the_base(demo: Path):
    script = demo / "train.py"
    code = script.read_text().replace(
        '        flor.log("acc", evaluate(model))',
        '        flor.log("acc", evaluate(model))\n        flor.log("momentum_used", momentum)',
    )
    script.write_text(code)
    old, new = _versions(demo)
    app = make_app(demo, watch=False)
    seen = Seen()
    async with app.run_test(size=(80, 24), message_hook=seen) as pilot:
        await loaded(pilot)
        # mark the old version in the history, then compare against it
        await pilot.press("G")
        while app.query_one("#history-list").current.kind != "version":
            await pilot.press("k")
        await pilot.press("space")
        assert app.marked_versions == {old}
        await pilot.press("2")
        # the banner names the new statement too: wait for its row in the matrix
        await seen.wait(
            pilot, StatementTableLoaded, lambda m: "momentum_used" in m.table.names, what="matrix"
        )
        text = await shown(pilot)
        row = _matrix_line(text, "momentum_used")
        assert "✗ no" in row  # v1 has no momentum: cannot place
        table = app.query_one("#matrix")
        pane = app.query_one("#statements-pane")
        # columns: statement, working tree (both fixed), then the versions oldest first
        assert pane.order[0] == "working tree" and table.fixed_columns == 2
        table.move_cursor(
            row=list(pane.data.names).index("momentum_used"), column=pane.order.index(old) + 1
        )
        text = await shown(pilot)  # the highlighted cell explains itself
        assert "cannot place:" in text
        assert "momentum" in text
        table.move_cursor(column=pane.order.index(new) + 1)
        await pilot.press("b")
        text = await shown(pilot)
        assert f"→ version {short_version(old)}" in text
        assert f"diff version {short_version(new)}" in text


async def test_saving_a_new_log_statement_is_noticed_and_offers_a_replay(demo: Path):
    app = make_app(demo)
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot)
        await pending_known(pilot, "weight_norm")
        # the watcher says when it watches (inotify watches are in place): no sleep
        monitor = app.query_one(LiveMonitor)
        await wait_until(pilot, lambda: monitor.watcher_ready, what="the script watcher")
        script = demo / "train.py"
        code = script.read_text().replace(
            '            flor.log("loss", loss.item())',
            '            flor.log("loss", loss.item())\n            flor.log("lr_now", lr)',
        )
        script.write_text(code)  # "another terminal" saves the script
        # the watcher (not the journal poll: no journal changed) brings it within a second
        # on an idle machine; the wait is generous for busy CI machines
        await pending_known(pilot, "lr_now", timeout=20)
        text = await shown(pilot)  # the banner shows what PendingChanged brought
        assert "lr_now" in text
        assert "r: replay past runs" in text
        # the offer is real: r opens the replay plan for both new statements
        await pilot.press("r")
        await wait_until(pilot, lambda: isinstance(app.screen, ReplayPlanScreen), what="plan")
        text = await shown(pilot)
        assert "Replay plan" in text
        assert "weight_norm" in text and "lr_now" in text
        await pilot.press("escape")
