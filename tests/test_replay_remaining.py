"""How long a running replay has left (replay/cost.remaining_s): the plan's estimate until
5% of the iterations are done, then the pace so far; past the estimate with too little
done, nothing to say. The workbench's Replay tab shows it."""

from __future__ import annotations

import pytest

from florwb_engine.replay.cost import checkpoint_spacing, remaining_s


def test_the_estimate_first_then_the_pace():
    assert remaining_s(2.0, 0, 100, 10.0) == (8.0, True)
    assert remaining_s(2.0, 4, 100, 10.0) == (8.0, True)  # 4%: still the estimate
    left, estimated = remaining_s(2.0, 10, 100, 10.0)  # 10% in 2 s: 18 s to go
    assert left == pytest.approx(18.0) and estimated is False
    assert remaining_s(12.0, 1, 100, 10.0) is None  # past the estimate, 1% done
    assert remaining_s(1.0, 0, 0, 5.0) == (4.0, True)  # nothing counted yet


def test_checkpoint_spacing_says_every_n_only_of_two_or_more():
    """A run whose budget let it checkpoint its last epoch alone was said to checkpoint
    'only every 1 iteration(s)' in the plan."""
    assert checkpoint_spacing([3], "epoch") == "one checkpoint, after epoch 3"
    assert checkpoint_spacing([], "epoch") == "no checkpoint"
    assert checkpoint_spacing([1, 3, 5, 6], "epoch") == "checkpoints after epoch 1, 3, 5-6"
    assert checkpoint_spacing([2, 5, 8], "epoch") == "checkpoints only every 3 iterations"
