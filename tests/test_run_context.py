"""Every run records where it ran and what it needed: device, versions, peak memory, energy.

Runs real scripts on this machine and checks the figures against what the machine itself
exposes (/proc/cpuinfo, powercap, the NVIDIA driver's /proc files), never fixed values.
"""

from __future__ import annotations

import json

import duckdb
import pytest
import torch
from conftest import florwb, git, run_py, write

from florwb_engine.record.context import NVIDIA_PROC, cpu_name, rapl_counters
from florwb_engine.store import Store

WITH_TORCH = """
import sys
import torch
import florwb as flor

net = torch.nn.Linear(64, 64)
for epoch in flor.loop("epoch", range(3)):
    flor.log("loss", net(torch.randn(256, 64)).pow(2).mean().item())
flor.commit()
assert not torch.cuda.is_initialized(), "recording must not initialise CUDA"
"""

WITHOUT_TORCH = """
import sys
import florwb as flor

blob = bytearray(50_000_000)  # a peak the RSS figure must show
for i in flor.loop("epoch", range(2)):
    flor.log("x", i)
flor.commit()
assert "torch" not in sys.modules, "recording must not import torch"
"""


def _project(tmp_path):
    root = tmp_path / "project"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    write(root / "with_torch.py", WITH_TORCH)
    write(root / "without_torch.py", WITHOUT_TORCH)
    return root


def test_a_cpu_run_records_device_versions_peak_memory_and_honest_energy(tmp_path):
    root = _project(tmp_path)
    run_py(root, "with_torch.py")
    run_py(root, "without_torch.py")
    runs = json.loads(florwb(root, "runs", "--json").stdout)
    by_script = {r["script"]: r["context"] for r in runs}
    ctx = by_script["with_torch.py"]
    assert ctx["device_kind"] == "cpu"
    assert ctx["cpu_name"] and ctx["cpu_name"] == cpu_name()
    assert ctx["device_name"] == ctx["cpu_name"]
    assert ctx["cpu_count"] >= 1
    assert ctx["peak_rss_bytes"] > 0
    assert ctx["torch_version"] == torch.__version__
    assert ctx["cuda_version"] == torch.version.cuda
    assert ctx["gpu_peak_bytes"] is None  # CUDA was never initialised
    if NVIDIA_PROC.is_dir():
        assert ctx["gpu_count"] >= 1 and ctx["gpu_name"]
    else:
        assert ctx["gpu_name"] is None and ctx["gpu_count"] is None
    # Energy: a number exactly where this machine lets a process read RAPL package counters.
    if rapl_counters():
        assert ctx["energy_cpu_j"] > 0 and ctx["energy_j"] >= ctx["energy_cpu_j"]
    else:
        assert ctx["energy_cpu_j"] is None
    if not NVIDIA_PROC.is_dir():
        assert ctx["energy_gpu_j"] is None
        assert ctx["energy_j"] == ctx["energy_cpu_j"]

    plain = by_script["without_torch.py"]
    assert plain["torch_version"] is None and plain["cuda_version"] is None
    assert plain["device_kind"] == "cpu"
    assert plain["peak_rss_bytes"] > 50_000_000


def test_the_context_is_queryable_in_sql(tmp_path):
    root = _project(tmp_path)
    run_py(root, "with_torch.py")
    sql = (
        "SELECT r.script, c.device_kind, c.peak_rss_bytes > 0 AS rss, c.torch_version "
        "FROM runs r JOIN run_context c USING (run_id)"
    )
    rows = json.loads(florwb(root, "query", sql, "--format", "json").stdout)
    assert rows == [
        {"script": "with_torch.py", "device_kind": "cpu", "rss": True,
         "torch_version": torch.__version__}
    ]  # fmt: skip


def test_a_killed_run_keeps_what_was_known_at_its_start(tmp_path):
    root = _project(tmp_path)
    write(root / "killed.py", "import os, florwb as flor\nflor.log('x', 1)\nos._exit(9)\n")
    run_py(root, "killed.py", check=False)
    (run,) = Store(root).runs()
    assert run["status"] == "killed"
    ctx = run["context"]
    assert ctx["cpu_name"] == cpu_name() and ctx["cpu_count"] >= 1
    assert ctx["device_kind"] is None and ctx["peak_rss_bytes"] is None  # never measured


def test_a_store_of_the_previous_schema_gains_the_table(tmp_path):
    root = _project(tmp_path)
    run_py(root, "without_torch.py")
    store = Store(root)
    assert store.runs()[0]["context"]["device_kind"] == "cpu"
    con = duckdb.connect(str(root / ".florwb" / "florwb.duckdb"))
    con.execute("DROP TABLE run_context")
    con.execute("UPDATE meta SET value = '3' WHERE key = 'schema_version'")
    con.close()
    (run,) = Store(root).runs()  # migrated in place: the run is kept, its context unknown
    assert run["status"] == "finished" and run["context"] is None
    run_py(root, "without_torch.py")
    contexts = [r["context"] for r in Store(root).runs()]
    assert contexts[0] is None and contexts[1]["device_kind"] == "cpu"


def test_a_store_of_one_context_row_per_run_keeps_it_as_rank_0(tmp_path):
    root = _project(tmp_path)
    run_py(root, "without_torch.py")
    (run,) = Store(root).runs()
    con = duckdb.connect(str(root / ".florwb" / "florwb.duckdb"))
    con.execute("CREATE TABLE old AS SELECT * EXCLUDE (rank) FROM run_context")
    con.execute("DROP TABLE run_context")
    con.execute("ALTER TABLE old RENAME TO run_context")  # one row per run, no rank
    con.execute("UPDATE meta SET value = '10' WHERE key = 'schema_version'")
    con.close()
    (again,) = Store(root).runs()  # migrated in place: its row is rank 0's
    assert again["context"] == run["context"]
    ranks = Store(root).query("SELECT run_id, rank FROM run_context")
    assert ranks.values.tolist() == [[run["run_id"], 0]]


def test_rapl_counters_read_packages_only_and_survive_a_wrap(tmp_path):
    def zone(name: str, label: str, energy: int) -> None:
        write(tmp_path / name / "name", label + "\n")
        write(tmp_path / name / "energy_uj", f"{energy}\n")
        write(tmp_path / name / "max_energy_range_uj", "1000000\n")

    zone("intel-rapl:0", "package-0", 999_000)
    zone("intel-rapl:0:0", "core", 5)  # inside the package's count
    zone("intel-rapl:1", "psys", 7)  # the whole platform: would count twice
    (counter,) = rapl_counters(tmp_path)
    write(tmp_path / "intel-rapl:0" / "energy_uj", "500\n")  # wrapped past 1_000_000
    counter.sample()
    assert counter.total_uj == 1_000_000 - 999_000 + 1 + 500
    write(tmp_path / "intel-rapl:0" / "energy_uj", "2500\n")
    counter.sample()
    assert counter.total_uj == 1_501 + 2_000


def test_replay_where_selects_runs_by_their_context(tmp_path):
    from florwb_engine.replay.plan import PlanError, plan_replay

    root = _project(tmp_path)
    run_py(root, "with_torch.py")
    plan = plan_replay(root, ["loss"], where="device_kind = 'cpu' AND peak_rss_bytes > 0")
    assert [p.run_id for p in plan.runs] == [Store(root).runs()[0]["run_id"]]
    with pytest.raises(PlanError, match="no recorded run matches"):
        plan_replay(root, ["loss"], where="device_kind = 'cuda'")
