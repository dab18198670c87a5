"""A SQL condition the user typed (`florwb replay --where`, the workbench's run filter),
evaluated where it cannot read, write or install anything.

The condition is user SQL like `florwb query`'s, but it is asked while the catalog is open
read-write (planning reads the same session), where any expression could call
`read_text('/etc/passwd')`, `glob('/')` or `read_csv('https://...')` (which installs and
loads the httpfs extension into ~/.duckdb). So the rows it filters are copied into a fresh
in-memory DuckDB with external access, extension autoload/autoinstall off and the
configuration locked, and only the ids of the rows it keeps come back. Only the table the
condition is documented to see (`runs`, args as columns) is there; a run table is small.
"""

from __future__ import annotations

from collections.abc import Sequence

import duckdb

from florwb_engine.store.schema import quote

LOCKDOWN = (
    "SET enable_external_access = false",
    "SET autoinstall_known_extensions = false",
    "SET autoload_known_extensions = false",
    "SET allow_community_extensions = false",
    "SET lock_configuration = true",
)


def matching_keys(
    con: duckdb.DuckDBPyConnection, rows_sql: str, key: str, condition: str, table: str
) -> Sequence[object]:
    """The `key` values of the rows of `rows_sql` (run on `con`) for which `condition`
    holds, the condition seeing those rows as the table `table`. duckdb.Error as DuckDB
    raises it (a bad condition, or one that tried to reach outside)."""
    result = con.execute(rows_sql)
    description = result.description or []
    frame = result.df()
    sandbox = duckdb.connect(":memory:")
    try:
        sandbox.register("copied_rows", frame)
        columns = ", ".join(
            f"CAST({quote(name)} AS {kind}) AS {quote(name)}" for name, kind, *_ in description
        )
        sandbox.execute(f"CREATE TABLE {quote(table)} AS SELECT {columns} FROM copied_rows")
        sandbox.unregister("copied_rows")
        for setting in LOCKDOWN:
            sandbox.execute(setting)
        found = sandbox.execute(
            f"SELECT {quote(key)} FROM {quote(table)} WHERE ({condition})"
        ).fetchall()
    finally:
        sandbox.close()
    return [row[0] for row in found]
