"""Parsing a source for propagation: libcst for the tree, `ast` for validity and lines.

libcst keeps every byte (so the old version round-trips exactly); `ast` is the fast, strict
check that the code is Python and gives line numbers without libcst's slower position pass.
"""

from __future__ import annotations

import ast
import bisect
import gc
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import libcst as cst
from libcst._nodes.internal import CodegenState

from florwb_engine.propagate.errors import PropagationError


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


def _top_level_starts(module: cst.Module, tree: ast.Module) -> list[int] | None:
    """1-based first line (leading comments included) of each top-level statement."""
    starts: list[int] = []
    body = tree.body
    position = 0
    for statement in module.body:
        if position >= len(body):
            return None
        node = body[position]
        first = node.lineno
        leading = len(statement.leading_lines)
        decorators = getattr(statement, "decorators", ())
        decorator_list = getattr(node, "decorator_list", [])
        if decorators and decorator_list:
            first = decorator_list[0].lineno
            leading += len(decorators[0].leading_lines)
        starts.append(first - leading)
        position += len(statement.body) if type(statement) is cst.SimpleStatementLine else 1
    return starts


def render_edits(
    old_source: str,
    old_module: cst.Module,
    old_tree: ast.Module,
    new_module: cst.Module,
    inserted: dict[int, list[cst.BaseStatement]],
    targets: Iterable[cst.CSTNode],
    old_lines_of: dict[int, int],
) -> tuple[str, dict[int, int]] | None:
    """The edited module's code, re-generating only the top-level statements that changed.

    Unchanged top-level statements are copied from the old source; each changed one is
    generated anew, after checking that generating its *old* version reproduces exactly
    the old text at that place (so the splice points are right). Returns None when that
    check fails or the module is not a plain sequence of statements; callers then
    generate the whole module. `inserted` maps a top-level index to the statements
    inserted before it; `old_lines_of` gives the old line of target nodes that sit in
    unchanged statements, which are shifted by the lines added above them.
    """
    old_body, new_body = list(old_module.body), list(new_module.body)
    if not old_body or len(new_body) != len(old_body) + sum(len(v) for v in inserted.values()):
        return None
    if old_source.count("\r") != old_source.count("\r\n") or any(
        c in old_source for c in "\v\f\x1c\x1d\x1e\x85\u2028\u2029"
    ):
        return None  # line breaks that str.splitlines and Python's tokenizer disagree on
    starts = _top_level_starts(old_module, old_tree)
    if starts is None:
        return None
    lines = old_source.splitlines(keepends=True)
    end = len(lines) - len(old_module.footer)
    bounds = [*starts, end + 1]
    if bounds[0] != len(old_module.header) + 1 or any(a > b for a, b in zip(bounds, bounds[1:])):
        return None
    target_ids = {id(n) for n in targets}
    found: dict[int, int] = {}
    pieces: list[str] = ["".join(lines[: bounds[0] - 1])]
    line = bounds[0]  # output line where the next piece starts
    shift_at: list[tuple[int, int]] = []  # (old first line, shift) per unchanged statement

    def generate(node: cst.CSTNode) -> str:
        nonlocal line
        state = _LineTrackingState(new_module, target_ids)
        state.line = line
        node._codegen(state)
        found.update(state.lines)
        text = "".join(state.tokens)
        line = state.line
        return text

    def old_text(i: int) -> str:
        return "".join(lines[bounds[i] - 1 : bounds[i + 1] - 1])

    checked: set[int] = set()

    def check(i: int) -> bool:
        if i not in checked:
            if old_module.code_for_node(old_body[i]) != old_text(i):
                return False
            checked.add(i)
        return True

    k = 0
    for i in range(len(old_body) + 1):
        extra = inserted.get(i, [])
        if extra and not check(min(i, len(old_body) - 1)):
            return None
        for statement in extra:
            if new_body[k] is not statement:
                return None
            pieces.append(generate(statement))
            k += 1
        if i == len(old_body):
            break
        current = new_body[k]
        k += 1
        if current is old_body[i]:
            text = old_text(i)
            shift_at.append((bounds[i], line - bounds[i]))
            pieces.append(text)
            line += text.count("\n") if "\n" in text else 0
        else:
            if not check(i):
                return None
            pieces.append(generate(current))
    pieces.append("".join(lines[end:]))
    for node_id, old_line in old_lines_of.items():
        if node_id in found:
            continue
        j = bisect.bisect_right([s for s, _ in shift_at], old_line) - 1
        if j >= 0:
            found[node_id] = old_line + shift_at[j][1]
    return "".join(pieces), found
