"""A light syntax tree over libcst nodes for matching: labels, values, hashes, no trivia.

GumTree-style matching compares node kinds and leaf values, never whitespace, comments or
parentheses, so those are left out here; every kept node still points at its libcst node
(so edits go back into the byte-exact libcst tree). Nodes are numbered in preorder, which
gives O(1) "is a descendant of" tests and a source order for name-binding positions.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping
from typing import Any

import libcst as cst

from florwb_engine.analysis.nodes import (
    FIELDS_CACHE,
    KINDS,
    NODE,
    fields_of,
    iter_children,
    kind_of,
)

_VALUE_TYPES = (
    cst.Name,
    cst.Integer,
    cst.Float,
    cst.Imaginary,
    cst.SimpleString,
    cst.FormattedStringText,
)

_VALUE_TYPE_SET = frozenset(_VALUE_TYPES)


def _leaf_value(node: cst.CSTNode) -> str:
    """A leaf's value; string literals by content, so `'a'` and `"a"` compare equal."""
    if type(node) is cst.SimpleString:
        raw = node.value
        if raw[:1] in "\"'" and "\\" not in raw:  # plain literal: strip the quotes
            quote = 3 if raw[:3] in ('"""', "'''") and len(raw) >= 6 else 1
            return repr(raw[quote:-quote])
        try:
            return repr(node.evaluated_value)
        except Exception:  # noqa: BLE001 - odd literals fall back to their source text
            return raw
    return node.value  # type: ignore[attr-defined]


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

    def contains_idx(self, idx: int) -> bool:
        """True when preorder position `idx` lies in this subtree."""
        return self.idx <= idx <= self.end

    def ancestors(self) -> Iterator[TNode]:
        node = self.parent
        while node is not None:
            yield node
            node = node.parent

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        value = f"={self.value}" if self.value is not None else ""
        return f"<{self.label}{value} #{self.idx}>"


_static_labels: dict[type, str | None] = {}


def _label(node: cst.CSTNode, skip: frozenset[int] | set[int]) -> str:
    tp = type(node)
    static = _static_labels.get(tp, "")
    if static:
        return static
    name = tp.__name__
    if tp is cst.SimpleStatementLine:
        body = node.body  # type: ignore[attr-defined]
        kinds = ",".join(type(s).__name__ for s in body if id(s) not in skip)
        return f"SimpleStatementLine[{kinds}]"
    dynamic = False
    operator = getattr(node, "operator", None)
    if operator is not None:
        dynamic = True
        if isinstance(operator, cst.CSTNode):
            return f"{name}:{type(operator).__name__}"
    star = getattr(node, "star", None)
    if star is not None:
        dynamic = True
        if isinstance(star, str) and star:
            return f"{name}{star}"
    if hasattr(node, "asynchronous"):
        dynamic = True
        if node.asynchronous is not None:
            return f"async {name}"
    if tp is cst.ImportFrom:
        dynamic = True
        relative = node.relative  # type: ignore[attr-defined]
        if relative:
            return f"{name}{'.' * len(relative)}"
    if not dynamic:
        _static_labels[tp] = name
    return name


class Tree:
    """The kept nodes of one module in preorder, with a lookup from libcst nodes."""

    def __init__(self, module: cst.Module) -> None:
        self.module = module
        self.nodes: list[TNode] = []
        self.by_cst: dict[int, TNode] = {}
        self._bags: dict[int, Counter[tuple[str, str | None]]] = {}
        nodes, by_cst = self.nodes, self.by_cst
        value_types = _VALUE_TYPE_SET
        kinds = KINDS
        empty: frozenset[int] = frozenset()
        stack: list[tuple[cst.CSTNode, TNode | None, str | None, int | None]] = [
            (module, None, None, None)
        ]
        pop, push = stack.pop, stack.extend
        while stack:
            node, parent, field, key = pop()
            tp = type(node)
            if tp in value_types:
                tn = TNode(tp.__name__, _leaf_value(node), node, parent, field, key, len(nodes))
            else:
                tn = TNode(_label(node, empty), None, node, parent, field, key, len(nodes))
            nodes.append(tn)
            by_cst[id(node)] = tn
            if parent is not None:
                parent.children.append(tn)
            if tn.value is not None:
                continue
            # inlined iter_children (this loop runs once per node of every source)
            kids: list[tuple[cst.CSTNode, TNode | None, str | None, int | None]] = []
            names = FIELDS_CACHE.get(tp) or fields_of(tp)
            for name in names:
                value: Any = getattr(node, name, None)
                vt = type(value)
                if vt is tuple or vt is list:
                    for i, child in enumerate(value):
                        ct = type(child)
                        kind = kinds.get(ct)
                        if kind is None:
                            kind = kind_of(ct)
                        if kind == NODE:
                            kids.append((child, tn, name, i))
                else:
                    kind = kinds.get(vt)
                    if kind is None:
                        kind = kind_of(vt)
                    if kind == NODE:
                        kids.append((value, tn, name, None))
            if kids:
                kids.reverse()
                push(kids)
        self._finish()

    def _finish(self) -> None:
        """Compute spans, heights and shape hashes bottom-up (children follow parents)."""
        for tn in reversed(self.nodes):
            children = tn.children
            if children:
                tn.end = children[-1].end
                height = 0
                for c in children:
                    if c.height > height:
                        height = c.height
                tn.height = height + 1
                tn.hash = hash((tn.label, tuple([c.hash for c in children])))
            else:
                tn.end = tn.idx
                tn.height = 1
                tn.hash = hash((tn.label, tn.value))
        self.root = self.nodes[0]

    def derived(self, skip: set[int], unwrap: Mapping[int, cst.CSTNode]) -> Tree:
        """A copy without the `skip`ped libcst nodes, and with each `unwrap` key (a call)
        replaced by the subtree of its mapped node (the value it wraps)."""
        tree = Tree.__new__(Tree)
        tree.module = self.module
        nodes: list[TNode] = []
        by_cst: dict[int, TNode] = {}
        tree.nodes = nodes
        tree.by_cst = by_cst
        tree._bags = {}
        source = self.by_cst
        stack: list[tuple[TNode, TNode | None, str | None, int | None]] = [
            (self.root, None, None, None)
        ]
        while stack:
            src, parent, field, key = stack.pop()
            replacement = unwrap.get(id(src.node))
            if replacement is not None:
                src = source[id(replacement)]
            node = src.node
            label = src.label
            if type(node) is cst.SimpleStatementLine and skip:
                label = _label(node, skip)
            tn = TNode(label, src.value, node, parent, field, key, len(nodes))
            nodes.append(tn)
            by_cst[id(node)] = tn
            if parent is not None:
                parent.children.append(tn)
            kids = [(c, tn, c.field, c.key) for c in src.children if id(c.node) not in skip]
            kids.reverse()
            stack.extend(kids)
        tree._finish()
        return tree

    def __len__(self) -> int:
        return len(self.nodes)

    def of(self, node: cst.CSTNode) -> TNode | None:
        return self.by_cst.get(id(node))

    def postorder(self) -> list[TNode]:
        """Children before parents (cached: trees are not changed once built)."""
        cached = self.__dict__.get("_postorder")
        if cached is not None:
            return cached
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
        self._postorder = order
        return order

    def bag(self, tn: TNode) -> Counter[tuple[str, str | None]]:
        """Multiset of the (kind, value) leaves of a subtree (names, literals): a
        matching-free similarity basis that is not inflated by shared syntax."""
        bag = self._bags.get(tn.idx)
        if bag is None:
            bag = Counter(
                (n.label, n.value) for n in self.nodes[tn.idx : tn.end + 1] if n.value is not None
            )
            self._bags[tn.idx] = bag
        return bag


def subtree_hash(node: cst.CSTNode) -> int:
    """The shape hash a Tree would give this node (to find it in another tree)."""
    if type(node) in _VALUE_TYPE_SET:
        return hash((type(node).__name__, _leaf_value(node)))
    children = tuple(subtree_hash(child) for child, _, _ in iter_children(node))
    if not children:
        return hash((_label(node, frozenset()), None))
    return hash((_label(node, frozenset()), children))


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
