"""A torchrun launch over two nodes without a shared filesystem: two node ranks on this
machine, each in its own copy of the project, meeting at a local c10d rendezvous (gloo, a
tiny model); `florwb pull` merges one copy's rank journals into the other's run, over real
SSH (tests/sshd.py: an SSH server that is another host, reached through an ssh config) or
from a path. A rank of another host that dies without an end reads as killed once a pull
asked that host; one still written there reads as running."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
from conftest import florwb, run_py, torchrun_node, write
from sshd import Node, as_host

from florwb_engine.project import journal_dir
from florwb_engine.replay import ddp_launch
from florwb_engine.store import Store, snapshot
from florwb_engine.store.journal_pull import pull
from florwb_engine.store.pull_answers import PULLED
from florwb_engine.store.queries import load_run_detail

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


@pytest.fixture(scope="module")
def node_b(tmp_path_factory) -> Iterator[Node]:
    """Another host, `node-b`, reachable as a user would reach it: `ssh node-b`."""
    node = Node.start(tmp_path_factory.mktemp("node-b"), "node-b", ddp_launch.free_port())
    yield node
    node.stop()


def test_two_nodes_in_two_copies_pull_into_one_run_idempotently(
    tmp_path: Path, node_b: Node
) -> None:
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

    pulled = florwb(home, "pull", f"node-b:{other}", env=node_b.env)  # over real ssh
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
    assert (journal_dir(home) / theirs).read_bytes() == (journal_dir(other) / theirs).read_bytes()

    # again, over ssh and from the path: nothing new, nothing changes
    for source, env in ((f"node-b:{other}", node_b.env), (str(other), None)):
        again = florwb(home, "pull", source, env=env)
        assert "pulled 0 new and 0 grown journals, 0 checkpoint files; 1 unchanged" in again.stdout
    assert len(store.query("SELECT * FROM logs WHERE name = 'rank_epoch'")) == 4
    assert [r.run_id for r in store.run_rows()] == [run_id]

    # ssh that cannot connect, or is refused: one line saying why, exit 1, nothing pulled
    for alias, why in (("node-b-closed", "Connection refused"), ("node-b-stranger", "denied")):
        failed = florwb(home, "pull", f"{alias}:{other}", env=node_b.env, check=False)
        assert failed.returncode == 1
        assert failed.stderr.count("\n") == 1 and failed.stderr.startswith("florwb: ")
        assert f"ssh to {alias} failed: " in failed.stderr and why in failed.stderr
    missing = florwb(home, "pull", f"node-b:{tmp_path}/nowhere", env=node_b.env, check=False)
    assert missing.returncode == 1 and missing.stderr.count("\n") == 1


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


# One rank of a two-node launch, started as torchrun starts it (its environment), logging
# without collectives: rank 1 prints "written" once its values are in its journal, then
# waits to be killed.
RANK = """
import os, sys
import florwb as flor
from florwb_engine.record import runtime

rank = int(os.environ["RANK"])
for epoch in flor.loop("epoch", range(3)):
    flor.log("rank_epoch", rank * 10 + epoch)
    if rank == 1 and epoch == 1:
        runtime.current().flush()
        print("written", flush=True)
        sys.stdin.readline()  # never comes: the test kills it
"""


def _rank_env(rank: int, port: int) -> dict[str, str]:
    return {
        **os.environ,
        "RANK": str(rank),
        "LOCAL_RANK": "0",
        "WORLD_SIZE": "2",
        "GROUP_WORLD_SIZE": "2",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
    }


def _launch(tmp_path: Path) -> tuple[Path, Path, int]:
    """Two copies of the project; rank 0 recorded and finished in the first (this host)."""
    home, other = tmp_path / "node-a" / "project", tmp_path / "node-b" / "project"
    write(home / "train.py", RANK)
    shutil.copytree(home, other)
    port = ddp_launch.free_port()
    run_py(home, "train.py", env=_rank_env(0, port))
    return home, other, port


def _writing(argv: list[str], project: Path, port: int) -> subprocess.Popen:
    """Rank 1 started and its first values written: it is writing its journal now."""
    proc = subprocess.Popen(
        argv,
        cwd=project,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_rank_env(1, port),
    )
    assert proc.stdout is not None
    if proc.stdout.readline() != "written\n":
        proc.kill()
        raise AssertionError(proc.communicate()[1][-3000:])
    return proc


def _killed(proc: subprocess.Popen) -> None:
    proc.kill()  # SIGKILL: no end event, no flush
    proc.communicate()


def test_a_rank_of_another_host_reads_running_while_written_and_killed_once_gone(
    tmp_path: Path, node_b: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    home, other, port = _launch(tmp_path)
    writer = _writing(as_host("node-b", [sys.executable, "train.py"]), other, port)
    try:
        pulled = florwb(home, "pull", f"node-b:{other}", env=node_b.env)
        (run,) = Store(home).run_rows()
        assert f"run {run.run_id}: ranks 1 of 2: running" in pulled.stdout
        assert "still written on node-b" in pulled.stderr
        assert run.status == "running"
        ranks = {r.rank: r for r in load_run_detail(Store(home), run.run_id).ranks}
        assert ranks[1].host == "node-b" and ranks[1].status == "running"
        assert ranks[0].status == "finished"
    finally:
        _killed(writer)

    # Gone now, but nothing on this machine can tell: its process and its lock are node-b's.
    # A path to node-b's copy asks no host, so the rank still reads as running...
    florwb(home, "pull", str(other))
    assert florwb(home, "runs", "--json").stdout.count('"status": "running"') == 1
    # ...until node-b is asked: its journal has no writer there, so it holds all it ever will.
    # A reader is not served the snapshot that said running, however recent it is.
    monkeypatch.setattr(snapshot, "FRESH_S", 600.0)
    for name, value in node_b.env.items():
        monkeypatch.setenv(name, value)
    with Store(home).pinned():  # someone reads the latest snapshot
        assert Store(home).run_rows()[0].status == "running"
        report = pull(home, f"node-b:{other}")
        journal = journal_dir(home) / f"{run.run_id}.rank1.journal"
        assert report.unchanged == [journal.name] and not report.writing
        assert Store(home).run_rows()[0].status == "killed"
    assert journal.read_bytes() == (journal_dir(other) / journal.name).read_bytes()
    assert (journal_dir(home) / f"{journal.name}{PULLED}").is_file()

    # every reader says so: the run listing, the run detail, flor.dataframe
    store = Store(home)
    (run,) = store.run_rows()
    assert run.status == "killed" and run.failed_rank == 1
    assert run.message == "rank 1 was killed"
    last_write = datetime.fromtimestamp(journal.stat().st_mtime)
    assert run.end_time == last_write  # the end of a rank killed without an end event
    ranks = {r.rank: r for r in load_run_detail(store, run.run_id).ranks}
    assert ranks[1].status == "killed" and ranks[1].failed_first
    assert ranks[1].end_time == last_write
    listed = florwb(home, "runs")
    assert "killed rank 1" in listed.stdout
    frame = store.dataframe("rank_epoch")  # flor.dataframe's
    assert sorted(frame["rank_epoch"].tolist()) == [0, 1, 2, 10, 11]

    answer = journal_dir(home) / f"{journal.name}{PULLED}"
    kept = answer.read_bytes(), answer.stat().st_mtime_ns
    again = florwb(home, "pull", f"node-b:{other}", env=node_b.env)  # changes nothing
    assert "pulled 0 new and 0 grown journals, 0 checkpoint files; 1 unchanged" in again.stdout
    assert "ranks 1 of 2: killed" in again.stdout
    assert (answer.read_bytes(), answer.stat().st_mtime_ns) == kept


def test_a_killed_rank_of_this_host_pulled_from_a_path_reads_killed(tmp_path: Path) -> None:
    """A copy on this machine: the rank's process is this host's, checked here directly."""
    home, other, port = _launch(tmp_path)
    _killed(_writing([sys.executable, "train.py"], other, port))
    pulled = florwb(home, "pull", str(other))
    (run,) = Store(home).run_rows()
    assert f"run {run.run_id}: ranks 1 of 2: killed" in pulled.stdout
    assert run.status == "killed" and run.failed_rank == 1
    assert not list(journal_dir(home).glob(f"*{PULLED}"))  # no host was asked
