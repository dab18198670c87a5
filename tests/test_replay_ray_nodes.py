"""A run launched on two nodes (`torchrun --nnodes 2`, c10d, gloo, one process each, into
one project as on a shared filesystem) replayed on a real two-node Ray cluster on this
machine (ray.cluster_utils.Cluster, one CPU per node): a placement group with one bundle
per recorded node, spread over both Ray nodes, gives the local replay's rows and verdicts,
and a cancel stops both nodes' launchers and ranks."""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path
from unittest import mock

import pytest
from conftest import florwb, git, torchrun_node, write

from florwb_engine.replay import ddp_launch, execute, plan_replay, ray_nodes
from florwb_engine.replay.ray_executor import RayOptions
from florwb_engine.store import Store

ray = pytest.importorskip("ray")  # the `ray` extra is in `dev`: present wherever tests run

# Each rank holds in its first epoch while the hold file exists (only in the cancel
# test's replay), after saying its pid and its launcher's (its parent: torchrun's agent).
TRAIN = """
import os
import time
import torch
import torch.distributed as dist
import florwb as flor

HOLD, MARK = {hold!r}, {mark!r}
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
        if os.path.exists(HOLD):
            with open(f"{{MARK}}.{{rank}}.tmp", "w") as f:
                f.write(f"{{os.getpid()}} {{os.getppid()}}")
            os.replace(f"{{MARK}}.{{rank}}.tmp", f"{{MARK}}.{{rank}}")
            while os.path.exists(HOLD):
                time.sleep(0.05)
dist.destroy_process_group()
"""
LOGGED = '        flor.log("rank_epoch", rank * 10 + epoch)\n'
NEW = LOGGED + '        flor.log("w", sum(p.sum().item() for p in net.parameters()))\n'


@pytest.fixture(scope="module")
def cluster():
    """Two Ray nodes of one CPU each on this machine, the test process connected. The
    cluster's address is not written to Ray's shared `ray_current_cluster` file (nor that
    file removed at the end), so no other `ray.init()` on this machine joins this cluster."""
    from ray.cluster_utils import Cluster

    with (
        mock.patch("ray._private.utils.write_ray_address", lambda *a, **k: None),
        mock.patch("ray._common.utils.reset_ray_address", lambda *a, **k: None),
    ):
        nodes = Cluster(
            initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False}
        )
        try:
            nodes.add_node(num_cpus=1)
            nodes.wait_for_nodes()
            ray.init(address=nodes.address, include_dashboard=False, log_to_driver=False)
            yield nodes.address
        finally:
            ray.shutdown()
            nodes.shutdown()


@pytest.fixture(scope="module")
def two_node_run(tmp_path_factory):
    """A project whose train.py was recorded by a two-node launch, then given a new
    statement; (project, hold file, marker prefix)."""
    root = tmp_path_factory.mktemp("nodes")
    hold, mark = root / "hold", root / "mark"
    project = root / "project"
    script = TRAIN.format(hold=str(hold), mark=str(mark))
    write(project / "train.py", script)
    git(project, "init", "-q")
    git(project, "add", "-A")
    git(project, "commit", "-qm", "two nodes")
    port = ddp_launch.free_port()
    launches = [torchrun_node(project, port), torchrun_node(project, port)]
    for launch in launches:
        _, err = launch.communicate(timeout=240)
        assert launch.returncode == 0, err[-3000:]
    (run,) = Store(project).run_rows()
    assert run.status == "finished" and run.world_size == 2
    assert (run.launcher or {}).get("nnodes") == 2
    write(project / "train.py", script.replace(LOGGED, NEW))
    return project, hold, mark


def _copy(project: Path, name: str) -> Path:
    other = project.parent / name
    shutil.copytree(project, other, symlinks=True)
    return other


def _rows(project: Path) -> list[tuple]:
    frame = Store(project).query(
        "SELECT run_id, rank, name, value, epoch FROM logs WHERE source != 'record' "
        "ORDER BY run_id, rank, name, epoch, value"
    )
    return [tuple(row) for row in frame.itertuples(index=False)]


def test_a_two_node_run_replays_across_two_ray_nodes_with_the_local_rows(cluster, two_node_run):
    project, _hold, _mark = two_node_run
    local, remote = _copy(project, "local"), _copy(project, "on-ray")
    plan = plan_replay(local, ["w"], workers=1)
    (run,) = plan.ready()
    assert any("one node of 2 processes" in note for note in run.notes)
    expected = execute(plan)
    assert expected.status == "finished", expected.runs

    proc = florwb(
        remote,
        *("replay", "w", "--executor", "ray", "--address", cluster, "--workers", "1"),
        *("--yes", "--json"),
    )
    out = json.loads(proc.stdout)
    (planned,) = out["plan"]["runs"]
    assert any("placement group" in note for note in planned["notes"])
    result = out["result"]
    assert result["status"] == "finished", result
    assert [(r["status"], r["verdict"], r["compared"], r["rows"]) for r in result["runs"]] == [
        (r.status, r.verdict, r.compared, r.rows) for r in expected.runs
    ]
    assert expected.runs[0].compared > 0
    rows = _rows(remote)
    assert rows == _rows(local)
    assert {row[1] for row in rows if row[2] == "w"} == {0, 1}  # both nodes' ranks filled

    # one bundle per recorded node, on two different Ray nodes of this cluster, each
    # node's launcher returning its own rank's journal
    assert [len(r["segments"]) for r in out["plan"]["runs"]] == [1]
    (shipment,) = result["shipped"].values()
    placement = shipment["placement"]
    assert placement["strategy"] == ray_nodes.SPREAD
    assert (
        placement["line"]
        == "2 nodes of 1 CPU(s) and 0 GPU(s) each: one per Ray node (STRICT_SPREAD)"
    )
    nodes = placement["nodes"]
    live = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
    assert len({n["node_id"] for n in nodes}) == 2 and {n["node_id"] for n in nodes} <= live
    assert sorted(n["ranks"] for n in nodes) == [[0], [1]]
    assert _groups_removed()


def _groups_removed() -> bool:
    """Whether every placement group made on the cluster went with its segment (none left
    holding the nodes' CPUs)."""
    groups = ray.util.placement_group_table().values()
    return bool(groups) and all(g["state"] == "REMOVED" for g in groups)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def test_cancel_stops_both_nodes_launchers_and_ranks(cluster, two_node_run):
    project, hold, mark = two_node_run
    repo = _copy(project, "cancelled")
    plan = plan_replay(repo, ["w"], workers=1, executor="ray")
    assert plan.ready()
    markers = [Path(f"{mark}.{rank}") for rank in (0, 1)]
    hold.write_text("")
    cancel = threading.Event()
    out: dict = {}
    worker = threading.Thread(
        target=lambda: out.update(
            result=execute(plan, cancel=cancel, executor=RayOptions(address=cluster))
        )
    )
    worker.start()
    try:
        try:
            deadline = time.monotonic() + 120
            while (
                not all(m.exists() for m in markers)
                and worker.is_alive()
                and time.monotonic() < deadline
            ):
                time.sleep(0.05)
            assert all(m.exists() for m in markers), "both nodes' ranks never ran"
        finally:
            cancel.set()  # also when they never ran: the replay must end
            worker.join(timeout=90)
        assert not worker.is_alive()
        assert out["result"].status == "cancelled"
        pids = [int(p) for m in markers for p in m.read_text().split()]
        ranks, launchers = pids[0::2], pids[1::2]
        assert len(set(launchers)) == 2  # one launcher per node
        deadline = time.monotonic() + 10
        while any(map(_alive, pids)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not [p for p in ranks + launchers if _alive(p)], "a node's processes outlived it"
        store = Store(repo)
        assert store.query("SELECT status FROM replays").status.tolist() == ["cancelled"]
        assert store.query("SELECT count(*) AS n FROM logs WHERE source != 'record'").n[0] == 0
        assert not list((repo / ".florwb" / "journal").glob("replay-*"))
        assert _groups_removed()
    finally:
        hold.unlink()
        for m in markers:
            m.unlink(missing_ok=True)


def test_the_bundles_spread_pack_or_are_refused_by_what_the_nodes_hold():
    bundle = ray_nodes.node_bundle(
        {"world_size": 4, "nnodes": 2, "devices": 2}, RayOptions(cpus_per_task=2)
    )
    assert bundle == {"CPU": 4.0, "GPU": 2.0}
    big = {"CPU": 8.0, "GPU": 4.0}
    assert ray_nodes.choose(bundle, 2, [big, big])[0] == ray_nodes.SPREAD
    strategy, line = ray_nodes.choose(bundle, 2, [big, {"CPU": 8.0}])
    assert strategy == ray_nodes.PACK and "fewer nodes than the run had" in line
    strategy, line = ray_nodes.choose(bundle, 2, [{"CPU": 4.0, "GPU": 2.0}, {"CPU": 64.0}])
    assert strategy is None and "hold 1 such bundle" in line
    assert ray_nodes.spans_nodes({"launcher": "torchrun", "nnodes": 2, "nproc": 4, "world_size": 4})
    assert not ray_nodes.spans_nodes(  # rank 0 alone (ddp_launch.fit): one node
        {"launcher": "torchrun", "nnodes": 2, "nproc": 1, "world_size": 4}
    )


def test_a_node_launch_meets_at_the_rendezvous_it_is_given():
    job = {"key": "r1:0", "launch": {"launcher": "torchrun", "world_size": 4, "nnodes": 2}}
    second = ray_nodes.node_job(job, 1, 2, "10.0.0.5:29411")
    argv = ddp_launch.launch_argv(second["launch"], ["/code/train.py"])
    assert argv == [
        "-m",
        "torch.distributed.run",
        "--nproc_per_node=2",
        "--nnodes=2",
        "--rdzv-backend=c10d",
        "--rdzv-endpoint=10.0.0.5:29411",
        "--rdzv-id=florwb-r1-0",
        "--rdzv-conf=is_host=0",
        "/code/train.py",
    ]
    first = ray_nodes.node_job(job, 0, 2, "10.0.0.5:29411")["launch"]["rendezvous"]
    assert first["host"] is True


def test_locally_a_multi_node_run_needs_all_its_gpus_on_this_machine():
    def launch() -> ddp_launch.Launch:
        return ddp_launch.Launch("torchrun", world_size=4, nproc=4, devices=2, nnodes=2)

    note, refusal = ddp_launch.fit(launch(), "inner", here=4)
    assert refusal is None and "one node of 4 processes" in (note or "")
    note, refusal = ddp_launch.fit(launch(), "inner", here=2)  # 2 GPUs: not 4 ranks' worth
    assert note is None and "it needs 4; this machine has 2" in (refusal or "")
    alone = launch()
    note, refusal = ddp_launch.fit(alone, "outer", here=2)
    assert refusal is None and alone.nproc == 1 and "rank 0 alone" in (note or "")
    spread = launch()  # on Ray each node gets a node of its own: 2 GPUs per node fit
    note, refusal = ddp_launch.fit(spread, "inner", here=2, across_nodes=True)
    assert refusal is None and spread.nproc == 4 and "placement group" in (note or "")


def test_a_segment_fails_with_the_node_that_failed_first_and_keeps_every_journal():
    """Node 1 failed; node 0, stopped after it (a world missing a node cannot finish),
    ended second with SIGTERM: the segment's exit code is node 1's."""
    outs = [
        {"returncode": -15, "journals": {"replay-r-0.rank0.journal": b"a"}, "log": b"stopped\n"},
        {"returncode": 1, "journals": {"replay-r-0.rank1.journal": b"b"}, "log": b"boom\n"},
    ]
    placement = {"line": "2 nodes ...", "nodes": [{"node_id": "n0" * 8}, {"node_id": "n1" * 8}]}
    out = ray_nodes.combined(outs, placement, ended=[1, 0])
    assert out["returncode"] == 1
    assert out["journals"] == {"replay-r-0.rank0.journal": b"a", "replay-r-0.rank1.journal": b"b"}
    assert out["log"].decode().splitlines() == [
        "florwb: 2 nodes ...",
        "florwb: node 0 (n0n0n0n0n0n0):",
        "stopped",
        "florwb: node 1 (n1n1n1n1n1n1):",
        "boom",
    ]
    assert ray_nodes.combined([outs[0], outs[0]], placement, ended=[0, 1])["returncode"] == -15
