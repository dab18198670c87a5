"""Export of a user's result (the Query tab's ^e; engine/store/user_export.py) on a real
catalog: the format from the extension, nothing written anywhere but the path asked for."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest
from conftest_app import copy_demo

from florwb_engine.store import Store, StoreError
from florwb_engine.store.user_export import export_result


@pytest.fixture
def demo(tmp_path: Path) -> Path:
    return copy_demo(tmp_path)


def test_formats_come_from_the_extension_and_several_statements_export_the_last(demo: Path):
    store = Store(demo)
    sql = "SELECT 1 AS ignored;\nSELECT run_id, status FROM runs ORDER BY run_id -- trailing\n;"
    expected = [
        tuple(r) for r in store.query("SELECT run_id, status FROM runs ORDER BY run_id").values
    ]
    for name, reader in (
        ("a.csv", "read_csv"),
        ("a.parquet", "read_parquet"),
        ("a.json", "read_json"),
        ("a.jsonl", "read_json"),
    ):
        target = demo.parent / name
        assert export_result(store, sql, target) == 4
        got = duckdb.sql(f"SELECT run_id, status FROM {reader}('{target}') ORDER BY run_id")
        assert got.fetchall() == expected, name


def test_export_refuses_what_it_cannot_do_and_leaves_nothing(demo: Path):
    store = Store(demo)
    before = sorted(p.name for p in demo.parent.iterdir())
    existing = demo.parent / "kept.csv"
    existing.write_text("mine\n")
    cases = {
        demo.parent / "a.xlsx": "cannot tell the format",
        existing: "exists",
        demo.parent / "no" / "such" / "a.csv": "no folder",
    }
    for target, said in cases.items():
        with pytest.raises(StoreError, match=said):
            export_result(store, "SELECT 1 AS a", target)
    assert existing.read_text() == "mine\n"
    with pytest.raises(StoreError, match="read-only"):
        export_result(store, f"COPY runs TO '{demo.parent / 'sneaky.csv'}'", demo.parent / "b.csv")
    with pytest.raises(StoreError, match="Permission Error"):  # no other file is read
        export_result(store, f"SELECT * FROM read_csv('{existing}')", demo.parent / "c.csv")
    with pytest.raises(StoreError, match="Binder Error"):
        export_result(store, "SELECT nosuch FROM runs", demo.parent / "d.csv")
    after = sorted(p.name for p in demo.parent.iterdir())
    assert after == sorted([*before, "kept.csv"])
