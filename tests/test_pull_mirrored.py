"""Pulling a past model from the script's own torch.save files (mirrored, never
flor.checkpointing): `florwb checkpoints` lists them, `flor.load` and `flor.load_into` load
them, and a state_dict saved from a `module.`-prefixing wrapper loads into the plain model
and back."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import florwb, git, run_py, write

import florwb as flor
from florwb_engine.record.pull import CheckpointError

TRAIN = """
import sys
import time

import torch
import florwb as flor
from florwb_engine.record.pull import CheckpointError

flor.set_checkpoint_budget(1.0)
torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
wrapped = torch.nn.DataParallel(net)  # names its parameters `module.*`, like DDP
opt = torch.optim.Adam(net.parameters(), lr=0.05)
x, y = torch.randn(64, 4), torch.randn(64, 1)
copies = []
for epoch in flor.loop("epoch", range(3)):
    loss = ((net(x) - y) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    flor.log("loss", loss.item())
    time.sleep(0.05)  # an epoch far longer than its mirror copy
    torch.save(net.state_dict(), "model.pt")
    torch.save({"net": wrapped.state_dict(), "opt": opt.state_dict(), "epoch": epoch}, "ckpt.pth")
    copies.append({k: v.clone() for k, v in net.state_dict().items()})
flor.commit()
torch.save(copies, sys.argv[1])
"""


@pytest.fixture(scope="module")
def mirrored(tmp_path_factory):
    root = tmp_path_factory.mktemp("pull_mirrored") / "project"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    write(root / "train.py", TRAIN)
    own = root.parent / "copies.pt"
    run_py(root, "train.py", str(own))
    (folder,) = (root / ".florwb" / "checkpoints").iterdir()
    assert not list(folder.glob("epoch-??????.pt")), "no flor.checkpointing files"
    return root, folder.name, torch.load(own, weights_only=True)


def _net() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))


def _equal(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_checkpoints_command_lists_mirrored_saves(mirrored):
    root, run_id, _ = mirrored
    rows = json.loads(florwb(root, "checkpoints", run_id, "--json").stdout)
    assert [(r["loop"], r["iteration"], r["kind"]) for r in rows] == [
        ("epoch", i, "torch.save") for i in range(3)
    ]
    for r in rows:
        assert r["path"].endswith(".saves.json") and len(r["saves"]) == 2 and r["bytes"] > 0
    table = florwb(root, "checkpoints", run_id).stdout
    assert "epoch-000002.save0.pt (+1)" in table, table
    assert f"flor.load_into('{run_id}', model=..., epoch=2)" in table


def test_load_names_saved_dict_keys_and_lone_state_dicts_by_file(mirrored):
    root, run_id, copies = mirrored
    states = flor.load(run_id, 1, project=root)
    assert set(states) == {"model", "net", "opt", "epoch"}
    assert states["epoch"] == 1
    assert _equal(states["model"], copies[1])
    assert all(k.startswith("module.") for k in states["net"])


def test_load_into_restores_mirrored_saves_across_the_module_prefix(mirrored):
    root, run_id, copies = mirrored
    plain = _net()
    used = flor.load_into(run_id, model=plain, epoch=1, project=root)
    assert used.kind == "torch.save" and used.iteration == 1
    assert _equal(plain.state_dict(), copies[1])

    from_wrapper = _net()
    opt = torch.optim.Adam(from_wrapper.parameters(), lr=0.05)
    flor.load_into(run_id, net=from_wrapper, opt=opt, epoch=2, rng=True, project=root)
    assert _equal(from_wrapper.state_dict(), copies[2])
    assert opt.state_dict()["state"], "Adam's moments restored"

    into_wrapper = torch.nn.DataParallel(_net())
    flor.load_into(run_id, model=into_wrapper, project=root)  # the latest: epoch 2
    assert _equal(into_wrapper.module.state_dict(), copies[2])

    with pytest.raises(CheckpointError, match="holds no optimizer; it holds: epoch, model, net"):
        flor.load_into(run_id, optimizer=opt, project=root)
