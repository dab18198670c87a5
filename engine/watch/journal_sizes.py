"""Tell cheaply whether any run journal appeared or grew, without opening the database.

A run recording in another terminal appends to its journal every ~50 ms. Polling the
catalog every second would take DuckDB's write lock each time (ingestion writes), so the
workbench first compares the journal folder's names and sizes, as Toolong tails a file:
only when something is new does it read the store.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from florwb_engine import project as projects
from florwb_engine.journal import SUFFIX


class JournalSizes:
    """The names and sizes of the journal folder at the last look; `changed()` compares.

    It reads no journal content (the store's ingestion does that): it only detects change."""

    def __init__(self, project: Path) -> None:
        self.folder = projects.journal_dir(project)
        self._seen: dict[str, int] | None = None

    def changed(self) -> bool:
        """True when a journal appeared or grew since the last call (the first call: True)."""
        return self.changes() != set()

    def changes(self) -> set[str] | None:
        """The journals (file names) that appeared, grew or went since the last call; None
        on the first call (everything is new)."""
        sizes: dict[str, int] = {}
        with contextlib.suppress(FileNotFoundError), os.scandir(self.folder) as entries:
            for entry in entries:
                if entry.name.endswith(SUFFIX):
                    with contextlib.suppress(FileNotFoundError):  # a journal removed meanwhile
                        sizes[entry.name] = entry.stat().st_size
        seen, self._seen = self._seen, sizes
        if seen is None:
            return None
        return {name for name in sizes.keys() | seen.keys() if sizes.get(name) != seen.get(name)}
