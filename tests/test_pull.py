"""Pulling a past model: flor.load / flor.load_into on a real recorded torch run, compared
with the weights the training script saved itself, and `florwb checkpoints`."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import florwb, git, run_py, write

import florwb as flor
from florwb_engine.record.pull import CheckpointError

COMMON = """
import torch

torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
opt = torch.optim.Adam(net.parameters(), lr=0.05)
x, y = torch.randn(64, 4), torch.randn(64, 1)


def train_one_epoch():
    perm = torch.randperm(64)  # draws from the RNG: resuming must restore it
    for i in range(0, 64, 16):
        idx = perm[i : i + 16]
        loss = ((net(x[idx]) - y[idx]) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return loss.item()
"""

TRAIN = """
import sys
import time

import torch
import florwb as flor
from common import net, opt, train_one_epoch

copies = []
flor.set_checkpoint_budget(1.0)
with flor.checkpointing(model=net, optimizer=opt):
    for epoch in flor.loop("epoch", range(5)):
        flor.log("loss", train_one_epoch())
        copies.append({k: v.clone() for k, v in net.state_dict().items()})
        time.sleep(0.1)  # an epoch far longer than its checkpoint: every epoch is saved
flor.commit()
torch.save(copies, sys.argv[1])  # the script's own copy of the weights of every epoch
"""

RESUME = """
import sys

import torch
import florwb as flor
from common import net, opt, train_one_epoch

run_id, what, out = sys.argv[1:]
if what == "all":
    used = flor.load_into(run_id, model=net, optimizer=opt, epoch=2, rng=True)
else:  # the model only: a fresh Adam has no moment estimates, so training goes elsewhere
    used = flor.load_into(run_id, model=net, iteration=2, rng=True)
assert used.iteration == 2, used
for epoch in range(3, 5):
    train_one_epoch()
torch.save(net.state_dict(), out)
"""


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("pull") / "project"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    write(root / "common.py", COMMON)
    write(root / "train.py", TRAIN)
    write(root / "resume.py", RESUME)
    own = root.parent / "own_copies.pt"
    run_py(root, "train.py", str(own))
    (folder,) = (root / ".florwb" / "checkpoints").iterdir()
    return root, folder.name, torch.load(own, weights_only=True)


def _equal(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_load_returns_the_weights_of_the_asked_epoch(trained):
    root, run_id, copies = trained
    states = flor.load(run_id, 2, project=root)
    assert set(states) == {"model", "optimizer"}
    assert _equal(states["model"], copies[2])
    assert not _equal(states["model"], copies[1])
    latest = flor.load(run_id[:12], project=root)  # a unique prefix; the latest by default
    assert _equal(latest["model"], copies[4])
    assert latest["optimizer"]["state"], "Adam's moments are in the checkpoint"


def test_an_iteration_without_checkpoint_names_the_checkpointed_ones(trained):
    root, run_id, _ = trained
    with pytest.raises(CheckpointError) as err:
        flor.load(run_id, 7, project=root)
    message = str(err.value)
    assert "\n" not in message and "checkpointed: 0, 1, 2, 3, 4" in message
    with pytest.raises(CheckpointError, match="no checkpoints"):
        flor.load("no-such-run", project=root)
    with pytest.raises(CheckpointError, match="holds no scheduler"):
        flor.load_into(run_id, scheduler=torch.nn.Linear(1, 1), epoch=1, project=root)


def test_load_into_restores_model_optimizer_and_rng_so_training_continues_the_same(
    trained, tmp_path
):
    root, run_id, copies = trained
    resumed = tmp_path / "resumed.pt"
    run_py(root, "resume.py", run_id, "all", str(resumed))
    assert _equal(torch.load(resumed, weights_only=True), copies[4])

    model_only = tmp_path / "model_only.pt"
    run_py(root, "resume.py", run_id, "model", str(model_only))
    assert not _equal(torch.load(model_only, weights_only=True), copies[4])


def test_checkpoints_command_lists_iterations_sizes_and_paths(trained):
    root, run_id, _ = trained
    rows = json.loads(florwb(root, "checkpoints", run_id, "--json").stdout)
    assert [(r["loop"], r["iteration"]) for r in rows] == [("epoch", i) for i in range(5)]
    for r in rows:
        assert r["bytes"] > 0 and r["path"].endswith(f"epoch-{r['iteration']:06d}.pt")
    table = florwb(root, "checkpoints", run_id).stdout
    assert "epoch-000004.pt" in table and f"flor.load_into('{run_id}', model=..., epoch=4)" in table
    missing = florwb(root, "checkpoints", "nope", check=False)
    assert missing.returncode == 1 and missing.stderr.count("\n") == 1
