"""A torchrun launch over two nodes without a shared filesystem: two node ranks on this
machine, each in its own copy of the project, meeting at a local c10d rendezvous (gloo, a
tiny model); `florwb pull` merges one copy's rank journals into the other's run."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from conftest import florwb, torchrun_node, write

from florwb_engine.project import journal_dir
from florwb_engine.replay import ddp_launch
from florwb_engine.store import Store
from florwb_engine.store.journal_pull import pull

TRAIN = """
import torch
import torch.distributed as dist
import florwb as flor

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
net = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 1))
opt = torch.optim.SGD(net.parameters(), lr=0.1)
with flor.checkpointing(model=net, optimizer=opt):
    for epoch in flor.loop("epoch", range(2)):
        loss = (net(torch.ones(4, 2) * (rank + 1)) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        flor.log("rank_epoch", rank * 10 + epoch)
dist.destroy_process_group()
"""


def test_two_nodes_in_two_copies_pull_into_one_run_idempotently(tmp_path: Path) -> None:
    first = tmp_path / "node-a" / "project"
    write(first / "train.py", TRAIN)
    second = tmp_path / "node-b" / "project"
    shutil.copytree(first, second)
    port = ddp_launch.free_port()
    nodes = [torchrun_node(first, port), torchrun_node(second, port)]
    for node in nodes:
        _, err = node.communicate(timeout=240)
        assert node.returncode == 0, err[-3000:]

    # c10d gives the global ranks in the order the nodes joined: rank 0 is in either copy
    journals = {p: sorted(f.name for f in journal_dir(p).iterdir()) for p in (first, second)}
    home = first if any(".rank0." in name for name in journals[first]) else second
    other = second if home is first else first
    (ours,), (theirs,) = journals[home], journals[other]
    assert ours.endswith(".rank0.journal") and theirs.endswith(".rank1.journal")
    run_id = ours.removesuffix(".rank0.journal")
    assert theirs == f"{run_id}.rank1.journal"  # both nodes' ranks agreed on one run
    assert not run_id.startswith("dist-")  # a fresh id agreed in the agent store (ranks.py)

    store = Store(home)
    (before,) = store.run_rows()
    assert before.status == "running"  # rank 1 is in the other copy: not finished here yet

    pulled = florwb(home, "pull", str(other))
    assert f"run {run_id}: ranks 1 of 2: finished" in pulled.stdout
    assert "pulled 1 new and 0 grown journals" in pulled.stdout
    (run,) = store.run_rows()
    assert run.run_id == run_id and run.status == "finished" and run.world_size == 2
    values = store.query("SELECT rank, value FROM logs WHERE name = 'rank_epoch'")
    assert sorted(values.itertuples(index=False, name=None)) == [
        (0, 0.0),
        (0, 1.0),
        (1, 10.0),
        (1, 11.0),
    ]
    launcher = run.launcher or {}
    assert launcher.get("nnodes") == 2 and launcher.get("start_s", 0) > 0

    # the same copy as HOST:PATH, over "ssh" (here a stand-in that runs the command on
    # this machine): nothing new, nothing changes
    ssh = tmp_path / "ssh.py"
    write(ssh, "import subprocess, sys\nsys.exit(subprocess.call(['sh', '-c', sys.argv[2]]))\n")
    again = florwb(home, "pull", f"node-b:{other}", env={"FLORWB_SSH": f"{sys.executable} {ssh}"})
    assert "pulled 0 new and 0 grown journals, 0 checkpoint files; 1 unchanged" in again.stdout
    assert len(store.query("SELECT * FROM logs WHERE name = 'rank_epoch'")) == 4
    assert [r.run_id for r in store.run_rows()] == [run_id]


def test_a_pull_replaces_a_journal_only_by_a_longer_copy_of_the_same_bytes(tmp_path: Path) -> None:
    """The other node wrote more since the last pull: the longer copy replaces ours, with
    its modification time (a killed rank's end); bytes that differ are not touched."""
    ours, theirs = journal_dir(tmp_path / "ours"), journal_dir(tmp_path / "theirs")
    ours.mkdir(parents=True)
    theirs.mkdir(parents=True)
    (ours / "r.rank1.journal").write_bytes(b"start")
    (theirs / "r.rank1.journal").write_bytes(b"start, then more")
    os.utime(theirs / "r.rank1.journal", (1_600_000_000.25, 1_600_000_000.25))
    (ours / "r.rank2.journal").write_bytes(b"one history")
    (theirs / "r.rank2.journal").write_bytes(b"another one")
    (theirs / "replay-x-0.rank1.journal").write_bytes(b"a replay's: not pulled")
    report = pull(tmp_path / "ours", str(tmp_path / "theirs"))
    assert report.grown == ["r.rank1.journal"] and report.conflicts == ["r.rank2.journal"]
    assert (ours / "r.rank1.journal").read_bytes() == b"start, then more"
    assert (ours / "r.rank1.journal").stat().st_mtime == 1_600_000_000.25
    assert (ours / "r.rank2.journal").read_bytes() == b"one history"
    assert not (ours / "replay-x-0.rank1.journal").exists()
