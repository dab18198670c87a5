"""Workbench: the replay loop run more than once in one session."""

from __future__ import annotations

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
)

from florwb.panes.replay import ReplayPane
from florwb.screens.confirm import ConfirmScreen
from florwb.ui.format import short_run
from florwb.ui.messages import MetricChanged, ReplayEnded, ReplaysLoaded
from florwb_engine.store import Store

# A hindsight statement that takes a while (0.3 s an epoch): a replay of it can be cancelled
# midway on any machine.
SLOW_LINE = '        flor.log("slow_sum", __import__("time").sleep(0.3) or 1.0)\n'
GRAD_LINE = '        flor.log("bias_sum", float(sum(p.sum().item() for p in model.parameters())))\n'


@pytest.fixture
def demo(tmp_path: Path) -> Path:
    return copy_demo(tmp_path)


def _a_run_done(pane: ReplayPane) -> bool:
    """Some run's segments have all finished (the pane then shows it `✓ done`)."""
    states: dict[str, set[str]] = {}
    for (run_id, _segment), (_done, _total, state) in pane.segments.items():
        states.setdefault(run_id, set()).add(state)
    return any(found == {"finished"} for found in states.values())


def _replays(project: Path):
    return Store(project).query("SELECT replay_id, status, names FROM replays ORDER BY started")


def add_statement(project: Path, line: str = GRAD_LINE) -> None:
    """A second hindsight statement, next to the demo's pending weight_norm."""
    script = project / "train.py"
    text = script.read_text()
    anchor = '        flor.log("acc", evaluate(model))\n'
    assert anchor in text
    script.write_text(text.replace(anchor, anchor + line))


async def replay_marked(pilot, app, seen: Seen, what: str) -> ReplayEnded:
    """`r`, wait for the plan, `⏎`, wait for the replay's end: one more ReplayEnded and the
    app no longer running one (a replay of one run can start and end between two looks at
    the app, so "it was running" is not waited for). Returns that ReplayEnded."""
    since = seen.mark()
    await pilot.press("r")
    await plan_shown(pilot, seen, since)
    await pilot.press("enter")
    end = await seen.wait(pilot, ReplayEnded, since=since, timeout=120, what=f"{what} ended")
    await wait_until(pilot, lambda: not app.replay_running, what=f"{what} ended")
    return end


async def replays_listed(pilot, seen: Seen, end: ReplayEnded, statuses: list[str]) -> str:
    """The past replays read back after `end` (ReplaysLoaded), newest first with these
    statuses (a read while it ran would list it running): the screen's text."""
    await seen.wait(
        pilot,
        ReplaysLoaded,
        lambda m: [r.status for r in m.replays] == statuses,
        since=seen.after(end),
        timeout=60,
        what=f"replays read back as {statuses}",
    )
    return await shown(pilot)


async def start_slow_replay_on_one_worker(pilot, seen: Seen, demo: Path) -> None:
    """Add the slow statement, plan it, bring the plan to one worker (the four runs one
    after another) and start it: long enough to be cancelled midway on any machine."""
    await pending_known(pilot, "weight_norm")
    add_statement(demo, SLOW_LINE)
    await pending_known(pilot, "slow_sum")
    since = seen.mark()
    await pilot.press("r")
    await plan_shown(pilot, seen, since)
    for _ in range(4):
        await pilot.press("minus")
    text = await plan_shown(pilot, seen, since)  # planned again for the workers now asked
    assert "with 1 worker " in text
    await pilot.press("enter")


async def test_a_second_replay_in_one_session_runs_and_shows_its_progress(demo: Path):
    app, seen = make_app(demo), Seen()
    async with app.run_test(size=(100, 30), message_hook=seen) as pilot:
        await loaded(pilot)
        await pending_known(pilot, "weight_norm")
        await pilot.press("g", "j", "space")  # one run: quick
        (run_id,) = app.marked_runs
        end = await replay_marked(pilot, app, seen, "first replay")
        text = await replays_listed(pilot, seen, end, ["finished"])
        assert "Past replays: 1" in text
        add_statement(demo)
        await pilot.press("1")
        await pending_known(pilot, "bias_sum")
        end = await replay_marked(pilot, app, seen, "second replay")
        text = await replays_listed(pilot, seen, end, ["finished", "finished"])
        assert "Past replays: 2" in text
        assert app.is_running
        line = next(line for line in text.splitlines() if short_run(run_id) in line)
        assert "finished" in line
    # the store is read once the app is closed: no second handle on the file meanwhile
    second = _replays(demo)
    assert list(second["status"]) == ["finished", "finished"]
    assert "bias_sum" in second["names"].iloc[-1]
    assert f"Replay {second['replay_id'].iloc[-1]}" in text
    n = Store(demo).query(
        f"SELECT count(*) AS n FROM logs WHERE name = 'bias_sum' AND run_id = '{run_id}'"
    )["n"][0]
    assert n > 0


async def test_replayed_names_are_offered_by_metric_cycling_and_show_their_values(demo: Path):
    app, seen = make_app(demo), Seen()
    async with app.run_test(size=(100, 30), message_hook=seen) as pilot:
        await loaded(pilot)
        await pending_known(pilot, "weight_norm")
        await pilot.press("g", "j", "space")
        (run_id,) = app.marked_runs
        await replay_marked(pilot, app, seen, "replay")
        await pilot.press("1")
        await wait_until(
            pilot,
            lambda: (
                app.history is not None
                and any(m.name == "weight_norm" for m in app.history.metrics)
            ),
            what="weight_norm among the metrics",
        )
        passed = []
        for _ in range(len(app.history.metrics) + 1):
            if app.history.metric == "weight_norm":
                break
            passed.append(app.history.metric)
            since = seen.mark()
            await pilot.press("m")
            await seen.wait(
                pilot,
                MetricChanged,
                lambda m, before=passed[-1]: m.metric != before,
                since=since,
                what="the next metric",
            )
        assert app.history.metric == "weight_norm", passed
        text = await shown(pilot)
        assert "weight_norm" in text  # the metric header
        line = next(line for line in text.splitlines() if short_run(run_id) in line)
    last = Store(demo).query(
        "SELECT arg_max(value, seq) AS v FROM logs "
        f"WHERE name = 'weight_norm' AND run_id = '{run_id}'"
    )["v"][0]
    assert f"{float(last):.4g}" in line


async def test_a_name_a_run_has_is_not_replayed_again_and_the_default_query_counts_once(
    demo: Path,
):
    from florwb_engine.store.queries import example_query

    acc_sql = example_query("acc")
    app, seen = make_app(demo), Seen()
    async with app.run_test(size=(100, 30), message_hook=seen) as pilot:
        await loaded(pilot)
        await pending_known(pilot, "weight_norm")
        await pilot.press("g", "j", "space")
        (run_id,) = app.marked_runs
        await replay_marked(pilot, app, seen, "first replay")
        add_statement(demo)
        await pilot.press("1")
        await pending_known(pilot, "bias_sum")
        await replay_marked(pilot, app, seen, "second replay")
        # the Query tab's default query: each recorded acc once, replays or not
        await pilot.press("4")
        app.query_one("#query-pane").run_sql(acc_sql)
        page = await first_page(pilot, seen)
        assert len(page.rows) == 4 and page.stream.exhausted
        await rows_added(pilot)
        text = await shown(pilot)
        assert "4 rows" in text
        assert short_run(run_id) in text
    first, second = _replays(demo)["replay_id"]
    sources = Store(demo).query(
        "SELECT name, list(DISTINCT source ORDER BY source) AS s FROM logs "
        f"WHERE run_id = '{run_id}' AND name IN ('weight_norm', 'bias_sum') GROUP BY name"
    )
    by_name = dict(zip(sources["name"], (list(s) for s in sources["s"]), strict=True))
    assert by_name == {"weight_norm": [first], "bias_sum": [second]}
    recorded = Store(demo).query(
        f"SELECT count(*) AS n FROM logs WHERE name = 'acc' AND run_id = '{run_id}' "
        "AND source = 'record'"
    )["n"][0]
    served = Store(demo).query(acc_sql)
    acc = dict(zip(served["run_id"], served["acc"], strict=True))[run_id]
    assert len(acc) == recorded


async def test_the_offer_to_replay_goes_once_every_run_has_the_name(demo: Path):
    app, seen = make_app(demo), Seen()
    async with app.run_test(size=(100, 30), notifications=True, message_hook=seen) as pilot:
        await loaded(pilot)
        await pending_known(pilot, "weight_norm")  # the banner is drawn with it
        assert "new in train.py: weight_norm" in await shown(pilot)  # the offer
        await replay_marked(pilot, app, seen, "replay of every run")
        await pilot.press("1")
        await wait_until(
            pilot,
            lambda: not any("weight_norm" in p.new for p in app.pending),
            what="weight_norm no longer pending",
        )
        text = await shown(pilot)
        assert "new in train.py" not in text and "r: replay past runs" not in text
        await pilot.press("r")
        assert "Nothing to replay" in await shown(pilot)  # a toast, sent as r is handled
    runs = Store(demo).query(
        "SELECT count(DISTINCT run_id) AS n FROM logs WHERE name = 'weight_norm'"
    )["n"][0]
    assert runs == 4


async def test_after_a_cancelled_replay_r_plans_the_runs_still_lacking_the_name(demo: Path):
    app, seen = make_app(demo), Seen()
    async with app.run_test(size=(100, 30), message_hook=seen) as pilot:
        await loaded(pilot)
        await start_slow_replay_on_one_worker(pilot, seen, demo)
        await wait_until(pilot, lambda: app.replay_running, what="replay running")
        await pilot.press("c")
        await wait_until(pilot, lambda: not app.replay_running, timeout=60, what="cancelled")
        await pilot.press("1")
        await pending_known(pilot, "weight_norm")
        assert "new in train.py: weight_norm" in await shown(pilot)  # the offer
        since = seen.mark()
        await pilot.press("r")
        text = await plan_shown(pilot, seen, since)
        assert "Replay plan: weight_norm" in text and "Nothing to replay" not in text
    assert list(_replays(demo)["status"]) == ["cancelled"]


async def test_q_during_a_replay_asks_before_quitting(demo: Path):
    app, seen = make_app(demo), Seen()
    async with app.run_test(size=(100, 30), message_hook=seen) as pilot:
        await loaded(pilot)
        await start_slow_replay_on_one_worker(pilot, seen, demo)
        await wait_until(pilot, lambda: app.replay_running, what="replay running")
        await pilot.press("q")
        await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="question")
        text = await shown(pilot)
        assert "Quit and cancel it?" in text and "A replay is running" in text
        await pilot.press("n")
        await wait_until(pilot, lambda: not isinstance(app.screen, ConfirmScreen), what="gone")
        assert "Quit and cancel it?" not in await shown(pilot)
        assert app.is_running
        await pilot.press("q")  # asked again, unless the replay finished meanwhile
        await wait_until(
            pilot,
            lambda: not app.is_running or isinstance(app.screen, ConfirmScreen),
            what="the question or the end",
        )
        if app.is_running:
            await pilot.press("y")
            await wait_until(pilot, lambda: not app.is_running, what="the app to quit")
    statuses = list(_replays(demo)["status"])
    assert len(statuses) == 1 and statuses[0] in ("cancelled", "finished")


async def test_plan_says_segment_counts_in_words_and_caps_workers_at_the_cores(demo: Path):
    import os
    import re

    app, seen = make_app(demo), Seen()
    async with app.run_test(size=(100, 30), notifications=True, message_hook=seen) as pilot:
        await loaded(pilot)
        await pending_known(pilot, "weight_norm")
        await pilot.press("g", "j", "space")
        since = seen.mark()
        await pilot.press("r")
        await plan_shown(pilot, seen, since)
        for _ in range(4):
            await pilot.press("minus")
        text = await plan_shown(pilot, seen, since)  # planned again for one worker
        assert "with 1 worker " in text
        count, word = re.search(r"· (\d+) (segments?)\b", text).groups()
        assert word == ("segment" if count == "1" else "segments"), text
        cores = os.cpu_count() or 1
        for _ in range(cores + 2):
            await pilot.press("plus")
        # the toast about cores, sent as a press past the cap is handled
        assert "core" in await shown(pilot)
        text = await plan_shown(pilot, seen, since)  # planned again for the workers kept
        assert f"with {cores} worker" in text and f"with {cores + 1} workers" not in text


async def test_cancel_keeps_the_runs_that_had_finished(demo: Path):
    """One worker replays the four runs one after another; cancelled once one is done."""
    app, seen = make_app(demo), Seen()
    async with app.run_test(size=(100, 30), message_hook=seen) as pilot:
        await loaded(pilot)
        await start_slow_replay_on_one_worker(pilot, seen, demo)
        pane = app.query_one("#replay-pane", ReplayPane)
        await wait_until(pilot, lambda: _a_run_done(pane), timeout=120, what="a run done")
        text = await shown(pilot)  # the pane draws a segment's progress as it is handed it
        assert "✓ done" in text
        await pilot.press("c")
        done = [r.run_id for r in app.history.runs if _line_of(text, r.run_id, "✓ done")]
        assert done
        end = await seen.wait(pilot, ReplayEnded, timeout=60, what="cancelled")
        await wait_until(pilot, lambda: not app.replay_running, what="cancelled")
        text = await replays_listed(pilot, seen, end, ["cancelled"])
        assert "Past replays: 1" in text
        for run_id in done:
            assert "finished" in _line_of(text, run_id), app.query_one("#replay-pane").result
    ((replay_id, status, _names),) = _replays(demo).itertuples(index=False)
    assert status == "cancelled"
    kept = Store(demo).query(
        f"SELECT DISTINCT run_id FROM logs WHERE source = '{replay_id}' AND name = 'weight_norm'"
    )
    assert set(kept["run_id"]) >= set(done)
    assert len(kept) < 4  # the runs stopped midway left nothing


def _line_of(text: str, run_id: str, needle: str = "") -> str:
    line = next((line for line in text.splitlines() if short_run(run_id) in line), "")
    return line if needle in line else ""
