"""State a replay needs beyond the checkpoints: gradients, objects
the main loop changes in place, statements in closures, nested functions and methods."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch
from conftest import git, run_py, write

from florwb_engine.propagate import find_log_statements, propagate
from florwb_engine.record.checkpoint import GRADS, holds_grads
from florwb_engine.replay import execute, plan_replay
from florwb_engine.replay.state_reads import state_reads
from florwb_engine.store import Store


def _reads(code: str, main_loop: str = "epoch"):
    code = textwrap.dedent(code).lstrip()
    result = propagate(code, code)
    placed = {p.name: p for p in result.placements}
    return state_reads(result.code, placed, main_loop)


HEAD = """
import math
import torch
import florwb as flor
net = torch.nn.Linear(2, 1)
opt = torch.optim.SGD(net.parameters(), lr=0.1)
"""


def test_gradients_read_directly_or_through_a_helper_are_recognised():
    found = _reads(
        HEAD
        + """
def gnorm(model):
    return sum(p.grad.norm() for p in model.parameters())

with flor.checkpointing(model=net, optimizer=opt):
    for epoch in flor.loop("epoch", range(2)):
        flor.log("clip", torch.nn.utils.clip_grad_norm_(net.parameters(), math.inf).item())
        flor.log("helper", float(gnorm(net)))
        flor.log("weights", float(net.weight.norm()))
        for step in flor.loop("step", range(2)):
            opt.zero_grad()
            net(torch.ones(2)).sum().backward()
            opt.step()
"""
    )
    assert found.refused is None
    assert sorted(found.grads) == ["clip", "helper"]
    assert found.unheld == {}  # opt.step() / zero_grad() change a registered object


def test_objects_changed_in_place_that_no_checkpoint_holds_are_recognised():
    found = _reads(
        HEAD
        + """
history = []
sched = torch.optim.lr_scheduler.StepLR(opt, 1)
with flor.checkpointing(model=net, optimizer=opt):
    for epoch in flor.loop("epoch", range(2)):
        per_epoch = []
        for step in flor.loop("step", range(2)):
            history.append(1.0)
            per_epoch.append(2.0)
            net.seen = step
        sched.step()
        flor.log("n_hist", len(history))
        flor.log("n_epoch", len(per_epoch))
        flor.log("lr", sched.get_last_lr()[0])
        flor.log("seen", net.seen)
        flor.log("bias", float(net.bias.sum()))
"""
    )
    assert found.unheld == {"n_hist": ["history"], "lr": ["sched"], "seen": ["net.seen"]}


def test_a_statement_in_a_function_never_called_is_refused():
    found = _reads(
        HEAD
        + """
def unused(x):
    flor.log("never", x)

for epoch in flor.loop("epoch", range(2)):
    pass
"""
    )
    assert found.refused and "never sits in `unused`" in found.refused


def test_closures_nested_functions_and_methods_run_in_the_loops_of_their_call_sites():
    code = textwrap.dedent(
        HEAD
        + """
class Trainer:
    def step(self):
        flor.log("in_method", 1)

    def epoch(self):
        for step in flor.loop("step", range(2)):
            self.step()

    def fit(self):
        for epoch in flor.loop("epoch", range(2)):
            self.epoch()

            def inner():
                flor.log("in_nested", 2)

            inner()

for epoch in flor.loop("epoch", range(2)):
    for step in flor.loop("step", range(2)):
        def closure():
            flor.log("in_closure", 3)
            return 0.0
        opt.step(closure)
Trainer().fit()
"""
    )
    paths = {s.name: (s.loop_path, s.where_known) for s in find_log_statements(code)}
    assert paths == {
        "in_method": (("epoch", "step"), True),
        "in_nested": (("epoch",), True),
        "in_closure": (("epoch", "step"), True),
    }


V1 = """
import time
import torch
import florwb as flor

torch.manual_seed(0)
flor.set_checkpoint_budget(1.0)
x, y = torch.randn(32, 3), torch.randn(32, 1)
net = torch.nn.Linear(3, 1)
opt = torch.optim.SGD(net.parameters(), lr=0.1)
with flor.checkpointing(model=net, optimizer=opt):
    for epoch in flor.loop("epoch", range(3)):
        for step in flor.loop("step", range(2)):
            loss = ((net(x) - y) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        time.sleep(0.03)
"""
GRAD = "torch.nn.utils.clip_grad_norm_(net.parameters(), float('inf')).item()"
TODAY = V1.replace(
    "        for step in",
    f'        flor.log("grad_norm", {GRAD})\n        flor.log("grad_again", {GRAD})\n'
    "        for step in",
).replace("with flor", 'flor.log("before", float(net.weight.sum()))\nwith flor')


@pytest.fixture
def recorded(repo: Path) -> Path:
    write(repo / "train.py", V1)
    git(repo, "add", "train.py")
    git(repo, "commit", "-q", "-m", "v1")
    run_py(repo, "train.py")
    write(repo / "train.py", TODAY)
    return repo


def _forward(tmp_path: Path) -> list[float]:
    folder = tmp_path / "forward"
    write(folder / "train.py", TODAY)
    run_py(folder, "train.py")
    return list(Store(folder).dataframe("grad_norm").grad_norm)


def _replayed(project: Path, name: str) -> list[float]:
    frame = Store(project).dataframe(name)
    return list(frame[name])


def test_gradients_come_back_from_checkpoints_or_the_loop_is_re_executed(recorded, tmp_path):
    forward = _forward(tmp_path)
    assert forward[0] == 0.0 and all(v > 0 for v in forward[1:])  # the shape
    files = sorted((recorded / ".florwb" / "checkpoints").rglob("*.pt"))
    assert len(files) == 3 and all(holds_grads(f) for f in files)

    plan = plan_replay(recorded, ["grad_norm", "before"], workers=2)
    (run,) = plan.runs
    assert run.mode == "outer" and not run.from_start
    assert run.segments[0].skip_inner  # the step loops are skipped: gradients restored
    assert len(run.segments) == 2  # both run the code before the loop; one logs it
    notes = " ".join(run.notes)
    assert "grad_norm reads gradients: restored from the run's checkpoints" in notes
    assert execute(plan).status == "finished"
    assert _replayed(recorded, "grad_norm") == pytest.approx(forward, rel=1e-6)
    count = "SELECT count(*) AS n FROM logs WHERE name = 'before'"
    assert Store(recorded).query(count).n[0] == 1

    # checkpoints written before florwb saved gradients: re-executed from the first epoch
    for f in files:
        saved = torch.load(f, weights_only=True)
        del saved[GRADS]
        torch.save(saved, f)
    plan = plan_replay(recorded, ["grad_again"], workers=2)
    (run,) = plan.runs
    assert run.mode == "inner" and run.from_start
    assert [(s.first, s.last, s.skip_inner) for s in run.segments] == [(0, 2, [])]
    assert (
        "grad_again reads gradients, which this run's checkpoints do not hold: the epoch "
        "loop is re-executed from its first iteration, in one segment"
    ) in run.notes
    assert execute(plan).status == "finished"
    assert _replayed(recorded, "grad_again") == pytest.approx(forward, rel=1e-6)


def test_calling_a_registered_module_through_self_changes_nothing_unheld():
    found = _reads(
        """
import torch
import florwb as flor


class Trainer:
    def __init__(self):
        self.net = torch.nn.Linear(2, 1)
        self.opt = torch.optim.SGD(self.net.parameters(), lr=0.1)
        self.seen = 0

    def fit(self):
        with flor.checkpointing(model=self.net, optimizer=self.opt):
            for epoch in flor.loop("epoch", range(2)):
                for step in flor.loop("step", range(2)):
                    self.opt.zero_grad()
                    self.net(torch.ones(2)).sum().backward()
                    self.opt.step()
                    self.seen += 1
                flor.log("w", float(self.net.weight.sum()))
                flor.log("seen", self.seen)


Trainer().fit()
"""
    )
    assert found.unheld == {"seen": ["self.seen"]}


def test_a_function_handed_to_a_hook_is_refused_not_guessed():
    found = _reads(
        HEAD
        + """
def hook(module, inputs, output):
    flor.log("act", float(output.sum()))

net.register_forward_hook(hook)
for epoch in flor.loop("epoch", range(2)):
    net(torch.ones(2))
"""
    )
    assert found.refused and "act sits in `hook`" in found.refused


def test_a_function_handed_to_mp_spawn_runs_its_own_loops_from_the_top():
    """`mp.spawn(train, ...)` never calls `train` in the script: its own flor.loops are its
    whole loop path (a hook registered outside loops still is not followed)."""
    from florwb_engine.propagate.finder import find_log_statements

    source = (
        "import florwb as flor\n"
        "import torch.multiprocessing as mp\n"
        "def train(rank):\n"
        "    for epoch in flor.loop('epoch', range(2)):\n"
        "        flor.log('x', epoch)\n"
        "def hook(module, inputs, output):\n"
        "    flor.log('h', 1)\n"
        "if __name__ == '__main__':\n"
        "    mp.spawn(train, nprocs=2)\n"
        "    net.register_forward_hook(hook)\n"
    )
    found = {s.name: s for s in find_log_statements(source)}
    assert found["x"].where_known and found["x"].loop_path == ("epoch",)
    assert not found["h"].where_known
