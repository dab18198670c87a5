"""An event of a kind this florwb does not know (a newer writer's) is counted and said once,
not dropped in silence; the run's other values and the other runs stay readable.

Before, `_apply_event` ignored any event kind it did not know: a newer florwb's data in a
journal vanished with exit 0 and no word.
"""

from __future__ import annotations

import json

from conftest import florwb, recorded_project, run_py

from florwb_engine.journal import JournalWriter

SCRIPT = """
import florwb as flor
for epoch in flor.loop("epoch", range(3)):
    print(f"epoch {epoch}")
    flor.log("x", epoch)
"""


def test_unknown_event_kinds_are_counted_and_said(tmp_path):
    recorded_project(tmp_path, SCRIPT)
    run_py(tmp_path, "train.py")
    first, second = sorted((tmp_path / ".florwb" / "journal").glob("*.journal"))
    writer = JournalWriter(first)
    writer.append((None, None, [{"kind": "from_the_future", "data": [1, 2]}] * 2))
    writer.close()

    proc = florwb(tmp_path, "runs", "--json")
    said = [line for line in proc.stderr.splitlines() if "from_the_future" in line]
    assert len(said) == 1 and "(2)" in said[0], proc.stderr
    runs = {r["run_id"]: r for r in json.loads(proc.stdout)}
    damaged = runs[first.stem]
    assert damaged["status"] == "finished" and damaged["n_logs"] == 3
    assert any("from_the_future" in i["detail"] and i["n"] == 2 for i in damaged["issues"])
    assert runs[second.stem]["status"] == "finished" and not runs[second.stem]["issues"]
    again = florwb(tmp_path, "runs")
    assert "from_the_future" not in again.stderr  # said once, when ingested
    assert f"! run {first.stem}" in again.stdout  # the listing keeps marking the run
