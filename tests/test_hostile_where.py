"""A `--where` condition (`florwb replay --where`, the workbench's run filter) is user SQL:
it must not read other files, list folders or install extensions, however it is written.

It runs while the catalog is open read-write (planning reads the same session), so it is
evaluated on a copy of the run table in a locked-down in-memory DuckDB
(engine/store/user_condition.py). Before, `--where "(SELECT count(*) FROM
read_text('/etc/passwd')) > 0"` planned a replay, and `read_csv('https://...')` tried to
install the httpfs extension into ~/.duckdb.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import florwb, recorded_project, write

from florwb_engine.store.catalog import Store
from florwb_engine.store.run_selection import WhereError, runs_where

SCRIPT = """
import florwb as flor
lr = flor.arg("lr", 0.1)
big = flor.arg("big", 10**100)
for epoch in flor.loop("epoch", range(2)):
    flor.log("loss", lr / (1 + epoch))
"""


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    return recorded_project(tmp_path_factory.mktemp("where"), SCRIPT)


def hostile(secret: Path) -> list[str]:
    return [
        f"(SELECT count(*) FROM read_text('{secret}')) > 0",
        f"(SELECT count(*) FROM read_csv('{secret}')) > 0",
        f"(SELECT count(*) FROM read_blob('{secret}')) > 0",
        f"(SELECT count(*) FROM glob('{secret.parent}/*')) > 0",
        "(SELECT count(*) FROM read_csv('https://example.com/x.csv')) > 0",
        "(SELECT count(*) FROM read_parquet('s3://bucket/x.parquet')) > 0",
        f"lr > 0 AND (SELECT count(*) FROM read_json_auto('{secret}')) >= 0",
    ]


def test_conditions_cannot_reach_outside(project, tmp_path):
    secret = write(tmp_path / "secret.csv", "a\n1\n")
    store = Store(project)
    for condition in hostile(secret):
        with store.session() as con, pytest.raises(WhereError) as caught:
            runs_where(con, condition)
        assert "disabled by configuration" in str(caught.value), (condition, caught.value)


def test_plain_conditions_still_select(project):
    store = Store(project)
    with store.session() as con:
        assert len(runs_where(con, "lr > 0.05 AND big > 5 AND status = 'finished'")) == 1
        assert runs_where(con, "lr > 1") == []
        assert len(runs_where(con, "runs.lr = 0.1")) == 1
        assert len(runs_where(con, None)) == 1
        with pytest.raises(WhereError, match="nosuch"):
            runs_where(con, "nosuch > 1")


def test_cli_replay_where_says_one_line(project, tmp_path):
    secret = write(tmp_path / "secret.csv", "a\n1\n")
    proc = florwb(
        project,
        "replay",
        "loss",
        "--json",
        "--where",
        f"(SELECT count(*) FROM read_text('{secret}')) > 0",
        check=False,
    )
    assert proc.returncode == 1
    assert proc.stderr.count("\n") == 1 and "disabled by configuration" in proc.stderr
    assert "Traceback" not in proc.stderr
