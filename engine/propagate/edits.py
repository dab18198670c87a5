"""Applying placements to the old module without touching any other byte.

Only the nodes on the path from the module down to an edit are rebuilt (`with_changes`);
every other node is the very object libcst parsed, so the old code's formatting and
comments come out byte for byte, and unchanged statements keep their identity (which is
how output line numbers are found for statements that were already present).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import libcst as cst

from florwb_engine.propagate.tree import TNode, Tree, iter_children

WrapFn = Callable[[cst.BaseExpression], cst.BaseExpression]


@dataclass
class EditPlan:
    """Insertions (old block -> body index -> new statements) and wraps (old expression)."""

    insertions: dict[int, dict[int, list[cst.BaseStatement]]] = field(default_factory=dict)
    wraps: dict[int, WrapFn] = field(default_factory=dict)

    def insert(self, block: TNode, index: int, statement: cst.BaseStatement, first=False) -> None:
        at = self.insertions.setdefault(block.idx, {}).setdefault(index, [])
        if first:
            at.insert(0, statement)
        else:
            at.append(statement)

    def wrap(self, expr: TNode, fn: WrapFn) -> None:
        self.wraps[expr.idx] = fn

    def __bool__(self) -> bool:
        return bool(self.insertions or self.wraps)


def apply_edits(tree: Tree, plan: EditPlan) -> cst.Module:
    """The old module with the plan applied; untouched subtrees are shared, not copied."""
    on_path: set[int] = set()
    for idx in (*plan.insertions, *plan.wraps):
        tn: TNode | None = tree.nodes[idx]
        while tn is not None and tn.idx not in on_path:
            on_path.add(tn.idx)
            tn = tn.parent
    module = _rebuild(tree.root, plan, on_path)
    assert isinstance(module, cst.Module)
    return module


def _rebuild(tn: TNode, plan: EditPlan, on_path: set[int]) -> cst.CSTNode:
    node = tn.node
    changes: dict[str, object] = {}
    sequences: dict[str, list[cst.CSTNode]] = {}
    for child in tn.children:
        if child.idx not in on_path:
            continue
        new_child = _rebuild(child, plan, on_path)
        assert child.field is not None
        if child.key is None:
            changes[child.field] = new_child
        else:
            seq = sequences.get(child.field)
            if seq is None:
                seq = sequences[child.field] = list(getattr(node, child.field))
            seq[child.key] = new_child
    insertions = plan.insertions.get(tn.idx)
    if insertions:
        body = sequences.get("body")
        if body is None:
            body = sequences["body"] = list(node.body)  # type: ignore[attr-defined]
        for index in sorted(insertions, reverse=True):
            body[index:index] = insertions[index]
    for name, seq in sequences.items():
        changes[name] = tuple(seq)
    new_node = node.with_changes(**changes) if changes else node
    wrap = plan.wraps.get(tn.idx)
    if wrap is not None:
        assert isinstance(new_node, cst.BaseExpression)
        new_node = wrap(new_node)
    return new_node


def replace_nodes(node: cst.CSTNode, replacements: dict[int, cst.CSTNode]) -> cst.CSTNode:
    """A copy of `node` where the given descendants (by identity) are replaced."""
    if not replacements:
        return node
    if id(node) in replacements:
        return replacements[id(node)]
    changes: dict[str, object] = {}
    sequences: dict[str, list[cst.CSTNode]] = {}
    for child, name, key in iter_children(node):
        new_child = replace_nodes(child, replacements)
        if new_child is child:
            continue
        if key is None:
            changes[name] = new_child
        else:
            seq = sequences.setdefault(name, list(getattr(node, name)))
            seq[key] = new_child
    for name, seq in sequences.items():
        changes[name] = tuple(seq)
    return node.with_changes(**changes) if changes else node


def needs_parentheses(expr: cst.BaseExpression) -> bool:
    """Expressions that change meaning or stop parsing as a bare call argument."""
    if getattr(expr, "lpar", None):
        return False
    return isinstance(expr, (cst.Tuple, cst.GeneratorExp, cst.Yield, cst.StarredElement))


def log_call(
    log_ref: cst.BaseExpression, name_literal: cst.BaseExpression, value: cst.BaseExpression
) -> cst.Call:
    """`<log_ref>(<name literal>, <value>)` with ordinary spacing."""
    if needs_parentheses(value):
        value = value.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    return cst.Call(
        func=log_ref,
        args=[
            cst.Arg(
                value=name_literal.with_changes(lpar=(), rpar=()),
                comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")),
            ),
            cst.Arg(value=value),
        ],
    )


def import_statement(module_name: str, alias: str) -> cst.SimpleStatementLine:
    """`import florwb as flor` (or `import florwb` when the alias is the module name)."""
    asname = None if alias == module_name else cst.AsName(name=cst.Name(alias))
    return cst.SimpleStatementLine(
        body=[cst.Import(names=[cst.ImportAlias(name=cst.Name(module_name), asname=asname)])]
    )
