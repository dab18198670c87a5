"""Every kind of run in every view: one project holding a plain single-process run, a run
with NaN, infinities, -0.0 and ints past 2**63, a failed run, a killed run, a run still
recording, a torchrun run, an mp.spawn run, a notebook run, a run that saves only its own
torch.save checkpoints, a run with 10,000 names, a replay verified and a replay diverged;
each opened in each reader of the CLI (runs, dataframe, query, checkpoints, io) and of the
workbench (history, run detail, chart, compare, statements, replay plan, query).

Features built side by side meet here: a new kind of run or a new view joins the matrix.
Each view test walks every kind in one app or one CLI call and names every kind that
failed, so one run of the module shows the whole matrix."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conftest import florwb, git, write
from conftest_app import Seen, loaded, make_app, shown, wait_until
from jupyter_client.manager import start_new_kernel
from textual.screen import Screen

from florwb.screens.chart import ChartScreen
from florwb.screens.error import ErrorScreen
from florwb.screens.replay_plan import ReplayPlanScreen
from florwb.screens.run_compare import RunCompareScreen
from florwb.screens.run_detail import RunDetailScreen
from florwb.ui.format import short_run
from florwb.ui.messages import QueryFailed, QueryRows
from florwb_engine.project import journal_dir
from florwb_engine.replay.ddp_launch import free_port
from florwb_engine.store import Store

TRAIN = """
import os, pathlib, random, signal, time
import torch
import florwb as flor
from florwb_engine.record import runtime

kind = flor.arg("kind", "plain")
torch.manual_seed(0)
net = torch.nn.Linear(3, 1)
opt = torch.optim.SGD(net.parameters(), lr=0.1)
x, y = torch.randn(8, 3), torch.randn(8, 1)
odd = [float("nan"), float("inf"), -0.0, 2**70 + 1]
with flor.checkpointing(model=net, optimizer=opt):
    for epoch in flor.loop("epoch", range(3)):
        for step in flor.loop("step", range(2)):
            opt.zero_grad()
            loss = ((net(x) - y) ** 2).mean()
            loss.backward()
            opt.step()
            flor.log("loss", loss.item())
        flor.log("acc", 1.0 - loss.item())
        print(f"epoch {epoch} loss {loss.item():.4f}")
        if kind == "noisy":  # an unseeded generator: no replay reproduces it
            flor.log("noise", random.Random().random())
        if kind == "odd":
            flor.log("odd", odd[epoch])
            flor.log("huge", 2**70 + epoch)
        if kind == "names" and epoch == 0:
            for i in range(10_000):
                flor.log(f"m{i:05d}", float(i))
        if kind == "fail" and epoch == 1:
            raise RuntimeError("the data ran out")
        if kind == "killed" and epoch == 1:
            runtime.current().flush()
            os.kill(os.getpid(), signal.SIGKILL)
        if kind == "running" and epoch == 1:
            runtime.current().flush()
            pathlib.Path("holding").write_text("1")
            deadline = time.monotonic() + 300  # never left running by a failed test
            while not pathlib.Path("release").exists() and time.monotonic() < deadline:
                time.sleep(0.05)
flor.commit()
"""

OWN_SAVE = """
import torch
import florwb as flor

torch.manual_seed(0)
net = torch.nn.Linear(3, 1)
opt = torch.optim.SGD(net.parameters(), lr=0.1)
x, y = torch.randn(8, 3), torch.randn(8, 1)
for epoch in flor.loop("epoch", range(3)):
    opt.zero_grad()
    loss = ((net(x) - y) ** 2).mean()
    loss.backward()
    opt.step()
    flor.log("loss", loss.item())
    torch.save({"model": net.state_dict(), "optimizer": opt.state_dict()}, "ckpt.pt")
flor.commit()
"""

DDP = """
import torch
import torch.distributed as dist
import florwb as flor

dist.init_process_group("gloo")
torch.manual_seed(0)
net = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(3, 1))
opt = torch.optim.SGD(net.parameters(), lr=0.1)
with flor.checkpointing(model=net, optimizer=opt):
    for epoch in flor.loop("epoch", range(2)):
        loss = (net(torch.randn(4, 3)) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        flor.log("loss", loss.item())
dist.destroy_process_group()
"""

SPAWN = """
import os
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import florwb as flor


def train(rank, world_size):
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    torch.manual_seed(0)
    net = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(3, 1))
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    with flor.checkpointing(model=net, optimizer=opt):
        for epoch in flor.loop("epoch", range(2)):
            loss = (net(torch.randn(4, 3)) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            flor.log("loss", loss.item())
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    mp.spawn(train, args=(2,), nprocs=2)
"""

NOTEBOOK_CELLS = [
    "import florwb as flor",
    'for epoch in flor.loop("epoch", range(2)):\n    flor.log("loss", 0.5 * epoch)',
    "flor.commit()",
]

HINDSIGHT = '        flor.log("wnorm", net.weight.norm().item())\n'

KINDS = (
    "single",
    "odd",
    "fail",
    "killed",
    "running",
    "torchrun",
    "spawn",
    "notebook",
    "own_save",
    "names",
    "replayed",
    "diverged",
)


def _wait_file(path: Path, proc: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"the held run ended early: {proc.stderr and proc.stderr.read()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{path.name} never appeared")
        time.sleep(0.05)


def _notebook_run(project: Path) -> None:
    manager, client = start_new_kernel(kernel_name="python3", cwd=str(project))
    try:
        for cell in NOTEBOOK_CELLS:
            reply = client.execute_interactive(cell, timeout=120)
            assert reply["content"]["status"] == "ok", cell
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=False)


def _by_kind(project: Path) -> dict[str, str]:
    """kind -> run id, told apart by script and the `kind` arg."""
    runs = Store(project).runs()
    found: dict[str, str] = {}
    for run in runs:
        script = run["script"] or ""
        if script.endswith(".ipynb"):
            found["notebook"] = run["run_id"]
        elif script == "own_save.py":
            found["own_save"] = run["run_id"]
        elif script == "ddp.py":
            found["torchrun"] = run["run_id"]
        elif script == "spawn.py":
            found["spawn"] = run["run_id"]
    args = Store(project).query("SELECT run_id, text FROM args WHERE name = 'kind'")
    for run_id, kind in zip(args["run_id"], args["text"], strict=True):
        found[kind.strip('"') if kind else "plain"] = run_id
    found["replayed"] = found.pop("plain")
    found["diverged"] = found.pop("noisy")
    return found


# exit status of each recording: the failed run raises, the killed one is SIGKILLed
EXPECTED_EXIT = {"fail": 1, "killed": -signal.SIGKILL}


def _record(root: Path, argv: list[str], env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, *argv],
        cwd=root,
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.fixture(scope="module")
def matrix(tmp_path_factory) -> Iterator[tuple[Path, dict[str, str]]]:
    """One project built once for the module; the recordings run side by side (each is
    its own process and journal, as runs started in several terminals are), the notebook
    meanwhile, then the one replay that makes the verified and the diverged run."""
    root = tmp_path_factory.mktemp("kinds") / "project"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    write(root / "train.py", TRAIN)
    write(root / "own_save.py", OWN_SAVE)
    write(root / "ddp.py", DDP)
    write(root / "spawn.py", SPAWN)
    git(root, "add", "-A")
    git(root, "commit", "-qm", "scripts")
    env = {"FLORWB_CKPT_BUDGET": "1000", "OMP_NUM_THREADS": "1"}  # a checkpoint every epoch
    held = _record(root, ["train.py", "--kwargs", "kind=running"], env)
    try:
        recordings = {
            kind: _record(root, ["train.py", "--kwargs", f"kind={kind}"], env)
            for kind in ("plain", "single", "odd", "names", "noisy", "fail", "killed")
        }
        recordings["own_save"] = _record(root, ["own_save.py"], env)
        recordings["torchrun"] = _record(
            root,
            [
                "-m",
                "torch.distributed.run",
                "--nproc_per_node=2",
                f"--master_port={free_port()}",
                "ddp.py",
            ],
            env,
        )
        recordings["spawn"] = _record(root, ["spawn.py"], {**env, "MASTER_PORT": str(free_port())})
        _notebook_run(root)
        for kind, proc in recordings.items():
            _out, err = proc.communicate(timeout=300)
            assert proc.returncode == EXPECTED_EXIT.get(kind, 0), f"{kind}: {err[-2000:]}"
        # today's script: one hindsight statement, replayed into the plain run
        text = (root / "train.py").read_text()
        (root / "train.py").write_text(
            text.replace('        flor.log("acc"', HINDSIGHT + '        flor.log("acc"', 1)
        )
        florwb(root, "replay", "wnorm", "--where", "kind IN ('plain', 'noisy')", "--yes")
        _wait_file(root / "holding", held)
        yield root, _by_kind(root)
    finally:
        (root / "release").write_text("1")
        try:
            held.wait(timeout=60)
        finally:
            held.kill()


def _failures(results: dict[str, str | None]) -> str:
    return "\n".join(f"{kind}: {why}" for kind, why in results.items() if why)


async def _each_kind(
    app,
    pilot,
    runs: dict[str, str],
    open_screen: Callable[[str, str], Screen],
    done: Callable[[Screen], bool],
    ready: Callable[[str, Screen], bool],
    judge: Callable[[str, str, Screen, str], str | None] = lambda *_: None,
    timeout: float = 30,
) -> dict[str, str | None]:
    """Open one screen per kind, wait until `done(screen)` (its worker's message handled:
    the screen's own state, no screen export meanwhile), read the screen once, check it is
    `ready(text, screen)`, then `judge` it (None: as it should be, else what is wrong);
    every kind's outcome, so a failure names them all."""
    results: dict[str, str | None] = {}
    for kind, run_id in runs.items():
        screen = open_screen(kind, run_id)
        app.push_screen(screen)
        try:
            await wait_until(pilot, lambda s=screen: done(s), timeout=timeout, what=kind)
            text = await shown(pilot)
            if ready(text, screen):
                results[kind] = judge(kind, run_id, screen, text)
            else:
                results[kind] = f"not as expected on screen:\n{text}"[:400]
        except AssertionError as exc:
            results[kind] = str(exc)[:400]
        fork_server = getattr(screen, "fork_server", None)
        if fork_server is not None:  # the plan screen's warm workers
            fork_server.close()
        app.pop_screen()
    return results


def test_every_kind_was_built(matrix):
    _project, runs = matrix
    assert set(runs) == set(KINDS)


# --- the CLI ------------------------------------------------------------------------------

STATUS = {
    "fail": "failed",
    "killed": "killed",
    "running": "running",
}


def test_runs_lists_every_kind_with_its_status(matrix):
    project, runs = matrix
    listed = {r["run_id"]: r for r in json.loads(florwb(project, "runs", "--json").stdout)}
    results = {}
    for kind, run_id in runs.items():
        row = listed.get(run_id)
        want = STATUS.get(kind, "finished")
        verdict = {"replayed": "verified", "diverged": "diverged"}.get(kind)
        results[kind] = (
            "not listed"
            if row is None
            else f"status {row['status']}"
            if row["status"] != want
            else f"verdict {row['verdict']}"
            if row["verdict"] != verdict
            else None
        )
    assert not _failures(results), _failures(results)


def test_dataframe_serves_every_kinds_values(matrix):
    project, runs = matrix
    out = json.loads(florwb(project, "dataframe", "loss", "--format", "json").stdout)
    rows: dict[str, int] = {}
    for row in out:
        if row.get("loss") is not None:
            rows[row["run_id"]] = rows.get(row["run_id"], 0) + 1
    results = {kind: None if rows.get(run_id) else "no loss rows" for kind, run_id in runs.items()}
    assert not _failures(results), _failures(results)


def test_odd_values_come_back_exactly_and_replayed_values_are_served(matrix):
    project, runs = matrix
    odd = json.loads(florwb(project, "dataframe", "odd", "huge", "--format", "json").stdout)
    mine = sorted((r for r in odd if r["run_id"] == runs["odd"]), key=lambda r: r["epoch"])
    assert [int(r["huge"]) for r in mine] == [2**70 + e for e in range(3)]  # every digit
    texts = [str(r["odd"]).lower() for r in mine]
    assert texts[0] == "nan" and texts[1] in ("inf", "infinity") and texts[2] in ("-0.0", "-0")
    served = florwb(project, "dataframe", "wnorm", "--format", "json")
    wnorm = json.loads(served.stdout)
    assert {r["run_id"] for r in wnorm if r.get("wnorm") is not None} == {runs["replayed"]}
    assert "diverged" in served.stderr  # the withheld values are said, in one line
    marked = florwb(project, "dataframe", "wnorm", "--diverged", "--format", "json")
    assert runs["diverged"] in {r["run_id"] for r in json.loads(marked.stdout) if r.get("wnorm")}


def test_query_reads_every_kind(matrix):
    project, runs = matrix
    out = florwb(
        project,
        "query",
        "SELECT run_id, count(*) AS n FROM logs GROUP BY run_id",
        "--format",
        "json",
    ).stdout
    counts = {r["run_id"]: r["n"] for r in json.loads(out)}
    results = {kind: None if counts.get(run_id) else "no rows" for kind, run_id in runs.items()}
    assert counts[runs["names"]] >= 10_000
    assert not _failures(results), _failures(results)


def test_checkpoints_and_io_answer_for_every_kind(matrix):
    """Every kind answers: its checkpoints (or a one-line reason, exit 1) and its lines."""
    project, runs = matrix
    results = {}
    for kind, run_id in runs.items():
        ck = florwb(project, "checkpoints", run_id, check=False)
        io = florwb(project, "io", run_id, check=False)
        problems = []
        for name, proc in (("checkpoints", ck), ("io", io)):
            if proc.returncode not in (0, 1) or "Traceback" in proc.stderr:
                problems.append(f"{name} exit {proc.returncode}: {proc.stderr[-300:]}")
            elif proc.returncode == 1 and len(proc.stderr.strip().splitlines()) != 1:
                problems.append(f"{name} failed without a one-line reason: {proc.stderr!r}")
        if kind in ("odd", "replayed", "fail", "names") and ck.returncode != 0:
            problems.append(f"checkpoints: {ck.stderr.strip()}")
        if kind in ("odd", "replayed") and "epoch 2 loss" not in io.stdout:
            problems.append("io lacks the printed epoch line")
        results[kind] = "; ".join(problems) or None
    assert not _failures(results), _failures(results)


# --- the workbench ------------------------------------------------------------------------


async def test_history_shows_every_kind(matrix):
    project, runs = matrix
    app = make_app(project)
    async with app.run_test(size=(160, 48)) as pilot:
        await loaded(pilot)
        await wait_until(
            pilot,
            lambda: (
                set(runs.values()) <= {r.run_id for r in app.history.runs}
                or isinstance(app.screen, ErrorScreen)
            ),
            timeout=60,
            what="every run in the history",
        )
        text = await shown(pilot)
    results = {k: None if short_run(run_id) in text else "not shown" for k, run_id in runs.items()}
    assert not _failures(results), _failures(results) + "\n" + text
    (line,) = [row for row in text.splitlines() if short_run(runs["diverged"]) in row]
    assert "diverged" in line and "replayed" not in line, line


def _detail_as_it_should_be(kind: str, _run_id: str, _screen, text: str) -> str | None:
    """Its loss shown; a replayed run's verdict said: a diverged replay never reads as
    verified, and a value it logged is never checked off (✓)."""
    if "loss" not in text and kind != "names":
        return "no loss shown"
    if kind == "replayed" and "verified" not in text:
        return "the replay's verdict (verified) is not shown"
    if kind == "diverged":
        if "diverged" not in text or "verified" in text:
            return "the diverged replay is not shown as diverged"
        if any("wnorm" in line and "✓" in line for line in text.splitlines()):
            return "a withheld value is checked off"
    return None


async def test_run_detail_opens_for_every_kind(matrix):
    project, runs = matrix
    app = make_app(project)
    async with app.run_test(size=(120, 40)) as pilot:
        await loaded(pilot)
        results = await _each_kind(
            app,
            pilot,
            runs,
            lambda _kind, run_id: RunDetailScreen(app.store, run_id),
            lambda s: s.detail is not None,
            lambda t, _s: "Metrics" in t and "Args" in t,
            _detail_as_it_should_be,
        )
    assert not _failures(results), _failures(results)


async def test_chart_draws_every_kind(matrix):
    project, runs = matrix
    app = make_app(project)
    async with app.run_test(size=(120, 40)) as pilot:
        await loaded(pilot)
        results = await _each_kind(
            app,
            pilot,
            runs,
            lambda kind, run_id: ChartScreen(app.store, [run_id], {run_id: kind}, "loss", kind),
            lambda s: s.drawing is not None,
            lambda t, _s: "loss vs" in t,
        )
    assert not _failures(results), _failures(results)


async def test_compare_opens_every_kind_against_the_replayed_run(matrix):
    project, runs = matrix
    app = make_app(project)
    base = runs["replayed"]
    others = {kind: run_id for kind, run_id in runs.items() if run_id != base}
    async with app.run_test(size=(120, 40)) as pilot:
        await loaded(pilot)
        # the comparison read and drawn, naming the second run
        results = await _each_kind(
            app,
            pilot,
            others,
            lambda _kind, run_id: RunCompareScreen(project, app.store, base, run_id),
            lambda s: s.comparison is not None,
            lambda t, s: (
                app.screen is s and s.comparison is not None and short_run(s.run_ids[1]) in t
            ),
        )
    assert not _failures(results), _failures(results)


async def test_statements_tab_shows_every_script(matrix):
    """The tab follows the history's cursor: each script's runs show that script's table."""
    project, runs = matrix
    app = make_app(project)
    results: dict[str, str | None] = {}
    async with app.run_test(size=(160, 48)) as pilot:
        await loaded(pilot)
        for kind, script in (
            ("torchrun", "ddp.py"),
            ("spawn", "spawn.py"),
            ("own_save", "own_save.py"),
            ("odd", "train.py"),
        ):
            await pilot.press("1", "escape", "slash", *short_run(runs[kind]), "enter", "g", "j")
            await pilot.press("2")
            try:
                await wait_until(
                    pilot,
                    lambda s=script: any(
                        p.data is not None and p.data.script == s
                        for p in app.query("#statements-pane")
                    ),
                    what=script,
                )
                text = await shown(pilot)
                if f"{script}: " not in text:
                    results[kind] = f"{script}'s table not on screen:\n{text}"[:600]
                    continue
                results[kind] = None if "loss" in text else "no loss statement listed"
            except AssertionError as exc:
                results[kind] = str(exc)[:600]
    assert not _failures(results), _failures(results)


def _planned_or_refused(_kind: str, run_id: str, screen, text: str) -> str | None:
    plan = screen.planned
    if plan is None:
        return "no plan: " + text[:300]
    (row,) = [r for r in plan.runs if r.run_id == run_id]
    return None if row.status == "ready" or row.reason else f"{row.status} without a reason"


async def test_replay_plan_answers_for_every_kind(matrix):
    """Each kind is planned or refused with a reason; none breaks the plan screen."""
    project, runs = matrix
    app = make_app(project)
    async with app.run_test(size=(160, 48)) as pilot:
        await loaded(pilot)
        results = await _each_kind(
            app,
            pilot,
            runs,
            lambda _kind, run_id: ReplayPlanScreen(project, ["wnorm"], [run_id], 1),
            lambda s: s.planned is not None or s.plan_error is not None,
            lambda t, s: s.planned is not None or "rror" in t,
            _planned_or_refused,
            timeout=60,
        )
    assert not _failures(results), _failures(results)


async def test_query_tab_reads_every_kind(matrix):
    project, runs = matrix
    app = make_app(project)
    seen = Seen()
    async with app.run_test(size=(160, 48), message_hook=seen) as pilot:
        await loaded(pilot)
        await pilot.press("4")
        editor = app.query_one("#sql")
        editor.load_text("SELECT run_id, count(*) AS n FROM logs GROUP BY run_id ORDER BY n")
        editor.focus()
        await pilot.press("ctrl+j")
        await seen.wait(
            pilot,
            (QueryRows, QueryFailed),
            lambda m: isinstance(m, QueryFailed) or m.first,
            timeout=60,
            what="query results",
        )
        text = await shown(pilot)
    results = {kind: None if run_id in text else "not in results" for kind, run_id in runs.items()}
    assert not _failures(results), _failures(results) + "\n" + text


def test_the_held_run_is_really_still_recording(matrix):
    project, runs = matrix
    assert (project / "holding").exists() and not (project / "release").exists()
    assert any(journal_dir(project).glob(f"{runs['running']}*"))
