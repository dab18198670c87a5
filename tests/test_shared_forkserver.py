"""The shared fork server: replays fork their workers from a server that outlives one
replay, give the values a forward run gives, never use a server made for another key, fall
back to a server of their own when the shared one is gone, and the server exits when idle."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import tempfile
import threading
import time
from pathlib import Path

import pytest
from conftest import florwb, recorded_project, write

from florwb_engine.replay.forkserver import IDLE_ENV, ForkServer, socket_path

SCRIPT = """
import torch
import florwb as flor

torch.manual_seed(0)
flor.set_checkpoint_budget(1.0)
data, target = torch.randn(32, 4), torch.randn(32, 1)
net = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(net.parameters(), lr=0.1)
with flor.checkpointing(model=net, optimizer=opt):
    for epoch in flor.loop("epoch", range(3)):
        for step in flor.loop("step", range(3)):
            loss = ((net(data) - target) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        flor.log("loss", loss.item())
"""


def today(name: str) -> str:
    """The script with an epoch-level statement logging the weight norm as `name`."""
    statement = f'        flor.log("{name}", net.weight.norm().item())\n'
    return SCRIPT.replace("        for step in", statement + "        for step in")


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    return recorded_project(tmp_path_factory.mktemp("shared") / "project", SCRIPT)


@pytest.fixture(scope="module")
def forward(tmp_path_factory) -> dict[int, float]:
    """The weight norms a forward run of the script with the statement logs."""
    root = recorded_project(tmp_path_factory.mktemp("forward") / "project", today("wnorm"))
    (values,) = _values(root, "wnorm").values()
    assert sorted(values) == [0, 1, 2]
    return values


@pytest.fixture
def shared():
    """Settings that turn the shared server on, in a runtime folder of the test's own
    (short: a socket's path is limited); the servers the test saw are stopped after it."""
    run = tempfile.mkdtemp(prefix="fws")
    os.chmod(run, 0o700)
    env = {IDLE_ENV: "120", "XDG_RUNTIME_DIR": run}
    seen: list[int] = []
    yield env, seen
    for pid in seen:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    shutil.rmtree(run, ignore_errors=True)


def _replay(project: Path, name: str, env: dict[str, str], seen: list[int]) -> dict:
    write(project / "train.py", today(name))
    report = json.loads(
        florwb(project, "replay", name, "--yes", "--json", "--profile", env=env).stdout
    )
    assert report["result"]["runs"][0]["verdict"] == "verified"
    server = report["profile"]["fork_server"]
    if "server" in server:
        seen.append(server["server"])
    return server


def _values(project: Path, name: str) -> dict[str, dict[int, float]]:
    rows = json.loads(florwb(project, "dataframe", name, "--format", "json").stdout)
    found: dict[str, dict[int, float]] = {}
    for row in rows:
        if row.get(name) is not None:
            found.setdefault(row["run_id"], {})[int(row["epoch"])] = row[name]
    return found


def _running(pid: int) -> bool:
    """Alive and not a zombie (an ended server nobody reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_a_second_replay_reuses_the_server_and_both_match_a_forward_run(project, forward, shared):
    env, seen = shared
    first = _replay(project, "w_first", env, seen)
    second = _replay(project, "w_second", env, seen)
    assert first["shared"] and second["shared"]
    assert second["server"] == first["server"]  # the same server process
    assert second["session"] != first["session"]  # a session of its own
    assert second["served"] == first["served"] + 1
    assert _running(first["server"])  # it lingers for the next replay
    for name in ("w_first", "w_second"):
        (values,) = _values(project, name).values()
        assert values == forward


def test_a_server_made_for_another_environment_is_not_used(project, forward, shared):
    env, seen = shared
    first = _replay(project, "w_env_a", env, seen)
    other = _replay(project, "w_env_b", {**env, "FWS_TEST_SETTING": "other"}, seen)
    assert other["shared"] and first["shared"]
    assert other["server"] != first["server"]
    assert _running(first["server"]) and _running(other["server"])
    assert len(list((Path(env["XDG_RUNTIME_DIR"]) / "florwb").glob("*.sock"))) == 2
    (values,) = _values(project, "w_env_b").values()
    assert values == forward


def test_a_killed_server_is_replaced_and_the_replay_still_right(project, forward, shared):
    env, seen = shared
    first = _replay(project, "w_kill_a", env, seen)
    os.kill(first["server"], signal.SIGKILL)
    again = _replay(project, "w_kill_b", env, seen)  # its socket is left behind, dead
    assert again["shared"] and again["server"] != first["server"]
    assert again["served"] == 1
    (values,) = _values(project, "w_kill_b").values()
    assert values == forward


def test_turned_off_each_replay_has_a_server_of_its_own(project, forward, shared):
    env, seen = shared
    server = _replay(project, "w_off", {**env, IDLE_ENV: "0"}, seen)
    assert server["shared"] is False and not _running(server["pid"])
    assert not (Path(env["XDG_RUNTIME_DIR"]) / "florwb").exists()
    (values,) = _values(project, "w_off").values()
    assert values == forward


def test_the_server_exits_when_idle(project, shared):
    env, seen = shared
    server = _replay(project, "w_idle", {**env, IDLE_ENV: "0.5"}, seen)
    sockets = Path(env["XDG_RUNTIME_DIR"]) / "florwb"
    deadline = time.monotonic() + 60
    while (_running(server["server"]) or list(sockets.glob("*.sock"))) and (
        time.monotonic() < deadline
    ):
        time.sleep(0.05)
    assert not _running(server["server"])
    assert not list(sockets.glob("*.sock"))  # it removed its socket


def test_a_session_lost_before_its_greeting_falls_back_to_a_server_of_its_own(
    tmp_path, monkeypatch
):
    """A socket that accepts and hangs up at once (a server dying as the replay
    connects): the replay's requests go to a server of its own, and its worker runs."""
    run = tempfile.mkdtemp(prefix="fws")
    os.chmod(run, 0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", run)
    monkeypatch.setenv(IDLE_ENV, "120")
    path = socket_path()
    assert path is not None
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(4)

    def hang_up() -> None:
        conn, _ = listener.accept()
        conn.close()

    thread = threading.Thread(target=hang_up)
    thread.start()
    script = tmp_path / "job.py"
    out = tmp_path / "out.txt"
    script.write_text(
        f"import os, sys\nopen({str(out)!r}, 'w').write(os.environ['FWS_JOB'] + sys.argv[1])\n"
    )
    server = ForkServer.shared(tmp_path / "own.log", ["colorsys"], [tmp_path])
    try:
        assert server is not None  # connected: the hang-up comes after (or as it says hello)
        n = server.start([str(script), "!"], tmp_path, {"FWS_JOB": "ran"}, tmp_path / "err")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            server.poll(0.1)
            pid = server.started.get(n)
            if isinstance(pid, int) and pid in server.exited:
                break
        assert server.identity == {
            "shared": False,
            "pid": server.identity["pid"],
            "fell_back": True,
        }
        assert server.exited[server.started[n]] == 0
        assert out.read_text() == "ran!"
    finally:
        if server is not None:
            server.close()
        thread.join()
        listener.close()
        shutil.rmtree(run, ignore_errors=True)


def _run_job(server: ForkServer, script: Path, cwd: Path, err: Path) -> int:
    n = server.start([str(script)], cwd, {}, err)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        server.poll(0.1)
        pid = server.started.get(n)
        if isinstance(pid, str):
            raise AssertionError(pid)
        if pid is not None and pid in server.exited:
            return server.exited[pid]
    raise AssertionError("the worker did not end")


def test_a_module_one_project_preloaded_is_the_next_projects_own_where_it_has_one(
    tmp_path, monkeypatch
):
    """Project a's replay has the server import colorsys; project b has a colorsys.py of
    its own, which its script (in a subfolder) imports through its project folder."""
    run = tempfile.mkdtemp(prefix="fws")
    os.chmod(run, 0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", run)
    monkeypatch.setenv(IDLE_ENV, "120")
    a, b = tmp_path / "a", tmp_path / "b"
    out = tmp_path / "out.txt"
    report = f"import colorsys\nopen({str(out)!r}, 'w').write(colorsys.__file__)\n"
    write(a / "job.py", report)
    write(b / "colorsys.py", "OWN = True\n")
    write(b / "sub" / "job.py", f"import sys\nsys.path.insert(0, {str(b)!r})\n" + report)
    servers = []
    try:
        for project, script in ((a, a / "job.py"), (b, b / "sub" / "job.py")):
            server = ForkServer.shared(tmp_path / "own.log", ["colorsys"], [project])
            assert server is not None
            servers.append(server)
            assert _run_job(server, script, project, tmp_path / "err") == 0
            server.close()
            if project == a:
                assert out.read_text() != str(b / "colorsys.py")  # the installed one
        assert out.read_text() == str(b / "colorsys.py")
        assert servers[0].identity["server"] == servers[1].identity["server"]
    finally:
        for server in servers:
            with contextlib.suppress(ProcessLookupError, KeyError):
                os.kill(server.identity["server"], signal.SIGKILL)
        shutil.rmtree(run, ignore_errors=True)


def test_a_worker_has_its_replays_environment_not_the_servers(tmp_path, monkeypatch):
    """Variables that do not pick the server (TERM) still reach the worker as the replay
    has them: the session takes the replay's environment, and its umask."""
    run = tempfile.mkdtemp(prefix="fws")
    os.chmod(run, 0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", run)
    monkeypatch.setenv(IDLE_ENV, "120")
    out = tmp_path / "out.txt"
    script = write(
        tmp_path / "job.py",
        f"import os\nmask = os.umask(0)\n"
        f"open({str(out)!r}, 'w').write(os.environ.get('TERM', '-') + ' ' + oct(mask))\n",
    )
    servers, seen = [], []
    try:
        for term, mask in (("first-term", 0o022), ("second-term", 0o027)):
            monkeypatch.setenv("TERM", term)
            old = os.umask(mask)
            try:
                server = ForkServer.shared(tmp_path / "own.log", [], [tmp_path])
            finally:
                os.umask(old)
            assert server is not None
            servers.append(server)
            assert _run_job(server, script, tmp_path, tmp_path / "err") == 0
            server.close()
            seen.append(out.read_text())
        assert seen == ["first-term 0o22", "second-term 0o27"]
        assert servers[0].identity["server"] == servers[1].identity["server"]
    finally:
        for server in servers:
            with contextlib.suppress(ProcessLookupError, KeyError):
                os.kill(server.identity["server"], signal.SIGKILL)
        shutil.rmtree(run, ignore_errors=True)
