"""A catalog damaged while the workbench is open: the next read rebuilds it and works.

The damage hits the data blocks of `log_rows` only (found with DuckDB's own
`pragma_storage_info`), so opening the file and ingesting still work and the damage is met
in the middle of a read, where `repair.guarded` moves the file aside and raises
CatalogRebuilt. Before, only the CLI's main and flor.query/dataframe read again; the
workbench showed "the catalog was damaged ..." in an error modal. Now the store's reads
retry once themselves (`repair.again_if_rebuilt`), so every reader gets it.
"""

from __future__ import annotations

import os
from pathlib import Path

import duckdb
import pytest
from conftest_app import Seen, copy_demo, loaded, make_app, run_lines, shown, wait_until

from florwb.screens.error import ErrorScreen
from florwb.ui.messages import HistoryLoaded
from florwb_engine.store import Store
from florwb_engine.store.history_values import load_history_values

HEADER = 3 * 4096  # DuckDB's file header: then blocks of block_size bytes


@pytest.fixture
def demo(tmp_path: Path) -> Path:
    return copy_demo(tmp_path)


def damage_log_rows(project: Path) -> int:
    """Overwrite every block holding `log_rows` data with random bytes; how many."""
    return overwrite(project, log_rows_blocks(project))


def log_rows_blocks(project: Path) -> tuple[int, list[int]]:
    """The block size and the blocks holding `log_rows` data (DuckDB's own account)."""
    db = project / ".florwb" / "florwb.duckdb"
    con = duckdb.connect(str(db), read_only=True)
    try:
        size = con.execute("SELECT block_size FROM pragma_database_size()").fetchall()[0][0]
        blocks = [
            b
            for (b,) in con.execute(
                "SELECT DISTINCT block_id FROM pragma_storage_info('log_rows') "
                "WHERE persistent AND block_id >= 0"
            ).fetchall()
        ]
    finally:
        con.close()
    return size, blocks


def overwrite(project: Path, found: tuple[int, list[int]]) -> int:
    size, blocks = found
    with open(project / ".florwb" / "florwb.duckdb", "r+b") as f:
        for block in blocks:
            f.seek(HEADER + block * size)
            f.write(os.urandom(size))
    return len(blocks)


def _damaged(project: Path) -> list[Path]:
    return sorted((project / ".florwb").glob("florwb.duckdb.damaged-*"))


def test_a_read_that_meets_damage_reads_again(demo: Path):
    expected = Store(demo).dataframe("acc").to_csv()
    assert damage_log_rows(demo) > 0
    assert Store(demo).dataframe("acc").to_csv() == expected  # no retry of the caller's
    assert len(_damaged(demo)) == 1
    damage_log_rows(demo)
    assert load_history_values(Store(demo)).metric == "acc"  # the workbench's loader too
    assert len(_damaged(demo)) == 2


async def test_workbench_reads_on_after_the_catalog_is_damaged(demo: Path):
    runs = Store(demo).runs()
    blocks = log_rows_blocks(demo)  # asked before the app holds the file
    app, seen = make_app(demo), Seen()
    async with app.run_test(size=(100, 30), message_hook=seen) as pilot:
        text = await loaded(pilot)
        assert len(run_lines(text)) == len(runs)
        assert overwrite(demo, blocks) > 0
        since = seen.mark()
        await pilot.press("ctrl+r")
        await wait_until(pilot, lambda: len(_damaged(demo)) == 1, what="the damage found")
        await seen.wait(
            pilot,
            HistoryLoaded,
            lambda m: not m.history.values_pending and len(m.history.runs) == len(runs),
            since=since,
            what="the history after the rebuild",
        )
        text = await shown(pilot)
        assert "version " in text and len(run_lines(text)) == len(runs)
        assert not isinstance(app.screen, ErrorScreen), app.screen.message
        assert any(ch in "".join(run_lines(text)) for ch in "▁▂▃▄▅▆▇█")  # values back
        await pilot.pause(0.5)  # the monitor's polls (every 0.25 s) read the rebuilt file
        assert not isinstance(app.screen, ErrorScreen), app.screen.message
    assert len(_damaged(demo)) == 1
