"""Parsing a source for propagation: libcst for the tree, `ast` for validity and lines.

libcst keeps every byte (so the old version round-trips exactly); `ast` is the fast, strict
check that the code is Python and gives line numbers without libcst's slower position pass.
"""

from __future__ import annotations

import ast
import gc
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import libcst as cst
from libcst._nodes.internal import CodegenState

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


class _LineTrackingState(CodegenState):
    """libcst's code generator, also noting the line where chosen nodes start.

    One code generation pass gives both the code and the lines (libcst's PositionProvider
    does the same for every node and is several times slower).
    """

    def __init__(self, module: cst.Module, targets: set[int]) -> None:
        super().__init__(
            default_indent=module.default_indent, default_newline=module.default_newline
        )
        self._newline = "\r" if module.default_newline == "\r" else "\n"
        self.line = 1
        self.targets = targets
        self.lines: dict[int, int] = {}

    def add_token(self, value: str) -> None:
        self.tokens.append(value)
        if self._newline in value:
            self.line += value.count(self._newline)

    def before_codegen(self, node: cst.CSTNode) -> None:
        if id(node) in self.targets:
            self.lines[id(node)] = self.line


def code_and_lines(module: cst.Module, nodes: Iterable[cst.CSTNode]) -> tuple[str, dict[int, int]]:
    """The module's code and the 1-based start line of each given node (by id).

    Lines are exact for expressions; a statement's line is where its leading comments or
    blank lines start.
    """
    state = _LineTrackingState(module, {id(n) for n in nodes})
    module._codegen(state)
    return "".join(state.tokens), state.lines


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while building large trees.

    Parsing and matching allocate hundreds of thousands of long-lived objects, which makes
    the collector rescan the heap again and again (about a quarter of the run time).
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
