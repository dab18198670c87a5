"""Parsing a source for propagation: libcst for the tree, `ast` for validity and lines.

libcst keeps every byte (so the old version round-trips exactly); `ast` is the fast, strict
check that the code is Python and gives line numbers without libcst's slower position pass.
"""

from __future__ import annotations

import ast

import libcst as cst

from engine.propagate.errors import PropagationError


def parse_source(source: str) -> tuple[cst.Module, ast.Module]:
    """Parse with both parsers; a failure is a one-line PropagationError naming the line.

    The message reads "does not parse: line N: reason"; callers prefix what the source is.
    """
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        line = exc.lineno if exc.lineno is not None else "?"
        raise PropagationError(f"does not parse: line {line}: {exc.msg}") from None
    except ValueError as exc:  # e.g. null bytes
        raise PropagationError(f"does not parse: {exc}") from None
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError as exc:
        message = str(exc.message).splitlines()[0] if exc.message else "syntax error"
        raise PropagationError(f"does not parse: line {exc.raw_line}: {message}") from None
    return module, tree
