"""Commands that are not plain readers still create no `.florwb/` outside a project.

`florwb replay` started its fork server (whose log lives in `.florwb/replays/`) before
planning read the store, so `florwb replay w` in any folder left `.florwb/florwb.duckdb`
and `.florwb/replays/` behind; `florwb checkpoints RUN` said a run had no checkpoints in a
`.florwb/checkpoints` that did not exist instead of saying there is no project.
"""

from __future__ import annotations

import pytest
from conftest import florwb


@pytest.mark.parametrize(
    "args",
    [
        ("replay", "loss", "--yes"),
        ("replay", "loss", "--json", "--where", "lr > 0"),
        ("checkpoints", "abc"),
        ("checkpoints", "abc", "--json"),
        ("io", "abc", "--extract", "loss=(?P<loss>[0-9.]+)"),
    ],
)
def test_outside_a_project_one_line_and_nothing_written(tmp_path, args):
    proc = florwb(tmp_path, *args, check=False)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.startswith("florwb: no florwb project in"), proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert list(tmp_path.iterdir()) == []
