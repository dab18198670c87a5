"""Which log statements the working-tree script has that its newest recorded version lacks.

These are the statements a user just added in hindsight: the ones a replay would fill in
for past runs. A script that does not parse (the user is mid-edit) is reported, not raised.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from florwb_engine import project as projects


@dataclass(frozen=True)
class PendingStatements:
    """`new`: names in the working tree missing from `version`'s copy of `script`."""

    script: str
    version: str | None
    new: tuple[str, ...]
    working: tuple[str, ...] = ()
    error: str | None = None
    lines: dict[str, int] = field(default_factory=dict, compare=False)


def pending_statements(project: Path, script: str, version: str | None) -> PendingStatements:
    """Compare `project/script` on disk with the same file in recorded `version`."""
    # libcst is slow to import: load it here, in the caller's worker thread, not at startup
    from florwb_engine.propagate import PropagationError, find_log_statements

    path = project / script
    try:
        current = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return PendingStatements(script, version, (), error=f"cannot read {script}: {exc}")
    try:
        statements = find_log_statements(current)
    except PropagationError as exc:
        return PendingStatements(script, version, (), error=str(exc))
    names = tuple(dict.fromkeys(s.name for s in statements))
    lines: dict[str, int] = {}
    for s in statements:
        lines.setdefault(s.name, s.line)
    recorded: set[str] = set()
    if version:
        old = recorded_source(project, version, script)
        if old is not None:
            try:
                recorded = {s.name for s in find_log_statements(old)}
            except PropagationError:
                recorded = set()
    new = tuple(n for n in names if n not in recorded)
    return PendingStatements(script, version, new, names, None, lines)


def recorded_source(project: Path, version: str, script: str) -> str | None:
    """The text of `script` as `version` recorded it; None when it is not in the snapshot."""
    from florwb_engine import versions

    try:
        data = versions.read_file(projects.store_dir(project), version, script)
    except versions.VersionError:
        return None
    return data.decode("utf-8", errors="replace") if data is not None else None
