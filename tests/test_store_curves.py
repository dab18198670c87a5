"""florwb_engine.store.curves: x on the shared axes from the recorded loop structure, and
the chart's arithmetic (min/max downsampling that keeps spikes, TensorBoard's EMA)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest_app import copy_demo

from florwb_engine.store import Store
from florwb_engine.store.curves import downsample, load_curves, smooth


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
    # a window: only points inside it, and all of them when they fit
    wx, _wy = downsample(x, y, 100.0, 150.0, 50)
    assert wx[0] == 100.0 and wx[-1] == 150.0 and len(wx) == 51


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
    assert loss.metric == "loss" and loss.metrics == ["acc", "loss"]
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
