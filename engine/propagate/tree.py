"""A light syntax tree over libcst nodes for matching: labels, values, hashes, no trivia.

GumTree-style matching compares node kinds and leaf values, never whitespace, comments or
parentheses, so those are left out here; every kept node still points at its libcst node
(so edits go back into the byte-exact libcst tree). Nodes are numbered in preorder, which
gives O(1) "is a descendant of" tests and a source order for name-binding positions.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterator, Mapping

import libcst as cst

_TRIVIA_TYPES = (
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

_SKIP_FIELDS = frozenset(
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
_FIELD_ORDER: dict[type, tuple[str, ...]] = {
    cst.FunctionDef: ("decorators", "name", "type_parameters", "params", "returns", "body"),
    cst.ClassDef: ("decorators", "name", "type_parameters", "bases", "keywords", "body"),
    cst.ExceptHandler: ("type", "name", "body"),
    cst.IfExp: ("body", "test", "orelse"),
}

_VALUE_TYPES = (
    cst.Name,
    cst.Integer,
    cst.Float,
    cst.Imaginary,
    cst.SimpleString,
    cst.FormattedStringText,
)

_fields_cache: dict[type, tuple[str, ...]] = {}


def _fields(tp: type) -> tuple[str, ...]:
    names = _fields_cache.get(tp)
    if names is None:
        if tp in _FIELD_ORDER:
            names = _FIELD_ORDER[tp]
        else:
            names = tuple(
                f.name
                for f in dataclasses.fields(tp)
                if f.name not in _SKIP_FIELDS and not f.name.startswith("whitespace")
            )
        _fields_cache[tp] = names
    return names


def iter_children(node: cst.CSTNode) -> Iterator[tuple[cst.CSTNode, str, int | None]]:
    """Non-trivia children of a libcst node in source order, as (child, field, index)."""
    for name in _fields(type(node)):
        value = getattr(node, name, None)
        if isinstance(value, cst.CSTNode):
            if not isinstance(value, _TRIVIA_TYPES):
                yield value, name, None
        elif isinstance(value, (tuple, list)):
            for i, child in enumerate(value):
                if isinstance(child, cst.CSTNode) and not isinstance(child, _TRIVIA_TYPES):
                    yield child, name, i


class TNode:
    """One kept node: label, leaf value, parent/children, preorder span, shape hash."""

    __slots__ = (
        "label",
        "value",
        "node",
        "parent",
        "children",
        "idx",
        "end",
        "height",
        "hash",
        "field",
        "key",
    )

    def __init__(
        self,
        label: str,
        value: str | None,
        node: cst.CSTNode,
        parent: TNode | None,
        field: str | None,
        key: int | None,
        idx: int,
    ) -> None:
        self.label = label
        self.value = value
        self.node = node
        self.parent = parent
        self.children: list[TNode] = []
        self.idx = idx
        self.end = idx
        self.height = 1
        self.hash = 0
        self.field = field
        self.key = key

    @property
    def size(self) -> int:
        return self.end - self.idx + 1

    def contains(self, other: TNode) -> bool:
        """True when `other` is this node or one of its descendants."""
        return self.idx <= other.idx <= self.end

    def ancestors(self) -> Iterator[TNode]:
        node = self.parent
        while node is not None:
            yield node
            node = node.parent

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        value = f"={self.value}" if self.value is not None else ""
        return f"<{self.label}{value} #{self.idx}>"


def _label(node: cst.CSTNode, skip: frozenset[int] | set[int]) -> str:
    name = type(node).__name__
    if isinstance(node, cst.SimpleStatementLine):
        kinds = ",".join(type(s).__name__ for s in node.body if id(s) not in skip)
        return f"SimpleStatementLine[{kinds}]"
    operator = getattr(node, "operator", None)
    if isinstance(operator, cst.CSTNode):
        return f"{name}:{type(operator).__name__}"
    star = getattr(node, "star", None)
    if isinstance(star, str) and star:
        return f"{name}{star}"
    if getattr(node, "asynchronous", None) is not None:
        return f"async {name}"
    if isinstance(node, cst.ImportFrom) and node.relative:
        return f"{name}{'.' * len(node.relative)}"
    return name


class Tree:
    """The kept nodes of one module in preorder, with a lookup from libcst nodes."""

    def __init__(
        self,
        module: cst.Module,
        skip: frozenset[int] | set[int] = frozenset(),
        unwrap: Mapping[int, cst.CSTNode] | None = None,
    ) -> None:
        unwrap = unwrap or {}
        self.module = module
        self.nodes: list[TNode] = []
        self.by_cst: dict[int, TNode] = {}
        nodes = self.nodes
        stack: list[tuple[cst.CSTNode, TNode | None, str | None, int | None]] = [
            (module, None, None, None)
        ]
        while stack:
            node, parent, field, key = stack.pop()
            value = node.value if isinstance(node, _VALUE_TYPES) else None
            tn = TNode(_label(node, skip), value, node, parent, field, key, len(nodes))
            nodes.append(tn)
            self.by_cst[id(node)] = tn
            if parent is not None:
                parent.children.append(tn)
            if value is not None:
                continue
            kids = []
            for child, cfield, ckey in iter_children(node):
                cid = id(child)
                if cid in skip:
                    continue
                if cid in unwrap:
                    child = unwrap[cid]
                kids.append((child, tn, cfield, ckey))
            kids.reverse()
            stack.extend(kids)
        for tn in reversed(nodes):
            children = tn.children
            if children:
                tn.end = children[-1].end
                tn.height = 1 + max(c.height for c in children)
                tn.hash = hash((tn.label, tuple(c.hash for c in children)))
            else:
                tn.hash = hash((tn.label, tn.value))
        self.root = nodes[0]
        self._bags: dict[int, Counter[tuple[str, str | None]]] = {}

    def __len__(self) -> int:
        return len(self.nodes)

    def of(self, node: cst.CSTNode) -> TNode | None:
        return self.by_cst.get(id(node))

    def postorder(self) -> list[TNode]:
        order: list[TNode] = []
        stack: list[tuple[TNode, bool]] = [(self.root, False)]
        while stack:
            tn, done = stack.pop()
            if done:
                order.append(tn)
                continue
            stack.append((tn, True))
            for child in reversed(tn.children):
                stack.append((child, False))
        return order

    def bag(self, tn: TNode) -> Counter[tuple[str, str | None]]:
        """Multiset of (label, value) over a subtree: a matching-free similarity basis."""
        bag = self._bags.get(tn.idx)
        if bag is None:
            bag = Counter((n.label, n.value) for n in self.nodes[tn.idx : tn.end + 1])
            self._bags[tn.idx] = bag
        return bag


def bag_dice(a: Counter[tuple[str, str | None]], b: Counter[tuple[str, str | None]]) -> float:
    total = sum(a.values()) + sum(b.values())
    if not total:
        return 0.0
    common = sum((a & b).values())
    return 2.0 * common / total


def is_statement(node: cst.CSTNode) -> bool:
    return isinstance(node, (cst.SimpleStatementLine, cst.BaseCompoundStatement))


def is_block(node: cst.CSTNode) -> bool:
    """Statement containers where a new line can be inserted (not one-line suites)."""
    return isinstance(node, (cst.Module, cst.IndentedBlock))
