"""Walking libcst trees without their trivia: the children that carry meaning.

Every analysis of a script (propagation's matching tree, what a statement changes, which
names a loop carries) walks libcst nodes the same way: fields in source order, whitespace,
commas, parentheses and operators left out. Per-type results are cached: libcst's node
classes are ABC-based and `isinstance` against them is slow.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator, Mapping
from typing import Any

import libcst as cst
from libcst.metadata import CodeRange, MetadataWrapper, PositionProvider

TRIVIA_TYPES = (
    cst.BaseParenthesizableWhitespace,
    cst.Comment,
    cst.EmptyLine,
    cst.TrailingWhitespace,
    cst.Newline,
    cst.Comma,
    cst.Semicolon,
    cst.LeftParen,
    cst.RightParen,
    cst.LeftSquareBracket,
    cst.RightSquareBracket,
    cst.LeftCurlyBrace,
    cst.RightCurlyBrace,
    cst.Colon,
    cst.AssignEqual,
    cst.Dot,
    cst.BaseBinaryOp,
    cst.BaseBooleanOp,
    cst.BaseCompOp,
    cst.BaseUnaryOp,
    cst.BaseAugOp,
    cst.Asynchronous,
)

SKIP_FIELDS = frozenset(
    {
        "lpar",
        "rpar",
        "leading_lines",
        "lines_after_decorators",
        "trailing_whitespace",
        "header",
        "footer",
        "comma",
        "semicolon",
        "newline",
        "lbracket",
        "rbracket",
        "lbrace",
        "rbrace",
        "colon",
        "first_colon",
        "second_colon",
        "equal",
        "dot",
        "operator",
        "relative",
        "asynchronous",
        "indent",
    }
)

# Fields in source order where libcst's dataclass order differs (matters for positions).
FIELD_ORDER: dict[type, tuple[str, ...]] = {
    cst.FunctionDef: ("decorators", "name", "type_parameters", "params", "returns", "body"),
    cst.ClassDef: ("decorators", "name", "type_parameters", "bases", "keywords", "body"),
    cst.ExceptHandler: ("type", "name", "body"),
    cst.IfExp: ("body", "test", "orelse"),
}

FIELDS_CACHE: dict[type, tuple[str, ...]] = {}

# Nodes that open a scope of their own: names bound inside are not the enclosing code's.
NESTED_SCOPES = (
    cst.FunctionDef,
    cst.ClassDef,
    cst.Lambda,
    cst.ListComp,
    cst.SetComp,
    cst.DictComp,
    cst.GeneratorExp,
)


def fields_of(tp: type) -> tuple[str, ...]:
    names = FIELDS_CACHE.get(tp)
    if names is None:
        if tp in FIELD_ORDER:
            names = FIELD_ORDER[tp]
        else:
            names = tuple(
                f.name
                for f in dataclasses.fields(tp)
                if f.name not in SKIP_FIELDS and not f.name.startswith("whitespace")
            )
        FIELDS_CACHE[tp] = names
    return names


TRIVIA, NODE, OTHER = 0, 1, 2
KINDS: dict[type, int] = {}


def kind_of(tp: type) -> int:
    """Trivia / kept node / not a node, cached per type (ABC isinstance checks are slow)."""
    kind = KINDS.get(tp)
    if kind is None:
        if issubclass(tp, TRIVIA_TYPES):
            kind = TRIVIA
        elif issubclass(tp, cst.CSTNode):
            kind = NODE
        else:
            kind = OTHER
        KINDS[tp] = kind
    return kind


def iter_children(node: cst.CSTNode) -> Iterator[tuple[cst.CSTNode, str, int | None]]:
    """Non-trivia children of a libcst node in source order, as (child, field, index)."""
    for name in fields_of(type(node)):
        value: Any = getattr(node, name, None)
        tp = type(value)
        if tp is tuple or tp is list:
            for i, child in enumerate(value):
                if kind_of(type(child)) == NODE:
                    yield child, name, i
        elif kind_of(tp) == NODE:
            yield value, name, None


def walk(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """`node` and every node below it (trivia left out), depth first."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(child for child, _, _ in iter_children(current))


class Parsed:
    """A parsed source and, on first use, its nodes' positions (libcst's position pass
    costs about twice the parse: only analyses that need lines pay for it)."""

    def __init__(self, module: cst.Module) -> None:
        self.module = module

    @functools.cached_property
    def positions(self) -> Mapping[cst.CSTNode, CodeRange]:
        return MetadataWrapper(self.module, unsafe_skip_copy=True).resolve(PositionProvider)


@functools.lru_cache(maxsize=32)
def parse(source: str) -> Parsed | None:
    """`source` parsed, or None where libcst cannot parse it. Kept per source: replay
    planning asks several analyses of each run's placed code (its requests, loop state
    and state reads), and runs of one version share their code."""
    try:
        return Parsed(cst.parse_module(source))
    except (cst.ParserSyntaxError, ValueError):
        return None
