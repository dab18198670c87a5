"""A main loop left through `break` (over `itertools.count()`, an endless iterator): the
iteration it leaves in is timed and checkpointed, replay plans and replays every recorded
iteration and ends there, and what a replay could not execute is named."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from conftest import florwb, recorded_project, run_py, write

from florwb_engine.record.checkpoint import AFTER_INNER
from florwb_engine.replay import execute, plan_replay
from florwb_engine.store import Store
from florwb_engine.store.queries import load_run_detail

COUNT = """
import itertools
import os
import torch
import florwb as flor

torch.manual_seed(0)
stop = int(os.environ.get("STOP_AT", "30"))
data, target = torch.randn(32, 4), torch.randn(32, 1)
net = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(net.parameters(), lr=0.05)
with flor.checkpointing(model=net, optimizer=opt):
    for it in flor.loop("iter", itertools.count()):
        idx = torch.randint(0, 32, (8,))
        loss = ((net(data[idx]) - target[idx]) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        flor.log("loss", loss.item())
        if it == stop:
            break
flor.log("after", float(torch.rand(1)))
"""

COUNT_NEW = COUNT.replace(
    "        idx = torch.randint",
    '        flor.log("wn", net.weight.norm().item())\n        idx = torch.randint',
)

# nanoGPT's shape: an endless loop, a learning-rate schedule and an evaluation every few
# iterations at its top, gradient accumulation over micro steps that prefetch their next
# batch at their end, the step, and `break` once max_iters is reached.
NANO = """
import itertools
import torch
import florwb as flor

torch.manual_seed(0)
data, target = torch.randn(256, 4), torch.randn(256, 1)
net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
opt = torch.optim.AdamW(net.parameters(), lr=1e-2)
max_iters, accum, eval_interval = 30, 2, 10


def get_batch():
    idx = torch.randint(0, 256, (8,))
    return data[idx], target[idx]


def get_lr(it):
    return 1e-2 * min(1.0, (it + 1) / 5)


with flor.checkpointing(model=net, optimizer=opt):
    for it in flor.loop("iter", itertools.count()):  # while True, counting
        lr = get_lr(it)
        for group in opt.param_groups:
            group["lr"] = lr
        if it % eval_interval == 0:
            with torch.no_grad():
                flor.log("val", float(((net(data) - target) ** 2).mean()))
        X, Y = get_batch()
        for micro in flor.loop("micro", range(accum)):
            loss = ((net(X) - Y) ** 2).mean() / accum
            X, Y = get_batch()
            loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if it >= max_iters:
            break
"""

NANO_NEW = NANO.replace(
    "        lr = get_lr(it)\n",
    '        lr = get_lr(it)\n        flor.log("wn", net[0].weight.norm().item())\n',
)


def _project(root, script, env=None):
    with pytest.MonkeyPatch.context() as patch:
        for key, value in (env or {}).items():
            patch.setenv(key, value)
        return recorded_project(root, script)


@pytest.fixture(scope="module")
def counted(tmp_path_factory):
    """The count() loop recorded at the default budget and with a checkpoint every
    iteration."""
    base = tmp_path_factory.mktemp("count")
    return {
        "default": _project(base / "default", COUNT),
        "every": _project(base / "every", COUNT, {"FLORWB_CKPT_BUDGET": "1000"}),
    }


@pytest.fixture(scope="module")
def forward(tmp_path_factory):
    folder = tmp_path_factory.mktemp("forward")
    write(folder / "train.py", COUNT_NEW)
    run_py(folder, "train.py")
    return list(Store(folder).dataframe("wn")["wn"])


def _today(recorded, tmp_path, script):
    copy = tmp_path / "project"
    shutil.copytree(recorded, copy, symlinks=True)
    write(copy / "train.py", script)
    return copy


def test_the_iteration_left_through_break_is_timed_and_checkpointed(counted):
    for project in counted.values():
        store = Store(project)
        iterations = store.query(
            "SELECT iteration FROM iterations WHERE loop = 'iter' ORDER BY iteration"
        )
        assert list(iterations.iteration) == list(range(31))
        last = store.query("SELECT max(iteration) AS i FROM checkpoints").i[0]
        assert last == 30
    every = Store(counted["every"]).query("SELECT count(*) AS n FROM checkpoints").n[0]
    assert every == 31
    (run,) = [p for p in (counted["every"] / ".florwb" / "checkpoints").iterdir() if p.is_dir()]
    saved = torch.load(run / "iter-000030.pt", weights_only=True)
    assert saved[AFTER_INNER] == 0  # no inner loop: the state as the loop was left


# one segment at the default budget; several, cut at checkpoints, with one every iteration
@pytest.mark.parametrize(("workers", "budget"), [(1, "default"), (2, "every")])
def test_a_count_loop_left_through_break_is_replayed_to_its_last_iteration(
    counted, forward, tmp_path, budget, workers
):
    project = _today(counted[budget], tmp_path, COUNT_NEW)
    plan = plan_replay(project, ["wn"], workers=workers)
    (run,) = plan.ready()
    assert run.segments[-1].last == 30
    assert min(s.first for s in run.segments) == 0
    result = execute(plan)
    assert result.status == "finished", result
    (outcome,) = result.runs
    assert outcome.missing is None and outcome.divergence is None
    assert outcome.compared >= 31  # every recorded loss re-logged, equal
    store = Store(project)
    replayed = store.query(
        f"SELECT iter, value FROM logs WHERE source = '{plan.replay_id}' AND name = 'wn' "
        "ORDER BY iter"
    )
    assert list(replayed.iter) == list(range(31))
    assert list(replayed.value) == pytest.approx(forward)
    after = store.query(
        f"SELECT count(*) AS n FROM logs WHERE source = '{plan.replay_id}' AND name = 'after'"
    ).n[0]
    assert after == 0  # the code after the loop did not run in the replay


def test_the_plan_names_every_recorded_iteration(counted, tmp_path):
    project = _today(counted["every"], tmp_path, COUNT_NEW)
    proc = florwb(project, "replay", "wn", "--workers", "1", check=False)  # the plan only
    assert "iter 0-30" in proc.stdout


def test_iterations_a_replay_did_not_execute_are_named_missing(counted, tmp_path):
    project = _today(counted["every"], tmp_path, COUNT_NEW)
    # the old script stops where its environment says: here, 10 iterations early
    # one segment: a later one would start past the stop and replay what follows it
    proc = florwb(project, "replay", "wn", "--yes", "--workers", "1", env={"STOP_AT": "20"})
    assert "missing: iter 21-30" in proc.stdout
    (run,) = json.loads(florwb(project, "runs", "--json").stdout)
    assert run["verdicts"][-1]["missing"] == "iter 21-30"  # kept with the verdict
    (replay,) = load_run_detail(Store(project), run["run_id"]).replays
    assert replay.missing == "iter 21-30"  # what the run detail says
    plan = plan_replay(project, ["wn"], workers=1)
    assert plan.ready() == []  # the run has wn now, at the iterations replayed


def test_a_nanogpt_shaped_loop_is_replayed_to_its_break(tmp_path):
    recorded = _project(tmp_path / "nano", NANO, {"FLORWB_CKPT_BUDGET": "1000"})
    folder = tmp_path / "forward"
    write(folder / "train.py", NANO_NEW)
    run_py(folder, "train.py")
    expected = list(Store(folder).dataframe("wn")["wn"])
    assert len(expected) == 31
    project = _today(recorded, tmp_path / "today", NANO_NEW)
    plan = plan_replay(project, ["wn"], workers=2)  # segments cut at checkpoints
    (run,) = plan.ready()
    assert run.mode == "outer" and run.segments[-1].last == 30
    result = execute(plan)
    assert result.status == "finished", result
    (outcome,) = result.runs
    assert outcome.missing is None and outcome.divergence is None
    assert outcome.compared == 4  # val at iterations 0, 10, 20, 30
    replayed = Store(project).dataframe("wn")
    assert list(replayed["wn"]) == pytest.approx(expected)
