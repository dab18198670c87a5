"""A run that logged 10,000 names (per-layer statistics) keeps the workbench responsive:
the history lists it, its run detail draws at once with the first names and a count of
the rest, `/` finds any name, and esc leaves the search, then the screen.

The real app through Pilot on a real recorded run (a training subprocess logging 10,001
names over two epochs)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import recorded_project, write
from conftest_app import Seen, loaded, make_app, shown, wait_until

from florwb.screens.run_detail import METRIC_ROWS, RunDetailScreen
from florwb.ui.messages import HistoryLoaded, RunDetailLoaded
from florwb_engine.store import Store

WIDE = """
    import florwb as flor

    for epoch in flor.loop("epoch", range(2)):
        for i in range(10_000):
            flor.log(f"w{i:05d}.norm", i * 0.001 + epoch)
        flor.log("loss", 1.0 / (epoch + 1))
"""


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    return recorded_project(tmp_path_factory.mktemp("wide") / "project", WIDE)


async def test_run_detail_of_10000_names_draws_a_page_and_finds_any_name(project: Path) -> None:
    (run,) = Store(project).runs()
    app = make_app(project, poll_s=0)
    seen = Seen()
    async with app.run_test(size=(100, 30), message_hook=seen) as pilot:
        await loaded(pilot)
        screen = RunDetailScreen(app.store, run["run_id"])
        app.call_later(app.push_screen, screen)  # by the app's task: its messages reach `seen`
        detail = (await seen.wait(pilot, RunDetailLoaded)).detail
        assert len(detail.metrics) == 10_001
        text = await shown(pilot)
        assert "w00000.norm" in text
        assert "w09999.norm" not in text
        # the note under the table says how many are drawn of how many
        await pilot.press("G")
        scroll = screen.query_one("#detail-scroll")
        await wait_until(
            pilot, lambda: 0 < scroll.max_scroll_y == scroll.scroll_y, what="G: the end"
        )
        text = await shown(pilot)
        assert f"{METRIC_ROWS} of 10,001 names shown (10,001 logged)" in text

        await pilot.press("slash")
        for char in "09999":
            await pilot.press(char)
        text = await shown(pilot)  # the names are filtered as each key is typed
        assert "w09999.norm" in text
        assert "1 of 1 names matching '09999' shown" in text
        assert "w00000.norm" not in text

        await pilot.press("escape")  # leaves the search: every name again, screen kept
        assert "w09999.norm" not in await shown(pilot)
        assert app.screen is screen
        await pilot.press("escape")
        await wait_until(pilot, lambda: app.screen is not screen, what="the screen closed")
        assert "▾ version" in await shown(pilot)


STREAMING = """
    import pathlib, time
    import florwb as flor

    release = pathlib.Path("release")
    for epoch in flor.loop("epoch", range(100_000)):
        flor.log("loss", float(epoch))
        time.sleep(0.03)
        if release.exists():
            break
"""


async def test_a_recording_run_is_followed_by_reading_its_rows_alone(project: Path) -> None:
    """While a run records, the history follows it by reading that run again, not the
    whole project (a thousand runs would cost the idle workbench a core); once it ends, a
    whole reload lists it finished."""
    write(project / "stream.py", STREAMING)
    seen: list[HistoryLoaded] = []

    def hook(message) -> None:
        if isinstance(message, HistoryLoaded):
            seen.append(message)

    recording = subprocess.Popen([sys.executable, "stream.py"], cwd=project)
    try:
        app = make_app(project, poll_s=0.25, follow_share=1.0)  # every 2 s, for the test
        async with app.run_test(size=(100, 30), message_hook=hook) as pilot:
            await loaded(pilot)

            def live_last() -> float | None:
                for message in seen:
                    if not message.runs_only:
                        continue
                    for run in message.history.runs:
                        if run.script == "stream.py" and run.status == "running":
                            return message.history.last.get(run.run_id)
                return None

            # whole reloads of this project come first, spaced by what they cost
            await wait_until(
                pilot, lambda: live_last() is not None, timeout=120, what="a runs-only read"
            )
            first = live_last()
            first_seen = len(seen)
            await wait_until(
                pilot,
                lambda: any(
                    m.runs_only and m.history.last.get(_stream_run(m)) not in (None, first)
                    for m in seen[first_seen:]
                ),
                timeout=120,
                what="the recording run's value moving on",
            )
            (project / "release").touch()
            recording.wait(timeout=60)
            await wait_until(
                pilot,
                lambda: any(
                    not m.runs_only
                    and any(
                        r.script == "stream.py" and r.status == "finished" for r in m.history.runs
                    )
                    for m in seen
                ),
                timeout=120,
                what="a whole reload with the run finished",
            )
    finally:
        (project / "release").touch()
        recording.wait(timeout=60)


def _stream_run(message: HistoryLoaded) -> str | None:
    return next((r.run_id for r in message.history.runs if r.script == "stream.py"), None)
