"""The plan's time estimate and its calibration (estimates were 3-6x
too high, per-run estimates grew with workers).

The estimator works from the recorded timings and calibrates itself from the project's
finished replays. What these tests check is the arithmetic, never a wall-clock bound: the
second plan of a project is scaled by exactly what the first replay took over what it was
estimated to take (clamped), and a run's estimate never grows with more workers. How
close the calibrated estimate lands on a real machine is measured by
benchmarks/bench_replay_estimate.py (RESULT replay_estimate_ratio_demo / _sweep)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import florwb
from conftest_app import copy_demo

from florwb_engine.replay import plan_replay
from florwb_engine.replay.cost import CALIBRATION_BOUNDS
from florwb_engine.store import Store


def _replay(project: Path, name: str) -> dict:
    """Replay `name` as a user does; its plan, with `actual_s` the recorded duration."""
    out = json.loads(florwb(project, "replay", name, "--yes", "--json").stdout)
    assert out["result"]["status"] == "finished", out["result"]
    plan = out["plan"]
    plan["actual_s"] = float(
        Store(project)
        .query(
            "SELECT epoch(ended - started) AS s FROM replays "
            f"WHERE replay_id = '{plan['replay_id']}'"
        )
        .s[0]
    )
    return plan


def test_the_second_plan_is_scaled_by_what_the_first_replay_took(tmp_path):
    demo = copy_demo(tmp_path)
    first = _replay(demo, "weight_norm")
    assert first["calibration"] == 1.0  # nothing to calibrate from before the first replay
    assert first["estimate_s"] == pytest.approx(first["estimate_raw_s"])
    assert first["actual_s"] > 0
    script = demo / "train.py"
    anchor = '        flor.log("weight_norm"'
    script.write_text(
        script.read_text().replace(
            anchor,
            '        flor.log("bias_norm", sum(p.detach().norm().item() for n, p in '
            'model.named_parameters() if "bias" in n))\n' + anchor,
        )
    )
    second = plan_replay(demo, ["bias_norm"])
    low, high = CALIBRATION_BOUNDS
    expected = min(max(first["actual_s"] / first["estimate_raw_s"], low), high)
    assert second.calibration == pytest.approx(expected, rel=1e-6)
    assert second.estimate_raw_s > 0
    assert second.estimate_s == pytest.approx(second.estimate_raw_s * second.calibration)


def test_per_run_estimates_do_not_grow_with_workers(tmp_path):
    demo = copy_demo(tmp_path)
    by_workers = {
        workers: {
            r.run_id: r.estimate_s
            for r in plan_replay(demo, ["weight_norm"], workers=workers).ready()
        }
        for workers in (1, 2, 4, 8)
    }
    for few, many in ((1, 2), (2, 4), (4, 8)):
        for run_id, seconds in by_workers[many].items():
            assert seconds <= by_workers[few][run_id] + 1e-9, (few, many, by_workers)
