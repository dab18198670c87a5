"""The log-statement diff across versions, for the workbench and `florwb` reports.

For every log statement name (the reference version's first, in source order, then names
only other versions have) and every version: is it there ("present", with its line), could
it be propagated into that version ("propagatable", with the line it would occupy), or not
("cannot place", with the reason). It is built from the same analysis as `propagate`, so
the matrix never promises a placement that replay would then refuse.
"""

from __future__ import annotations

from collections.abc import Mapping

from florwb_engine.propagate.errors import PropagationError
from florwb_engine.propagate.finder import Analysis, analyze
from florwb_engine.propagate.model import (
    INSERTED,
    MATRIX_CANNOT_PLACE,
    MATRIX_PRESENT,
    MATRIX_PROPAGATABLE,
    MatrixCell,
    StatementMatrix,
)
from florwb_engine.propagate.propagation import propagate
from florwb_engine.propagate.source import gc_paused


def statement_matrix(sources: Mapping[str, str], reference: str) -> StatementMatrix:
    """Which log statement exists, or could be placed, in which version.

    `sources` maps a version id to its source text; `reference` is the id of the version
    whose statements are the point of comparison (usually today's script). Statements
    missing from a version are propagated from the reference, or, for names the reference
    lacks, from the first version (in mapping order) that has them. A version that does not
    parse gets "cannot place" cells carrying the parse error; a reference that does not
    parse raises PropagationError; an unknown reference raises ValueError.
    """
    if reference not in sources:
        raise ValueError(f"reference version {reference!r} is not among the sources")
    with gc_paused():
        return _statement_matrix(sources, reference)


def _statement_matrix(sources: Mapping[str, str], reference: str) -> StatementMatrix:
    ref = analyze(sources[reference], f"version {reference}")
    analyses: dict[str, Analysis | PropagationError] = {}
    for version, source in sources.items():
        try:
            analyses[version] = analyze(source, f"version {version}")
        except PropagationError as exc:
            analyses[version] = exc

    names: list[str] = []
    origin: dict[str, str] = {}
    for site in ref.sites:
        if site.name not in origin:
            names.append(site.name)
            origin[site.name] = reference
    for version, analysis in analyses.items():
        if isinstance(analysis, PropagationError):
            continue
        for site in analysis.sites:
            if site.name not in origin:
                names.append(site.name)
                origin[site.name] = version

    cells: dict[tuple[str, str], MatrixCell] = {}
    for version, analysis in analyses.items():
        if isinstance(analysis, PropagationError):
            for name in names:
                cells[(name, version)] = MatrixCell(MATRIX_CANNOT_PLACE, None, str(analysis))
            continue
        lines: dict[str, int] = {}
        for site in analysis.sites:
            lines.setdefault(site.name, site.line)
        todo: dict[str, list[str]] = {}
        for name in names:
            if name in lines:
                cells[(name, version)] = MatrixCell(MATRIX_PRESENT, lines[name])
            else:
                todo.setdefault(origin[name], []).append(name)
        for source_version, wanted in todo.items():
            result = propagate(sources[source_version], sources[version], wanted)
            for name in wanted:
                placements = [p for p in result.placements if p.name == name]
                placed = [p for p in placements if p.status == INSERTED]
                if placed:
                    cells[(name, version)] = MatrixCell(MATRIX_PROPAGATABLE, placed[0].old_line)
                else:
                    reason = next((p.reason for p in placements if p.reason), None)
                    cells[(name, version)] = MatrixCell(MATRIX_CANNOT_PLACE, None, reason)
    return StatementMatrix(reference, tuple(sources), tuple(names), cells)
