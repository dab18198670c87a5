"""Writing a user's query result to a file (the Query tab's ^e): CSV, Parquet or JSON.

`export_rows` writes rows already read (the result on the workbench's screen, page by page)
through an in-memory DuckDB, so the file holds the rows that were shown even when the
catalog has changed since (a run still recording, a replay landing); `export_result` runs
the SQL itself (a result nobody has read yet).

The user's SQL passes the same read-only check as every query (so a COPY inside it is still
refused); florwb wraps its last statement in its own `COPY (...) TO path`, on a read-only
connection whose file access is limited to that one path (DuckDB's `allowed_paths`, then
external access off and the configuration locked). So the export writes where the user
asked and nowhere else, and reads no other file.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb

from florwb_engine.store.db import StoreError
from florwb_engine.store.schema import literal, quote
from florwb_engine.store.user_sql import check_read_only, failure_of, read_only_connection

if TYPE_CHECKING:
    from florwb_engine.store.catalog import Store

# Extension -> DuckDB COPY options.
FORMATS = {
    ".csv": "(FORMAT csv, HEADER true)",
    ".parquet": "(FORMAT parquet)",
    ".json": "(FORMAT json, ARRAY true)",
    ".jsonl": "(FORMAT json)",
    ".ndjson": "(FORMAT json)",
}


def export_target(path: Path) -> tuple[Path, str]:
    """The absolute path and COPY options, or StoreError saying what is wrong with it."""
    options = FORMATS.get(path.suffix.lower())
    if options is None:
        raise StoreError(
            f"cannot tell the format of {path.name!r}: end it in .csv, .parquet, .json or .jsonl"
        )
    path = path.expanduser().resolve()
    if path.exists():
        raise StoreError(f"{path} exists; choose another name")
    if not path.parent.is_dir():
        raise StoreError(f"no folder {path.parent}")
    return path, options


def export_result(store: Store, sql: str, path: Path) -> int:
    """Write the last statement's result of `sql` to `path` (format from its extension);
    the number of rows written."""
    statements = check_read_only(sql)
    target, options = export_target(path)
    last = statements[-1].rstrip().rstrip(";")
    with read_only_connection(store, writable=target) as con:
        try:
            for statement in statements[:-1]:
                con.execute(statement).fetchall()
            row = con.execute(f"COPY (\n{last}\n) TO {literal(str(target))} {options}").fetchall()
        except duckdb.Error as exc:
            target.unlink(missing_ok=True)  # a half-written file is not a result
            raise failure_of(exc) from None
    return int(row[0][0]) if row and row[0] else 0


def export_rows(
    columns: list[str], types: list[Any], pages: Iterable[list[tuple]], path: Path
) -> int:
    """Write `pages` of rows of a result with these columns and DuckDB types to `path`
    (format from its extension); the number of rows written."""
    import pandas as pd  # only an export needs it; the workbench starts without it

    target, options = export_target(path)
    inner = [f"c{i}" for i in range(len(columns))]  # a result may repeat a column name
    body = ", ".join(f"{name} {kind}" for name, kind in zip(inner, types))
    written = 0
    con = duckdb.connect(config={"threads": 1})
    try:
        con.execute(f"CREATE TABLE result ({body})")
        for page in pages:
            if not page:
                continue
            frame = pd.DataFrame.from_records(page, columns=inner)  # noqa: F841 (read by SQL)
            con.execute("INSERT INTO result SELECT * FROM frame")
            written += len(page)
        named = ", ".join(f"{i} AS {quote(c)}" for i, c in zip(inner, columns))
        con.execute(f"COPY (SELECT {named} FROM result) TO {literal(str(target))} {options}")
    except duckdb.Error as exc:
        target.unlink(missing_ok=True)  # a half-written file is not a result
        raise StoreError(f"cannot write {target}: {str(exc).splitlines()[0]}") from None
    finally:
        con.close()
    return written
