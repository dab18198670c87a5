"""Regenerate screenshots/*.svg: every workbench screen and state, from the demo project.

    python tools/screenshots.py [OUTDIR] [--demo DIR] [--size 80x24]

Builds the demo project in a temp folder (or copies DIR, an existing `florwb demo`
folder), drives the real app headless through each state and saves an SVG of each with
App.save_screenshot. The replay screenshots run a real replay of one run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

SCRIPT_WITH_NEW_STATEMENT = '            flor.log("loss", loss.item())'
# A run whose values no replay can reproduce (an unseeded generator): replayed with a new
# statement, its replay diverges, and the workbench says so instead of "replayed".
NOISY_RUN = """
import random
import florwb as flor

noise = random.Random()
for epoch in flor.loop("epoch", range(4)):
    flor.log("noise", noise.random())
flor.commit()
"""
NOISY_STATEMENT = '    flor.log("noise", noise.random())'
SLOW_RUN = """
import time
import florwb as flor

for epoch in flor.loop("epoch", range(20)):
    time.sleep(0.3)
    flor.log("metric", epoch * 0.5)
flor.commit()
"""


async def _until(pilot, check: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        await pilot.pause(0.1)
        if check():
            return
    raise TimeoutError("the workbench did not reach the expected state")


def _text(widget) -> str:
    return str(getattr(widget, "content", ""))


async def capture(project: Path, out: Path, size: tuple[int, int]) -> list[Path]:
    from florwb.app import WorkbenchApp
    from florwb.panes.query import QueryPane
    from florwb.panes.replay import ReplayPane
    from florwb.panes.statements import StatementsPane
    from florwb.widgets.history_list import HistoryList

    saved: list[Path] = []
    app = WorkbenchApp(project, poll_s=0.5)

    async def shot(name: str, toasts: bool = False) -> None:
        if not toasts:
            app.clear_notifications()
            await pilot.pause(0.2)
        app.save_screenshot(f"{name}.svg", str(out))
        saved.append(out / f"{name}.svg")
        print(f"  {name}.svg", file=sys.stderr)

    async with app.run_test(size=size, notifications=True) as pilot:
        await _until(pilot, lambda: app.history is not None and bool(app.pending))
        await pilot.pause(0.5)
        await shot("01-history")
        await pilot.press("slash", *"lr=0.1")
        await pilot.pause(0.3)
        await shot("02-history-filter")
        await pilot.press("escape")
        await pilot.press("g", "j", "space", "m")
        await pilot.pause(1.0)
        await shot("03-history-marked-metric")
        await pilot.press("m", "g", "j", "enter")
        await _until(pilot, lambda: getattr(app.screen, "detail", None) is not None)
        await pilot.pause(0.2)
        await shot("04-run-detail")
        await pilot.press("escape")
        await pilot.press("2")
        statements = app.query_one("#statements-pane", StatementsPane)
        await _until(pilot, lambda: statements.data is not None)
        await pilot.pause(0.3)
        await shot("05-statements")

        # two runs of different versions side by side, the diff searched for "model"
        await pilot.press("1", "u")
        listing = app.query_one("#history-list", HistoryList)
        versions_seen: set[str | None] = set()
        for index, row in enumerate(listing.rows):
            if row.run is not None and row.version not in versions_seen:
                versions_seen.add(row.version)
                listing.cursor = index
                await pilot.press("space")
        await pilot.press("v")
        await _until(pilot, lambda: getattr(app.screen, "comparison", None) is not None)
        await pilot.press("d", "slash", *"model", "enter")
        await pilot.pause(0.5)
        await shot("23-run-compare")
        await pilot.press("escape")

        await pilot.press("1", "u", "r")  # no marks: replay every run
        await _until(pilot, lambda: getattr(app.screen, "plan", None) is not None)
        await pilot.pause(0.2)
        await shot("06-replay-plan")
        await pilot.press("enter")
        pane = app.query_one("#replay-pane", ReplayPane)
        # a warm replay of the demo takes about a second: shoot as soon as its rows show
        await _until(pilot, lambda: bool(pane.segments), 120)
        await pilot.pause(0.3)
        await shot("07-replay-progress")
        await _until(pilot, lambda: not app.replay_running, 300)
        await pilot.pause(1.0)
        await shot("08-replay-finished")
        await pilot.press("1")
        await pilot.pause(1.0)
        await shot("09-history-replayed")
        await _chart_shots(pilot, app, shot)

        script = project / "train.py"
        script.write_text(
            script.read_text().replace(
                SCRIPT_WITH_NEW_STATEMENT,
                SCRIPT_WITH_NEW_STATEMENT + '\n            flor.log("lr_now", lr)',
            )
        )
        await _until(pilot, lambda: any("lr_now" in p.new for p in app.pending), 20)
        await pilot.pause(0.5)
        await shot("10-live-new-statement", toasts=True)

        (project / "slow.py").write_text(SLOW_RUN)
        # system metrics every half second, so the live run detail shows some
        env = {**os.environ, "FLORWB_SYSTEM_SAMPLE_S": "0.5"}
        proc = subprocess.Popen([sys.executable, "slow.py"], cwd=project, env=env)
        try:
            await _until(pilot, lambda: bool(app.query_one("#history-list", HistoryList).live), 60)
            await pilot.pause(1.5)
            await shot("11-live-recording-history")
            await pilot.press("3")
            await pilot.pause(1.0)
            await shot("12-live-recording-replay-tab")
            await pilot.press("1", "home")
            listing = app.query_one("#history-list", HistoryList)
            slow = [i for i, r in enumerate(listing.rows) if r.run and r.run.script == "slow.py"]
            listing.cursor = slow[0]
            await pilot.press("enter")  # the live run's detail: its latest system sample
            await _until(
                pilot, lambda: bool(getattr(getattr(app.screen, "detail", None), "system", None))
            )
            await pilot.press("end")
            await pilot.pause(0.5)
            await shot("27-run-detail-system")
            await pilot.press("escape")
        finally:
            proc.wait(timeout=120)

        await _diverged_shots(pilot, app, project, shot)

        await pilot.press("4")
        query = app.query_one("#query-pane", QueryPane)
        status = app.query_one("#query-status")
        query.run_sql(
            "SELECT run_id, list(value ORDER BY epoch, step) AS loss\n"
            "FROM logs WHERE name = 'loss' AND source = 'record' GROUP BY run_id ORDER BY run_id"
        )
        await _until(pilot, lambda: "row" in _text(status))
        await pilot.pause(0.3)
        await shot("13-query-sparklines")
        query.editor.load_text("SELECT range AS i, sqrt(range) AS root FROM range(2500000)")
        query.run_sql(query.editor.text)
        await _until(pilot, lambda: "2,500,000" in _text(status))
        await pilot.pause(0.3)
        await shot("14-query-truncated")
        query.editor.load_text("SELECT run_id, nonsense FROM runs")
        query.run_sql(query.editor.text)
        await _until(pilot, lambda: type(app.screen).__name__ == "TextViewScreen")
        await pilot.pause(0.3)
        await shot("15-query-error")
        await pilot.press("escape")
        await pilot.press("f9")
        await _until(pilot, lambda: query.outline is not None)
        query.editor.load_text("")
        query.editor.focus()
        await pilot.press(*"SELECT * FROM it")
        await _until(pilot, lambda: query.editor.completing)
        await pilot.pause(0.3)
        await shot("21-query-schema-completion")
        await pilot.press("escape", "f9")
        query.run_sql("SELECT run_id, argv FROM runs ORDER BY run_id LIMIT 1")
        await _until(pilot, lambda: "1 row" in _text(status))
        app.query_one("#results").focus()
        await pilot.press("right", "enter")
        await _until(pilot, lambda: type(app.screen).__name__ == "TextViewScreen")
        await pilot.pause(0.3)
        await shot("22-query-cell-viewer")
        await pilot.press("escape")

        await pilot.press("question_mark")
        await pilot.pause(0.5)
        await shot("16-help")
        await pilot.press("escape")
        await pilot.press("ctrl+p")
        await pilot.pause(0.5)
        await pilot.press(*"replay")
        await pilot.pause(0.5)
        await shot("17-command-palette")
        await pilot.press("escape")
        app.theme = "textual-light"
        await pilot.press("1")
        await pilot.pause(0.5)
        await shot("18-theme-light")
    return saved


async def _diverged_shots(pilot, app, project: Path, shot: Callable) -> None:
    """A replay that diverged: marked so in the history, and in the run detail its
    verdict and the first value that differed (its values withheld)."""
    from florwb.widgets.history_list import HistoryList

    script = project / "noisy.py"
    script.write_text(NOISY_RUN)
    subprocess.run([sys.executable, "noisy.py"], cwd=project, check=True, timeout=120)
    script.write_text(
        NOISY_RUN.replace(NOISY_STATEMENT, NOISY_STATEMENT + '\n    flor.log("half", epoch / 2)')
    )
    subprocess.run(
        [sys.executable, "-m", "florwb.cli", "replay", "half", "--where", "script = 'noisy.py'"]
        + ["--yes"],
        cwd=project,
        check=True,
        timeout=300,
        capture_output=True,
    )
    await pilot.press("1", "ctrl+r")
    listing = app.query_one("#history-list", HistoryList)

    def diverged() -> bool:
        return any(r.run and r.run.verdict == "diverged" for r in listing.rows)

    await _until(pilot, diverged)
    rows = listing.rows
    listing.cursor = next(i for i, r in enumerate(rows) if r.run and r.run.verdict == "diverged")
    await pilot.pause(0.5)
    await shot("28-history-diverged")
    await pilot.press("enter")
    await _until(pilot, lambda: getattr(app.screen, "detail", None) is not None)
    app.screen.query_one("#detail-rest").scroll_visible(top=True, animate=False)
    await pilot.pause(0.5)
    await shot("29-run-detail-diverged")
    await pilot.press("escape")


async def _chart_shots(pilot, app, shot: Callable) -> None:
    """The chart view over the newest version's runs: loss against epochs, smoothed, then
    the replayed weight_norm (drawn with • and called "replayed" in the legend)."""
    from florwb.screens.chart import ChartScreen

    await pilot.press("u", "g", "j", "c")
    await _until(pilot, lambda: getattr(app.screen, "drawing", None) is not None)
    chart = app.screen
    assert isinstance(chart, ChartScreen)
    while chart.state.metric != "loss":
        await pilot.press("m")
        await _until(
            pilot, lambda: chart.curves is not None and chart.curves.metric == chart.state.metric
        )
    loads = chart.loads
    await pilot.press("x")
    await _until(pilot, lambda: chart.loads > loads)
    await pilot.press("s")
    await pilot.pause(1.0)
    await shot("19-chart-loss-by-epoch")
    while chart.state.metric != "weight_norm":
        await pilot.press("m")
        await _until(
            pilot, lambda: chart.curves is not None and chart.curves.metric == chart.state.metric
        )
    await pilot.pause(1.0)
    await shot("20-chart-replayed")
    # the cursor: each run's value, step and wall time at one x, read below the legend
    await pilot.press("left", "left", "left")
    await _until(
        pilot, lambda: bool(chart.readings) and getattr(chart.drawing, "cursor", None) is not None
    )
    await pilot.pause(0.5)
    await shot("24-chart-cursor")
    await pilot.press("escape", "slash", *"ls")  # the fuzzy metric picker
    await pilot.pause(0.5)
    await shot("25-chart-metric-picker")
    await pilot.press("escape")
    loads = chart.loads
    await pilot.press("g")  # small multiples: a page of metrics at once
    await _until(pilot, lambda: chart.loads > loads and bool(chart.grid_drawings))
    await pilot.pause(0.5)
    await shot("26-chart-grid")
    await pilot.press("escape")
    await pilot.pause(0.3)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python tools/screenshots.py", description=__doc__)
    parser.add_argument("outdir", nargs="?", default="screenshots", type=Path)
    parser.add_argument("--demo", type=Path, help="an existing demo folder to copy")
    parser.add_argument("--size", default="80x24", help="terminal size, e.g. 80x24")
    args = parser.parse_args(argv)
    width, height = (int(n) for n in args.size.lower().split("x"))
    args.outdir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="florwb-shots-") as scratch:
        project = Path(scratch) / "demo"
        if args.demo:
            shutil.copytree(args.demo, project, symlinks=True)
        else:
            from florwb.demo.build import build_demo

            print("building the demo project…", file=sys.stderr)
            build_demo(project, progress=lambda line: print(f"  {line}", file=sys.stderr))
        print(f"writing screenshots to {args.outdir}/", file=sys.stderr)
        saved = asyncio.run(capture(project, args.outdir.resolve(), (width, height)))
    print(f"{len(saved)} screenshots in {args.outdir}/", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
