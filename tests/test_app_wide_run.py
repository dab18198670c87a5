"""A run that logged 10,000 names (per-layer statistics) keeps the workbench responsive:
the history lists it, its run detail draws at once with the first names and a count of
the rest, `/` finds any name, and esc leaves the search, then the screen.

The real app through Pilot on a real recorded run (a training subprocess logging 10,001
names over two epochs)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import recorded_project
from conftest_app import loaded, make_app, wait_for

from florwb.screens.run_detail import METRIC_ROWS, RunDetailScreen
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
    async with app.run_test(size=(100, 30)) as pilot:
        await loaded(pilot)
        screen = RunDetailScreen(app.store, run["run_id"])
        app.push_screen(screen)
        text = await wait_for(
            pilot, lambda t: "names shown" in t or "w00000" in t, what="the run detail"
        )
        assert "w00000.norm" in text
        assert "w09999.norm" not in text
        # the note under the table says how many are drawn of how many
        await pilot.press("G")
        text = await wait_for(pilot, lambda t: "names shown" in t, what="the count of names")
        assert f"{METRIC_ROWS} of 10,001 names shown (10,001 logged)" in text

        await pilot.press("slash")
        for char in "09999":
            await pilot.press(char)
        text = await wait_for(pilot, lambda t: "w09999.norm" in t, what="the name found by search")
        assert "1 of 1 names matching '09999' shown" in text
        assert "w00000.norm" not in text

        await pilot.press("escape")  # leaves the search: every name again, screen kept
        await wait_for(pilot, lambda t: "w09999.norm" not in t, what="the search cleared")
        assert app.screen is screen
        await pilot.press("escape")
        await wait_for(pilot, lambda t: "▾ version" in t, what="the history again")
        assert app.screen is not screen
