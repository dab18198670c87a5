"""Applying placements to the old module without touching any other byte.

Only the nodes on the path from the module down to an edit are rebuilt (`with_changes`);
every other node is the very object libcst parsed, so the old code's formatting and
comments come out byte for byte, and unchanged statements keep their identity (which is
how output line numbers are found for statements that were already present).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import libcst as cst

from florwb_engine.propagate.match_tree import TNode, Tree, iter_children

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
    module = _rebuild(tree.root, plan, on_path, tree.module.default_indent)
    assert isinstance(module, cst.Module)
    return module


def _rebuild(tn: TNode, plan: EditPlan, on_path: set[int], default_indent: str) -> cst.CSTNode:
    node = tn.node
    changes: dict[str, object] = {}
    sequences: dict[str, list[cst.CSTNode]] = {}
    for child in tn.children:
        if child.idx not in on_path:
            continue
        new_child = _rebuild(child, plan, on_path, default_indent)
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
        level = _indent_of(tn, default_indent)
        for index in sorted(insertions, reverse=True):
            moved: list[cst.EmptyLine] = []
            if index > 0:
                body[index - 1], moved = _strip(body[index - 1], level, default_indent)
            body[index:index] = insertions[index]
            if moved:
                after = index + len(insertions[index])
                if after < len(body):
                    following: Any = body[after]
                    body[after] = following.with_changes(
                        leading_lines=(*moved, *following.leading_lines)
                    )
                else:
                    changes["footer"] = (*moved, *getattr(node, "footer", ()))
    for name, seq in sequences.items():
        changes[name] = tuple(seq)
    new_node = node.with_changes(**changes) if changes else node
    wrap = plan.wraps.get(tn.idx)
    if wrap is not None:
        assert isinstance(new_node, cst.BaseExpression)
        new_node = wrap(new_node)
    return new_node


def _indent_of(tn: TNode, default_indent: str) -> str:
    """The indentation of the statements of a block (the module's is empty)."""
    parts: list[str] = []
    node: TNode | None = tn
    while node is not None:
        if type(node.node) is cst.IndentedBlock:
            indent = node.node.indent
            parts.append(default_indent if indent is None else indent)
        node = node.parent
    return "".join(reversed(parts))


def _last_clause(node: cst.CSTNode) -> str | None:
    """The field holding the part of a compound statement that is written last."""
    tp = type(node)
    if tp in (cst.If, cst.For, cst.While):
        return "orelse" if node.orelse is not None else "body"  # type: ignore[attr-defined]
    if tp in (cst.Try, cst.TryStar):
        if node.finalbody is not None:  # type: ignore[attr-defined]
            return "finalbody"
        if node.orelse is not None:  # type: ignore[attr-defined]
            return "orelse"
        return "handlers" if node.handlers else "body"  # type: ignore[attr-defined]
    if tp is cst.Match:
        return "cases"
    if isinstance(node, (cst.BaseCompoundStatement, cst.Else, cst.Finally)) or tp in (
        cst.ExceptHandler,
        cst.ExceptStarHandler,
        cst.MatchCase,
    ):
        return "body"
    return None


def _absolute(line: cst.EmptyLine, indent: str) -> cst.EmptyLine:
    """The same line with its indentation written out (it is moved to another block)."""
    if not line.indent:
        return line
    whitespace = cst.SimpleWhitespace(indent + line.whitespace.value)
    return line.with_changes(indent=False, whitespace=whitespace)


def _strip(node: cst.CSTNode, indent: str, default_indent: str) -> tuple[Any, list[cst.EmptyLine]]:
    """A compound statement without the blank/comment lines that trail its last block,
    and those lines (in order, indentation written out).

    A statement inserted after an `if` block goes right after the block's last
    statement; the blank and comment lines that followed the block move below it.
    """
    if type(node) is cst.IndentedBlock:
        inner = indent + (default_indent if node.indent is None else node.indent)
        body = list(node.body)
        lines: list[cst.EmptyLine] = []
        if body:
            body[-1], lines = _strip(body[-1], inner, default_indent)
        lines = lines + [_absolute(line, inner) for line in node.footer]
        if not lines:
            return node, []
        return node.with_changes(body=tuple(body), footer=()), lines
    field = _last_clause(node)
    if field is None:
        return node, []
    value = getattr(node, field)
    if isinstance(value, tuple):
        if not value:
            return node, []
        last, lines = _strip(value[-1], indent, default_indent)
        if not lines:
            return node, []
        return node.with_changes(**{field: (*value[:-1], last)}), lines
    child, lines = _strip(value, indent, default_indent)
    if not lines:
        return node, []
    return node.with_changes(**{field: child}), lines


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
