"""Unseeded scripts replay exactly: the RNG states at a run's first florwb call are recorded
and put back at the replay worker's first florwb call."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from conftest import git, run_py, write

from florwb_engine.project import checkpoint_dir
from florwb_engine.record import start_rng
from florwb_engine.replay import execute, plan_replay
from florwb_engine.store import Store

# Never seeded; draws its own seed after its first florwb call, like scripts that do
# `opt.seed = random.randint(...)` when no --seed is given.
UNSEEDED = """
import random
import numpy as np
import torch
import florwb as flor

epochs = flor.arg("epochs", 3)
seed = random.randint(0, 10**6)
flor.set_checkpoint_budget(1.0)
net = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(net.parameters(), lr=0.1)
with flor.checkpointing(model=net, optimizer=opt):
    for epoch in flor.loop("epoch", range(epochs)):
        a = float(np.random.rand())
        b = torch.randn(1).item()
        for step in flor.loop("step", range(3)):
            loss = (net(torch.randn(8, 4) + a) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        flor.log("seed", seed)
        flor.log("a", a)
        flor.log("b", b)
"""

TODAY = UNSEEDED.replace(
    '        flor.log("b", b)\n', '        flor.log("b", b)\n        flor.log("ab", a + b + seed)\n'
)


def test_start_states_round_trip_in_process():
    torch.randn(3)
    state = start_rng.capture()
    expected = (random.random(), float(np.random.rand()), torch.rand(2).tolist())
    random.random(), np.random.rand(5), torch.rand(7)  # move every generator on
    assert start_rng.restore(state) == []
    assert (random.random(), float(np.random.rand()), torch.rand(2).tolist()) == expected
    assert "cuda" not in state or torch.cuda.is_initialized()


def test_unseeded_script_that_draws_its_own_seed_replays_exactly(repo):
    write(repo / "train.py", UNSEEDED)
    git(repo, "add", "train.py")
    git(repo, "commit", "-q", "-m", "unseeded")
    run_py(repo, "train.py")
    store = Store(repo)
    run_id = store.runs()[0]["run_id"]
    saved = start_rng.load(checkpoint_dir(repo) / run_id / start_rng.FILE)
    assert {"python", "numpy", "torch"} <= set(saved)
    recorded = store.dataframe("seed", "a", "b")
    assert len(recorded) == 3

    write(repo / "train.py", TODAY)
    plan = plan_replay(repo, ["ab"], workers=2)
    assert [r.mode for r in plan.runs] == ["outer"]
    result = execute(plan)
    # Without the start states the seed and epoch 0's draws differ and the fidelity check
    # of seed/a/b says diverged.
    assert result.status == "finished", result
    assert result.runs[0].compared >= 3 * 3
    replayed = Store(repo).dataframe("seed", "a", "b", "ab")
    replayed = replayed[replayed.ab.notna()].sort_values("epoch")
    recorded = recorded.sort_values("epoch")
    assert list(replayed.epoch) == [0, 1, 2]
    expected = [a + b + s for s, a, b in zip(recorded.seed, recorded.a, recorded.b, strict=True)]
    assert list(replayed.ab) == pytest.approx(expected, rel=0, abs=0)
