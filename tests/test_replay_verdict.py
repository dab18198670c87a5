"""Every replayed run gets a verdict, and a diverged replay's values are never served as
plain values: real recordings whose replay diverges at a segment cut (retried strictly
and verified) or whatever the replay does (an unseeded generator: unreproducible)."""

from __future__ import annotations

import json
import shutil
import warnings

import duckdb
import pytest
from conftest import florwb, git, run_py, write
from conftest_app import Seen, loaded, make_app, run_detail_shown, run_lines

import florwb as flor
from florwb.ui.format import short_run
from florwb_engine.replay import execute, plan_replay
from florwb_engine.run_compare import compare_runs
from florwb_engine.store import Store
from florwb_engine.store.curves import load_curves

# `seen` is a dict in another module of the project (tally.py), changed in place by its
# `note`, once a step: no checkpoint holds it and the planner, which reads train.py alone,
# cannot tell, so a segment that starts from a checkpoint (its previous epoch replayed
# with the steps skipped) starts with seen["n"] = 0 and re-logs less than the run did.
# `noise=1` logs a value of an unseeded generator: no replay can reproduce it.
TALLY = """
seen = {"n": 0.0}


def note(x):
    seen["n"] += x
"""

SCRIPT = """
import random
import time
import torch
import florwb as flor
import tally

torch.manual_seed(0)
noise = flor.arg("noise", 0)
flor.set_checkpoint_budget(1.0)
net = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(net.parameters(), lr=0.1)

with flor.checkpointing(model=net, optimizer=opt):
    for epoch in flor.loop("epoch", range(4)):
        for step in flor.loop("step", range(2)):
            loss = net(torch.ones(1, 4)).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
            tally.note(1.0)
        flor.log("seen", tally.seen["n"])
        if noise:
            flor.log("noise", random.Random().random())
        time.sleep(0.05)  # epochs well above checkpoint cost: every epoch is checkpointed
"""

TODAY = SCRIPT.replace(
    "            opt.step()\n",
    '            opt.step()\n            flor.log("w", float(net.weight.sum()))\n',
)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """Run 0 (noise=0) diverges only at the segment cut; run 1 (noise=1) always does."""
    root = tmp_path_factory.mktemp("verdict") / "project"
    root.mkdir()
    git(root, "init", "-q")
    write(root / "train.py", SCRIPT)
    write(root / "tally.py", TALLY)
    git(root, "add", "-A")
    git(root, "commit", "-qm", "v1")
    run_py(root, "train.py")
    run_py(root, "train.py", "--kwargs", "noise=1")
    write(root / "train.py", TODAY)
    return root


@pytest.fixture(scope="module")
def replayed(recorded, tmp_path_factory):
    """The recorded project after one replay of `w` with 2 workers (two segments per run)."""
    copy = tmp_path_factory.mktemp("replayed") / "project"
    shutil.copytree(recorded, copy, symlinks=True)
    plan = plan_replay(copy, ["w"], workers=4)
    # two segments per run: the second starts from a checkpoint, without tally's state
    assert [len(r.segments) for r in plan.ready()] == [2, 2]
    assert all(r.segments[1].first > 0 for r in plan.ready())
    result = execute(plan)
    return copy, plan, result


def _runs(project):
    return [r.run_id for r in Store(project).run_rows()]


def test_a_segment_cut_divergence_is_retried_strictly_and_verified(replayed):
    project, _plan, result = replayed
    clean, noisy = _runs(project)
    by_run = {r.run_id: r for r in result.runs}
    assert by_run[clean].verdict == "verified" and by_run[clean].strict
    assert by_run[clean].compared == 4 and by_run[clean].divergence is None
    # served: exactly the strict re-run's 8 values, equal to a forward run's
    frame = Store(project).dataframe("w", "seen")
    rows = frame[(frame.run_id == clean) & frame.w.notna()]
    assert len(rows) == 8
    assert frame.attrs["withheld"].runs == {noisy}


def test_an_unreproducible_run_stays_diverged_with_its_first_differing_value(replayed):
    project, plan, result = replayed
    _clean, noisy = _runs(project)
    run = next(r for r in result.runs if r.run_id == noisy)
    assert run.verdict == "diverged" and run.status == "diverged" and run.strict
    assert run.divergence.startswith("unreproducible: noise at epoch=0: recorded ")
    assert result.status == "diverged"
    stored = Store(project).query(
        "SELECT run_id, verdict, compared, strict FROM replay_runs ORDER BY verdict"
    )
    assert stored.values.tolist() == [[noisy, "diverged", 8, True], [_clean, "verified", 4, True]]


def test_diverged_values_are_left_out_of_every_reader_with_a_note(replayed):
    project, _plan, _result = replayed
    clean, noisy = _runs(project)
    store = Store(project)
    frame = store.dataframe("w")
    assert set(frame[frame.w.notna()].run_id) == {clean}
    assert frame.attrs["withheld"].values == 8  # the names asked for: w of run 1
    assert frame.attrs["withheld"].note("--diverged") == (
        "8 values of 1 diverged replay left out; --diverged shows them"
    )
    served = store.query("SELECT DISTINCT run_id FROM logs WHERE name = 'w'").run_id.tolist()
    assert served == [clean]
    cli = florwb(project, "dataframe", "w", "--format", "json")
    assert {row["run_id"] for row in json.loads(cli.stdout) if row["w"] is not None} == {clean}
    assert "8 values of 1 diverged replay left out; --diverged shows them" in cli.stderr
    query = florwb(project, "query", "SELECT count(*) AS n FROM logs WHERE name = 'w'")
    assert query.stdout.split()[-1] == "8"
    # w, seen and noise of run 1: what the `logs` view leaves out
    assert "16 values of 1 diverged replay left out; logs_all shows them" in query.stderr
    assert florwb(project, "query", "SELECT 1 AS n FROM logs_all LIMIT 1").stderr == ""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import os

        here = os.getcwd()
        os.chdir(project)
        try:
            flor_frame = flor.dataframe("w")
        finally:
            os.chdir(here)
    assert set(flor_frame[flor_frame.w.notna()].run_id) == {clean}
    assert any("diverged=True shows them" in str(w.message) for w in caught)


def test_the_opt_in_shows_diverged_values_marked(replayed):
    project, _plan, _result = replayed
    clean, noisy = _runs(project)
    frame = Store(project).dataframe("w", "seen", diverged=True)
    noisy_rows = frame[(frame.run_id == noisy) & frame.w.notna()]
    assert len(noisy_rows) == 8 and set(noisy_rows.diverged) == {"w"}
    # where the run recorded `seen`, the recorded value is the one shown, not flagged
    epochs = frame[(frame.run_id == noisy) & frame.seen.notna() & frame.step.isna()]
    assert list(epochs.seen) == [2.0, 4.0, 6.0, 8.0] and epochs.diverged.isna().all()
    assert frame[frame.run_id == clean].diverged.isna().all()
    args = Store(project).dataframe("arg:noise", diverged=True)
    assert list(args["arg:noise"]) == [0, 1] and args.diverged.isna().all()
    cli = florwb(project, "dataframe", "w", "--diverged", "--format", "json")
    marked = [row for row in json.loads(cli.stdout) if row["diverged"]]
    assert len(marked) == 8 and {row["run_id"] for row in marked} == {noisy}
    assert cli.stderr == ""
    every = Store(project).query(
        "SELECT verdict, count(*) AS n FROM logs_all WHERE name = 'w' GROUP BY 1 ORDER BY 1"
    )
    assert every.values.tolist() == [["diverged", 8], ["verified", 8]]


def test_runs_shows_the_verdict(replayed):
    project, plan, _result = replayed
    clean, noisy = _runs(project)
    listing = florwb(project, "runs").stdout
    assert "replay" in listing.splitlines()[0]
    lines = {line.split()[0]: line for line in listing.splitlines()[1:] if line.strip()}
    assert "verified" in lines[clean] and "diverged" in lines[noisy]
    assert f"! run {noisy}: its replay diverged, values withheld: unreproducible: noise" in listing
    runs = {r["run_id"]: r for r in json.loads(florwb(project, "runs", "--json").stdout)}
    assert runs[clean]["verdict"] == "verified"
    (verdict,) = runs[noisy]["verdicts"]
    assert verdict["replay_id"] == plan.replay_id and verdict["verdict"] == "diverged"
    assert verdict["names"] == ["w"] and verdict["strict"] is True


def test_a_later_replay_retries_the_diverged_run(replayed, tmp_path):
    project = tmp_path / "project"
    shutil.copytree(replayed[0], project, symlinks=True)
    clean, noisy = _runs(project)
    again = plan_replay(project, ["w"])
    status = {r.run_id: (r.status, r.reason) for r in again.runs}
    assert status[clean] == ("done", "already has w")
    assert status[noisy][0] == "ready"
    (retry,) = again.ready()
    assert f"retries replay {replayed[1].replay_id}, which diverged on this run" in retry.notes


def test_the_chart_leaves_diverged_values_out_with_the_note(replayed):
    project, _plan, _result = replayed
    clean, noisy = _runs(project)
    curves = load_curves(Store(project), [clean, noisy], "w", "step")
    assert {c.run_id for c in curves.curves} == {clean}
    assert curves.withheld.values == 8 and curves.withheld.runs == {noisy}


def test_compare_leaves_diverged_values_out_with_the_note(replayed):
    project, _plan, _result = replayed
    clean, noisy = _runs(project)
    comparison = compare_runs(project, Store(project), clean, noisy)
    assert "w" in comparison.only_first and "w" not in comparison.only_second
    assert comparison.withheld.values == 16 and comparison.withheld.runs == {noisy}


async def test_the_workbench_says_diverged_and_never_shows_a_check_beside_it(replayed):
    project, plan, _result = replayed
    clean, noisy = _runs(project)
    app = make_app(project)
    seen = Seen()
    async with app.run_test(size=(140, 50), message_hook=seen) as pilot:
        text = await loaded(pilot)
        noisy_line = next(line for line in run_lines(text) if short_run(noisy) in line)
        clean_line = next(line for line in run_lines(text) if short_run(clean) in line)
        assert noisy_line.split()[0] == "≠" and "diverged" in noisy_line.split(), text
        assert clean_line.split()[0] == "↻" and "replayed" in clean_line.split(), text
        text = await run_detail_shown(pilot, seen, noisy)
        assert "Replays (1)" in text
        assert "✓" not in text.split("Metrics")[1].split("Checkpoints")[0]
        assert "16 values of 1 diverged replay left out; florwb dataframe NAME --diverged" in text
        assert f"{plan.replay_id} diverged: unreproducible: noise at epoch=0" in text
        rows = [line.split() for line in text.splitlines() if plan.replay_id in line]
        assert [plan.replay_id, "diverged", "diverged", "w", "0", "(16", "withheld)"] in [
            row[:7] for row in rows
        ], text


def test_a_catalog_rebuilt_from_the_journals_still_withholds(replayed, tmp_path):
    project = tmp_path / "project"
    shutil.copytree(replayed[0], project, symlinks=True)
    clean, noisy = _runs(project)
    (project / ".florwb" / "florwb.duckdb").unlink()  # what repair does with a damaged one
    frame = Store(project).dataframe("w")
    assert set(frame[frame.w.notna()].run_id) == {clean}
    assert frame.attrs["withheld"].runs == {noisy} and frame.attrs["withheld"].values == 8
    verdicts = {r.run_id: r.verdict for r in Store(project).run_rows()}
    assert verdicts == {clean: "verified", noisy: "diverged"}


def test_a_catalog_from_before_verdicts_withholds_what_its_replays_called_diverged(
    replayed, tmp_path
):
    """Schema 6 had no verdicts: the rows of a replay whose own results said `diverged`
    were served. Opening such a catalog moves them out and stores the verdict."""
    project = tmp_path / "project"
    shutil.copytree(replayed[0], project, symlinks=True)
    _clean, noisy = _runs(project)
    for sidecar in (project / ".florwb" / "journal").glob("*.verdicts.json"):
        sidecar.unlink()  # older florwb wrote none
    con = duckdb.connect(str(project / ".florwb" / "florwb.duckdb"))
    con.execute("INSERT INTO log_rows SELECT * FROM withheld_rows")
    con.execute("INSERT INTO name_stats SELECT * FROM withheld_name_stats")
    for table in ("withheld_rows", "withheld_name_stats", "replay_runs"):
        con.execute(f"DROP TABLE {table}")
    con.execute("DROP VIEW logs_all")
    con.execute("UPDATE meta SET value = '6' WHERE key = 'schema_version'")
    assert con.execute("SELECT count(*) FROM log_rows").fetchall()[0][0] > 0
    con.close()
    store = Store(project)
    frame = store.dataframe("w")
    assert frame.attrs["withheld"].runs == {noisy} and frame.attrs["withheld"].values == 8
    assert noisy not in set(frame[frame.w.notna()].run_id)
    verdict = store.query(f"SELECT verdict FROM replay_runs WHERE run_id = '{noisy}'")
    assert verdict.verdict.tolist() == ["diverged"]
