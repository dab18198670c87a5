"""The `run_context` table: where each run ran and what it needed (see record/context.py).

One row per process of a recorded run, typed columns so plain SQL can ask "which runs used
more than 10 GB of GPU memory" or "energy per run of this version":
`SELECT run_id, sum(energy_j) FROM runs JOIN run_context USING (run_id) GROUP BY run_id`.
`rank` says whose figures they are: each rank of a torchrun / mp.spawn launch has its own
row (its memory, its GPU), a run of one process has rank 0. The start event gives what
survives a kill (CPU, GPUs present); the end event replaces the row with everything
measured at the end. A figure the machine did not expose stays NULL.
"""

from __future__ import annotations

import json
from typing import Any

import duckdb

COLUMNS = {
    "run_id": "VARCHAR",
    "rank": "INTEGER DEFAULT 0",  # the rank of a multi-process run; 0 for one process
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
TABLE = ", ".join(f"{name} {kind}" for name, kind in COLUMNS.items()) + (
    ", PRIMARY KEY (run_id, rank)"
)
_FIELDS = [c for c in COLUMNS if c not in ("run_id", "rank")]
# One row per run, its lowest rank's, to join with `runs` (USING (run_id)) without a row per
# rank of a multi-process run.
ONE_PER_RUN = (
    "(SELECT * EXCLUDE (rank) FROM run_context "
    "QUALIFY row_number() OVER (PARTITION BY run_id ORDER BY rank) = 1)"
)


def create(con: duckdb.DuckDBPyConnection) -> None:
    """Additive migration: stores written before run contexts existed get the table; a
    table of one row per run (before ranks had their own) becomes rank 0's rows."""
    con.execute(f"CREATE TABLE IF NOT EXISTS run_context ({TABLE})")
    for name in ADDED:
        con.execute(f"ALTER TABLE run_context ADD COLUMN IF NOT EXISTS {name} {COLUMNS[name]}")
    ranked = con.execute(
        "SELECT 1 FROM information_schema.columns WHERE table_name = 'run_context' "
        "AND column_name = 'rank'"
    ).fetchall()
    if not ranked:
        kept = ", ".join(c for c in COLUMNS if c != "rank")
        con.execute("ALTER TABLE run_context RENAME TO run_context_unranked")
        con.execute(f"CREATE TABLE run_context ({TABLE})")
        con.execute(
            f"INSERT INTO run_context ({kept}, rank) SELECT {kept}, 0 FROM run_context_unranked"
        )
        con.execute("DROP TABLE run_context_unranked")


def apply(
    con: duckdb.DuckDBPyConnection, run_id: str | None, context: Any, rank: int | None = None
) -> None:
    """Store a start or end event's `context` as `rank`'s (0: a run of one process); an end
    event that only says why its readings failed keeps the start's figures and adds the
    reason."""
    if isinstance(context, tuple) and len(context) == 2 and context[0] == "json":
        context = json.loads(context[1])  # the journal had to encode the event as text
    if not isinstance(context, dict) or not context:
        return
    rank = rank or 0
    if set(context) == {"error"}:
        con.execute(
            "INSERT INTO run_context (run_id, rank, error) VALUES (?, ?, ?) "
            "ON CONFLICT (run_id, rank) DO UPDATE SET error = excluded.error",
            [run_id, rank, str(context["error"])],
        )
        return
    marks = ", ".join("?" for _ in COLUMNS)
    con.execute(
        f"INSERT OR REPLACE INTO run_context ({', '.join(COLUMNS)}) VALUES ({marks})",
        [run_id, rank, *(_value(context.get(f)) for f in _FIELDS)],
    )


def _value(v: Any) -> Any:
    if isinstance(v, (list, tuple)):
        return [int(x) for x in v]
    return v


def contexts(con: duckdb.DuckDBPyConnection) -> dict[str, dict[str, Any]]:
    """run_id -> its context (column -> value) for every run that has one: the lowest
    rank's (rank 0's) for a multi-process run, whose every rank is in `rank_contexts`."""
    rows = con.execute(
        f"SELECT run_id, {', '.join(_FIELDS)} FROM run_context ORDER BY run_id, rank DESC"
    ).fetchall()
    return {r[0]: dict(zip(_FIELDS, r[1:])) for r in rows}


def context_of(con: duckdb.DuckDBPyConnection, run_id: str) -> dict[str, Any] | None:
    """One run's context (column -> value; its lowest rank's), None when it has none."""
    rows = con.execute(
        f"SELECT {', '.join(_FIELDS)} FROM run_context WHERE run_id = ? ORDER BY rank LIMIT 1",
        [run_id],
    ).fetchall()
    return dict(zip(_FIELDS, rows[0])) if rows else None


def rank_contexts(con: duckdb.DuckDBPyConnection, run_id: str) -> dict[int, dict[str, Any]]:
    """rank -> that rank's context, for every rank of the run that has one."""
    rows = con.execute(
        f"SELECT rank, {', '.join(_FIELDS)} FROM run_context WHERE run_id = ? ORDER BY rank",
        [run_id],
    ).fetchall()
    return {int(r[0]): dict(zip(_FIELDS, r[1:])) for r in rows}
