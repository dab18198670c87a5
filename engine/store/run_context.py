"""The `run_context` table: where each run ran and what it needed (see record/context.py).

One row per recorded run, typed columns so plain SQL can ask "which runs used more than
10 GB of GPU memory" or "energy per run of this version":
`SELECT run_id, energy_j FROM runs JOIN run_context USING (run_id)`. The start event gives
what survives a kill (CPU, GPUs present); the end event replaces the row with everything
measured at the end. A figure the machine did not expose stays NULL.
"""

from __future__ import annotations

import json
from typing import Any

import duckdb

COLUMNS = {
    "run_id": "VARCHAR PRIMARY KEY",
    "device_kind": "VARCHAR",  # 'cpu' or 'cuda' (the script initialised CUDA); NULL: unknown
    "device_name": "VARCHAR",  # the GPU's name when device_kind = 'cuda', else the CPU's
    "cpu_name": "VARCHAR",
    "cpu_count": "INTEGER",
    "gpu_name": "VARCHAR",
    "gpu_count": "INTEGER",
    "torch_version": "VARCHAR",  # only when the script imported torch
    "cuda_version": "VARCHAR",  # the CUDA torch was built with
    "peak_rss_bytes": "BIGINT",
    "gpu_peak_bytes": "BIGINT[]",  # torch.cuda.max_memory_allocated per device
    "energy_j": "DOUBLE",  # energy_cpu_j + energy_gpu_j, of those measured
    "energy_cpu_j": "DOUBLE",  # Linux RAPL packages
    "energy_gpu_j": "DOUBLE",  # NVML
    "error": "VARCHAR",  # why the end-of-run readings are missing
    "energy_note": "VARCHAR",  # why energy_j is NULL: which counters were not readable
    # thread settings (record/context.py): torch's counts, the OMP/MKL environment as set
    "torch_threads": "INTEGER",
    "torch_interop_threads": "INTEGER",
    "omp_num_threads": "VARCHAR",
    "mkl_num_threads": "VARCHAR",
}
# columns added after the table first shipped: ALTERed into older stores
ADDED = (
    "torch_threads",
    "torch_interop_threads",
    "omp_num_threads",
    "mkl_num_threads",
    "energy_note",
)
TABLE = ", ".join(f"{name} {kind}" for name, kind in COLUMNS.items())
_FIELDS = [c for c in COLUMNS if c != "run_id"]


def create(con: duckdb.DuckDBPyConnection) -> None:
    """Additive migration: stores written before run contexts existed get the table."""
    con.execute(f"CREATE TABLE IF NOT EXISTS run_context ({TABLE})")
    for name in ADDED:
        con.execute(f"ALTER TABLE run_context ADD COLUMN IF NOT EXISTS {name} {COLUMNS[name]}")


def apply(con: duckdb.DuckDBPyConnection, run_id: str | None, context: Any) -> None:
    """Store a start or end event's `context`; an end event that only says why its
    readings failed keeps the start's figures and adds the reason."""
    if isinstance(context, tuple) and len(context) == 2 and context[0] == "json":
        context = json.loads(context[1])  # the journal had to encode the event as text
    if not isinstance(context, dict) or not context:
        return
    if set(context) == {"error"}:
        con.execute(
            "INSERT INTO run_context (run_id, error) VALUES (?, ?) "
            "ON CONFLICT (run_id) DO UPDATE SET error = excluded.error",
            [run_id, str(context["error"])],
        )
        return
    marks = ", ".join("?" for _ in COLUMNS)
    con.execute(
        f"INSERT OR REPLACE INTO run_context ({', '.join(COLUMNS)}) VALUES ({marks})",
        [run_id, *(_value(context.get(f)) for f in _FIELDS)],
    )


def _value(v: Any) -> Any:
    if isinstance(v, (list, tuple)):
        return [int(x) for x in v]
    return v


def contexts(con: duckdb.DuckDBPyConnection) -> dict[str, dict[str, Any]]:
    """run_id -> its context (column -> value) for every run that has one."""
    rows = con.execute(f"SELECT {', '.join(COLUMNS)} FROM run_context").fetchall()
    return {r[0]: dict(zip(_FIELDS, r[1:])) for r in rows}


def context_of(con: duckdb.DuckDBPyConnection, run_id: str) -> dict[str, Any] | None:
    """One run's context (column -> value), None when it has none."""
    rows = con.execute(
        f"SELECT {', '.join(_FIELDS)} FROM run_context WHERE run_id = ?", [run_id]
    ).fetchall()
    return dict(zip(_FIELDS, rows[0])) if rows else None
