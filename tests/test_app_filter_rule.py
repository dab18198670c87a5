"""The history's filter line reads its text by one rule (florwb_engine.store.run_selection
.is_condition): the pane that runs a `--where` condition and the summary that explains an
empty result agree on what is a condition, also for SQL words without an operator sign."""

from __future__ import annotations

from pathlib import Path

from conftest_app import Seen, copy_demo, loaded, make_app, run_lines, shown

from florwb.panes.history import WhereAnswered
from florwb_engine.store.run_selection import is_condition


def test_words_and_conditions():
    assert is_condition("lr > 0.05") and is_condition("status LIKE 'fin%'")
    assert is_condition("exception is null") and is_condition("script in ('a.py')")
    assert not is_condition("finished train.py") and not is_condition("0.05")


async def test_a_condition_without_an_operator_sign_is_explained_as_a_condition(tmp_path: Path):
    demo = copy_demo(tmp_path)
    app, seen = make_app(demo, watch=False), Seen()
    async with app.run_test(size=(100, 30), message_hook=seen) as pilot:
        await loaded(pilot)
        condition = "status like 'nothing%'"
        await pilot.press("slash", *condition)
        answered = await seen.wait(
            pilot, WhereAnswered, lambda m: m.condition == condition, what="the condition run"
        )
        assert answered.run_ids == set() and answered.error is None
        text = await shown(pilot)
        assert "No run matches the condition" in text
        assert run_lines(text) == []
        assert "Every word must appear" not in text
