"""DuckDB catalog of runs, versions, logs and checkpoints (see read.Store)."""

from engine.store.db import StoreBusy, StoreError
from engine.store.ingest import IngestReport
from engine.store.read import Store

__all__ = ["IngestReport", "Store", "StoreBusy", "StoreError"]
