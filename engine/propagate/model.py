"""Result types of the propagation engine: plain frozen dataclasses with stable JSON.

They are the contract with the CLI (`florwb propagate --json`), the replay planner and the
workbench's log-statement diff, so they hold only built-in types and never libcst nodes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

STANDALONE = "standalone"
WRAPPED = "wrapped"

INSERTED = "inserted"
PRESENT = "present"
UNPLACED = "unplaced"

# how an inserted statement's place was found (Placement.anchor)
EXACT = "exact"  # next to a statement whose old counterpart is the same code
SIMILAR = "similar"  # next to a statement matched by similarity (it was edited)
POSITIONAL = "positional"  # same position in a block of the same length, nothing matched

MATRIX_PRESENT = "present"
MATRIX_PROPAGATABLE = "propagatable"
MATRIX_CANNOT_PLACE = "cannot place"


@dataclass(frozen=True)
class LogStatement:
    """One `flor.log("<name>", expr)` call with a literal name, as found in a source.

    `line` is the 1-based line where the log call starts. `form` is "standalone" when the
    call is a statement on its own, "wrapped" when its value is used by another statement
    (`x = flor.log("x", f())`). `loop_path` names the `flor.loop`s the statement runs in,
    outermost first: the loops around it in its function, and, for a module-level function
    whose every call site sits in the same loops, those loops too. `reads` holds the free
    names the logged expression reads (builtins included). `chain` describes the enclosing
    blocks, outermost first (e.g. ``("def train", "for epoch in ...", "with torch.no_grad()")``).
    `where_known` is False when the statement sits in a function whose call sites cannot be
    followed (never called, stored, or called from different loops): `loop_path` then holds
    only the loops visible around it.
    """

    name: str
    line: int
    form: str
    code: str
    loop_path: tuple[str, ...]
    reads: frozenset[str]
    chain: tuple[str, ...] = ()
    where_known: bool = True


@dataclass(frozen=True)
class Placement:
    """What happened to one log statement of the new source.

    `new_line` is its line in the new source. `old_line` is its line in the *output* code:
    where it was inserted or wrapped, or where it already was; None when unplaced.
    `status` is "inserted", "present" or "unplaced"; `reason` says why it was not placed
    (or notes something about a present statement), else None. `loop_path` is the loop path
    in the output code (the new source's, when unplaced). `anchor` says how sure an
    inserted (or wrapped) statement's place is: "exact" (next to a statement that is the
    same code in both versions), "similar" (next to one matched by similarity, i.e.
    edited) or "positional" (same position in a block of the same length where nothing
    matched; `reason` then says so); None for present and unplaced statements.
    """

    name: str
    new_line: int
    old_line: int | None
    status: str
    reason: str | None
    loop_path: tuple[str, ...]
    anchor: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "line_new": self.new_line,
            "line_old": self.old_line,
            "status": self.status,
            "reason": self.reason,
            "loop_path": list(self.loop_path),
            "anchor": self.anchor,
        }


@dataclass(frozen=True)
class PropagationResult:
    """The old source with the new statements placed in it, and one placement per statement.

    `code` equals the old source byte for byte except for inserted lines and wrapped calls.
    """

    code: str
    placements: tuple[Placement, ...]

    @property
    def inserted(self) -> tuple[Placement, ...]:
        return tuple(p for p in self.placements if p.status == INSERTED)

    @property
    def unplaced(self) -> tuple[Placement, ...]:
        return tuple(p for p in self.placements if p.status == UNPLACED)

    def to_json(self) -> dict[str, Any]:
        """`{"statements": [{"name", "line_new", "line_old", "status", "reason", "loop_path",
        "anchor"}]}`."""
        return {"statements": [p.to_json() for p in self.placements]}


@dataclass(frozen=True)
class MatrixCell:
    """One log statement in one version: "present", "propagatable" or "cannot place".

    `line` is the line in that version where it is, or where it would be inserted (the line
    it would occupy in the propagated code); None when it cannot be placed. `reason` says why.
    """

    status: str
    line: int | None = None
    reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status, "line": self.line, "reason": self.reason}


@dataclass(frozen=True)
class StatementMatrix:
    """The log-statement diff across versions: every name x every version.

    `names` lists the reference version's statements first (in source order), then names
    only other versions have. `versions` keeps the order of the `sources` mapping.
    """

    reference: str
    versions: tuple[str, ...]
    names: tuple[str, ...]
    cells: dict[tuple[str, str], MatrixCell] = field(default_factory=dict)

    def cell(self, name: str, version: str) -> MatrixCell:
        return self.cells[(name, version)]

    def row(self, name: str) -> dict[str, MatrixCell]:
        return {v: self.cells[(name, v)] for v in self.versions}

    def to_json(self) -> dict[str, Any]:
        return {
            "reference": self.reference,
            "versions": list(self.versions),
            "names": list(self.names),
            "cells": {
                name: {v: self.cells[(name, v)].to_json() for v in self.versions}
                for name in self.names
            },
        }
