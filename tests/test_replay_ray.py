"""Replay on a Ray cluster: one real local cluster for the module (ray.init with 2 CPUs; the
CLI connects to it by address, through the warm driver, ray_driver.py, kept in a runtime
folder of the module's own). The demo project, a run launched by torchrun (2 ranks, gloo)
and a run restored from its own torch.save replayed through Ray and through the local fork
server must give the same rows, and a cancelled Ray replay must leave nothing. A second
command reuses the warm driver; a dead or hung one is replaced."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import florwb, git, recorded_project, run_py, write
from conftest_app import copy_demo

from florwb_engine.contract.replay_spec import ReplaySpec
from florwb_engine.replay import ddp_launch, execute, plan_replay, ray_driver
from florwb_engine.replay.ray_executor import RayOptions, segment_files, task_resources
from florwb_engine.store import Store

ray = pytest.importorskip("ray")  # the `ray` extra is in `dev`: present wherever tests run


@pytest.fixture(scope="module")
def ray_address():
    """A local Ray cluster, started once for the module (slow) and stopped after."""
    context = ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield context.address_info["gcs_address"]
    finally:
        ray.shutdown()


@pytest.fixture(scope="module")
def driver_env(tmp_path_factory, ray_address):
    """The environment that sends the CLI's replays on Ray through the warm driver, in a
    runtime folder of the module's own; the drivers started there are stopped after."""
    runtime = tmp_path_factory.mktemp("run")
    env = {"FLORWB_FORKSERVER_IDLE_S": "600", "XDG_RUNTIME_DIR": str(runtime)}
    try:
        yield env
    finally:
        for pid in _drivers(runtime):
            os.kill(pid, signal.SIGKILL)


def _drivers(runtime: Path) -> list[int]:
    """The pids of the drivers listening in `runtime`'s florwb folder."""
    pids = []
    for path in (runtime / "florwb").glob("ray-*.sock"):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            try:
                sock.connect(str(path))
            except OSError:
                continue
            creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
            pids.append(struct.unpack("3i", creds)[0])
    return pids


def _replay_on_ray(project: Path, name: str, ray_address: str, env: dict, check=True):
    return florwb(
        project,
        "replay",
        name,
        "--executor",
        "ray",
        "--address",
        ray_address,
        "--yes",
        "--json",
        env=env,
        check=check,
    )


def _rows(project: Path, source_like: str = "2%") -> list[tuple]:
    """The replayed values, without the replay id that tells two replays apart."""
    frame = Store(project).query(
        "SELECT run_id, rank, name, value, epoch, step FROM logs "
        f"WHERE source LIKE '{source_like}' ORDER BY run_id, rank, name, epoch, step, value"
    )
    return [tuple(row) for row in frame.itertuples(index=False)]


def test_ray_replay_gives_the_local_replays_rows(tmp_path, ray_address, driver_env):
    local, remote = copy_demo(tmp_path / "a"), copy_demo(tmp_path / "b")
    plan = plan_replay(local, ["weight_norm"], workers=2)
    expected = execute(plan)
    assert expected.status == "finished", expected
    proc = _replay_on_ray(remote, "weight_norm", ray_address, driver_env)
    out = json.loads(proc.stdout)
    result = out["result"]
    assert out["plan"]["executor"] == "ray"
    assert out["ray_driver"]["pid"] in _drivers(Path(driver_env["XDG_RUNTIME_DIR"]))
    assert result["status"] == "finished", result
    # the same fidelity check: as many recorded values compared, run by run
    assert {r["run_id"]: (r["status"], r["compared"], r["rows"]) for r in result["runs"]} == {
        r.run_id: (r.status, r.compared, r.rows) for r in expected.runs
    }
    rows = _rows(remote)
    assert rows and rows == _rows(local)
    # each version's code and each checkpoint went into the object store once, however
    # many segments read them: per segment, the bytes it put there first
    shipped = result["shipped"]
    ready = [r for r in out["plan"]["runs"] if r["status"] == "ready"]
    assert len(shipped) == sum(len(r["segments"]) for r in ready)
    assert sum(s["code_bytes"] > 0 for s in shipped.values()) == len({r["version"] for r in ready})
    folders = [remote / ".florwb" / "checkpoints" / r["run_id"] for r in ready]
    files = [p for folder in folders for p in folder.rglob("*")]
    put = sum(s["checkpoint_bytes"] for s in shipped.values())
    assert 0 < put <= sum(p.stat().st_size for p in files if p.is_file())
    assert not any((remote / ".florwb" / "replays").iterdir())


# Records quickly (no hold file then); replayed with the hold file there, each epoch writes
# the script's pid to a marker and waits, so the test cancels a task whose script runs.
HELD = """
import os
import time
import florwb as flor

MARK, HOLD = {mark!r}, {hold!r}
total = 0
for epoch in flor.loop("epoch", range(3)):
    for step in flor.loop("step", range(3)):
        total += step
    flor.log("total", total)
    if os.path.exists(HOLD):
        open(MARK, "w").write(str(os.getpid()))
        while os.path.exists(HOLD):
            time.sleep(0.05)
"""
HELD_TODAY = HELD.replace(
    '    flor.log("total", total)\n', '    flor.log("total", total)\n    flor.log("held", epoch)\n'
)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "Z" not in _state(pid)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "X"


def _held_project(repo: Path, mark: Path, hold: Path) -> None:
    write(repo / "train.py", HELD.format(mark=str(mark), hold=str(hold)))
    git(repo, "add", "train.py")
    git(repo, "commit", "-q", "-m", "v1")
    run_py(repo, "train.py")
    write(repo / "train.py", HELD_TODAY.format(mark=str(mark), hold=str(hold)))


def _left_nothing(repo: Path, pid: int) -> None:
    store = Store(repo)
    assert store.query("SELECT status FROM replays").status.tolist() == ["cancelled"]
    assert store.query("SELECT count(*) AS n FROM logs WHERE source != 'record'").n[0] == 0
    assert not list((repo / ".florwb" / "journal").glob("replay-*"))
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid), "the replayed script outlived its cancelled task"


def _wait_for(path: Path, still: Callable[[], bool], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists() and still() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert path.exists(), "the old script never ran inside a Ray task"


def test_cancelling_a_ray_replay_stops_its_tasks_and_leaves_nothing(repo, tmp_path, ray_address):
    mark, hold = tmp_path / "mark", tmp_path / "hold"
    _held_project(repo, mark, hold)
    plan = plan_replay(repo, ["held"], workers=1, executor="ray")
    assert plan.ready()
    hold.write_text("")
    cancel = threading.Event()
    out: dict = {}
    worker = threading.Thread(
        target=lambda: out.update(
            result=execute(plan, cancel=cancel, executor=RayOptions(address=ray_address))
        )
    )
    worker.start()
    try:
        try:
            _wait_for(mark, worker.is_alive)
        finally:
            cancel.set()  # also when the script never ran: the replay must end
            worker.join(timeout=60)
        assert not worker.is_alive()
        result = out["result"]
        assert result.status == "cancelled"
        assert [r.status for r in result.runs] == ["cancelled"]
        _left_nothing(repo, int(mark.read_text()))
    finally:
        hold.unlink()  # a script that outlived its task ends too


def test_task_resources_come_from_the_flags_or_the_runs_recorded_devices(tmp_path):
    demo = copy_demo(tmp_path)
    store = Store(demo)
    run_id = store.query("SELECT run_id FROM runs ORDER BY run_id LIMIT 1").run_id[0]
    assert task_resources(demo, run_id, RayOptions()) == (1.0, 0.0)  # recorded on CPU
    with store.session() as con:
        con.execute(
            "UPDATE run_context SET device_kind = 'cuda', gpu_count = 2 WHERE run_id = ?", [run_id]
        )
    assert task_resources(demo, run_id, RayOptions()) == (1.0, 2.0)
    assert task_resources(demo, run_id, RayOptions(gpus_per_task=0.5, cpus_per_task=4)) == (
        4,
        0.5,
    )


def test_ray_flags_without_the_ray_executor_are_refused(tmp_path):
    demo = copy_demo(tmp_path)
    proc = florwb(demo, "replay", "weight_norm", "--address", "auto", "--yes", check=False)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        "florwb: --address, --gpus-per-task, --cpus-per-task need --executor ray"
    ]
    assert Store(demo).query("SELECT count(*) AS n FROM replays").n[0] == 0


def test_ctrl_c_on_a_ray_replay_cancels_it(repo, tmp_path, ray_address, driver_env):
    mark, hold = tmp_path / "mark", tmp_path / "hold"
    _held_project(repo, mark, hold)
    hold.write_text("")
    proc = subprocess.Popen(
        [sys.executable, "-m", "florwb.cli", "replay", "held", "--yes"]
        + ["--executor", "ray", "--address", ray_address],
        cwd=repo,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **driver_env},
    )
    try:
        _wait_for(mark, lambda: proc.poll() is None)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, (out, err)
        assert "cancelled" in out
        _left_nothing(repo, int(mark.read_text()))
    finally:
        proc.kill()  # no-op when it ended
        hold.unlink()  # a script that outlived its task ends too


def test_a_killed_command_stops_the_segments_the_driver_runs_for_it(
    repo, tmp_path, ray_address, driver_env
):
    mark, hold = tmp_path / "mark", tmp_path / "hold"
    _held_project(repo, mark, hold)
    hold.write_text("")
    proc = subprocess.Popen(
        [sys.executable, "-m", "florwb.cli", "replay", "held", "--yes"]
        + ["--executor", "ray", "--address", ray_address],
        cwd=repo,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, **driver_env},
    )
    try:
        _wait_for(mark, lambda: proc.poll() is None)
        proc.kill()  # no cancel said: the driver sees the connection end
        proc.wait(timeout=30)
        pid = int(mark.read_text())
        deadline = time.monotonic() + 30
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(pid), "the script outlived the command that replayed it"
    finally:
        proc.kill()
        hold.unlink()


def _held_copies(repo: Path, tmp_path: Path, n: int) -> list[Path]:
    """`n` copies of a recorded project whose replay ends at once (no hold file)."""
    _held_project(repo, tmp_path / "mark", tmp_path / "hold")
    copies = [tmp_path / f"copy{i}" for i in range(n)]
    for copy in copies:
        shutil.copytree(repo, copy, symlinks=True)
    return copies


def test_a_second_replay_reuses_the_warm_driver_and_a_dead_one_is_replaced(
    repo, tmp_path, ray_address, driver_env
):
    first, second, third = _held_copies(repo, tmp_path, 3)
    driver: dict[Path, dict] = {}
    for copy in (first, second):
        out = json.loads(_replay_on_ray(copy, "held", ray_address, driver_env).stdout)
        assert out["result"]["status"] == "finished", out["result"]
        driver[copy] = out["ray_driver"]
    rows = _rows(first)
    assert rows and _rows(second) == rows
    pid = driver[first]["pid"]
    assert driver[second] == {"pid": pid, "served": driver[first]["served"] + 1, "started": False}

    os.kill(pid, signal.SIGKILL)  # its socket stays behind, with nobody listening
    deadline = time.monotonic() + 30
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    out = json.loads(_replay_on_ray(third, "held", ray_address, driver_env).stdout)
    assert out["result"]["status"] == "finished", out["result"]
    assert out["ray_driver"]["started"] and out["ray_driver"]["pid"] != pid
    assert _drivers(Path(driver_env["XDG_RUNTIME_DIR"])) == [out["ray_driver"]["pid"]]
    assert _rows(third) == rows


def test_a_driver_that_does_not_answer_is_replaced_not_waited_for(
    ray_address, driver_env, monkeypatch
):
    for name, value in driver_env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(ray_driver, "HELLO_S", 1.0)
    options = RayOptions(address=ray_address)
    try:
        warm = ray_driver.connect(options, start=True)
        assert warm is not None and warm.cluster is not None and warm.cluster.cpus == 2
        os.kill(warm.pid, signal.SIGSTOP)  # alive, its socket accepts, it never greets
        fresh = ray_driver.connect(options, start=True)
        assert fresh is not None and fresh.started and fresh.pid != warm.pid
        deadline = time.monotonic() + 30
        while _alive(warm.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(warm.pid)
    finally:
        ray_driver.forget()


def test_a_driver_that_dies_during_a_replay_fails_its_runs_at_once(
    repo, tmp_path, ray_address, driver_env
):
    mark, hold = tmp_path / "mark", tmp_path / "hold"
    _held_project(repo, mark, hold)
    hold.write_text("")
    proc = subprocess.Popen(
        [sys.executable, "-m", "florwb.cli", "replay", "held", "--yes", "--json"]
        + ["--executor", "ray", "--address", ray_address],
        cwd=repo,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **driver_env},
    )
    try:
        _wait_for(mark, lambda: proc.poll() is None)
        (driver,) = _drivers(Path(driver_env["XDG_RUNTIME_DIR"]))
        os.kill(driver, signal.SIGKILL)
        out, err = proc.communicate(timeout=60)  # not waiting for the segment
        assert proc.returncode == 1, err
        (run,) = json.loads(out)["result"]["runs"]
        assert run["status"] == "failed"
        assert f"the florwb Ray driver (pid {driver}) ended during the replay" in run["error"]
    finally:
        proc.kill()
        hold.unlink()


def test_without_ray_installed_the_ray_executor_is_one_line(repo, tmp_path, driver_env):
    _held_project(repo, tmp_path / "mark", tmp_path / "hold")
    hidden = tmp_path / "no-ray"
    write(hidden / "sitecustomize.py", "import sys\nsys.modules['ray'] = None\n")
    path = os.pathsep.join(filter(None, [str(hidden), os.environ.get("PYTHONPATH")]))
    proc = florwb(
        repo,
        *("replay", "held", "--executor", "ray", "--yes"),
        env={**driver_env, "PYTHONPATH": path},
        check=False,
    )
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        "florwb: the ray executor needs Ray: pip install 'florwb[ray]'"
    ]


def test_an_unreachable_cluster_is_said_in_one_line(repo, tmp_path, driver_env):
    _held_project(repo, tmp_path / "mark", tmp_path / "hold")
    nobody = f"127.0.0.1:{ddp_launch.free_port()}"
    proc = _replay_on_ray(repo, "held", nobody, driver_env, check=False)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        f"florwb: cannot reach Ray at {nobody}: Connection refused"
    ]
    assert proc.stdout == ""


# Two ranks (gloo), each drawing its own data: a replay matches only when every rank gets
# its own RNG states back from the run's checkpoints (rank 1's live in `rank1/`).
DDP = """
import torch
import torch.distributed as dist
import florwb as flor

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
net = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
torch.manual_seed(100 + rank)
opt = torch.optim.SGD(net.parameters(), lr=0.1)
flor.set_checkpoint_budget(1.0)
with flor.checkpointing(model=net, optimizer=opt):
    for epoch in flor.loop("epoch", range(3)):
        for step in flor.loop("step", range(3)):
            loss = (net(torch.randn(8, 4)) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            flor.log("loss", loss.item())
dist.destroy_process_group()
"""


def _local_and_ray(project: Path, name: str, ray_address: str, workers: int) -> None:
    """Replay `name` in `project` with the local executor and in a copy of it on Ray: the
    same verdicts, compared values and rows."""
    other = project.parent / "on-ray"
    shutil.copytree(project, other, symlinks=True)
    plan = plan_replay(project, [name], workers=workers)
    assert plan.ready(), plan.runs
    local = execute(plan)
    plan = plan_replay(other, [name], workers=workers, executor="ray")
    assert plan.ready(), plan.runs
    remote = execute(plan, executor=RayOptions(address=ray_address))
    assert local.status == remote.status == "finished", (local.runs, remote.runs)
    assert [(r.verdict, r.compared, r.rows) for r in remote.runs] == [
        (r.verdict, r.compared, r.rows) for r in local.runs
    ]
    assert remote.runs[0].compared > 0
    rows = _rows(other)
    assert rows and rows == _rows(project)


def test_a_torchrun_run_replays_on_ray_as_one_task_of_both_ranks(tmp_path, ray_address):
    project = tmp_path / "project"
    project.mkdir()
    git(project, "init", "-q")
    write(project / "train.py", DDP)
    git(project, "add", "-A")
    git(project, "commit", "-qm", "ddp")
    subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2"]
        + ["--master_port", str(ddp_launch.free_port()), "train.py"],
        cwd=project,
        check=True,
        capture_output=True,
        timeout=180,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    write(
        project / "train.py",
        DDP.replace(
            '            flor.log("loss", loss.item())\n',
            '            flor.log("loss", loss.item())\n'
            '            flor.log("wsum", sum(p.sum().item() for p in net.parameters()))\n',
        ),
    )
    _local_and_ray(project, "wsum", ray_address, workers=1)
    filled = [row for row in _rows(project.parent / "on-ray") if row[2] == "wsum"]
    assert {row[1] for row in filled} == {0, 1} and len(filled) == 18  # both ranks' steps


# Saves its own checkpoint every epoch (no flor.checkpointing): a segment that starts after
# epoch 0 is restored from the mirrored torch.save, with the RNG states taken with it.
OWN = """
import os
import torch
import florwb as flor

torch.manual_seed(0)
net = torch.nn.Linear(4, 1)
opt = torch.optim.Adam(net.parameters(), lr=0.05)
x, y = torch.randn(32, 4), torch.randn(32, 1)
assert not os.path.exists("ckpt.pth"), "the replay found the file the run created"
for epoch in flor.loop("epoch", range(4)):
    for step in flor.loop("step", range(3)):
        idx = torch.randint(0, 32, (8,))
        loss = ((net(x[idx]) - y[idx]) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        flor.log("loss", loss.item())
    torch.save({"model": net.state_dict(), "optimizer": opt.state_dict()}, "ckpt.pth")
"""


def test_a_run_restored_from_its_own_saves_replays_on_ray(tmp_path, ray_address):
    project = tmp_path / "project"
    recorded_project(project, OWN, files={".gitignore": "ckpt.pth\n"})
    write(
        project / "train.py",
        OWN.replace(
            '        flor.log("loss", loss.item())\n',
            '        flor.log("loss", loss.item())\n        flor.log("picked", idx.sum().item())\n',
        ),
    )
    (run,) = plan_replay(project, ["picked"], workers=2, executor="ray").ready()
    assert run.mirrored and run.segments[-1].first > 0  # restored from a mirrored save
    _local_and_ray(project, "picked", ray_address, workers=2)


def test_a_segment_ships_the_files_it_restores_and_only_those(tmp_path):
    checkpoints = tmp_path / "checkpoints"
    folder = checkpoints / "run"
    names = ["epoch-1.pt", "epoch-2.pt", "epoch-5.pt", "start-rng.json", "s1.pth", "r1.pt"]
    for name in [*names, "rank1/epoch-1.pt", "rank1/start-rng.json", "rank1/epoch-5.pt"]:
        write(folder / name, name)
    write(
        folder / "epoch-000002.saves.json",
        json.dumps({"rng": "r1.pt", "saves": [{"file": "s1.pth"}]}),
    )
    write(checkpoints / "parent" / "last.pt", "parent's")
    spec = ReplaySpec(
        replay_id="r",
        run_id="run",
        segment=0,
        mode="inner",
        main_loop="epoch",
        first=2,
        last=3,
        checkpoint_dir=str(folder),
        checkpoints={"1": "epoch-1.pt", "2": "epoch-2.pt", "5": "epoch-5.pt"},
        start_rng=str(folder / "start-rng.json"),
        world_size=2,
        mirrored={"2": "epoch-000002.saves.json"},
        starts=[{"path": "parent/last.pt"}, {"path": "/elsewhere/x.pt"}],
    )
    assert sorted(segment_files(spec)) == sorted(
        [
            "run/epoch-1.pt",
            "run/epoch-2.pt",
            "run/epoch-000002.saves.json",
            "run/s1.pth",
            "run/r1.pt",
            "run/start-rng.json",
            "run/rank1/epoch-1.pt",
            "run/rank1/start-rng.json",
            "parent/last.pt",
        ]
    )
