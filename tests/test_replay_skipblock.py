"""A checkpoint holds the state at the end of its iteration's inner loops (FLOR's SkipBlock),
so an outer-mode replay that skips them runs the rest of the epoch body once, as the run did:
a scheduler stepped at the end of the epoch is not stepped twice."""

from __future__ import annotations

import shutil

import pytest
import torch
from conftest import recorded_project, run_py, write

from florwb_engine.record.checkpoint import AFTER_INNER
from florwb_engine.replay import execute, plan_replay
from florwb_engine.store import Store

OLD = """
import torch
import florwb as flor

torch.manual_seed(0)
data, target = torch.randn(32, 4), torch.randn(32, 1)
net = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(net.parameters(), lr=0.06)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
with flor.checkpointing(model=net, optimizer=opt, scheduler=sched):
    for epoch in flor.loop("epoch", range(6)):
        for step in flor.loop("step", range(3)):
            idx = torch.randint(0, 32, (8,))
            loss = ((net(data[idx]) - target[idx]) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        flor.log("lr", opt.param_groups[0]["lr"])
        flor.log("acc", float(-((net(data) - target) ** 2).mean()))
        sched.step()
"""

# today: the epoch's learning rate at its start, and the weights after the step loop
NEW = OLD.replace(
    "        for step in",
    '        flor.log("lr_start", sched.get_last_lr()[0])\n        for step in',
).replace(
    "        sched.step()\n",
    '        flor.log("wnorm", net.weight.norm().item())\n        sched.step()\n',
)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    root = tmp_path_factory.mktemp("skipblock") / "project"
    with pytest.MonkeyPatch.context() as env:
        env.setenv("FLORWB_CKPT_BUDGET", "1000")  # a checkpoint every epoch
        recorded_project(root, OLD)
    assert Store(root).query("SELECT count(*) AS n FROM checkpoints").n[0] == 6
    return root


@pytest.fixture(scope="module")
def forward(tmp_path_factory):
    """What today's script logs when run from scratch."""
    folder = tmp_path_factory.mktemp("forward")
    write(folder / "train.py", NEW)
    run_py(folder, "train.py")
    return Store(folder).dataframe("lr", "lr_start", "wnorm")


@pytest.fixture
def project(recorded, tmp_path):
    copy = tmp_path / "project"
    shutil.copytree(recorded, copy, symlinks=True)
    write(copy / "train.py", NEW)
    return copy


def test_checkpoints_are_taken_at_the_end_of_the_inner_loops(recorded):
    folder = recorded / ".florwb" / "checkpoints"
    (run,) = [p for p in folder.iterdir() if p.is_dir()]
    files = sorted(run.glob("epoch-*.pt"))
    assert len(files) == 6
    for path in files:
        saved = torch.load(path, weights_only=True)
        assert saved[AFTER_INNER] == 1  # one step loop ended before the copy
    # the copy precedes sched.step(): epoch 1's scheduler has stepped once, not twice
    epoch1 = torch.load(files[1], weights_only=True)
    assert epoch1["objects"]["scheduler"]["last_epoch"] == 1


@pytest.mark.parametrize("workers", [1, 2])
def test_outer_replay_steps_the_scheduler_once_per_epoch(project, forward, workers):
    plan = plan_replay(project, ["lr_start", "wnorm"], workers=workers)
    (run,) = plan.ready()
    assert run.mode == "outer"
    assert len(run.segments) == workers
    assert sum(len(s.skip_inner) for s in run.segments) == 6
    result = execute(plan)
    assert result.status == "finished", result
    (outcome,) = result.runs
    assert outcome.divergence is None and outcome.missing is None
    assert outcome.compared == 12  # every recorded lr and acc re-logged, equal
    replayed = Store(project).dataframe("lr", "lr_start", "wnorm")
    for name in ("lr", "lr_start", "wnorm"):
        assert list(replayed[name]) == pytest.approx(list(forward[name])), name
    assert list(replayed["lr"]) == pytest.approx([0.06, 0.06, 0.03, 0.03, 0.015, 0.015])
    steps = (
        Store(project)
        .query(
            f"SELECT count(*) AS n FROM iterations WHERE source = '{plan.replay_id}' "
            "AND loop = 'step'"
        )
        .n[0]
    )
    assert steps == 0  # every step loop was skipped


def test_a_later_segment_replays_the_tail_of_the_epoch_before_it(project, forward):
    plan = plan_replay(project, ["lr_start"], workers=2)
    (run,) = plan.ready()
    later = run.segments[1]
    assert later.first > 0
    result = execute(plan)
    assert result.status == "finished", result
    store = Store(project)
    # the epoch before the segment was replayed only to reach its state: nothing of it is
    # stored twice (one value per epoch, one timing per epoch)
    counts = store.query(
        f"SELECT epoch, count(*) AS n FROM logs WHERE source = '{plan.replay_id}' "
        "AND name = 'lr_start' GROUP BY epoch ORDER BY epoch"
    )
    assert list(counts.n) == [1] * 6
    timings = store.query(
        f"SELECT count(*) AS n FROM iterations WHERE source = '{plan.replay_id}' AND loop = 'epoch'"
    ).n[0]
    assert timings == 6
    replayed = store.dataframe("lr_start")
    assert list(replayed["lr_start"]) == pytest.approx(list(forward["lr_start"]))


def test_old_checkpoints_taken_at_the_epoch_end_reexecute_the_inner_loops(project, forward):
    """Checkpoints written before the moment was noted hold the epoch's end, after
    sched.step(): skipping the step loop would step the scheduler twice."""
    folder = project / ".florwb" / "checkpoints"
    (run,) = [p for p in folder.iterdir() if p.is_dir()]
    for path in run.glob("epoch-*.pt"):
        saved = torch.load(path, weights_only=True)
        del saved[AFTER_INNER]
        torch.save(saved, path)
    plan = plan_replay(project, ["lr_start", "wnorm"], workers=2)
    (planned,) = plan.ready()
    assert planned.mode == "inner"
    assert any("inner loops are re-executed" in note for note in planned.notes), planned.notes
    result = execute(plan)
    assert result.status == "finished", result
    replayed = Store(project).dataframe("lr_start", "wnorm")
    for name in ("lr_start", "wnorm"):
        assert list(replayed[name]) == pytest.approx(list(forward[name])), name


TWO_LOOPS_AND_EXITS = """
import os
import torch
import florwb as flor

torch.manual_seed(0)
net = torch.nn.Linear(2, 1)
opt = torch.optim.SGD(net.parameters(), lr=0.1)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1)
how = os.environ.get("HOW", "return")


def train():
    with flor.checkpointing(model=net, optimizer=opt, scheduler=sched):
        for epoch in flor.loop("epoch", range(10)):
            for step in flor.loop("step", range(2)):
                opt.zero_grad()
                net(torch.ones(2)).sum().backward()
                opt.step()
            for batch in flor.loop("eval", range(2)):
                torch.rand(1)
            sched.step()
            if epoch == 3 and how == "return":
                return
            if epoch == 3 and how == "raise":
                raise RuntimeError("stopped")


train()
"""


@pytest.mark.parametrize("how", ["return", "raise"])
def test_a_loop_left_by_return_or_an_exception_keeps_its_last_iteration(tmp_path, how):
    write(tmp_path / "train.py", TWO_LOOPS_AND_EXITS)
    env = {"FLORWB_CKPT_BUDGET": "1000", "HOW": how}
    proc = run_py(tmp_path, "train.py", check=False, env=env)
    assert (proc.returncode != 0) == (how == "raise"), proc.stderr
    store = Store(tmp_path)
    epochs = store.query("SELECT iteration FROM iterations WHERE loop = 'epoch' ORDER BY 1")
    assert list(epochs.iteration) == [0, 1, 2, 3]
    (run,) = [p for p in (tmp_path / ".florwb" / "checkpoints").iterdir() if p.is_dir()]
    assert sorted(p.name for p in run.glob("epoch-*.pt"))[-1] == "epoch-000003.pt"
    saved = torch.load(run / "epoch-000003.pt", weights_only=True)
    assert saved[AFTER_INNER] == 2  # after the step loop and the eval loop
    # copied before sched.step(): epoch 3's scheduler has stepped three times
    assert saved["objects"]["scheduler"]["last_epoch"] == 3


def test_a_loop_left_by_return_is_replayed_to_that_iteration_and_no_further(tmp_path):
    workers = 2  # segments cut at checkpoints: the harder case
    with pytest.MonkeyPatch.context() as env:
        env.setenv("FLORWB_CKPT_BUDGET", "1000")
        project = recorded_project(tmp_path / "project", TWO_LOOPS_AND_EXITS)
    today = TWO_LOOPS_AND_EXITS.replace(
        "            sched.step()\n",
        '            flor.log("lr", sched.get_last_lr()[0])\n            sched.step()\n',
    ).replace("train()\n", 'train()\nflor.log("after", 1)\n')
    write(project / "train.py", today)
    plan = plan_replay(project, ["lr"], workers=workers)
    (run,) = plan.ready()
    assert run.segments[-1].last == 3 and len(run.segments) == workers
    result = execute(plan)
    assert result.status == "finished" and result.runs[0].missing is None, result
    rows = Store(project).query(
        f"SELECT name, value FROM logs WHERE source = '{plan.replay_id}' ORDER BY epoch"
    )
    assert list(rows.name) == ["lr"] * 4  # nothing after train() ran
    assert list(rows.value) == pytest.approx([0.1, 0.01, 0.001, 0.0001])
