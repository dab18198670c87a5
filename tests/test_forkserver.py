"""The replay fork server: a forked worker must behave like `python script.py` would."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from florwb_engine.replay.executor import SegmentTask, _run_all
from florwb_engine.replay.forkserver import (
    ForkServer,
    likely_imports,
    script_imports,
    signal_worker,
)

REPORT = textwrap.dedent(
    """
    import json, os, sys
    out = {
        "argv": sys.argv, "cwd": os.getcwd(), "name": __name__, "file": __file__,
        "env": os.environ.get("FS_TEST"), "path0": sys.path[0],
        "preloaded": sorted(m for m in ("colorsys", "starts_thread") if m in sys.modules),
    }
    """
)


def _wait(server: ForkServer, request: int, timeout: float = 60) -> tuple[int, int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        server.poll(0.1)
        pid = server.started.get(request)
        if isinstance(pid, str):
            raise AssertionError(pid)
        if pid is not None and pid in server.exited:
            return pid, server.exited[pid]
    raise AssertionError("worker did not end")


def _run(server: ForkServer, tmp: Path, body: str, *args: str, folder: str = "code") -> dict:
    code = tmp / folder
    code.mkdir(exist_ok=True)
    script = code / "train.py"
    out = tmp / "out.json"
    script.write_text(REPORT + body + f"\nopen({str(out)!r}, 'w').write(json.dumps(out))\n")
    work = tmp / "cwd"
    work.mkdir(exist_ok=True)
    n = server.start([str(script), *args], work, {"FS_TEST": "yes"}, tmp / "err.txt")
    _pid, code_ = _wait(server, n)
    result = json.loads(out.read_text()) if out.exists() else {}
    out.unlink(missing_ok=True)
    return {"code": code_, "err": (tmp / "err.txt").read_text(), **result}


@pytest.fixture
def server(tmp_path):
    s = ForkServer(tmp_path / "server.log")
    yield s
    s.close()


def test_worker_runs_the_script_as_main_with_its_argv_folder_and_environment(server, tmp_path):
    server.preload(["colorsys"])
    got = _run(server, tmp_path, "", "--lr", "0.1")
    assert got["code"] == 0, got["err"]
    script = str(tmp_path / "code" / "train.py")
    assert got["argv"] == [script, "--lr", "0.1"]
    assert got["name"] == "__main__" and got["file"] == script
    assert got["cwd"] == str(tmp_path / "cwd")
    assert got["path0"] == str(tmp_path / "code")
    assert got["env"] == "yes"
    assert got["preloaded"] == ["colorsys"]  # imported once by the server, inherited


def test_exit_codes_and_tracebacks_are_those_of_a_plain_run(server, tmp_path):
    assert _run(server, tmp_path, "sys.exit(3)")["code"] == 3
    failed = _run(server, tmp_path, "raise ValueError('bad epoch')")
    assert failed["code"] == 1
    assert "ValueError: bad epoch" in failed["err"].splitlines()[-1]


def test_a_worker_has_sigchld_and_wakeup_fd_as_a_plain_run(server, tmp_path):
    """The server wakes on SIGCHLD (a worker's end is reported at once); the old script
    must not inherit that: its own subprocesses are reaped the usual way."""
    body = (
        "import signal, subprocess\n"
        "out['sigchld'] = signal.getsignal(signal.SIGCHLD) == signal.SIG_DFL\n"
        "out['wakeup'] = signal.set_wakeup_fd(-1)\n"
        "out['child'] = subprocess.run([sys.executable, '-c', 'pass']).returncode\n"
    )
    got = _run(server, tmp_path, body)
    assert got["code"] == 0, got["err"]
    assert got["sigchld"] is True and got["wakeup"] == -1 and got["child"] == 0


def test_a_stopped_worker_reports_the_signal(server, tmp_path):
    script = tmp_path / "sleep.py"
    script.write_text("import time\ntime.sleep(60)\n")
    n = server.start([str(script)], tmp_path, {}, tmp_path / "err.txt")
    while n not in server.started:
        server.poll(0.1)
    signal_worker(server.started[n], signal.SIGTERM)
    assert _wait(server, n)[1] == -signal.SIGTERM


def test_the_scripts_own_modules_win_over_preloaded_ones(server, tmp_path):
    code = tmp_path / "code"
    code.mkdir()
    (code / "colorsys.py").write_text("LOCAL = True\n")
    server.preload(["colorsys"], [tmp_path / "elsewhere"])
    got = _run(server, tmp_path, "import colorsys\nout['local'] = hasattr(colorsys, 'LOCAL')")
    assert got["code"] == 0, got["err"]
    assert got["local"] is True


def test_modules_of_the_project_are_never_preloaded(tmp_path, monkeypatch):
    project = tmp_path / "project"
    project.mkdir()
    (project / "mymodel.py").write_text("VERSION = 'today'\n")
    monkeypatch.setenv("PYTHONPATH", str(project))  # importable, as with `pip install -e .`
    server = ForkServer(tmp_path / "server.log")
    try:
        server.preload(["mymodel"], [project])
        got = _run(server, tmp_path, "out['seen'] = 'mymodel' in sys.modules")
    finally:
        server.close()
    assert got["code"] == 0 and got["seen"] is False


def test_a_preload_that_starts_threads_makes_workers_start_fresh(tmp_path, monkeypatch):
    site = tmp_path / "site"
    site.mkdir()
    (site / "starts_thread.py").write_text(
        "import threading, time\n"
        "threading.Thread(target=time.sleep, args=(600,), daemon=True).start()\n"
    )
    monkeypatch.setenv("PYTHONPATH", str(site))
    server = ForkServer(tmp_path / "server.log")
    try:
        server.preload(["starts_thread"])
        got = _run(server, tmp_path, "")
    finally:
        server.close()
    assert got["code"] == 0, got["err"]
    assert got["preloaded"] == []  # a new interpreter, not a fork of the threaded server


TRAIN = textwrap.dedent(
    """
    import torch
    torch.manual_seed(0)
    net = torch.nn.Linear(3, 2)
    params = []
    for make in (
        lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
        lambda p: torch.optim.Adam(p, lr=0.1),
        lambda p: torch.optim.AdamW(p, lr=0.1, weight_decay=0.1),
    ):
        opt = make(net.parameters())
        sched = torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.5)
        for _ in range(3):
            opt.zero_grad()
            net(torch.randn(4, 3)).pow(2).sum().backward()
            opt.step()
            sched.step()
        again = make(net.parameters())
        again.load_state_dict(opt.state_dict())
        out["grad_enabled"] = torch.is_grad_enabled()
        params.append([p.tolist() for p in net.parameters()])
        if len(params) == 2:
            out["dynamo_before_compile"] = "torch._dynamo" in sys.modules
            import torch._dynamo  # as torch.compile would: the real wrappers take over
    out["params"] = params
    """
)


def test_optimizers_train_without_dynamo_exactly_as_a_fresh_interpreter(server, tmp_path):
    """Stepping, zero_grad, state_dict and load_state_dict give the same numbers whether the
    worker deferred torch._dynamo or imported it the way `python script.py` does."""
    server.preload(["torch"])
    got = _run(server, tmp_path, TRAIN)
    assert got["code"] == 0, got["err"]
    assert got["dynamo_before_compile"] is False

    script = tmp_path / "fresh.py"
    script.write_text(REPORT + TRAIN + "\nprint(json.dumps(out))\n")
    ran = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, check=True)
    fresh = json.loads(ran.stdout)
    assert fresh["dynamo_before_compile"] is True  # torch's own wrappers import it
    assert got["params"] == fresh["params"]
    assert got["grad_enabled"] is True


def test_imports_are_read_from_the_scripts_that_log_the_names(tmp_path):
    (tmp_path / "train.py").write_text(
        "import os\nimport numpy as np\nfrom torch import nn\nimport florwb as flor\n"
        "from . import sibling\n"
        "def main():\n    import torchvision.models\n    flor.log('grad_norm', 1)\n"
    )
    (tmp_path / "other.py").write_text("import pandas\n")
    venv = tmp_path / ".venv"
    venv.mkdir()
    (venv / "pyvenv.cfg").write_text("")
    (venv / "x.py").write_text("import sqlite3\nflor.log('grad_norm', 1)\n")
    assert script_imports((tmp_path / "train.py").read_text()) == [
        "os",
        "numpy",
        "torch",
        "torchvision.models",
    ]
    assert likely_imports(tmp_path, ["grad_norm"]) == ["os", "numpy", "torch", "torchvision.models"]
    assert likely_imports(tmp_path, ["unknown"]) == []
    deep = tmp_path / "a" / "b" / "c"
    deep.mkdir(parents=True)
    (deep / "deep.py").write_text("import sqlite3\nflor.log('deep_name', 1)\n")
    assert likely_imports(tmp_path, ["deep_name"]) == []  # a guess: it does not dig deep
    assert script_imports("def (:\n") == []


def test_cancel_gives_up_on_a_worker_the_server_never_started(tmp_path, monkeypatch):
    """A server stuck importing (a module that hangs) must not hang a cancelled replay."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "hangs_on_import.py").write_text("import time\ntime.sleep(120)\n")
    monkeypatch.setenv("PYTHONPATH", str(site))
    script = tmp_path / "train.py"
    marker = tmp_path / "ran"
    script.write_text(f"open({str(marker)!r}, 'w').close()\n")
    server = ForkServer(tmp_path / "server.log")
    server.preload(["hangs_on_import"])
    task = SegmentTask(
        plan=SimpleNamespace(run_id="r", launch=None, threads=None),
        segment=SimpleNamespace(index=0, first=0, last=0),
        spec_path=tmp_path / "spec.json",
        progress_path=tmp_path / "progress.json",
        log_path=tmp_path / "err.txt",
        argv=[str(script)],
        cwd=tmp_path,
        project=tmp_path,
    )
    cancel = threading.Event()
    states = []
    runner = threading.Thread(
        target=_run_all, args=([task], 1, server, None, lambda p: states.append(p.state), cancel)
    )
    runner.start()
    deadline = time.monotonic() + 30
    while not states and time.monotonic() < deadline:  # the worker was asked for
        time.sleep(0.01)
    cancel.set()
    runner.join(timeout=60)
    server.close()
    assert not runner.is_alive()
    assert task.returncode == -1 and states[-1] == "cancelled"
    assert not marker.exists()


def test_a_plain_folder_named_like_a_preloaded_package_shadows_nothing(server, tmp_path):
    code = tmp_path / "code"
    (code / "colorsys").mkdir(parents=True)  # e.g. the wandb/ folder wandb leaves behind
    server.preload(["colorsys"], [tmp_path / "elsewhere"])
    got = _run(server, tmp_path, "")
    assert got["code"] == 0, got["err"]
    assert got["preloaded"] == ["colorsys"]
