"""Loop names that are no identifiers, or that collide, through every reader.

Before: `florwb io` died with a KeyError traceback on a loop named "\\n" or "x/y" (pandas'
itertuples renames such columns), and a loop nested in one whose name differs only in case
(`EPOCH` in `epoch`: one column, since DuckDB compares names without case) silently gave
the inner iteration as the outer coordinate in every dataframe.
"""

from __future__ import annotations

import json

from conftest import florwb, recorded_project

SCRIPT = """
import florwb as flor
names = ['a"; DROP TABLE runs; --', "x/y", "run_id", "text", "a'b", " ", "\\n"]
for n in names:
    for i in flor.loop(n, range(2)):
        print(f"in {n!r} {i}")
        flor.log("v", i)
for e in flor.loop("epoch", range(2)):
    for s in flor.loop("EPOCH", range(2)):
        flor.log("nested", e * 10 + s)
"""


def test_odd_and_colliding_loop_names(tmp_path):
    recorded_project(tmp_path, SCRIPT)
    listed = florwb(tmp_path, "runs", "--json")
    said = [line for line in listed.stderr.splitlines() if "share the column" in line]
    assert len(said) == 1 and "epoch/EPOCH" in said[0], listed.stderr
    (run,) = json.loads(listed.stdout)
    assert any(i["kind"] == "ambiguous" for i in run["issues"])
    assert "! run" in florwb(tmp_path, "runs").stdout  # the listing marks the run

    proc = florwb(tmp_path, "io", run["run_id"], check=False)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 14
    assert "'\\n'=1" in proc.stdout and "x/y=0" in proc.stdout and "' '=1" in proc.stdout
    for fmt in ("csv", "json"):
        assert florwb(tmp_path, "io", run["run_id"], "--format", fmt).returncode == 0
    frame = json.loads(florwb(tmp_path, "dataframe", "v", "--format", "json").stdout)
    assert len(frame) == 14
    count = florwb(tmp_path, "query", "SELECT count(*) AS n FROM runs", "--format", "json")
    assert json.loads(count.stdout) == [{"n": 1}]  # the loop name ran as no SQL
