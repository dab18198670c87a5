"""Input-pipeline diagnosis (the Plumber seed): the share of loop time a run spent waiting
on its data iterator, from flor.loop's timings, and the hint `florwb runs` prints above 20%.

The same script runs twice: with a loader that takes 30 ms to produce each batch while a
training step computes for 20 ms (input-bound), and with a loader that produces batches at
once (compute-bound). Compute is a busy wait on the clock, so a loaded machine cannot turn
the fast run into a slow one.
"""

from __future__ import annotations

import json

from conftest import florwb, run_py, write

from florwb_engine.store import Store
from florwb_engine.store.hints import DATA_WAIT_HINT_MIN_S, data_wait_hint

SCRIPT = """
import time

import florwb as flor


class SlowLoader:
    \"\"\"Stands in for a DataLoader whose workers cannot keep up.\"\"\"

    def __init__(self, batches, delay):
        self.batches, self.delay = batches, delay

    def __len__(self):
        return self.batches

    def __iter__(self):
        for i in range(self.batches):
            if self.delay:
                time.sleep(self.delay)  # decoding, augmenting, reading from disk...
            yield i


def train_step(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


delay = flor.arg("delay", 0.03)
for epoch in flor.loop("epoch", range(2)):
    for batch in flor.loop("step", SlowLoader(5, delay)):
        train_step(0.02)
        flor.log("batch", batch)
"""

HINT = "waited on the data iterator"


def test_slow_input_is_flagged_and_fast_input_is_not(repo) -> None:
    write(repo / "train.py", SCRIPT)
    run_py(repo, "train.py")
    run_py(repo, "train.py", "--kwargs", "delay=0.0")
    slow, fast = Store(repo).runs()
    assert (slow["args"], fast["args"]) == ({"delay": 0.03}, {"delay": 0.0})

    assert slow["data_wait_share"] > 0.2
    assert slow["data_wait_s"] >= 10 * 0.03 * 0.9
    assert fast["data_wait_share"] < 0.2

    table = florwb(repo, "runs").stdout
    hints = [line for line in table.splitlines() if line.startswith("hint:")]
    assert len(hints) == 1
    assert hints[0].startswith(f"hint: run {slow['run_id']} {HINT} ")
    assert "DataLoader workers" in hints[0] and "prefetching" in hints[0]
    assert fast["run_id"] not in hints[0]
    stall_column = next(line for line in table.splitlines() if line.startswith(slow["run_id"]))
    assert f"{slow['data_wait_share']:.0%}" in stall_column

    listed = json.loads(florwb(repo, "runs", "--json").stdout)
    shares = {r["run_id"]: r["data_wait_share"] for r in listed}
    assert shares[slow["run_id"]] > 0.2 > shares[fast["run_id"]]


def test_a_microsecond_loop_gets_no_data_loader_advice(repo) -> None:
    """A toy loop over range(3) takes microseconds, a quarter of them in `next()`: it was
    told to try more DataLoader workers. The advice needs a wait worth tuning."""
    write(
        repo / "train.py",
        'import florwb as flor\nfor e in flor.loop("epoch", range(3)):\n    flor.log("x", e)\n',
    )
    run_py(repo, "train.py")
    (run,) = Store(repo).runs()
    assert run["data_wait_s"] < DATA_WAIT_HINT_MIN_S
    assert not [line for line in florwb(repo, "runs").stdout.splitlines() if HINT in line]
    assert data_wait_hint(0.26, 2e-6) is None
    assert HINT in (data_wait_hint(0.26, 0.5) or "")
    assert data_wait_hint(0.1, 5.0) is None
