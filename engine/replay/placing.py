"""Placing the requested statements into the code each run executed (propagation).

One propagation per (code version, script), shared by every run of that version: a replay
over 100 runs of 3 versions propagates 3 times.
"""

from __future__ import annotations

from pathlib import Path

from florwb_engine import versions
from florwb_engine.project import store_dir
from florwb_engine.propagate import (
    Placement,
    PropagationError,
    PropagationResult,
    find_log_statements,
    propagate,
)
from florwb_engine.propagate.model import UNPLACED


class Placer:
    """Today's statements `names` placed into old versions of the project's scripts."""

    def __init__(self, project: Path, names: list[str]) -> None:
        self.project = project
        self.names = names
        self._done: dict[tuple[str, str, tuple[str, ...]], PropagationResult | str] = {}

    def place(
        self, version: str | None, script: str | None, names: list[str] | None = None
    ) -> PropagationResult | str:
        """The propagated code of `script` at `version` with `names` (all of the placer's by
        default), or why there is none. A run gets only the names it lacks: a name it has,
        recorded or from an earlier replay, is done for it and must not be recomputed."""
        if not version or not script:
            return "the run has no recorded code version"
        today = self.project / script
        if not today.is_file():
            return f"{script} is not in the working tree"
        wanted = tuple(self.names if names is None else names)
        key = (version, script, wanted)
        if key not in self._done:
            self._done[key] = self._propagate(version, script, today.read_text(), list(wanted))
        return self._done[key]

    def _propagate(
        self, version: str, script: str, new_source: str, names: list[str]
    ) -> PropagationResult | str:
        try:
            old = versions.read_file(store_dir(self.project), version, script)
        except versions.VersionError as exc:
            return f"code version unavailable: {exc}"
        if old is None:
            return f"{script} is not in the run's code version"
        try:
            available = {s.name for s in find_log_statements(new_source)}
        except PropagationError as exc:  # today's script is being edited: say so per run
            return f"today's {script}: {str(exc).removeprefix('source ')}"
        missing = [n for n in names if n not in available]
        if missing:
            hint = (
                ""
                if available
                else " (florwb finds log calls through the name the script imports florwb as, "
                "e.g. `import florwb as flor`)"
            )
            return f"no flor.log statement named {', '.join(missing)} in today's {script}{hint}"
        try:
            return propagate(new_source, old.decode("utf-8", errors="replace"), names)
        except PropagationError as exc:
            return str(exc)


def placed_statements(
    result: PropagationResult, wanted: list[str]
) -> tuple[dict[str, Placement], list[str]]:
    """The wanted statements that could be placed (inserted or already there), and one note
    per wanted statement that could not, with propagation's reason."""
    placed: dict[str, Placement] = {}
    notes: list[str] = []
    for placement in result.placements:
        if placement.name in wanted:
            if placement.status == UNPLACED:
                notes.append(f"{placement.name}: cannot place: {placement.reason}")
            else:
                placed[placement.name] = placement
    return placed, notes
