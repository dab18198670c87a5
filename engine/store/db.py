"""Short-lived DuckDB connections that wait for the single-writer lock instead of failing.

DuckDB lets one process open a database file for writing. Every florwb process (CLI, app
worker, notebook) connects only for the work at hand and closes again, and retries while
another process holds the lock, so concurrent readers and ingesters take turns.
"""

from __future__ import annotations

import logging
import random
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb

DB_FILENAME = "florwb.duckdb"
LOCK_TIMEOUT_S = 120.0
LOCK_NOTICE_AFTER_S = 1.0  # a wait longer than this is said once (logged at INFO level)

# Who waits on whose lock: said through logging, so the engine stays silent under a TUI
# unless its reader asks (the CLI sends this logger to stderr).
log = logging.getLogger(__name__)


class StoreBusy(RuntimeError):
    """The database stayed locked by another process for longer than we wait."""


class StoreError(RuntimeError):
    """An expected store failure with a one-line message (bad SQL, unknown name...)."""


class NoProject(StoreError):
    """Readers found no `.florwb/` folder: there is nothing to read, and they create none."""


def lock_holder(message: str) -> str:
    """The process DuckDB names in a lock conflict ("... held in /usr/bin/python3 (PID 42)")."""
    found = re.search(r"held in (.+?) \(PID (\d+)\)", message)
    if found is None:
        return "another process"
    return f"another process (PID {found.group(2)}, {found.group(1)})"


def _is_lock_conflict(exc: Exception) -> bool:
    text = str(exc)
    if "different configuration" in text:  # this process holds it read-only, or read-write
        return True
    if "Unique file handle conflict" in text:  # another thread of this process opening it
        return True
    return "lock" in text.lower() and ("Conflicting" in text or "Could not set lock" in text)


@contextmanager
def connect(
    store: Path,
    *,
    timeout_s: float = LOCK_TIMEOUT_S,
    read_only: bool = False,
    config: dict[str, Any] | None = None,
) -> Iterator[duckdb.DuckDBPyConnection]:
    """A connection to the catalog in `store` (a `.florwb/` folder that must exist: readers
    never create a project; recording makes the folder when it writes its journal)."""
    if not store.is_dir():
        raise NoProject(
            f"no florwb project in {store.parent} (no {store.name}/ folder; record a run "
            "with `import florwb as flor` first, or try `florwb demo`)"
        )
    path = store / DB_FILENAME
    deadline = time.monotonic() + timeout_s
    noticed_at = time.monotonic() + LOCK_NOTICE_AFTER_S
    said = False
    delay = 0.01
    while True:
        try:
            con = duckdb.connect(str(path), read_only=read_only, config=config or {})
            break
        except (duckdb.IOException, duckdb.ConnectionException, duckdb.OperationalError) as exc:
            # OperationalError: "Unique file handle conflict", another thread of this
            # process opening or closing the same file at this moment; it passes like a lock
            if not _is_lock_conflict(exc):
                raise StoreError(f"cannot open {path}: {str(exc).splitlines()[0]}") from None
            holder = lock_holder(str(exc))
            if time.monotonic() > deadline:
                raise StoreBusy(f"{path} stayed locked by {holder} for {timeout_s:.0f} s") from None
            if not said and time.monotonic() > noticed_at and "Conflicting lock" in str(exc):
                log.info("%s is locked by %s; retrying for up to %.0f s", path, holder, timeout_s)
                said = True
            time.sleep(delay * (1 + random.random()))
            delay = min(delay * 2, 0.5)
    try:
        no_progress_bar(con)
        yield con
    finally:
        con.close()


def no_progress_bar(con: duckdb.DuckDBPyConnection) -> None:
    """DuckDB draws a progress bar on stdout for long queries: not under a TUI or a pipe.
    In a Jupyter kernel without ipywidgets it is off already and DuckDB refuses the SET."""
    if con.execute("SELECT current_setting('enable_progress_bar')").fetchone() != (False,):
        con.execute("SET enable_progress_bar = false")


def fetch_one(con: duckdb.DuckDBPyConnection, sql: str, params: list | None = None):
    """The first row or None. Fetches everything: DuckDB refuses further statements on a
    connection while a result is only partly read (what `fetchone()` leaves behind)."""
    rows = con.execute(sql, params or []).fetchall()
    return rows[0] if rows else None
