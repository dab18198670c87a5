"""Checkpoint density that serves replay: `flor.checkpointing(..., every=N)` and a per-run
`budget=` decide which main-loop iterations get a checkpoint; `florwb runs` and the run
detail show which iterations are restorable; the replay plan says what a checkpoint every
iteration would have saved.

One project, one script recorded with several policies (real subprocesses, real
checkpoints); the plan and the workbench read it as a user does."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import florwb, recorded_project, run_py, write
from conftest_app import Seen, loaded, make_app, run_detail_shown

import florwb as flor
from florwb_engine.replay import execute, plan_replay
from florwb_engine.store import Store

EPOCHS = 8

# 400 steps per epoch and a light end of the epoch: the inner loops are most of an epoch,
# so skipping them (what a checkpoint allows) is most of its replay time
TRAIN = f"""
import torch
import florwb as flor

torch.manual_seed(0)
every = flor.arg("every", 0)
budget = flor.arg("budget", -1.0)
options = {{}}
if every:
    options["every"] = every
if budget >= 0:
    options["budget"] = budget
data, target = torch.randn(256, 32), torch.randn(256, 1)
net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
with flor.checkpointing(model=net, optimizer=opt, **options):
    for epoch in flor.loop("epoch", range({EPOCHS})):
        for step in flor.loop("step", range(400)):
            idx = torch.randint(0, 256, (64,))
            loss = ((net(data[idx]) - target[idx]) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        flor.log("acc", float(-((net(data) - target) ** 2).mean().detach()))
"""

NEW = TRAIN.replace(
    '        flor.log("acc"',
    '        flor.log("wnorm", net[0].weight.norm().item())\n        flor.log("acc"',
)

POLICIES = {
    "every3": ("every=3",),
    "every1": ("every=1", "budget=0.0"),  # the period wins over the budget
    "budget0": ("budget=0.0",),
    "budget1": ("budget=1.0",),
}


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> tuple[Path, dict[str, dict]]:
    """The project, and per policy its run as `florwb runs --json` lists it."""
    root = tmp_path_factory.mktemp("density") / "project"
    names = list(POLICIES)
    recorded_project(root, TRAIN, "--kwargs", *POLICIES[names[0]])
    for name in names[1:]:
        run_py(root, "train.py", "--kwargs", *POLICIES[name])
    listed = json.loads(florwb(root, "runs", "--json").stdout)
    assert len(listed) == len(names)
    return root, dict(zip(names, listed))  # oldest first, as recorded


def _files(project: Path, run_id: str) -> list[int]:
    folder = project / ".florwb" / "checkpoints" / run_id
    return sorted(int(p.stem.split("-")[1]) for p in folder.glob("epoch-*.pt"))


def test_every_n_checkpoints_iterations_0_n_2n_and_the_last(recorded):
    project, runs = recorded
    assert runs["every1"]["restorable"] == list(range(EPOCHS))
    assert runs["every3"]["restorable"] == [0, 3, 6, 7]  # the last, 7, always
    for run in runs.values():
        assert run["main_iterations"] == EPOCHS
        assert run["saved_iterations"] == []
        assert _files(project, run["run_id"]) == run["restorable"]  # what is on disk


def test_the_budget_sets_the_period_and_every_overrides_it(recorded):
    _project, runs = recorded
    assert runs["budget0"]["restorable"] == [EPOCHS - 1]  # nothing affordable but the end
    assert len(runs["budget1"]["restorable"]) > 1  # checkpoints as cheap as they are here
    assert runs["every1"]["args"]["budget"] == 0.0  # every=1 had all of them all the same


def test_runs_lists_restorable_iterations(recorded):
    project, runs = recorded
    lines = florwb(project, "runs").stdout.splitlines()
    start = lines[0].index("restorable")
    cells = {line.split()[0]: line[start:].split()[0] for line in lines[1:] if line.strip()}
    assert cells[runs["every3"]["run_id"]] == f"4/{EPOCHS}"
    assert cells[runs["every1"]["run_id"]] == f"{EPOCHS}/{EPOCHS}"
    assert cells[runs["budget0"]["run_id"]] == f"1/{EPOCHS}"


async def test_the_run_detail_names_the_restorable_iterations(recorded):
    project, runs = recorded
    app = make_app(project)
    seen = Seen()
    async with app.run_test(size=(120, 80), message_hook=seen) as pilot:
        await loaded(pilot)
        text = await run_detail_shown(pilot, seen, runs["every3"]["run_id"])
        assert "Checkpoints (4)" in text
        assert f"restorable epoch iterations: 0, 3, 6-7 (4 of {EPOCHS})" in text
        app.pop_screen()
        text = await run_detail_shown(pilot, seen, runs["budget0"]["run_id"])
        assert "Checkpoints (1)" in text
        assert f"restorable epoch iterations: 7 (1 of {EPOCHS})" in text


@pytest.fixture
def changed(recorded, tmp_path) -> tuple[Path, dict[str, dict]]:
    """A copy of the project with a new statement in the epoch body (outer mode)."""
    project, runs = recorded
    copy = tmp_path / "project"
    shutil.copytree(project, copy, symlinks=True)
    write(copy / "train.py", NEW)
    return copy, runs


def test_the_plan_says_what_a_checkpoint_every_iteration_would_save(changed):
    project, runs = changed
    plan = plan_replay(
        project, ["wnorm"], run_ids=[runs["budget0"]["run_id"], runs["every1"]["run_id"]]
    )
    sparse, dense = sorted(plan.ready(), key=lambda r: r.run_id != runs["budget0"]["run_id"])
    assert sparse.mode == dense.mode == "outer"
    assert sparse.rerun == list(range(EPOCHS - 1))  # no checkpoint before the last
    assert sparse.denser_estimate_s is not None and sparse.denser_estimate_s < sparse.estimate_s
    assert any(
        n.startswith("with a checkpoint every epoch iteration ~")
        and f"(re-run now: {EPOCHS - 1} epoch iterations from the nearest checkpoint" in n
        for n in sparse.notes
    ), sparse.notes
    assert dense.denser_estimate_s is None and dense.rerun == []  # nothing to gain
    assert not any("with a checkpoint every" in n for n in dense.notes)
    assert plan.denser_estimate_s is not None and plan.denser_estimate_s < plan.estimate_s
    note = plan.denser_note()
    assert note is not None and "this replay would take ~" in note
    # the CLI's plan, as text and as JSON
    out = florwb(project, "replay", "wnorm", check=False).stdout
    assert "with a checkpoint every epoch iteration this replay would take ~" in out
    shown = json.loads(florwb(project, "replay", "wnorm", "--json").stdout)["plan"]
    assert shown["denser_note"].startswith("with a checkpoint every epoch iteration")
    by_run = {r["run_id"]: r for r in shown["runs"]}
    assert by_run[runs["every1"]["run_id"]]["denser_estimate_s"] is None
    assert by_run[runs["budget0"]["run_id"]]["rerun"] == list(range(EPOCHS - 1))


def test_a_run_recorded_every_3_replays_from_those_checkpoints(changed):
    project, runs = changed
    run_id = runs["every3"]["run_id"]
    plan = plan_replay(project, ["wnorm"], run_ids=[run_id])
    (run,) = plan.ready()
    assert sorted(i for s in run.segments for i in s.skip_inner) == [0, 3, 6, 7]
    result = execute(plan)
    assert result.status == "finished", result
    replayed = Store(project).dataframe("wnorm")
    values = replayed[replayed.run_id == run_id].dropna(subset=["wnorm"])
    assert sorted(values.epoch) == list(range(EPOCHS))


def test_policy_keywords_are_checked_and_objects_under_those_names_still_register(tmp_path):
    with pytest.raises(ValueError, match="every=0"):
        with flor.checkpointing(every=0):
            pass  # refused before any run starts in this process
    with pytest.raises(ValueError, match="budget"):
        with flor.checkpointing(budget=1.5):
            pass
    project = tmp_path / "named"
    write(
        project / "train.py",
        """
        import torch
        import florwb as flor

        net = torch.nn.Linear(2, 1)
        every = torch.nn.Linear(2, 2)  # a module under a policy keyword is an object
        with flor.checkpointing(model=net, every=every):
            for epoch in flor.loop("epoch", range(2)):
                flor.log("w", net.weight.sum().item())
        """,
    )
    run_py(project, "train.py")
    (folder,) = (project / ".florwb" / "checkpoints").iterdir()
    import torch

    saved = torch.load(folder / "epoch-000001.pt", weights_only=True)
    assert set(saved["objects"]) == {"model", "every"}


def test_every_picks_the_mirrored_saves_too_and_they_are_listed_apart(tmp_path):
    """A script that saves its own checkpoints: `every=2` keeps the saves of iterations 0,
    2, 4, whatever they cost; they are not flor.checkpointing's, so the listing names them
    apart from the restorable iterations (the plan decides whether they hold the state)."""
    project = recorded_project(
        tmp_path / "saves",
        """
        import torch
        import florwb as flor

        net = torch.nn.Linear(2, 1)
        with flor.checkpointing(every=2, budget=0.0):
            for epoch in flor.loop("epoch", range(5)):
                flor.log("w", net.weight.sum().item())
                torch.save({"model": net.state_dict()}, "ckpt.pt")
        """,
        files={".gitignore": "ckpt.pt\n"},
    )
    (run,) = json.loads(florwb(project, "runs", "--json").stdout)
    assert run["restorable"] == [] and run["saved_iterations"] == [0, 2, 4]
    lines = florwb(project, "runs").stdout.splitlines()
    start = lines[0].index("restorable")
    assert lines[1][start:].startswith("0/5 +3 saves")
