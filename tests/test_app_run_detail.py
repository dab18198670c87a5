"""Run detail (issues 14 and 16): each metric once however many replays re-checked it,
where time goes (host, argv, git, device, peak memory, data wait per loop), the call that
loads the run's model, and the console tail, live while the run records.

The real app through Pilot on real projects: a git repository, training subprocesses with
torch, a real replay, assertions on the screen text."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import florwb, git, run_py, write
from conftest_app import Seen, loaded, make_app, shown

from florwb.screens.run_detail import RunDetailScreen
from florwb.ui.messages import RunDetailLoaded
from florwb_engine.store import Store

TRAIN = """
    import logging
    import torch
    import florwb as flor

    logging.basicConfig(level=logging.INFO)
    torch.manual_seed(0)
    net = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(net.parameters(), lr=flor.arg("lr", 0.1))
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    with flor.checkpointing(model=net, optimizer=opt):
        for epoch in flor.loop("epoch", range(3)):
            for step in flor.loop("step", range(4)):
                opt.zero_grad()
                loss = torch.nn.functional.mse_loss(net(x), y)
                loss.backward()
                opt.step()
                flor.log("loss", loss.item())
            print(f"epoch {epoch} loss {loss.item():.4f}")
            logging.getLogger("train").warning("lr may be too high")
"""


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """One recorded run, then a replay of a new statement (which logs loss again)."""
    root = tmp_path_factory.mktemp("detail") / "project"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    write(root / "train.py", TRAIN)
    git(root, "add", "train.py")
    git(root, "commit", "-q", "-m", "train")
    run_py(root, "train.py", "--kwargs", "lr=0.05")
    text = (root / "train.py").read_text()
    (root / "train.py").write_text(
        text.replace(
            '        print(f"epoch',
            '        flor.log("wnorm", net.weight.norm().item())\n        print(f"epoch',
        )
    )
    florwb(root, "replay", "wnorm", "--yes")
    return root


def _has_line(text: str, line: str) -> bool:
    """A screen line with these words, whatever the column padding between them."""
    words = line.split()
    return any(row.split() == words for row in text.splitlines())


def _run_id(project: Path) -> str:
    (run,) = Store(project).runs()
    return run["run_id"]


async def _open_detail(pilot, seen: Seen, run_id: str) -> str:
    """The run detail of `run_id` opened, once its run is read (RunDetailLoaded): its screen."""
    app = pilot.app
    since = seen.mark()
    app.push_screen(RunDetailScreen(app.store, run_id))
    loaded_ = await seen.wait(pilot, RunDetailLoaded, since=since, what="the run detail")
    assert loaded_.detail.run.run_id == run_id
    text = await shown(pilot)
    assert "Metrics" in text and "Args" in text
    return text


def _printed(message: RunDetailLoaded, text: str) -> bool:
    """The detail read has `text` among its console lines."""
    return any(line.text.rstrip("\n") == text for line in message.detail.console)


async def test_each_metric_once_and_where_time_goes(project: Path):
    run_id = _run_id(project)
    sources = Store(project).query(
        f"SELECT DISTINCT source FROM logs WHERE run_id = '{run_id}' AND name = 'loss'"
    )
    assert len(sources) == 2  # recorded, and re-logged by the replay: the defect's setup
    app, seen = make_app(project), Seen()
    async with app.run_test(size=(120, 80), message_hook=seen) as pilot:
        await loaded(pilot)
        text = await _open_detail(pilot, seen, run_id)
        metric_rows = [line.split() for line in text.splitlines() if line.strip()]
        assert sum(1 for words in metric_rows if words[0] == "loss") == 1
        assert sum(1 for words in metric_rows if words[0] == "wnorm") == 1
        loss_row = next(line for line in text.splitlines() if line.split()[:1] == ["loss"])
        assert "recorded ✓1" in loss_row and " 12 " in loss_row
        wnorm_row = next(line for line in text.splitlines() if line.split()[:1] == ["wnorm"])
        assert "↻" in wnorm_row
        # where time goes
        assert "Where time goes" in text
        assert f"host    {socket.gethostname()}" in text
        assert "argv    train.py --kwargs lr=0.05" in text
        head = git(project, "rev-parse", "HEAD").strip()[:10]
        assert f"git     main @ {head}" in text
        assert "device  cpu:" in text and "torch " in text
        assert "memory  host peak " in text
        assert "epoch/step" in text.split("Where time goes")[1]  # data wait per loop
        # the call that loads the run's model at its latest checkpoint
        assert f'flor.load_into("{run_id}", model=..., optimizer=..., epoch=2)' in text
        # the console tail: each printed and logged line, with its epoch
        assert "Console (6 lines)" in text
        assert "epoch=2 stdout  epoch 2 loss" in text
        assert "epoch=2 warning train: lr may be too high" in text
        assert f"florwb io {run_id}" in text


async def test_console_tail_follows_a_live_run(tmp_path: Path):
    project = tmp_path / "live"
    project.mkdir()
    go = project / "go"
    write(
        project / "train.py",
        f"""
        import os, time
        import florwb as flor
        for step in flor.loop("step", range(2)):
            flor.log("x", step)
            print(f"step {{step}} printed")
            while step == 0 and not os.path.exists({str(go)!r}):
                time.sleep(0.02)  # the test lets it go on
        print("all done")
        """,
    )
    proc = subprocess.Popen(
        [sys.executable, "train.py"], cwd=project, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "step 0 printed\n"  # the run is live
        app, seen = make_app(project), Seen()
        async with app.run_test(size=(120, 50), message_hook=seen) as pilot:
            await loaded(pilot)
            run_id = _run_id(project)
            app.push_screen(RunDetailScreen(app.store, run_id))
            await seen.wait(
                pilot, RunDetailLoaded, lambda m: _printed(m, "step 0 printed"), what="step 0"
            )
            text = await shown(pilot)
            assert _has_line(text, "step=0 stdout step 0 printed")
            assert "step 1 printed" not in text
            go.touch()
            await seen.wait(
                pilot,
                RunDetailLoaded,
                lambda m: _printed(m, "all done") and m.detail.run.status == "finished",
                what="the lines printed after",
            )
            text = await shown(pilot)
            assert _has_line(text, "- stdout all done")
            assert _has_line(text, "step=1 stdout step 1 printed")
            assert "finished" in text
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


async def test_a_run_that_printed_nothing_says_so(tmp_path: Path):
    project = tmp_path / "quiet"
    project.mkdir()
    write(
        project / "train.py",
        """
        import florwb as flor
        for step in flor.loop("step", range(2)):
            flor.log("x", step)
        """,
    )
    run_py(project, "train.py")
    app, seen = make_app(project), Seen()
    async with app.run_test(size=(100, 60), message_hook=seen) as pilot:
        await loaded(pilot)
        text = await _open_detail(pilot, seen, _run_id(project))
        assert "Console (0 lines)" in text and "nothing printed" in text
        assert "git     not a git checkout" in text
        assert "load_into" not in text  # no checkpoint, no command


def test_the_metric_table_never_cuts_a_number_silently():
    """However narrow the screen, a value is shown whole or clipped with …, never cut at
    the edge (which would read as another number); the sparkline gives way first."""
    from rich.console import Console

    from florwb.screens.run_detail import MetricRows

    values = ("123456.7", "-0.000123", "2.5e+06")
    row = ("train/loss_ema", "recorded", "1,000", *values, "▁▂▃▄▅▆▇█▁▂▃▄")
    for width in range(40, 121):
        console = Console(width=width, record=True, color_system=None)
        console.print(MetricRows([row]))
        line = console.export_text().splitlines()[1]
        assert len(line.rstrip()) <= width
        for value in values:
            whole = f" {value} " in f"{line} "
            clipped = any(f" {value[:n]}…" in line for n in range(len(value)))
            assert whole or clipped, (width, value, line)
        if not all(f" {v} " in f"{line} " for v in values):  # the sparkline gave way first
            spark = [cell for cell in line.split() if "▁" in cell]
            assert not spark or len(spark[0]) <= MetricRows.MIN_SERIES, (width, line)
