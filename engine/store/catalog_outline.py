"""The tables and views of the catalog with their columns and types: the Query tab's schema
sidebar and the editor's completion read it (one read-only query, on a worker thread)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import duckdb

from florwb_engine.store.repair import again_if_rebuilt
from florwb_engine.store.user_sql import failure_of, read_only_connection

if TYPE_CHECKING:
    from florwb_engine.store.catalog import Store


@dataclass(frozen=True)
class Relation:
    """A table or view and its columns (name, DuckDB type), in column order."""

    name: str
    kind: str  # "view" or "table"
    columns: tuple[tuple[str, str], ...]


_OUTLINE_SQL = """
SELECT t.table_name, t.table_type, c.column_name, c.data_type
FROM information_schema.tables t
JOIN information_schema.columns c USING (table_catalog, table_schema, table_name)
WHERE t.table_schema = 'main'
ORDER BY t.table_type DESC, t.table_name, c.ordinal_position
"""


@again_if_rebuilt
def outline(store: Store) -> list[Relation]:
    """Views first (logs, iterations, loops: what users query), then tables, by name."""
    with read_only_connection(store) as con:
        try:
            rows = con.execute(_OUTLINE_SQL).fetchall()
        except duckdb.Error as exc:
            raise failure_of(exc) from None
    relations: dict[str, tuple[str, list[tuple[str, str]]]] = {}
    for table, kind, column, data_type in rows:
        entry = relations.setdefault(table, ("view" if kind == "VIEW" else "table", []))
        entry[1].append((column, data_type))
    return [Relation(name, kind, tuple(cols)) for name, (kind, cols) in relations.items()]
