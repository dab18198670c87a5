"""Fixtures for the workbench's Pilot tests: the real demo project, built once per session
and copied per test (with its .git and .florwb), and helpers that read the screen as text.

Imported by tests/test_app*.py (`from conftest_app import ...`); pytest puts tests/ on
sys.path because the folder is not a package. Plain functions, not fixtures, so no plugin
registration is needed: each test module declares its own three-line `demo` fixture.
"""

from __future__ import annotations

import asyncio
import fcntl
import functools
import hashlib
import html
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from rich.cells import cell_len
from textual.app import App
from textual.message import Message
from textual.pilot import Pilot

from florwb.app import WorkbenchApp
from florwb.demo.build import build_demo
from florwb.panes.query import QueryPane
from florwb.screens.chart import ChartScreen
from florwb.screens.replay_plan import PlanReady, ReplayPlanScreen
from florwb.screens.run_detail import RunDetailScreen
from florwb.ui.messages import (
    ChartDrawn,
    GridDrawn,
    HistoryLoaded,
    PaneReady,
    QueryFailed,
    QueryRows,
    RunDetailLoaded,
)
from florwb_engine.store import Store
from florwb_engine.store.queries import History

M = TypeVar("M", bound=Message)
SIZE = (80, 24)
ROOT = Path(__file__).resolve().parents[1]
# The workbench reads the user's keymap file (florwb.ui.keys.keymap_path) when it starts:
# the tests read none, whatever the machine's user has bound (a test that wants one sets
# XDG_CONFIG_HOME itself).
os.environ["XDG_CONFIG_HOME"] = str(Path(tempfile.gettempdir()) / "florwb-test-no-config")
# What records the demo: a change here means the cached demo must be rebuilt.
RECORDING_CODE = (
    "florwb/demo/*.py",
    "florwb/__init__.py",
    "engine/*.py",
    "engine/record/*.py",
    "engine/versions/*.py",
    "engine/store/db.py",
    "engine/store/ingest.py",
    "engine/store/catalog.py",
    "engine/store/runs.py",
    "engine/store/values.py",
    "engine/store/schema.py",
)
RUN_LINE = re.compile(r"^  [ *]\S \d\d-\d\d \d\d:\d\d ")


def _code_hash() -> str:
    """Changes whenever the demo or the engine that recorded it changes."""
    digest = hashlib.sha256()
    for path in sorted(p for pattern in RECORDING_CODE for p in ROOT.glob(pattern)):
        digest.update(str(path.relative_to(ROOT)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


@functools.cache
def demo_source() -> Path:
    """The demo project (4 runs over 2 versions, one pending statement), built once and
    kept in the temp folder keyed by the code that made it, so reruns skip the ~40 s build."""
    cache = Path(tempfile.gettempdir()) / "florwb-test-demo"
    folder = cache / _code_hash()
    if (folder / ".florwb").is_dir():
        return folder
    cache.mkdir(parents=True, exist_ok=True)
    # One build at a time: the xdist workers all reach their first app test at the start of
    # a run, and a second build would train the same runs again on the cores the first
    # one's two parallel trainings need; the waiting worker then copies the finished one.
    with open(cache / f"{folder.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (folder / ".florwb").is_dir():
            return folder
        scratch = Path(tempfile.mkdtemp(dir=cache, prefix="build-")) / "demo"
        build_demo(scratch)
        Store(scratch).ingest()  # the copies then start with every journal already ingested
        try:
            scratch.rename(folder)
        except OSError:  # another session finished first: use theirs
            shutil.rmtree(scratch, ignore_errors=True)
        shutil.rmtree(scratch.parent, ignore_errors=True)
    return folder


def copy_demo(tmp_path: Path) -> Path:
    """A private copy of the demo project (with .git and .florwb) for one test. Each test
    module wraps this in its own `demo` fixture."""
    target = tmp_path / "demo"
    shutil.copytree(demo_source(), target, symlinks=True)
    return target


# One <text> element of Rich's SVG export: a run of characters at column x/char_width of
# line N (its clip path); runs of spaces are left out (their background is a <rect>).
SVG_TEXT = re.compile(
    r'<text class="[^"]*" x="([0-9.]+)" y="[0-9.]+" textLength="[0-9.]+" '
    r'clip-path="url\(#[^"]*-line-(\d+)\)">(.*?)</text>'
)
SVG_CHAR_WIDTH = 20 * 0.61  # Rich's export_svg: char_height 20, font_aspect_ratio 0.61


def screen_text(app: App) -> str:
    """What the terminal shows now, as plain text: every line `width` cells long.

    Read from `App.export_screenshot()` (public API: the SVG Textual's own snapshot tests
    compare), so it needs no private attribute of Textual; a wide character fills two
    cells and is written once."""
    width, height = app.size
    cells = [[" "] * width for _ in range(height)]
    for x, line, content in SVG_TEXT.findall(app.export_screenshot(simplify=True)):
        row = int(line)
        if row >= height:
            continue
        column = round(float(x) / SVG_CHAR_WIDTH)
        for char in html.unescape(content).replace("\xa0", " "):
            if column >= width:
                break
            cells[row][column] = char
            wide = cell_len(char)
            for extra in range(1, wide):
                if column + extra < width:
                    cells[row][column + extra] = ""
            column += max(wide, 1)
    return "\n".join("".join(row) for row in cells)


async def wait_until(
    pilot: Pilot, predicate: Callable[[], bool], timeout: float = 30.0, what: str = "condition"
) -> None:
    """Pause until `predicate()` holds (checked between frames); fail after `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        await pilot.pause(0.05)
        if predicate():
            return
    raise AssertionError(f"timed out waiting for {what}; screen was:\n{screen_text(pilot.app)}")


async def settled(pilot: Pilot) -> None:
    """Every message the screen's nodes were sent is handled, and what they changed is
    laid out and drawn. A widget's new size reaches the screen as a message of its own
    once the widget is idle, and may move another: three rounds. Each round waits on the
    queues, not on the clock (`pause()` would also wait for the CPU to idle, up to 1 s
    while a worker thread computes)."""
    for _ in range(3):
        await pilot.pause(0)


async def shown(pilot: Pilot) -> str:
    """The screen as text once what the app was sent is drawn: one export, read after the
    test waited on the message or state that says the thing happened."""
    await settled(pilot)
    return screen_text(pilot.app)


def run_lines(text: str) -> list[str]:
    """The history's run lines on screen."""
    return [line for line in text.splitlines() if RUN_LINE.match(line)]


HELD_RUN = """
import pathlib, time
import florwb as flor

release = pathlib.Path("release")
for epoch in flor.loop("epoch", range(8)):
    flor.log("metric", VALUE)
    if epoch == 2:
        deadline = time.monotonic() + 120  # never left running by a failed test
        while not release.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
flor.commit()
"""


def write_held_run(project: Path, value: str) -> Path:
    """`slow.py`: a run of 8 epochs logging `metric` = `value` that holds after epoch 3
    until a file named `release` appears, so what a test checks while it records cannot
    race its end (touch `project / "release"` to let it finish)."""
    script = project / "slow.py"
    script.write_text(HELD_RUN.replace("VALUE", value))
    return script


class Seen:
    """A `run_test(message_hook=...)`: every message dispatched to a node of the app (a
    bubbling one once per node, right before that node handles it; one that a newer one
    replaced, never), so a test waits on and asserts the message that says a thing
    happened instead of reading the screen (an SVG export, ~25 ms of the app's loop)."""

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self._arrived = asyncio.Event()

    def __call__(self, message: Message) -> None:
        self.messages.append(message)
        self._arrived.set()

    def of(self, kind: type[M]) -> list[M]:
        return [m for m in self.messages if isinstance(m, kind)]

    def mark(self) -> int:
        """Where the messages stand now: `wait(since=...)` then takes only later ones."""
        return len(self.messages)

    def after(self, message: Message) -> int:
        """The mark just after `message` (that very object): to wait on what followed it."""
        return next(i for i, m in enumerate(self.messages) if m is message) + 1

    async def wait(
        self,
        pilot: Pilot,
        kind: type[M] | tuple[type[M], ...],
        where: Callable[[M], bool] | None = None,
        *,
        since: int = 0,
        timeout: float = 30.0,
        what: str = "",
    ) -> M:
        """The first message of `kind` dispatched after `since` for which `where` holds
        (asked once of each message, when this task next runs), once it is handled and
        the screen drawn. Woken by each message: no frame is polled, no screen exported."""
        deadline = time.monotonic() + timeout
        checked = since
        while True:
            for message in self.messages[checked:]:
                if isinstance(message, kind) and (where is None or where(message)):
                    await settled(pilot)
                    return message
            checked = len(self.messages)
            self._arrived.clear()
            try:
                await asyncio.wait_for(self._arrived.wait(), deadline - time.monotonic())
            except TimeoutError:
                kinds = (kind,) if isinstance(kind, type) else kind
                names = "/".join(k.__name__ for k in kinds)
                raise AssertionError(
                    f"timed out waiting for {what or names}; screen was:\n{screen_text(pilot.app)}"
                ) from None

    def ready(self) -> bool:
        """The history is loaded and both lazily mounted panes said they are ready (an app
        closed before that races their mounting)."""
        panes = {id(m.pane) for m in self.of(PaneReady)}
        return bool(self.of(HistoryLoaded)) and len(panes) >= 2


def make_app(project: Path, **kwargs) -> WorkbenchApp:
    kwargs.setdefault("poll_s", 0.25)
    return WorkbenchApp(project, **kwargs)


async def loaded(pilot: Pilot) -> str:
    """Wait for the history: listed, then its metric's values read (the app's state, no
    screen export meanwhile); then read the screen once, with the history on it."""
    app = pilot.app
    await wait_until(pilot, lambda: values_read(app), what="the history and its values")
    text = await shown(pilot)
    assert "version " in text and "▾" in text, f"no history on the screen:\n{text}"
    return text


def values_read(app: App) -> bool:
    """The history shown has its metric's values (the first one is listed before them)."""
    history = app.history if isinstance(app, WorkbenchApp) else None
    return isinstance(history, History) and not history.values_pending


async def pending_known(pilot: Pilot, name: str, timeout: float = 30.0) -> None:
    """Wait until the app knows `name` as a statement no run recorded yet (PendingChanged
    handled: the banner and the `r` key use it)."""
    app = pilot.app
    assert isinstance(app, WorkbenchApp)
    await wait_until(
        pilot,
        lambda: any(name in p.new for p in app.pending),
        timeout=timeout,
        what=f"{name} pending",
    )


async def query_tab(pilot: Pilot) -> QueryPane:
    """The Query tab, shown and mounted (it mounts the first time it is shown)."""
    await loaded(pilot)
    await pilot.press("4")
    app = pilot.app
    await wait_until(pilot, lambda: bool(app.query("#sql")), what="the query tab")
    return app.query_one(QueryPane)


async def run_query(pilot: Pilot, sql: str) -> None:
    """Type `sql` into the editor and run it with the key a user presses."""
    editor = pilot.app.query_one("#sql")
    editor.load_text(sql)
    editor.focus()
    await pilot.press("ctrl+j")


async def first_page(pilot: Pilot, seen: Seen) -> QueryRows:
    """The first page of the query started last (QueryRows), handled and drawn."""
    pane = pilot.app.query_one(QueryPane)
    return await seen.wait(
        pilot, QueryRows, lambda m: m.first and m.serial == pane.serial, what="the first page"
    )


async def query_failed(pilot: Pilot, seen: Seen, since: int = 0) -> QueryFailed:
    """The query started last failed or was stopped (QueryFailed), handled and drawn."""
    pane = pilot.app.query_one(QueryPane)
    return await seen.wait(
        pilot, QueryFailed, lambda m: m.serial == pane.serial, since=since, what="the failure"
    )


async def rows_added(pilot: Pilot) -> None:
    """The results table holds every row handed to it (pages are added a chunk a frame)."""
    table = pilot.app.query_one("#results")
    await wait_until(
        pilot, lambda: table.row_count == len(table.raw_rows), what="the rows in the table"
    )


async def chart_drawn(pilot: Pilot, seen: Seen, chart: ChartScreen, since: int) -> None:
    """The chart shows the state it is in now: a drawing of that state (ChartDrawn, or a
    page of the grid, GridDrawn) posted after `since`, handled and on screen."""
    await seen.wait(
        pilot,
        (ChartDrawn, GridDrawn),
        lambda m: m.state == chart.state,
        since=since,
        what=f"the chart drawn as {chart.state}",
    )


async def open_chart(pilot: Pilot, seen: Seen, *keys: str) -> ChartScreen:
    """Press `keys` then c on the History tab: the chart, once it is drawn."""
    app = pilot.app
    since = seen.mark()
    await pilot.press(*keys, "c")
    await wait_until(pilot, lambda: isinstance(app.screen, ChartScreen), what="the chart")
    chart = app.screen
    assert isinstance(chart, ChartScreen)
    await chart_drawn(pilot, seen, chart, since)
    return chart


# -- helpers of msga


async def plan_shown(pilot: Pilot, seen: Seen, since: int, timeout: float = 60.0) -> str:
    """The replay plan screen opened (or re-planned by +/-) after `since` drew the plan of
    its latest request (its PlanReady, handled), or why there is none: the screen's text."""
    app = pilot.app
    await wait_until(
        pilot, lambda: isinstance(app.screen, ReplayPlanScreen), what="the plan screen"
    )
    screen = app.screen
    assert isinstance(screen, ReplayPlanScreen)
    await seen.wait(
        pilot,
        PlanReady,
        lambda m: m.serial == screen.serial,
        since=since,
        timeout=timeout,
        what="the plan",
    )
    text = await shown(pilot)
    assert "estimate" in text or "Cannot replay" in text, text
    return text


async def run_detail_shown(pilot: Pilot, seen: Seen, run_id: str) -> str:
    """The run detail of `run_id` opened and its run read (RunDetailLoaded): the screen's
    text, once. The app's own task pushes the screen, so the screen's messages reach the
    test's message hook (a screen pushed from the test's task runs outside it)."""
    app = pilot.app
    since = seen.mark()
    app.call_later(app.push_screen, RunDetailScreen(app.store, run_id))
    message = await seen.wait(pilot, RunDetailLoaded, since=since, what="the run detail")
    assert message.detail.run.run_id == run_id
    return await shown(pilot)
