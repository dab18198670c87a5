"""System metrics while a run records (record/system.py -> system_rows): sampled on the
flusher's thread, per rank, shown in the run detail and chartable as `system/<name>`; a
sampler that fails stops and says why without touching training; a run without readable
energy counters says why in one line. Real recordings, the real app."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from conftest import recorded_project
from conftest_app import Seen, loaded, make_app, open_chart
from rich.console import Console

from florwb.screens.run_detail import RunDetailScreen, render_detail
from florwb.ui.messages import ChartDrawn, RunDetailLoaded
from florwb_engine.record.context import energy_unavailable, rapl_counters
from florwb_engine.record.system import SystemSampler
from florwb_engine.store import Store
from florwb_engine.store.curves import load_curves

BUSY = """
import florwb as flor

total = 0
for epoch in flor.loop("epoch", range(2)):
    for step in flor.loop("step", range(8)):
        total += sum(i * i for i in range(60_000))
        flor.log("loss", 1.0 / (epoch * 8 + step + 1))
flor.commit()
"""


@pytest.fixture(scope="module")
def busy(tmp_path_factory) -> Path:
    # a sample every flusher pass: the run is short, and each pass is off training's thread
    return recorded_project(
        tmp_path_factory.mktemp("busy"), BUSY, env={"FLORWB_SYSTEM_SAMPLE_S": "0.01"}
    )


def test_a_recording_samples_cpu_and_memory_into_system_rows(busy: Path):
    store = Store(busy)
    (run,) = store.run_rows()
    rows = store.query(
        "SELECT name, count(*) AS n, min(value) AS lo, max(value) AS hi, "
        f"count(DISTINCT rank) AS ranks FROM system_rows WHERE run_id = '{run.run_id}' "
        "GROUP BY name"
    )
    figures = dict(zip(rows["name"], zip(rows["n"], rows["lo"], rows["hi"])))
    for name in ("cpu_percent", "process_cpu_percent", "memory_used_bytes", "process_rss_bytes"):
        assert name in figures and figures[name][0] >= 1, name
    assert 0 <= figures["cpu_percent"][1] and figures["cpu_percent"][2] <= 100
    assert figures["process_rss_bytes"][1] > 1_000_000  # a Python process: megabytes
    # this process has no NVIDIA driver: no GPU figure is made up
    assert not any(name.startswith("gpu") for name in figures) or Path("/dev/nvidia0").exists()
    # on the chart: beside the logged metrics, on every axis
    names = load_curves(store, [run.run_id], None, "step").metrics
    assert "loss" in names and "system/cpu_percent" in names
    for axis in ("wall", "step", "epoch"):
        (curve,) = load_curves(store, [run.run_id], "system/process_rss_bytes", axis).curves
        assert len(curve.x) == figures["process_rss_bytes"][0]
        assert (curve.x >= 0).all() and (curve.y > 1_000_000).all()
    (steps,) = load_curves(store, [run.run_id], "system/cpu_percent", "step").curves
    assert steps.x.max() <= 16  # steps done by then: at most all 16


def test_a_run_without_energy_counters_says_why(busy: Path):
    (run,) = Store(busy).run_rows()
    ctx = run.context
    if rapl_counters() or Path("/proc/driver/nvidia/gpus").is_dir():
        assert ctx["energy_j"] is not None or ctx["energy_note"]
    else:
        assert ctx["energy_j"] is None
        assert ctx["energy_note"] == energy_unavailable(False)
        assert "RAPL" in ctx["energy_note"] and ";" in ctx["energy_note"]


async def test_the_run_detail_shows_the_latest_sample_and_the_energy_reason(busy: Path):
    app = make_app(busy)
    seen = Seen()
    async with app.run_test(size=(160, 48), message_hook=seen) as pilot:
        await loaded(pilot)
        (run,) = app.history.runs
        screen = RunDetailScreen(app.store, run.run_id)
        app.call_later(app.push_screen, screen)  # by the app's task: its messages reach `seen`
        loaded_detail = await seen.wait(pilot, RunDetailLoaded, what="the run detail")
        assert screen.detail is loaded_detail.detail
        assert screen.detail.system and "cpu_percent" in screen.detail.system[0].values
        console = Console(width=160, record=True, file=io.StringIO())
        console.print(render_detail(screen.detail))  # what the scrolled view holds
        text = console.export_text()
        assert "system  CPU " in text and "RSS " in text
        if run.context.get("energy_note"):
            assert "energy  not measured: " in text


async def test_the_chart_draws_a_system_figure(busy: Path):
    app = make_app(busy)
    seen = Seen()
    async with app.run_test(size=(120, 36), message_hook=seen) as pilot:
        await loaded(pilot)
        chart = await open_chart(pilot, seen, "j")
        assert chart.curves is not None
        since = seen.mark()
        await pilot.press("slash", *"system/cpu_percent", "enter")
        drawn = await seen.wait(
            pilot,
            ChartDrawn,
            lambda m: m.state == chart.state and m.state.metric == "system/cpu_percent",
            since=since,
            what="the system figure drawn",
        )
        assert drawn.drawing.points > 0 and drawn.drawing is chart.drawing
        assert chart.curves.metric == "system/cpu_percent"


class _Broken:
    """An NVML meter whose device calls fail (a GPU that fell off the bus)."""

    nvml = None
    handles = [object()]


def test_a_failing_sampler_stops_says_why_and_never_raises(capsys):
    sampler = SystemSampler(0, nvml=lambda: _Broken(), interval=1e-9)  # always due
    events: list = []
    sampler.drain(events)
    assert sampler.off and events[-1]["kind"] == "system" and "error" in events[-1]
    assert "system metrics no longer sampled" in capsys.readouterr().err
    sampler.drain(events)  # off: nothing more, nothing raised
    assert len(events) == 1


def test_a_store_of_schema_7_gains_system_rows_and_the_energy_note(tmp_path: Path):
    import duckdb

    root = recorded_project(tmp_path, BUSY, env={"FLORWB_SYSTEM_SAMPLE_S": "0"})
    assert Store(root).query("SELECT count(*) AS n FROM system_rows").n[0] == 0  # off
    con = duckdb.connect(str(root / ".florwb" / "florwb.duckdb"))
    con.execute("DROP TABLE system_rows")
    con.execute("ALTER TABLE run_context DROP COLUMN energy_note")
    con.execute("UPDATE meta SET value = '7' WHERE key = 'schema_version'")
    con.close()
    (run,) = Store(root).run_rows()  # migrated in place: the run is kept
    assert "energy_note" in run.context
    assert Store(root).query("SELECT count(*) AS n FROM system_rows").n[0] == 0
