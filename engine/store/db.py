"""Short-lived DuckDB connections that wait for the single-writer lock instead of failing.

DuckDB lets one process open a database file for writing. Every florwb process (CLI, app
worker, notebook) connects to the catalog only for the work at hand (ingesting, a bounded
read) and closes again, and retries while another process holds the lock, so concurrent
readers and ingesters take turns of milliseconds. Nothing holds the catalog while a result
is read, paged or streamed: reads read a snapshot (engine/store/snapshot.py), and a reader
waiting for the catalog may be served by another's snapshot instead (`served_by`).

Within one process the threads share one DuckDB instance of the catalog; `exclusive_here`
waits until none of them has a connection open (a snapshot is copied while nothing in this
process can checkpoint into the file).
"""

from __future__ import annotations

import logging
import random
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any

import duckdb

from florwb_engine import settings
from florwb_engine.errors import FlorwbError

DB_FILENAME = "florwb.duckdb"
LOCK_TIMEOUT_S = settings.LOCK_WAIT_S.default  # FLORWB_LOCK_WAIT_S overrides it
LOCK_NOTICE_AFTER_S = 1.0  # a wait longer than this is said once (logged at INFO level)

# Who waits on whose lock: said through logging, so the engine stays silent under a TUI
# unless its reader asks (the CLI sends this logger to stderr).
log = logging.getLogger(__name__)


# Who is told, while a connection waits on another process's lock, who holds it and for how
# long it has waited (the workbench shows it; the CLI has the log line). Per thread/task.
LockWaitListener = Callable[[str, float], None]
LockFreedListener = Callable[[float], None]
_lock_wait_listener: ContextVar[tuple[LockWaitListener, LockFreedListener | None] | None] = (
    ContextVar("florwb_lock_wait_listener", default=None)
)
LOCK_REPORT_EVERY_S = 0.5
# While a connection waits on another process, `served_by` may find that what it waits for
# was done by someone else meanwhile (a reader served by another reader's snapshot).
_served_by: ContextVar[Callable[[], object | None] | None] = ContextVar(
    "florwb_served_by", default=None
)
# The longest pause between two tries for the lock: holders keep it for milliseconds, so a
# waiter that slept longer would wait on a file that is free.
RETRY_DELAY_MAX_S = 0.05


@contextmanager
def lock_waits_reported(
    listener: LockWaitListener, freed: LockFreedListener | None = None
) -> Iterator[None]:
    """Connections opened inside this block call `listener(holder, waited_s)` every
    LOCK_REPORT_EVERY_S while they wait on another process's lock, and `freed(waited_s)`
    when they got the file after waiting on one at all (whoever shows a holder stops
    showing it; whoever measures waits adds it up)."""
    token = _lock_wait_listener.set((listener, freed))
    try:
        yield
    finally:
        _lock_wait_listener.reset(token)


class Served(Exception):  # noqa: N818 - not an error: the wait ended another way
    """Raised out of a waiting connection when `served_by`'s check found what it waited for;
    `value` is what the check returned."""

    def __init__(self, value: object) -> None:
        super().__init__("served while waiting for the catalog")
        self.value = value


@contextmanager
def served_by(check: Callable[[], object | None]) -> Iterator[None]:
    """Connections opened inside this block call `check()` between their tries while another
    process holds the catalog; the first value other than None ends the wait by raising
    `Served(value)` (its waiting time told to the `freed` listener like any wait)."""
    token = _served_by.set(check)
    try:
        yield
    finally:
        _served_by.reset(token)


class _Gate:
    """Per catalog file: connections of this process share it, `exclusive_here` has it
    alone. Shared entries nest in a thread (a session inside a session); one waiting
    exclusive entry holds back new shared entries of other threads, so it is not starved."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._shared = 0
        self._exclusive: int | None = None  # the thread that holds it alone
        self._waiting = 0
        self._mine = threading.local()

    @contextmanager
    def shared(self) -> Iterator[None]:
        me = threading.get_ident()
        depth = getattr(self._mine, "depth", 0)
        with self._cond:
            if self._exclusive != me and depth == 0:
                while self._exclusive is not None or self._waiting:
                    self._cond.wait()
            self._shared += 1
        self._mine.depth = depth + 1
        try:
            yield
        finally:
            self._mine.depth = depth
            with self._cond:
                self._shared -= 1
                self._cond.notify_all()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        me = threading.get_ident()
        if getattr(self._mine, "depth", 0):
            raise RuntimeError("exclusive use of the catalog inside a connection of this thread")
        with self._cond:
            self._waiting += 1
            try:
                while self._exclusive is not None or self._shared:
                    self._cond.wait()
            finally:
                self._waiting -= 1
            self._exclusive = me
        try:
            yield
        finally:
            with self._cond:
                self._exclusive = None
                self._cond.notify_all()


_GATES: dict[Path, _Gate] = {}
_GATES_LOCK = threading.Lock()


def _gate(path: Path) -> _Gate:
    key = path.absolute()
    with _GATES_LOCK:
        return _GATES.setdefault(key, _Gate())


@contextmanager
def exclusive_here(store: Path) -> Iterator[None]:
    """No other thread of this process has a connection to the catalog in `store` open
    inside this block (connections this thread opens inside it are allowed)."""
    with _gate(store / DB_FILENAME).exclusive():
        yield


def lock_timeout_s() -> float:
    """How long a connection waits for another process's lock before StoreBusy."""
    return settings.read(settings.LOCK_WAIT_S)


class StoreBusy(FlorwbError, RuntimeError):
    """The database stayed locked by another process for longer than we wait."""

    title = "The catalog is busy"


class StoreError(FlorwbError, RuntimeError):
    """An expected store failure with a one-line message (bad SQL, unknown name...)."""


class NoProject(StoreError):
    """Readers found no `.florwb/` folder: there is nothing to read, and they create none."""


def require_store(store: Path) -> None:
    """NoProject unless `store` (a `.florwb/` folder) exists: readers create none."""
    if not store.is_dir():
        raise NoProject(
            f"no florwb project in {store.parent} (no {store.name}/ folder; record a run "
            "with `import florwb as flor` first, or try `florwb demo`)"
        )


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
    timeout_s: float | None = None,
    read_only: bool = False,
    config: dict[str, Any] | None = None,
) -> Iterator[duckdb.DuckDBPyConnection]:
    """A connection to the catalog in `store` (a `.florwb/` folder that must exist: readers
    never create a project; recording makes the folder when it writes its journal)."""
    require_store(store)
    path = store / DB_FILENAME
    timeout_s = lock_timeout_s() if timeout_s is None else timeout_s
    with _gate(path).shared(), _connected(path, timeout_s, read_only, config) as con:
        yield con


@contextmanager
def _connected(
    path: Path, timeout_s: float, read_only: bool, config: dict[str, Any] | None
) -> Iterator[duckdb.DuckDBPyConnection]:
    listeners = _lock_wait_listener.get()
    listener, freed = listeners if listeners is not None else (None, None)
    check = _served_by.get()
    waited = False
    began = time.monotonic()
    reported_at = began
    deadline = time.monotonic() + timeout_s
    noticed_at = time.monotonic() + LOCK_NOTICE_AFTER_S
    said = False
    delay = 0.002
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
            waited = True
            served = check() if check is not None else None
            if served is not None:
                if freed is not None:
                    freed(time.monotonic() - began)
                raise Served(served) from None
            if time.monotonic() > deadline:
                raise StoreBusy(f"{path} stayed locked by {holder} for {timeout_s:.0f} s") from None
            if not said and time.monotonic() > noticed_at and "Conflicting lock" in str(exc):
                log.info("%s is locked by %s; retrying for up to %.0f s", path, holder, timeout_s)
                said = True
            now = time.monotonic()
            if listener is not None and "Conflicting lock" in str(exc):
                if now - reported_at >= LOCK_REPORT_EVERY_S:
                    reported_at = now
                    listener(holder, now - began)
            time.sleep(delay * (1 + random.random()))
            delay = min(delay * 2, RETRY_DELAY_MAX_S)
    if waited and freed is not None:
        freed(time.monotonic() - began)
    if waited and check is not None:  # served by whoever held the file until now
        served = check()
        if served is not None:
            con.close()
            raise Served(served)
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
