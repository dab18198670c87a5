"""A damaged catalog is rebuilt from the journals; what killed processes left is removed.

The journals are the source of truth and the DuckDB file is derived from them. A catalog
that is truncated or has corrupted blocks (a power cut, a full disk, a bad copy) is moved
aside, never deleted (`florwb.duckdb.damaged-<time>`), with a one-line notice; the next
session starts a fresh file and ingests every journal again. What cannot come back from
journals is the bookkeeping of past replays (status, plan); their values do come back.

Leftovers of killed processes are removed by the next reader: checkpoint temp files of a
process that is gone, and replay work folders whose replay never got (or no longer has) a
running row.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from datetime import datetime
from pathlib import Path
from typing import ParamSpec, TypeVar

import duckdb

from florwb_engine import processes
from florwb_engine.store.db import DB_FILENAME, StoreError, connect

# How DuckDB words a damaged file, whichever exception class carries it.
_DAMAGE = (
    "Corrupt database file",
    "Could not read enough bytes",
    "not a valid DuckDB database file",
    "does not match stored checksum",
    "Failed to load metadata",
    "database has been invalidated",
)
# DuckDB's file header: a file shorter than this was never a whole catalog (its creation
# stopped, e.g. on a full disk) and holds nothing the journals cannot give again.
_HEADER_BYTES = 3 * 4096
# atomic.temp_path: `.NAME.PID.tmp`
_CHECKPOINT_TMP = re.compile(r"^\..+\.(\d+)\.tmp$")


class CatalogRebuilt(StoreError):
    """The catalog was found damaged during a read and moved aside; reading again rebuilds
    it from the journals."""


def is_damage(exc: BaseException) -> bool:
    text = str(exc)
    return any(marker in text for marker in _DAMAGE)


def _remove(path: Path) -> None:
    for stale in (path, path.with_name(path.name + ".wal")):
        stale.unlink(missing_ok=True)


def move_aside(store_dir: Path, exc: BaseException) -> Path | None:
    """Rename the damaged catalog (and its WAL) out of the way; say so in one line. A file
    shorter than a catalog's header was never created whole: it is removed, and said so."""
    path = store_dir / DB_FILENAME
    if not path.exists():
        return None
    size = path.stat().st_size
    if size < _HEADER_BYTES:
        _remove(path)
        print(
            f"florwb: the catalog was never created whole ({size} bytes: a reader stopped "
            "while creating it, e.g. on a full disk); creating it from the journals",
            file=sys.stderr,
            flush=True,
        )
        return None
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S-%f")
    target = path.with_name(f"{DB_FILENAME}.damaged-{stamp}")
    os.replace(path, target)
    wal = path.with_name(DB_FILENAME + ".wal")
    if wal.exists():
        os.replace(wal, target.with_name(target.name + ".wal"))
    reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    print(
        f"florwb: the catalog was damaged ({reason[:160]}); moved aside to {target.name}, "
        "rebuilding it from the journals",
        file=sys.stderr,
        flush=True,
    )
    return target


@contextmanager
def guarded(store_dir: Path) -> Iterator[None]:
    """Damage met while reading: the file is moved aside and CatalogRebuilt raised, so the
    caller's next read starts from the journals instead of failing the same way forever."""
    try:
        yield
    except (duckdb.Error, StoreError) as exc:
        if isinstance(exc, CatalogRebuilt) or not is_damage(exc):
            raise
        moved = move_aside(store_dir, exc)
        where = f" (kept as {moved.name})" if moved else ""
        raise CatalogRebuilt(
            f"the catalog was damaged{where}; it is rebuilt from the journals on the next read"
        ) from None


P = ParamSpec("P")
T = TypeVar("T")


def again_if_rebuilt(read: Callable[P, T]) -> Callable[P, T]:
    """A read that met a damaged catalog in the middle (CatalogRebuilt: the file was moved
    aside) runs once more, and that run rebuilds the catalog from the journals. Every read
    of the store goes through this (Store's methods, the workbench's loaders, user SQL), so
    no caller (the CLI, flor.query, a workbench pane) needs its own retry. Only for reads:
    running a write twice could write twice."""

    @functools.wraps(read)
    def again(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return read(*args, **kwargs)
        except CatalogRebuilt:
            return read(*args, **kwargs)

    return again


def remove_leftovers(store_dir: Path, running_replays: set[str] | None) -> list[str]:
    """Remove temp files of processes that are gone and replay folders without a running
    replay; the paths removed, relative to `store_dir`."""
    removed = []
    checkpoints = store_dir / "checkpoints"
    if checkpoints.is_dir():
        for tmp in checkpoints.glob("*/.*.tmp"):
            match = _CHECKPOINT_TMP.match(tmp.name)
            if match and processes.is_gone(int(match.group(1)), None):
                tmp.unlink(missing_ok=True)
                removed.append(str(tmp.relative_to(store_dir)))
    replays = store_dir / "replays"
    if running_replays is not None and replays.is_dir():
        for folder in replays.iterdir():
            if folder.is_dir() and folder.name not in running_replays:
                shutil.rmtree(folder, ignore_errors=True)
                removed.append(str(folder.relative_to(store_dir)))
    return removed


def running_replays(con: duckdb.DuckDBPyConnection) -> set[str]:
    rows = con.execute("SELECT replay_id FROM replays WHERE status = 'running'").fetchall()
    return {r[0] for r in rows}


@contextmanager
def opened(
    store_dir: Path, prepare: Callable[[duckdb.DuckDBPyConnection], None]
) -> Iterator[duckdb.DuckDBPyConnection]:
    """`connect` then `prepare` (schema, ingestion); a catalog found damaged on the way is
    moved aside once and a fresh one built from the journals in the same call."""
    from florwb_engine.store.ingest import CatalogDiskFull, disk_full  # ingest imports us

    path = store_dir / DB_FILENAME
    for attempt in (0, 1):
        creating = store_dir.is_dir() and not path.exists()
        with ExitStack() as stack:
            try:
                con = stack.enter_context(connect(store_dir))
                prepare(con)
            except (duckdb.Error, StoreError) as exc:
                full = None if isinstance(exc, CatalogDiskFull) else disk_full(exc)
                if creating and full is not None:  # what it wrote so far is no catalog
                    stack.close()
                    _remove(path)
                    raise CatalogDiskFull(
                        f"the catalog cannot be created: {full} where {store_dir} is; free "
                        "some space and run it again (nothing is lost: the journals hold "
                        "every value)"
                    ) from None
                if attempt or not is_damage(exc):
                    raise
                stack.close()
                move_aside(store_dir, exc)
                continue
            yield con
            return


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
