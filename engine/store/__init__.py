"""DuckDB catalog of runs, versions, logs and checkpoints (see read.Store)."""

from florwb_engine.store.db import StoreBusy, StoreError
from florwb_engine.store.ingest import IngestReport
from florwb_engine.store.read import Store

__all__ = ["IngestReport", "Store", "StoreBusy", "StoreError"]
