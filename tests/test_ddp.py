"""Multi-process training (torchrun, torch.multiprocessing.spawn) recorded as one run and
replayed the way it was launched: real launchers, 2 ranks, gloo on CPU, a small model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

import duckdb
import pytest
import torch
from conftest import florwb, git, write

from florwb.screens.run_detail import rank_lines
from florwb_engine.project import checkpoint_dir, journal_dir
from florwb_engine.replay import ddp_launch, execute, plan_replay
from florwb_engine.replay.cost import launch_start_s
from florwb_engine.replay.ddp_launch import Launch
from florwb_engine.store import Store, run_ranks
from florwb_engine.store.queries import load_run_detail
from florwb_engine.store.schema import ensure_schema

# Each rank draws its own data from its own seed, so a replay matches only when every rank
# gets its own RNG states back; DDP keeps the replicas' weights identical.
TRAIN = """
import os
import torch
import torch.distributed as dist
import florwb as flor

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
net = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
torch.manual_seed(100 + rank)
opt = torch.optim.SGD(net.parameters(), lr=0.1)
epochs = flor.arg("epochs", 3)
flor.set_checkpoint_budget(1.0)
with flor.checkpointing(model=net, optimizer=opt):
    for epoch in flor.loop("epoch", range(epochs)):
        shift = torch.randn(1).item()
        for step in flor.loop("step", range(4)):
            x = torch.randn(8, 4) + shift
            loss = (net(x) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            flor.log("loss", loss.item())
        flor.log("shift", shift)
        print(f"rank {rank} epoch {epoch}")
        print("tick")
        print("tick")
dist.destroy_process_group()
"""

EPOCH_LEVEL = '        flor.log("wsum", sum(p.sum().item() for p in net.parameters()))\n'
STEP_LEVEL = (
    '            flor.log("gsq", sum((p.grad ** 2).sum().item() for p in net.parameters()))\n'
)


def torchrun(project: Path, script: str, *options: str, check: bool = True):
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", *options]
        + ["--master_port", str(ddp_launch.free_port()), script],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"torchrun {script} failed ({proc.returncode}):\n{proc.stderr}")
    return proc


def commit(project: Path, message: str) -> None:
    git(project, "add", "-A")
    git(project, "commit", "-q", "-m", message)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> tuple[Path, str]:
    """A project with one run recorded under torchrun with 2 ranks."""
    project = tmp_path_factory.mktemp("ddp") / "project"
    project.mkdir()
    git(project, "init", "-q", "-b", "main")
    write(project / "train.py", TRAIN)
    commit(project, "v1")
    torchrun(project, "train.py", "--max-restarts", "0")
    runs = Store(project).run_rows()
    assert len(runs) == 1
    return project, runs[0].run_id


def test_a_torchrun_launch_is_one_run_with_a_rank_on_every_value(recorded):
    project, run_id = recorded
    store = Store(project)
    (run,) = [r for r in store.run_rows() if r.run_id == run_id]
    assert run.world_size == 2
    assert run.status == "finished"
    launcher = dict(run.launcher or {})
    assert launcher.pop("start_s") > 0  # measured by the ranks (record/ranks.py)
    assert launcher == {"launcher": "torchrun", "nnodes": 1, "argv": ["--max-restarts", "0"]}
    assert run.args == {"epochs": 3}
    names = sorted(p.name for p in journal_dir(project).iterdir())
    assert names == [f"{run_id}.rank0.journal", f"{run_id}.rank1.journal"]
    counts = store.query(
        f"SELECT rank, name, count(*) AS n FROM logs WHERE run_id = '{run_id}' "
        "GROUP BY ALL ORDER BY ALL"
    )
    assert counts.values.tolist() == [
        [0, "loss", 12],
        [0, "shift", 3],
        [1, "loss", 12],
        [1, "shift", 3],
    ]
    timings = store.query(
        f"SELECT rank, loop, count(*) FROM iterations WHERE run_id = '{run_id}' "
        "GROUP BY ALL ORDER BY ALL"
    )
    assert timings.values.tolist() == [
        [0, "epoch", 3],
        [0, "step", 12],
        [1, "epoch", 3],
        [1, "step", 12],
    ]
    # the ranks drew different data: their values differ, and each is at its own rank
    shifts = store.query(
        f"SELECT rank, list(value ORDER BY epoch) AS v FROM logs WHERE run_id = '{run_id}' "
        "AND name = 'shift' GROUP BY rank ORDER BY rank"
    )
    assert list(shifts.v[0]) != list(shifts.v[1])
    frame = store.dataframe("loss", "shift")
    assert list(frame.columns[:4]) == ["run_id", "version", "start_time", "rank"]
    assert sorted(frame["rank"].unique().tolist()) == [0, 1]
    assert len(frame[(frame["rank"] == 1) & frame["loss"].notna()]) == 12

    listed = json.loads(florwb(project, "runs", "--json").stdout)
    assert [r["world_size"] for r in listed if r["run_id"] == run_id] == [2]

    # each rank's printed lines are its own: numbered apart, said whose, repeats counted apart
    lines = json.loads(florwb(project, "io", run_id, "--format", "json").stdout)
    said = [(line["rank"], line["epoch"], line["text"].strip(), line["n"]) for line in lines]
    assert said == [
        (rank, epoch, text, n)
        for rank in (0, 1)
        for epoch in range(3)
        for text, n in ((f"rank {rank} epoch {epoch}", 1), ("tick", 2))
    ]
    tail = load_run_detail(store, run_id).console  # the run detail's tail: the ranks side by side
    assert [(line.rank, line.text.strip()) for line in tail[-2:]] == [(0, "tick"), (1, "tick")]
    table = florwb(project, "runs").stdout.splitlines()
    assert "procs" in table[0].split()


def test_checkpoints_are_written_once_by_rank_0_with_every_ranks_rng(recorded):
    project, run_id = recorded
    folder = checkpoint_dir(project) / run_id
    store = Store(project)
    rows = store.query(f"SELECT iteration, path FROM checkpoints WHERE run_id = '{run_id}'")
    assert sorted(rows.iteration.tolist()) == [0, 1, 2]  # once per iteration, not per rank
    assert sorted(p.name for p in folder.glob("*.pt")) == sorted(rows.path.tolist())
    own = sorted(p.name for p in (folder / "rank1").glob("*.pt"))
    assert own == sorted(rows.path.tolist())  # rank 1 keeps its RNG at the same iterations
    state = torch.load(folder / "rank1" / own[0], weights_only=True)
    assert state["objects"] == {} and "torch" in state["rng"]
    full = torch.load(folder / own[0], weights_only=True)
    assert set(full["objects"]) == {"model", "optimizer"}
    assert not torch.equal(state["rng"]["torch"], full["rng"]["torch"])
    assert (folder / "start-rng.json").exists() and (folder / "rank1" / "start-rng.json").exists()


def _values(store: Store, name: str, run_id: str, source: str) -> dict:
    rows = store.query(
        f"SELECT rank, epoch, coalesce(step, -1) AS step, value FROM logs WHERE name = '{name}' "
        f"AND run_id = '{run_id}' AND source = '{source}'"
    )
    return {(int(r.rank), int(r.epoch), int(r.step)): r.value for r in rows.itertuples()}


def test_replays_fill_every_rank_and_equal_a_forward_run(recorded):
    project, run_id = recorded
    script = project / "train.py"
    script.write_text(
        script.read_text()
        .replace(
            '        flor.log("shift", shift)\n', '        flor.log("shift", shift)\n' + EPOCH_LEVEL
        )
        .replace(
            '            flor.log("loss", loss.item())\n',
            '            flor.log("loss", loss.item())\n' + STEP_LEVEL,
        )
    )
    store = Store(project)
    (run,) = [r for r in store.run_rows() if r.run_id == run_id]
    # the launcher's start to the slowest rank's first flor call, as the ranks measured it
    measured = (run.launcher or {}).get("start_s")
    assert measured is not None and measured > 0
    replayed = {}
    for name, mode in (("wsum", "outer"), ("gsq", "inner")):
        plan = plan_replay(project, [name], run_ids=[run_id], workers=1)
        (run_plan,) = plan.ready()
        assert run_plan.mode == mode
        assert run_plan.launch is not None and run_plan.launch["nproc"] == 2
        # every segment starts the launch afresh: the measured start is in the estimate
        assert launch_start_s(run_plan.launch) == measured
        assert plan.estimate_raw_s >= measured * len(run_plan.segments)
        assert any("launched as 2 processes" in note for note in run_plan.notes)
        result = execute(plan)
        assert result.status == "finished", result.runs
        assert result.runs[0].compared > 0  # recorded values recomputed per rank, equal
        replayed[name] = _values(store, name, run_id, plan.replay_id)
    assert {k[0] for k in replayed["wsum"]} == {0, 1}
    assert len(replayed["wsum"]) == 6 and len(replayed["gsq"]) == 24

    torchrun(project, "train.py")  # today's script, forward, the same args
    forward_id = [r.run_id for r in store.run_rows() if r.run_id != run_id][0]
    for name in ("wsum", "gsq"):
        forward = _values(store, name, forward_id, "record")
        assert forward == pytest.approx(replayed[name], rel=1e-6, abs=1e-9)
        assert set(forward) == set(replayed[name])


KILLED = """
import os, signal
import torch
import torch.distributed as dist
import florwb as flor
from florwb_engine.record import runtime

dist.init_process_group("gloo")
rank = dist.get_rank()
net = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 1))
for epoch in flor.loop("epoch", range(3)):
    flor.log("rank_epoch", rank * 10 + epoch)
    if rank == 1 and epoch == 1:
        runtime.current().flush()  # what it logged is in its journal: then it dies
        os.kill(os.getpid(), signal.SIGKILL)
    net(torch.ones(1, 2)).sum().backward()
"""


def test_a_killed_rank_is_named_first_and_every_ranks_values_are_kept(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    write(project / "train.py", KILLED)
    proc = torchrun(project, "train.py", check=False)
    assert proc.returncode != 0
    store = Store(project)
    (run,) = store.run_rows()
    assert run.status == "killed"
    assert run.world_size == 2
    # Rank 0 then fails on its lost peer, or torchrun stops it (SIGTERM): either way it
    # ended after rank 1's journal was last written, and is not the one named.
    assert run.failed_rank == 1
    assert run.message is not None and run.message.startswith("rank 1 was killed first; ")
    detail = load_run_detail(store, run.run_id)
    ranks = {r.rank: r for r in detail.ranks}
    assert ranks[1].status == "killed" and ranks[1].failed_first
    assert ranks[0].status in ("failed", "stopped") and not ranks[0].failed_first
    assert ranks[1].end_time is not None and ranks[0].end_time is not None
    assert ranks[1].end_time <= ranks[0].end_time
    # each rank's own context: its own process's CPU figures, not one row for the run
    assert set(store.query("SELECT rank FROM run_context")["rank"]) == {0, 1}
    assert ranks[0].context is not None and ranks[1].context is not None
    listed = florwb(project, "runs")
    assert "killed rank 1 first" in listed.stdout
    shown = [line.plain for line in rank_lines(detail.ranks)]  # the run detail's lines
    assert shown[1].startswith("rank 1  killed first · last wrote ")
    assert shown[0].startswith("rank 0  ") and " first" not in shown[0]
    kept = store.query("SELECT rank, value FROM logs WHERE name = 'rank_epoch' ORDER BY ALL")
    assert [10.0, 11.0] == kept[kept["rank"] == 1].value.tolist()
    assert 0.0 in kept[kept["rank"] == 0].value.tolist()


SPAWNED = """
import os
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import florwb as flor


def train(rank, world_size):
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    torch.manual_seed(0)
    net = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 1))
    torch.manual_seed(10 + rank)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    flor.set_checkpoint_budget(1.0)
    with flor.checkpointing(model=net, optimizer=opt):
        for epoch in flor.loop("epoch", range(2)):
            for step in flor.loop("step", range(2)):
                loss = net(torch.randn(3, 2)).pow(2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
                flor.log("loss", loss.item())
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29500")
    mp.spawn(train, args=(2,), nprocs=2)
"""


def test_mp_spawn_ranks_record_one_run_and_replay(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    git(project, "init", "-q", "-b", "main")
    write(project / "train.py", SPAWNED)
    commit(project, "v1")
    env = {"MASTER_PORT": str(ddp_launch.free_port()), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "train.py"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, **env},
    )
    assert proc.returncode == 0, proc.stderr
    store = Store(project)
    (run,) = store.run_rows()
    assert (run.world_size, run.status) == (2, "finished")
    assert run.launcher is not None and run.launcher["launcher"] == "mp.spawn"
    rows = store.query("SELECT rank, count(*) AS n FROM logs GROUP BY rank ORDER BY rank")
    assert rows.values.tolist() == [[0, 4], [1, 4]]

    # a step-level statement: the steps re-execute in both spawned ranks, and the losses
    # they recompute equal what each rank recorded (its own RNG states restored)
    script = project / "train.py"
    script.write_text(
        script.read_text().replace(
            '                flor.log("loss", loss.item())\n',
            '                flor.log("loss", loss.item())\n'
            '                flor.log("wsum", net.module.weight.sum().item())\n',
        )
    )
    plan = plan_replay(project, ["wsum"], workers=1)
    (run_plan,) = plan.ready()
    assert run_plan.mode == "inner" and run_plan.launch is not None
    result = execute(plan)
    assert result.status == "finished", result.runs
    assert result.runs[0].compared == 8
    filled = store.query(
        f"SELECT rank, count(*) AS n FROM logs WHERE source = '{plan.replay_id}' "
        "AND name = 'wsum' GROUP BY rank ORDER BY rank"
    )
    assert filled.values.tolist() == [[0, 4], [1, 4]]


def test_a_machine_with_fewer_gpus_is_told_before_the_replay_starts():
    def launch() -> Launch:
        return Launch("torchrun", world_size=4, nproc=4, devices=4)

    same = launch()
    note, refusal = ddp_launch.fit(same, "inner", here=4)
    assert refusal is None and same.nproc == 4 and "4 processes" in (note or "")
    fewer = launch()
    note, refusal = ddp_launch.fit(fewer, "outer", here=1)
    assert refusal is None and fewer.nproc == 1
    assert "rank 0 alone" in (note or "") and "this machine has 1" in (note or "")
    step_level = launch()
    note, refusal = ddp_launch.fit(step_level, "inner", here=2)
    assert note is None and "collectives" in (refusal or "")
    _note, refusal = ddp_launch.fit(launch(), "prefix", here=0)
    assert "not even rank 0" in (refusal or "")
    cpu = Launch("torchrun", world_size=2, nproc=2, devices=0)
    assert ddp_launch.fit(cpu, "inner", here=0)[1] is None


def test_launch_argv_keeps_the_recorded_options_and_picks_a_port():
    launch = {"launcher": "torchrun", "nproc": 2, "options": ["--max-restarts=0"]}
    argv = ddp_launch.launch_argv(launch, ["/code/train.py", "--lr", "0.1"])
    assert argv[:3] == ["-m", "torch.distributed.run", "--nproc_per_node=2"]
    assert "--max-restarts=0" in argv and argv[-3:] == ["/code/train.py", "--lr", "0.1"]
    port = int(next(a for a in argv if a.startswith("--master_port=")).split("=")[1])
    assert 0 < port < 65536
    assert ddp_launch.launch_argv(None, ["train.py"]) == ["train.py"]


WAITS = """
import os
import time
from pathlib import Path
import torch.distributed as dist
import florwb as flor

dist.init_process_group("gloo")
rank = dist.get_rank()
flor.log("r", rank)
if rank == 0:  # rank 1 ends first; rank 0 goes on until the test says so
    while not Path(os.environ["GO_FILE"]).exists():
        time.sleep(0.02)
"""


def test_a_run_is_finished_only_once_every_rank_finished(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    write(project / "train.py", WAITS)
    go = tmp_path / "go"
    launcher = subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2"]
        + ["--master_port", str(ddp_launch.free_port()), "train.py"],
        cwd=project,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "GO_FILE": str(go), "OMP_NUM_THREADS": "1"},
    )
    try:
        store = Store(project)
        deadline = time.monotonic() + 150
        ranks = []
        while time.monotonic() < deadline:
            if (project / ".florwb").exists():
                ranks = store.query("SELECT rank, status FROM run_ranks ORDER BY rank").values
                if [list(r) for r in ranks] == [[0, "running"], [1, "finished"]]:
                    break
            time.sleep(0.1)
        assert [list(r) for r in ranks] == [[0, "running"], [1, "finished"]]
        assert [r.status for r in store.run_rows()] == ["running"]
    finally:
        go.touch()
        assert launcher.wait(timeout=120) == 0
    (run,) = store.run_rows()
    assert run.status == "finished" and run.end_time is not None


def test_ranks_stopped_by_their_launcher_are_told_apart_from_the_one_that_failed():
    """torchrun stops the other ranks (SIGTERM) once one dies: the stopped ranks' ends say
    so (record/runtime.py), and the run names the rank whose failure came first."""
    con = duckdb.connect()
    ensure_schema(con)
    t0 = datetime(2026, 1, 1, 12, 0, 0)

    def start(run_id: str, rank: int) -> None:
        con.execute("INSERT INTO runs (run_id, run_key, status) VALUES (?, ?, 'running')"
                    " ON CONFLICT DO NOTHING", [run_id, ord(run_id)])  # fmt: skip
        info = {"rank": rank, "world_size": 3, "local_rank": rank, "launcher": "torchrun"}
        run_ranks.on_start(con, run_id, {"rank": info, "pid": 1}, t0)

    stopped = {"status": "killed", "signal": "SIGTERM", "message": "stopped by SIGTERM"}
    for rank in range(3):
        start("a", rank)
    run_ranks.on_end(con, "a", 0, stopped, t0 + timedelta(seconds=5))
    run_ranks.on_end(con, "a", 2, {"status": "failed", "exception": "RuntimeError",
                                  "message": "peer gone"}, t0 + timedelta(seconds=4))  # fmt: skip
    run_ranks.mark_killed(con, "a", 1, t0 + timedelta(seconds=3))  # its journal's last write
    for rank in range(2):
        start("b", rank)
        run_ranks.on_end(con, "b", rank, stopped, t0 + timedelta(seconds=rank))
    runs = dict(con.execute("SELECT run_id, status || ': ' || message FROM runs").fetchall())
    assert (
        runs["a"] == "killed: rank 1 was killed first; then rank 2; rank 0 stopped by the launcher"
    )
    assert runs["b"] == "killed: ranks 0, 1 stopped by SIGTERM"  # stopped from outside
    assert run_ranks.first_failures(con) == {"a": 1}
    assert [r.status for r in run_ranks.rank_rows(con, "a")] == ["stopped", "killed", "failed"]
