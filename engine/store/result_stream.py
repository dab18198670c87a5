"""A user's query result paged through without loading it (the workbench's Query tab).

The result streams from a read-only connection (engine/store/user_sql.py) that stays open
between pages, so page 500 costs what page 1 did. The connection is to a snapshot of the
catalog taken when the query started (engine/store/snapshot.py), not to the catalog: an
open result, however long it stays on screen, keeps nobody waiting, and every page comes
from the same state of the catalog. It lets go of the snapshot when the result is exhausted
or closed.

`interrupt()` stops a running query from any thread (DuckDB's connection interrupt); the
fetch or count then raises QueryStopped.
"""

from __future__ import annotations

import threading
from contextlib import ExitStack
from typing import TYPE_CHECKING, Any

import duckdb

from florwb_engine.store import repair
from florwb_engine.store.db import StoreError
from florwb_engine.store.repair import again_if_rebuilt
from florwb_engine.store.user_sql import (
    QueryStopped,
    check_read_only,
    count_result,
    failure_of,
    read_only_connection,
)

if TYPE_CHECKING:
    from florwb_engine.store.catalog import Store


class ResultStream:
    """The rows of the last statement of `sql`, `fetch(n)` at a time.

    `check_read_only` runs in the constructor (StoreError for writing SQL); nothing opens
    until `start()` or the first `fetch`. Thread-safe: one fetch at a time; `interrupt`
    from any thread."""

    def __init__(self, store: Store, sql: str) -> None:
        self.store = store
        self.statements = check_read_only(sql)
        self.columns: list[str] = []
        self.types: list[Any] = []  # DuckDBPyType of each column
        self.returns_rows = True
        self.fetched = 0  # rows handed out so far
        self.exhausted = False
        self._peeked: list[tuple] = []
        self._lock = threading.Lock()
        self._no_users = threading.Condition(self._lock)  # a count on a cursor has ended
        self._stack: ExitStack | None = None
        self._con: duckdb.DuckDBPyConnection | None = None
        self._cursor: duckdb.DuckDBPyConnection | None = None
        self._counting: duckdb.DuckDBPyConnection | None = None
        self._users = 0  # counts running on a cursor of the open connection
        self._closed = False
        self._stopped = False

    # --- opening and letting go -----------------------------------------------------------

    def start(self) -> None:
        """Run the statements (the last one's result pending); raises UserSqlError."""
        with self._lock:
            self._ensure_open()

    @again_if_rebuilt
    def _ensure_open(self) -> None:
        if self._closed:
            raise StoreError("the result was closed")
        if self._stopped:
            raise QueryStopped("stopped")
        if self._cursor is not None:
            return
        if self.fetched:  # a failed fetch let go: rows of another snapshot would not follow
            raise StoreError("the result was lost after an error; run the query again")
        stack = ExitStack()
        try:
            with repair.guarded(self.store.dir):
                con = stack.enter_context(read_only_connection(self.store))
                cursor = con.cursor()
                stack.callback(cursor.close)
                self._stack, self._con, self._cursor = stack, con, cursor
                for statement in self.statements[:-1]:
                    cursor.execute(statement).fetchall()
                cursor.execute(self.statements[-1])
        except duckdb.Error as exc:
            self._let_go()
            stack.close()
            raise self._failed(exc) from None
        except BaseException:
            self._let_go()
            stack.close()
            raise
        description = cursor.description
        self.returns_rows = description is not None
        if description is None:
            self.exhausted = True
            self._let_go()
            return
        self.columns = [d[0] for d in description]
        self.types = [d[1] for d in description]

    def _let_go(self) -> None:
        stack, self._stack, self._con, self._cursor = self._stack, None, None, None
        self._peeked = []
        if stack is not None:
            stack.close()

    def close(self, *, wait: bool = True) -> None:
        """Stop whatever runs and let go of the file; the stream cannot be used again.
        `wait=False` (an app closing) does not wait for a fetch still under way: the
        fetch lets go of the file when it returns."""
        self._closed = True
        self.interrupt()
        if not self._lock.acquire(blocking=wait):
            return
        try:
            while self._users:  # DuckDB refuses to close a connection a cursor is using
                if not wait:
                    return
                self._no_users.wait()
            self._let_go()
        finally:
            self._lock.release()

    @property
    def is_open(self) -> bool:
        return self._cursor is not None

    # --- reading --------------------------------------------------------------------------

    def fetch(self, n: int) -> list[tuple]:
        """The next `n` rows (fewer at the end); `exhausted` says whether more exist."""
        with self._lock:
            if self.exhausted:
                return []
            self._ensure_open()
            if self.exhausted or self._cursor is None:
                return []
            try:
                rows = self._peeked + self._cursor.fetchmany(n - len(self._peeked) + 1)
            except duckdb.Error as exc:
                self._let_go()
                raise self._failed(exc) from None
            self._peeked = rows[n:]
            rows = rows[:n]
            self.fetched += len(rows)
            if not self._peeked:
                self.exhausted = True
            if self.exhausted or self._closed:
                self._let_go()
            return rows

    def count(self) -> int | None:
        """How many rows the result has (as slow as the query); None when it has none."""
        with self._lock:
            if self.exhausted:
                return self.fetched if self.returns_rows else None
            con = self._con
            if con is not None:
                cursor = con.cursor()
                self._counting = cursor
                self._users += 1
        if con is None:  # not started: count on a connection of its own
            return count_result(self.store, ";\n".join(self.statements))
        try:
            relation = cursor.sql(self.statements[-1])
            if relation is None:
                return None
            return int(relation.aggregate("count(*)").fetchall()[0][0])
        except duckdb.Error as exc:
            raise self._failed(exc) from None
        finally:
            with self._lock:
                self._users -= 1
                self._counting = None
                cursor.close()
                self._no_users.notify_all()
                if self._closed and not self._users:
                    self._let_go()

    def interrupt(self) -> None:
        """Stop the running query and count (from any thread)."""
        self._stopped = True
        for cursor in (self._cursor, self._counting):
            if cursor is not None:
                cursor.interrupt()

    def _failed(self, exc: duckdb.Error) -> StoreError:
        if self._stopped:
            return QueryStopped("stopped")
        return failure_of(exc)
