"""Workbench: an unexpected failure in a worker keeps its traceback (the error log under
.florwb/logs/, and the error modal shows it on a key); an expected one stays one line; the
user's keymap file rebinds keys, and a bad one is said in one line with the defaults kept."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest_app import Seen, copy_demo, make_app, screen_text, shown, wait_until
from textual.worker import Worker, WorkerFailed, WorkerState

from florwb.screens.error import ErrorScreen
from florwb.ui.workers import run_in_thread
from florwb_engine.replay import PlanError


@pytest.fixture
def demo(tmp_path: Path) -> Path:
    return copy_demo(tmp_path)


def _nested_cause() -> None:
    raise ZeroDivisionError("the real cause")


def _fails() -> None:
    try:
        _nested_cause()
    except ZeroDivisionError as exc:
        raise RuntimeError("a wrapped failure") from exc


async def _failed_in_a_worker(pilot, seen: Seen, fn, description: str):
    """`fn` run in a worker of the app once its panes are ready; the worker, once the
    failure's modal is up."""
    app = pilot.app
    await wait_until(pilot, seen.ready, what="the panes")
    worker = run_in_thread(app, fn, group="test", description=description)
    with pytest.raises(WorkerFailed):
        await worker.wait()
    await wait_until(pilot, lambda: isinstance(app.screen, ErrorScreen), what="the modal")
    return worker


async def test_an_unexpected_worker_failure_keeps_its_traceback(demo: Path):
    app = make_app(demo, watch=False)
    seen = Seen()
    async with app.run_test(size=(100, 30), message_hook=seen) as pilot:
        worker = await _failed_in_a_worker(pilot, seen, _fails, "testing a failure")
        changes = seen.of(Worker.StateChanged)
        assert [m.worker for m in changes if m.state is WorkerState.ERROR] == [worker]
        screen = app.screen
        assert isinstance(screen, ErrorScreen)
        assert (screen.title_text, screen.message) == (
            "Error while testing a failure",
            "a wrapped failure",
        )
        log = demo / ".florwb" / "logs" / "errors.log"
        assert screen.logged == "also in .florwb/logs/errors.log"
        text = log.read_text()
        assert ": Error while testing a failure\n" in text
        for part in ("in _nested_cause", "ZeroDivisionError: the real cause", "in _fails"):
            assert part in text and part in (screen.details or ""), part
        assert not screen.details_shown
        assert "Traceback" not in screen_text(app)
        assert "t shows the traceback (also in .florwb/logs/errors.log)" in screen_text(app)
        await pilot.press("t")
        assert screen.details_shown
        assert "Traceback (most recent call last)" in await shown(pilot)
        await pilot.press("t")
        assert not screen.details_shown
        await pilot.press("escape")
        await wait_until(pilot, lambda: not isinstance(app.screen, ErrorScreen), what="closed")


async def test_an_expected_failure_is_its_one_line_under_its_title(demo: Path):
    app = make_app(demo, watch=False)

    def refused() -> None:
        raise PlanError("no run recorded loss")

    seen = Seen()
    async with app.run_test(size=(100, 30), message_hook=seen) as pilot:
        await _failed_in_a_worker(pilot, seen, refused, "planning")
        screen = app.screen
        assert isinstance(screen, ErrorScreen)
        assert (screen.title_text, screen.message) == (
            "Cannot plan the replay",
            "no run recorded loss",
        )
        assert screen.details is None  # nothing to show: the line is the whole story
        assert not (demo / ".florwb" / "logs" / "errors.log").exists()


async def test_the_keymap_file_rebinds_and_a_bad_one_keeps_the_defaults(
    demo: Path, tmp_path: Path, monkeypatch
):
    folder = tmp_path / "config" / "florwb"
    folder.mkdir(parents=True)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(folder.parent))
    (folder / "keymap.toml").write_text('app.help = "h"\n')
    app = make_app(demo, watch=False)
    seen = Seen()
    async with app.run_test(size=(100, 30), message_hook=seen) as pilot:
        await wait_until(pilot, seen.ready, what="the panes")
        await wait_until(pilot, lambda: app.keymap == {"app.help": "h"}, what="the keymap")
        assert app.key_hints("app.help") == "h"
        await pilot.press("h")
        await wait_until(pilot, lambda: type(app.screen).__name__ == "HelpScreen", what="help")

    (folder / "keymap.toml").write_text('app.hepl = "h"\n')
    app = make_app(demo, watch=False)
    said: list[tuple[str, str]] = []
    notify = app.notify
    monkeypatch.setattr(
        app, "notify", lambda text, **kw: (said.append((text, kw.get("severity"))), notify(text))
    )
    seen = Seen()
    async with app.run_test(size=(100, 30), message_hook=seen) as pilot:
        await wait_until(pilot, seen.ready, what="the panes")
        assert said
        assert app.keymap == {}
        (text, severity), *_ = said
        assert severity == "warning" and "\n" not in text
        assert "keymap.toml: ignored (no key 'app.hepl'" in text
