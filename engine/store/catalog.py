"""The catalog of one project: `Store` opens it, ingests journals, and answers reads.

Every session first ingests pending journals, inside the same short connection, so results
include runs that are still going or were just killed. Reads shaped for a screen live in
queries.py, the run listing in runs.py, the flordb-style dataframe in pivot.py.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb

from florwb_engine import project as projects
from florwb_engine.store.db import StoreError, connect
from florwb_engine.store.ingest import IngestReport, ingest_pending
from florwb_engine.store.pivot import logged_names, pivot
from florwb_engine.store.replays import clear_abandoned
from florwb_engine.store.runs import RunRow, list_runs
from florwb_engine.store.schema import ensure_schema

if TYPE_CHECKING:  # pandas loads only when a DataFrame is made: it slows every start-up
    import pandas as pd

_INGEST_LOCK = threading.Lock()
READ_ONLY_STATEMENTS = {"SELECT", "EXPLAIN", "PRAGMA"}


class Store:
    """The catalog of one project (`<project>/.florwb/florwb.duckdb`)."""

    def __init__(self, project: Path | str) -> None:
        self.project = Path(project)
        self.dir = projects.store_dir(self.project)
        self.last_ingest = IngestReport()

    @contextmanager
    def session(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A connection with the schema in place and every journal ingested; what killed
        replays left is removed first, so no reader sees their partial results."""
        with connect(self.dir) as con:
            with _INGEST_LOCK:  # threads of one process share one DuckDB instance
                ensure_schema(con)
                clear_abandoned(con, self.project)
                self.last_ingest = ingest_pending(con, projects.journal_dir(self.project))
            yield con

    def ingest(self) -> IngestReport:
        with self.session():
            return self.last_ingest

    def query(self, sql: str) -> pd.DataFrame:
        """Run read-only SQL; bad SQL raises StoreError with DuckDB's one-line reason."""
        check_read_only(sql)
        with self.session() as con:
            try:
                result = con.execute(sql)
                if result.description:
                    return result.df()
                import pandas as pd

                return pd.DataFrame()
            except duckdb.Error as exc:
                raise StoreError(first_line(exc)) from None

    def run_rows(self) -> list[RunRow]:
        """Every run, oldest first, as the CLI and the workbench list them."""
        with self.session() as con:
            return list_runs(con)

    def runs(self) -> list[dict]:
        """Every run as `florwb runs --json` prints it."""
        return [run.to_json() for run in self.run_rows()]

    def names(self) -> list[str]:
        with self.session() as con:
            return logged_names(con)

    def dataframe(self, *names: str) -> pd.DataFrame:
        """One row per run x loop coordinates, one column per name (logs or args)."""
        if not names:
            raise StoreError("dataframe needs at least one log name")
        with self.session() as con:
            return pivot(con, list(dict.fromkeys(names)))


def check_read_only(sql: str) -> list[str]:
    """The statements of `sql`, or StoreError for empty, unparsable or writing SQL."""
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise StoreError(first_line(exc)) from None
    if not statements:
        raise StoreError("empty query")
    for statement in statements:
        kind = statement.type.name
        if kind not in READ_ONLY_STATEMENTS:
            raise StoreError(f"queries are read-only: {kind} statements are not allowed")
    return [s.query for s in statements]


def first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
