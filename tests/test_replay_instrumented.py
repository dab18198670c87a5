"""A plain script instrumented by `florwb instrument`, recorded, then replayed: hands-free
mode must give runs that replay like hand-written ones."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import florwb, git, run_py, write

from florwb_engine.replay import execute, plan_replay
from florwb_engine.store import Store

CASE = Path(__file__).parent / "instrument_corpus" / "01_classifier"
EPOCH_LINE = (
    '    for epoch in flor.loop("epoch", range(EPOCHS)):  # loop over the dataset multiple times\n'
)
STATEMENT = '        flor.log("wsum", float(sum(p.abs().sum() for p in net.parameters())))\n'


def test_instrumented_classifier_replays_like_a_fresh_run(repo, tmp_path):
    write(repo / "train.py", (CASE / "train.py").read_text())
    git(repo, "add", "train.py")
    git(repo, "commit", "-q", "-m", "plain script")
    florwb(repo, "instrument", "train.py", "--write")
    instrumented = (repo / "train.py").read_text()
    assert instrumented == (CASE / "expected.py").read_text()
    run_py(repo, "train.py", "--kwargs", "EPOCHS=3")
    assert EPOCH_LINE in instrumented
    today = instrumented.replace(EPOCH_LINE, EPOCH_LINE + STATEMENT)
    (repo / "train.py").write_text(today)

    plan = plan_replay(repo, ["wsum"])
    (run,) = plan.ready()
    # the epoch body prints running_loss, set in the step loop: kept at record time with the
    # checkpoints, it is restored there and the step loops are skipped
    assert run.mode == "outer"
    result = execute(plan)
    assert result.status == "finished", result

    fresh = tmp_path / "fresh"
    write(fresh / "train.py", today)
    run_py(fresh, "train.py", "--kwargs", "EPOCHS=3")
    replayed = list(Store(repo).dataframe("wsum").wsum)
    assert len(replayed) == 3
    assert replayed == pytest.approx(list(Store(fresh).dataframe("wsum").wsum))
