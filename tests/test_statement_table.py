"""The log-statement table (florwb_engine.statements) without a screen: the workbench's
diff tab draws exactly this, and a script or notebook can build it the same way."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest_app import copy_demo

from florwb_engine.statements import WORKING, choose_script_and_versions, statement_table
from florwb_engine.store import Store


@pytest.fixture
def demo(tmp_path: Path) -> Path:
    return copy_demo(tmp_path)


def test_script_and_versions_follow_the_wanted_version_and_keep_it_when_trimming():
    runs = [("a.py", f"v{i}") for i in range(6)] + [("b.py", "w0"), ("b.py", "w0")]
    order = [f"v{i}" for i in range(6)] + ["w0"]
    # the newest run's script by default
    assert choose_script_and_versions(runs, order) == ("b.py", ["w0"], {"w0": 2})
    # the script the wanted version was recorded with, its newest versions, the wanted kept
    script, versions, counts = choose_script_and_versions(runs, order, "v0", max_versions=3)
    assert script == "a.py"
    assert versions == ["v0", "v4", "v5"]
    assert counts == {f"v{i}": 1 for i in range(6)}
    assert choose_script_and_versions([(None, "v0")], ["v0"]) is None


def test_two_scripts_of_one_version_each_get_their_table():
    """Scripts committed together share a version: the run under the cursor decides."""
    runs = [("prep.py", "v0"), ("train.py", "v0")]
    assert choose_script_and_versions(runs, ["v0"], "v0")[0] == "train.py"
    assert choose_script_and_versions(runs, ["v0"], "v0", wanted_script="prep.py") == (
        "prep.py",
        ["v0"],
        {"v0": 1},
    )
    # a script no run recorded (a notebook, a stale name) does not win
    assert choose_script_and_versions(runs, ["v0"], "v0", wanted_script="gone.py")[0] == "train.py"


def test_table_of_the_demo_says_recorded_propagatable_and_in_tree(demo: Path):
    store = Store(demo)
    runs = store.runs()
    order = list(store.query("SELECT version FROM versions ORDER BY first_seen")["version"])
    choice = choose_script_and_versions(((r["script"], r["version"]) for r in runs), order)
    assert choice is not None
    script, versions, counts = choice
    assert script == "train.py" and versions == order and sum(counts.values()) == len(runs)
    table = statement_table(demo, store, script, versions, counts)
    assert table.versions == [*order, WORKING]
    assert {"loss", "acc", "weight_norm"} <= set(table.names)
    for version in order:
        assert table.cells[("loss", version)].status == "recorded"
        cell = table.cells[("weight_norm", version)]
        assert cell.status == "propagatable" and cell.line is not None
    assert table.cells[("weight_norm", WORKING)].status == "in tree"
    # the diff needs every version's code and where its log lines are
    assert set(table.sources) == {*order, WORKING}
    assert table.cells[("loss", order[0])].line in table.log_lines[order[0]]
    assert table.note is None


def test_a_working_tree_that_does_not_parse_compares_the_recorded_versions(demo: Path):
    (demo / "train.py").write_text("def broken(:\n")
    store = Store(demo)
    order = list(store.query("SELECT version FROM versions ORDER BY first_seen")["version"])
    table = statement_table(demo, store, "train.py", order)
    assert WORKING not in table.versions and table.versions == order
    assert table.note is not None and table.note.startswith("working tree:")
    assert "weight_norm" not in table.names  # only the tree had it
