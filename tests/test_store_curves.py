"""florwb_engine.store.curves: x on the shared axes from the recorded loop structure, and
the chart's arithmetic (min/max downsampling that keeps spikes, TensorBoard's EMA)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import run_py, write
from conftest_app import copy_demo

from florwb_engine.store import Store
from florwb_engine.store.curves import downsample, finite_runs, load_curves, smooth


@pytest.fixture
def demo(tmp_path: Path) -> Path:
    return copy_demo(tmp_path)


def test_downsample_keeps_a_spike_one_step_wide():
    x = np.arange(10_000, dtype=float)
    y = np.zeros(10_000)
    y[4321] = 100.0
    y[7777] = -5.0
    dx, dy = downsample(x, y, 0.0, 9_999.0, 50)
    assert len(dx) <= 100
    assert dy.max() == 100.0 and dy.min() == -5.0
    assert np.all(np.diff(dx) > 0)  # still in x order
    # a window: the points inside it, and all of them when they fit, with the nearest
    # point outside on each side (the lines run to the window's edges)
    wx, _wy = downsample(x, y, 100.0, 150.0, 50)
    assert wx[0] == 99.0 and wx[-1] == 151.0 and len(wx) == 53


def test_smoothing_is_tensorboards_debiased_ema():
    y = np.array([1.0, 3.0, 2.0, 5.0, 4.0])
    weight = 0.6
    expected, last, debias = [], 0.0, 1.0
    for value in y:
        last = last * weight + (1 - weight) * value
        debias *= weight
        expected.append(last / (1 - debias))
    assert smooth(y, weight).tolist() == pytest.approx(expected)
    assert smooth(y, 0.0) is y


def test_axes_come_from_the_recorded_loops(demo: Path):
    store = Store(demo)
    runs = store.run_rows()
    ids = [r.run_id for r in runs]
    epochs = {r.run_id: int(r.args["epochs"]) for r in runs}
    steps = store.query(
        "SELECT run_id, count(*) AS n FROM iterations WHERE loop = 'step' GROUP BY run_id"
    )
    per_run = dict(zip(steps["run_id"], steps["n"]))

    loss = load_curves(store, ids, "loss", "step")
    assert loss.metric == "loss"
    logged = [m for m in loss.metrics if not m.startswith("system/")]  # sampled: beside them
    assert logged == ["acc", "loss"]
    assert {c.run_id for c in loss.curves} == set(ids)
    for curve in loss.curves:
        assert not curve.replayed
        # one value per step: x counts the steps done, 1..n
        assert curve.x.tolist() == list(range(1, per_run[curve.run_id] + 1))

    acc = load_curves(store, ids, "acc", "step")
    for curve in acc.curves:  # logged after each epoch's steps: at the steps done by then
        n = per_run[curve.run_id] // epochs[curve.run_id]
        assert curve.x.tolist() == [n * (e + 1) for e in range(epochs[curve.run_id])]

    by_epoch = load_curves(store, ids, "acc", "epoch")
    for curve in by_epoch.curves:
        assert curve.x.tolist() == [e + 1 for e in range(epochs[curve.run_id])]
    loss_epochs = load_curves(store, ids, "loss", "epoch")
    for curve in loss_epochs.curves:
        assert curve.x[-1] == epochs[curve.run_id]
        assert 0 < curve.x[0] < 1

    wall = load_curves(store, ids, "loss", "wall")
    durations = {r.run_id: r.duration_s for r in runs}
    for curve in wall.curves:
        assert np.all(np.diff(curve.x) >= 0) and curve.x[0] > 0
        assert curve.x[-1] <= durations[curve.run_id]


def test_no_numeric_metric_and_unknown_runs(demo: Path):
    store = Store(demo)
    assert load_curves(store, ["no-such-run"], "loss", "step").curves == []
    with pytest.raises(ValueError):
        load_curves(store, [], "loss", "sideways")


def test_values_outside_loops_are_counted_and_a_loop_without_inner_timing(repo: Path):
    """A three-level script (epoch/step/micro) with a value logged outside any loop: the
    outside one is counted, not drawn; the innermost values get x on every axis."""
    write(
        repo / "train.py",
        """
        import florwb as flor

        for epoch in flor.loop("epoch", range(2)):
            for step in flor.loop("step", range(3)):
                for micro in flor.loop("micro", range(2)):
                    flor.log("m", epoch * 100 + step * 10 + micro)
            flor.log("e", float(epoch))
        flor.log("final", 1.0)
        flor.commit()
        """,
    )
    run_py(repo, "train.py")
    store = Store(repo)
    ids = [r.run_id for r in store.run_rows()]
    final = load_curves(store, ids, "final", "step")
    assert final.curves == [] and final.outside_loops == 1
    deep = load_curves(store, ids, "m", "step")
    (curve,) = deep.curves
    assert curve.x.tolist() == list(range(1, 13))  # 2 x 3 x 2 innermost iterations
    assert curve.y.tolist() == [
        e * 100 + s * 10 + m for e in (0, 1) for s in (0, 1, 2) for m in (0, 1)
    ]
    epochs = load_curves(store, ids, "e", "step").curves[0]
    assert epochs.x.tolist() == [6, 12]
    by_epoch = load_curves(store, ids, "m", "epoch").curves[0]
    assert by_epoch.x[0] == pytest.approx(1 / 3) and by_epoch.x[-1] == pytest.approx(2.0)
    wall = load_curves(store, ids, "m", "wall").curves[0]
    assert np.all(np.isfinite(wall.x)) and np.all(np.diff(wall.x) >= 0)


def test_a_version_brings_all_its_runs(demo: Path):
    """The chart of a version (nothing marked) asks by version, so runs started after it
    opened are read too."""
    store = Store(demo)
    runs = store.run_rows()
    version = runs[-1].version
    mine = {r.run_id for r in runs if r.version == version}
    assert 0 < len(mine) < len(runs)
    curves = load_curves(store, [], "loss", "step", version=version)
    assert {c.run_id for c in curves.curves} == mine
    one = sorted(mine)[0]
    assert {c.run_id for c in load_curves(store, [one], "loss", "step").curves} == {one}


def test_a_column_whose_values_share_a_pixel_row_keeps_one_point_and_a_spike_stays():
    x = np.arange(10_000.0)
    y = np.linspace(1.0, 0.5, 10_000)  # a smooth curve: every column within one pixel row
    y[5_000] = 3.0  # a one-step spike
    both_x, both_y = downsample(x, y, 0.0, 9_999.0, 100)
    one_x, one_y = downsample(x, y, 0.0, 9_999.0, 100, rows=40)
    assert len(both_x) == 200 and len(one_x) == 101  # the spike's column keeps both
    assert 3.0 in one_y and both_y.min() == 0.5
    assert abs(one_y.min() - 0.5) <= (3.0 - 0.5) / 40  # within the one pixel row it shares


def test_a_value_logged_before_the_inner_loop_sits_at_the_start_of_its_epoch(repo: Path):
    """`lr` logged at the start of each epoch, `acc` at its end: lr of epoch e is drawn
    at e epochs done (and at the steps done when epoch e began), acc at e + 1."""
    write(
        repo / "train.py",
        """
        import florwb as flor

        for epoch in flor.loop("epoch", range(3)):
            flor.log("lr", 0.1 / (epoch + 1))
            for step in flor.loop("step", range(4)):
                flor.log("loss", 1.0 / (epoch * 4 + step + 1))
            flor.log("acc", 0.5 + epoch / 10)
        flor.commit()
        """,
    )
    run_py(repo, "train.py")
    store = Store(repo)
    ids = [r.run_id for r in store.run_rows()]
    assert load_curves(store, ids, "lr", "epoch").curves[0].x.tolist() == [0, 1, 2]
    assert load_curves(store, ids, "acc", "epoch").curves[0].x.tolist() == [1, 2, 3]
    assert load_curves(store, ids, "lr", "step").curves[0].x.tolist() == [0, 4, 8]
    assert load_curves(store, ids, "acc", "step").curves[0].x.tolist() == [4, 8, 12]
    lr_wall = load_curves(store, ids, "lr", "wall").curves[0]
    acc_wall = load_curves(store, ids, "acc", "wall").curves[0]
    assert lr_wall.x[0] == 0.0  # the first epoch starts the run's training time
    assert np.all(lr_wall.x[1:] == acc_wall.x[:-1])  # epoch e starts where e - 1 ended
    # whatever the axis, each point knows its step and wall time (the chart's cursor)
    by_epoch = load_curves(store, ids, "acc", "epoch").curves[0]
    assert by_epoch.step.tolist() == [4, 8, 12]
    assert by_epoch.wall.tolist() == acc_wall.x.tolist()


def test_nan_and_inf_are_kept_where_they_were_logged(repo: Path):
    write(
        repo / "train.py",
        """
        import florwb as flor

        for step in flor.loop("step", range(6)):
            flor.log("loss", [1.0, float("nan"), 0.8, float("inf"), 0.6, 0.5][step])
            flor.log("broken", float("nan"))
        flor.commit()
        """,
    )
    run_py(repo, "train.py")
    store = Store(repo)
    ids = [r.run_id for r in store.run_rows()]
    (curve,) = load_curves(store, ids, "loss", "step").curves
    assert curve.x.tolist() == [1, 2, 3, 4, 5, 6]
    assert np.isnan(curve.y[1]) and np.isposinf(curve.y[3])
    assert curve.finite.tolist() == [True, False, True, False, True, True]
    (broken,) = load_curves(store, ids, "broken", "step").curves
    assert len(broken.y) == 6 and not broken.finite.any()
    assert finite_runs(curve.y) == [(0, 1), (2, 3), (4, 6)]
    smoothed = smooth(curve.y, 0.6)
    assert np.isnan(smoothed[1]) and np.isposinf(smoothed[3])
    assert smoothed[2] == pytest.approx(smooth(np.array([1.0, 0.8]), 0.6)[1])
