"""DuckDB catalog of runs, versions, logs and checkpoints.

catalog.Store opens a project's catalog, ingests journals and answers SQL and dataframes;
runs.list_runs is the one run listing; queries.py holds the workbench's other reads.
"""

from florwb_engine.store.catalog import Store
from florwb_engine.store.db import StoreBusy, StoreError
from florwb_engine.store.ingest import IngestReport
from florwb_engine.store.runs import RunRow, RunStatus

__all__ = ["IngestReport", "RunRow", "RunStatus", "Store", "StoreBusy", "StoreError"]
