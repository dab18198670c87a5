"""florwb: hindsight logging for model training.

`import florwb as flor` is a drop-in for `import flordb as flor`. Importing this package
stays cheap (no DuckDB, pandas, torch or textual): those load only when a call needs them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from florwb_engine.record import arg, checkpointing, commit, log, loop, set_checkpoint_budget

__all__ = [
    "arg",
    "checkpointing",
    "commit",
    "dataframe",
    "log",
    "loop",
    "query",
    "set_checkpoint_budget",
]
__version__ = "0.1.0"


def _store() -> Any:
    from florwb_engine import project
    from florwb_engine.record import runtime
    from florwb_engine.store import Store

    run = runtime.current()
    if run is not None:
        run.try_flush()  # a script reading its own logs sees them
        return Store(run.project)
    return Store(project.find_project())


def _again_if_rebuilt(read: Callable[[], Any]) -> Any:
    """A read that found the catalog damaged moved it aside; the second one rebuilds it
    from the journals (engine/store/repair.py)."""
    from florwb_engine.store.repair import CatalogRebuilt

    try:
        return read()
    except CatalogRebuilt:
        return read()


def dataframe(*names: str) -> Any:
    """pandas DataFrame: one row per run x loop coordinates, one column per name."""
    return _again_if_rebuilt(lambda: _store().dataframe(*names))


def query(sql: str) -> Any:
    """pandas DataFrame with the result of read-only SQL over the project's catalog."""
    return _again_if_rebuilt(lambda: _store().query(sql))
