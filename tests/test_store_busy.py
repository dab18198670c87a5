"""Another program holds the catalog file: the workbench
says who holds it and keeps retrying visibly, `florwb runs` waits with one line on stderr
and gives up after a bounded time with a one-line error. The holder is a real second
process with a DuckDB write connection open on the file."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import florwb
from conftest_app import (
    Seen,
    copy_demo,
    first_page,
    loaded,
    make_app,
    query_failed,
    run_lines,
    shown,
    wait_until,
)

from florwb.ui.messages import QueryRows, StoreWaiting

HOLDER = (
    "import duckdb, sys\n"
    "con = duckdb.connect(sys.argv[1])\n"
    "print('held', flush=True)\n"
    "sys.stdin.read()\n"  # until the test closes stdin
    "con.close()\n"
)


@pytest.fixture
def demo(tmp_path: Path) -> Path:
    return copy_demo(tmp_path)


@contextmanager
def held(project: Path) -> Iterator[subprocess.Popen]:
    """A second process holding a write connection on the project's catalog."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(project / ".florwb" / "florwb.duckdb")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        yield proc
    finally:
        release(proc)


def release(proc: subprocess.Popen) -> None:
    if proc.stdin is not None and not proc.stdin.closed:
        proc.stdin.close()
    proc.wait(timeout=60)


def _flat(text: str) -> str:
    """Screen text with its line breaks and runs of spaces as single spaces."""
    return " ".join(text.split())


async def test_the_workbench_says_who_holds_the_catalog_and_loads_once_it_is_free(
    demo: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("FLORWB_LOCK_WAIT_S", "1")  # each attempt gives up after 1 s, retried
    with held(demo) as holder:
        app = make_app(demo)
        seen = Seen()
        async with app.run_test(size=(100, 30), message_hook=seen) as pilot:
            pid = f"(PID {holder.pid},"
            await seen.wait(
                pilot, StoreWaiting, lambda m: pid in m.holder, what="who holds the catalog"
            )
            # the summary wraps the line where the holder's PID length puts the break
            text = _flat(await shown(pilot))
            assert pid in text
            assert "The catalog is held by another process" in text and "retrying" in text
            assert "Loading the version history" not in text
            # past several give-ups of 1 s, it still says so, with the time growing
            await seen.wait(
                pilot,
                StoreWaiting,
                lambda m: pid in m.holder and round(m.waited_s) >= 3,  # as the line rounds
                what="retrying past the lock wait",
            )
            text = _flat(await shown(pilot))
            assert any(f"retrying… {s} s" in text for s in range(3, 60))
            assert pid in text
            release(holder)
            text = await loaded(pilot)
            assert len(run_lines(text)) == 4
            assert "held by" not in text


def test_florwb_runs_waits_with_one_line_then_fails_with_one_line(demo: Path):
    with held(demo) as holder:
        proc = florwb(demo, "runs", check=False, env={"FLORWB_LOCK_WAIT_S": "2"})
    assert proc.returncode == 1
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 2, proc.stderr
    assert lines[0].startswith("florwb: ") and "is locked by another process" in lines[0]
    assert f"(PID {holder.pid}," in lines[0] and "retrying for up to 2 s" in lines[0]
    assert lines[1].startswith("florwb: ") and "stayed locked by another process" in lines[1]
    assert f"(PID {holder.pid}," in lines[1] and "for 2 s" in lines[1]


def test_florwb_runs_goes_on_once_the_holder_lets_go(demo: Path):
    with held(demo) as holder:
        proc = subprocess.Popen(
            [sys.executable, "-m", "florwb.cli", "runs"],
            cwd=demo,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "FLORWB_LOCK_WAIT_S": "120"},
        )
        assert proc.stderr is not None
        notice: list[str] = []
        reader = threading.Thread(target=lambda: notice.append(proc.stderr.readline()))
        reader.start()
        reader.join(timeout=60)  # the notice comes after about a second of waiting
        assert notice and f"(PID {holder.pid}," in notice[0], notice
        release(holder)
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert err == ""  # the one notice line was all
    assert len([line for line in out.splitlines() if "finished" in line]) == 4


async def test_a_result_being_paged_lets_other_programs_at_the_catalog(demo: Path):
    """The Query tab's open result reads a snapshot of the catalog, never the catalog: while
    it is open mid-result another process takes DuckDB's write lock at the first try, and
    `florwb runs` in another terminal answers."""
    app = make_app(demo)
    seen = Seen()
    async with app.run_test(size=(100, 30), message_hook=seen) as pilot:
        await loaded(pilot)
        await pilot.press("4")
        pane = app.query_one("#query-pane")
        pane.run_sql("SELECT range AS i FROM range(2500000)")
        assert len((await first_page(pilot, seen)).rows) == 1000
        assert "rows 1–1,000" in await shown(pilot)
        assert pane.stream is not None and pane.stream.is_open and not pane.stream.exhausted
        with held(demo):  # one try, no retries: it fails if anything holds the file
            pass
        proc = subprocess.Popen(
            [sys.executable, "-m", "florwb.cli", "runs"],
            cwd=demo,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "FLORWB_LOCK_WAIT_S": "120"},
        )
        for _ in range(1200):  # bounded: 120 s
            if proc.poll() is not None:
                break
            await pilot.pause(0.1)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        assert err == ""  # no "is locked by" notice: it never waited a second
        assert len([line for line in out.splitlines() if "finished" in line]) == 4
        assert pane.stream.is_open  # still mid-result; paging goes on from the snapshot
        app.query_one("#results").focus()
        await pilot.press("G")
        await seen.wait(
            pilot, QueryRows, lambda m: not m.first and m.serial == pane.serial, what="a page"
        )
        assert "rows 1–2,000" in await shown(pilot)
        assert [r[0] for r in app.query_one("#results").raw_rows] == list(range(2000))


async def test_a_query_waiting_on_the_lock_says_who_and_esc_stops_the_wait(demo: Path):
    app = make_app(demo, poll_s=0)  # no polls: only the query waits on the holder
    seen = Seen()
    async with app.run_test(size=(120, 30), message_hook=seen) as pilot:
        await loaded(pilot)
        await pilot.press("4")
        with held(demo) as holder:
            pane = app.query_one("#query-pane")
            pane.run_sql("SELECT count(*) AS n FROM runs")
            pid = f"(PID {holder.pid},"
            await seen.wait(
                pilot, StoreWaiting, lambda m: m.serial == pane.serial and pid in m.holder
            )
            text = await shown(pilot)
            assert f"held by another process {pid}" in text
            assert "waiting: the catalog is held by" in text
            app.query_one("#results").focus()
            since = seen.mark()
            await pilot.press("escape")
            assert (await query_failed(pilot, seen, since)).stopped
            assert "■ stopped" in await shown(pilot)
        pane.run_sql("SELECT count(*) AS n FROM runs")
        assert [tuple(r) for r in (await first_page(pilot, seen)).rows] == [(4,)]
        assert "✓ 1 row" in await shown(pilot)


async def test_an_idle_workbench_holds_nothing_and_forgets_a_holder_once_it_let_go(
    demo: Path, monkeypatch: pytest.MonkeyPatch
):
    """Loaded and idle, the workbench has no connection open: another process takes the
    write lock at the first try. A reload that meets that holder says who it is; the moment
    the holder lets go, the title says the project again."""
    from florwb.components.live_monitor import LiveMonitor

    monkeypatch.setenv("FLORWB_LOCK_WAIT_S", "120")  # the same wait gets the file
    app = make_app(demo)
    async with app.run_test(size=(100, 30)) as pilot:
        await loaded(pilot)
        await wait_until(
            pilot, lambda: not any(w.is_running for w in app.workers), what="nothing running"
        )
        with held(demo) as holder:
            app.query_one(LiveMonitor).reload()
            await wait_until(
                pilot, lambda: f"(PID {holder.pid}," in app.sub_title, what="who holds it"
            )
        await wait_until(pilot, lambda: "held by" not in app.sub_title, what="the holder gone")
        assert app.sub_title == f"{demo.name} · 4 runs · 2 versions"
