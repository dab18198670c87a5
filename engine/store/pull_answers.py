"""What another host said about the writers of the rank journals pulled from it: the
readers' side of `florwb pull` (store/journal_pull.py writes the answers).

A rank journal recorded on another host has no writer here whose lock or process could
say whether it still runs; the pull asked that host and kept its answer beside the journal
(`<journal>.pulled`: host, writer "live" or "gone", the journal's size then). Readers ask
only this module, so reading a run's status never imports the copying machinery.
"""

from __future__ import annotations

import json
from pathlib import Path

PULLED = ".pulled"


def answer_path(journal: Path) -> Path:
    """Where the answer about `journal`'s writer is kept."""
    return journal.with_name(journal.name + PULLED)


def writer_gone(journal: Path, host: str | None) -> bool:
    """A pulled rank journal (recorded on `host`) whose writer was gone when that host was
    last asked, the journal here being the size it was then: it holds all it ever will."""
    try:
        answer = json.loads(answer_path(journal).read_text())
        size = journal.stat().st_size
    except (OSError, ValueError):
        return False
    return (
        isinstance(answer, dict)
        and host is not None
        and answer.get("host") == host
        and answer.get("writer") == "gone"
        and answer.get("size") == size
    )
