"""The `run_lineage` table read back: which runs a run started from (record/lineage.py).

Shown where runs are listed (`florwb runs`, the run detail, the compare view) and handed to
a replay of the run, which loads the same checkpoints."""

from __future__ import annotations

import duckdb

FIELDS = ("name", "call", "parent", "checkpoint", "kind", "loop", "iteration", "path")


def lineage_of(con: duckdb.DuckDBPyConnection, run_id: str) -> list[dict]:
    """The loads `run_id` made, in call order per name (`name` None: flordb's omitted name)."""
    rows = con.execute(
        f"SELECT {', '.join(FIELDS)} FROM run_lineage WHERE run_id = ? ORDER BY name, call",
        [run_id],
    ).fetchall()
    return [{**dict(zip(FIELDS, row, strict=True)), "name": row[0] or None} for row in rows]


def parents(con: duckdb.DuckDBPyConnection) -> dict[str, list[str]]:
    """Each run that started from another run's checkpoint -> those runs, first loaded first."""
    found: dict[str, list[str]] = {}
    for run_id, parent in con.execute(
        "SELECT run_id, parent FROM run_lineage ORDER BY run_id, call, name"
    ).fetchall():
        listed = found.setdefault(run_id, [])
        if parent not in listed:
            listed.append(parent)
    return found


def describe(entry: dict) -> str:
    """One load as a phrase: `ckpt.pth of 20261121-143501-a1b2c3 (epoch 2)`."""
    where = f" ({entry['loop']} {entry['iteration']})" if entry.get("loop") is not None else ""
    return f"{entry['checkpoint']} of {entry['parent']}{where}"
