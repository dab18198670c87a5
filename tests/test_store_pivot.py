"""The dataframe pivot: the last value of an iteration wins, however ingestion split it,
and stores written by an older florwb keep working."""

from __future__ import annotations

import duckdb
import pandas as pd
from conftest import run_py, write

from florwb_engine.store import Store
from florwb_engine.store.schema import SCHEMA_VERSION

REPEATS = """
import florwb as flor
from florwb_engine.record import runtime

for epoch in flor.loop("epoch", range(3)):
    flor.log("split", 50.0)     # the first value of the iteration...
    flor.log("same", 70.0)
    flor.log("same", float(epoch))  # ...a later one in the same batch wins
    runtime.current().flush()   # the first values are written now
    flor.query("SELECT 1")      # and a reader ingests them now
    flor.log("split", float(epoch))  # so the last value lands in a later batch
    flor.log("once", 10.0 + epoch)
    for step in flor.loop("step", range(2)):
        flor.log("loss", epoch + step / 10)
flor.log("text", "done")
flor.commit()
"""


def test_the_last_value_of_an_iteration_wins_across_batches(repo):
    write(repo / "repeats.py", REPEATS)
    run_py(repo, "repeats.py")
    frame = Store(repo).dataframe("split", "same", "once")
    assert list(frame["epoch"]) == [0, 1, 2]
    assert list(frame["split"]) == [0.0, 1.0, 2.0]  # not 50.0, the largest
    assert list(frame["same"]) == [0.0, 1.0, 2.0]  # not 70.0
    assert list(frame["once"]) == [10.0, 11.0, 12.0]


def test_pivot_types_coordinates_and_text_like_duckdb_does(repo):
    write(repo / "repeats.py", REPEATS)
    run_py(repo, "repeats.py")
    frame = Store(repo).dataframe("once", "loss", "text")
    assert str(frame["step"].dtype) == "Int64"  # epoch-level rows have no step
    assert str(frame["epoch"].dtype) == "Int64"  # nor has the row logged outside loops
    assert frame["epoch"].isna().sum() == 1 and frame["step"].isna().sum() == 4
    epoch_rows = frame[frame["epoch"].notna() & frame["step"].isna()]
    assert list(epoch_rows["once"]) == [10.0, 11.0, 12.0]
    step_rows = frame[frame["step"].notna()]
    assert list(step_rows["loss"]) == [0.0, 0.1, 1.0, 1.1, 2.0, 2.1]
    assert frame["text"].dropna().tolist() == ["done"]
    assert pd.api.types.is_string_dtype(frame["text"])


def test_a_store_from_before_repeat_counts_is_migrated_and_stays_right(repo):
    write(repo / "repeats.py", REPEATS)
    run_py(repo, "repeats.py")
    store = Store(repo)
    store.ingest()
    with duckdb.connect(str(repo / ".florwb" / "florwb.duckdb")) as con:  # as version 2 left it
        con.execute("ALTER TABLE name_stats DROP COLUMN n_repeat")
        con.execute("ALTER TABLE name_stats DROP COLUMN last_ctx")
        con.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    run_py(repo, "repeats.py")  # a second run, ingested into the migrated store
    frame = Store(repo).dataframe("split", "same", "once")
    assert len(frame) == 6
    assert list(frame["split"]) == [0.0, 1.0, 2.0] * 2
    assert list(frame["same"]) == [0.0, 1.0, 2.0] * 2
    version = Store(repo).query("SELECT value FROM meta WHERE key = 'schema_version'")
    assert version.value[0] == str(SCHEMA_VERSION)
