"""Which names are bound, for sure, where a statement runs, and to what; which statements
end the flow.

Propagation places a statement only where every name it reads exists; the instrumenter
names in `with flor.checkpointing(model=net)` only variables bound where the training loop
starts. Both ask the same question, answered here over libcst: a name counts at a point
only if it is bound on every path that reaches it, within its scope. Assignments earlier
in the same block or in an enclosing block count (`with` bodies always run); an
`if`/`elif`/`else` (or a `try` and its handlers) binds what every branch binds, and a
branch that never completes (`return`, `raise`, `continue`, `break`, `sys.exit()`, or a
nested statement that always does) does not constrain; a `try` body's names count in its
`else`, a handler's `as` name in the handler, a `with`'s `as` names in its body.

Loops are the one assumption callers choose (`loops_run`): propagation assumes a loop runs
its body at least once (training loops do; refusing every name a loop body binds would
refuse most hindsight statements after a loop, and a wrong guess fails a replay, which
says so), while the instrumenter does not (what it writes runs in the user's training,
which florwb must never crash: a setup loop that ran zero times would leave the name
unbound).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

import libcst as cst

from florwb_engine.analysis.names import assigned_names
from florwb_engine.analysis.nodes import NESTED_SCOPES, iter_children

Scope = cst.Module | cst.FunctionDef | cst.ClassDef
ASSIGN, PARAM, OTHER = "assign", "param", "other"


@dataclass(frozen=True, eq=False)
class Binding:
    """One place a name gets its value: an assignment, a parameter, an import, a def."""

    name: str
    scope: Scope
    stmt: cst.CSTNode  # the binding statement (the def itself for a parameter)
    kind: str  # ASSIGN, PARAM or OTHER (imports, defs, augmented assignments, ...)
    value: cst.BaseExpression | None = None
    index: int | None = None  # which element of `value` a tuple target takes
    # Branches (if/else, try/except) binding the name in each: the binding of every
    # branch (this binding is the first of them).
    alternatives: tuple[Binding, ...] = ()


Bound = dict[str, Binding]

# -- which statements end the flow --------------------------------------------------------------

_FLOW_ENDERS = (cst.Return, cst.Raise, cst.Continue, cst.Break)
_TRY = (cst.Try, cst.TryStar)
_LOOPS = (cst.For, cst.While)
_SCOPES = (cst.FunctionDef, cst.ClassDef, cst.Lambda)
_BLOCKS = (cst.Module, cst.IndentedBlock, cst.SimpleStatementSuite, cst.SimpleStatementLine)
_EXITS = frozenset({"exit", "quit", "sys.exit", "os._exit"})


def ends_flow(node: cst.CSTNode) -> bool:
    """True when a statement never completes normally: nothing after it in its block runs.

    `return`/`raise`/`continue`/`break` (or `sys.exit()`); an if/elif/else whose every
    branch ends; a try whose body (or else) and every handler end, or whose finally ends;
    a with whose body ends; a `while True:` without `break`.
    """
    tp = type(node)
    if tp is cst.SimpleStatementLine or tp is cst.SimpleStatementSuite:
        return any(_small_ends(small) for small in node.body)  # type: ignore[attr-defined]
    if tp in _FLOW_ENDERS or tp is cst.Expr:  # a small statement of a one-line suite
        return _small_ends(node)
    if tp in (cst.IndentedBlock, cst.Module):
        return any(ends_flow(stmt) for stmt in node.body)  # type: ignore[attr-defined]
    if tp is cst.If:
        if _always_true(node):
            return ends_flow(node.body)  # type: ignore[attr-defined]
        orelse = node.orelse  # type: ignore[attr-defined]
        return orelse is not None and ends_flow(node.body) and ends_flow(orelse)  # type: ignore[attr-defined]
    if tp is cst.Else or tp is cst.Finally or tp is cst.With:
        return ends_flow(node.body)  # type: ignore[attr-defined]
    if tp in _TRY:
        final = node.finalbody  # type: ignore[attr-defined]
        if final is not None and ends_flow(final):
            return True
        orelse = node.orelse  # type: ignore[attr-defined]
        normal = ends_flow(node.body) or (orelse is not None and ends_flow(orelse))  # type: ignore[attr-defined]
        return normal and all(ends_flow(h.body) for h in node.handlers)  # type: ignore[attr-defined]
    if tp is cst.While:
        test = node.test  # type: ignore[attr-defined]
        if type(test) is cst.Name and test.value == "True" and node.orelse is None:  # type: ignore[attr-defined]
            return not _breaks(node.body)  # type: ignore[attr-defined]
    return False


def _small_ends(small: cst.CSTNode) -> bool:
    """`return`/`raise`/`continue`/`break`, or a bare call of sys.exit()/exit()/quit()."""
    if type(small) in _FLOW_ENDERS:
        return True
    if type(small) is cst.Expr and type(small.value) is cst.Call:
        func = small.value.func
        if type(func) is cst.Name:
            return func.value in _EXITS
        if type(func) is cst.Attribute and type(func.value) is cst.Name:
            return f"{func.value.value}.{func.attr.value}" in _EXITS
    return False


def _always_true(node: cst.CSTNode) -> bool:
    """`if True:` (its body always runs)."""
    test = node.test  # type: ignore[attr-defined]
    return type(test) is cst.Name and test.value == "True"


def _breaks(node: cst.CSTNode) -> bool:
    """A `break` that leaves this loop body (not one of a nested loop or function)."""
    for child, _, _ in iter_children(node):
        tp = type(child)
        if tp is cst.Break:
            return True
        if tp in _LOOPS or tp in _SCOPES:
            continue
        if _breaks(child):
            return True
    return False


# -- what a finished statement surely binds -----------------------------------------------------


def _assign_bindings(
    target: cst.BaseExpression, value: cst.BaseExpression, scope: Scope, stmt: cst.CSTNode
) -> Iterator[Binding]:
    if isinstance(target, cst.Name):
        yield Binding(target.value, scope, stmt, ASSIGN, value)
        return
    if not isinstance(target, (cst.Tuple, cst.List)):
        return
    elements = target.elements
    starred = any(isinstance(e, cst.StarredElement) for e in elements)
    if (
        isinstance(value, (cst.Tuple, cst.List))
        and len(value.elements) == len(elements)
        and not starred
        and not any(isinstance(e, cst.StarredElement) for e in value.elements)
    ):
        for element, item in zip(elements, value.elements):
            yield from _assign_bindings(element.value, item.value, scope, stmt)
        return
    for i, element in enumerate(elements):
        if isinstance(element.value, cst.Name) and not starred:
            yield Binding(element.value.value, scope, stmt, ASSIGN, value, i)
        else:
            for name in assigned_names(element.value):
                yield Binding(name, scope, stmt, OTHER)


def import_bindings(small: cst.CSTNode, scope: Scope, stmt: cst.CSTNode) -> Iterator[Binding]:
    """The names an `import` binds (`os` of `import os.path`); a star import binds none
    that can be named."""
    if not isinstance(small, (cst.Import, cst.ImportFrom)) or isinstance(
        small.names, cst.ImportStar
    ):
        return
    for alias in small.names:
        if alias.asname is not None:
            yield from (Binding(n, scope, stmt, OTHER) for n in assigned_names(alias.asname.name))
        else:
            node: cst.BaseExpression = alias.name
            while isinstance(node, cst.Attribute):
                node = node.value
            if isinstance(node, cst.Name):
                yield Binding(node.value, scope, stmt, OTHER)


def _walrus(node: cst.CSTNode | None, scope: Scope, stmt: cst.CSTNode) -> Iterator[Binding]:
    """Names `:=` binds inside an expression (not inside a lambda or comprehension)."""
    if node is None:
        return
    stack = [node]
    while stack:
        current = stack.pop()
        if type(current) is cst.NamedExpr:
            for name in assigned_names(current.target):
                yield Binding(name, scope, stmt, OTHER)
        if isinstance(current, NESTED_SCOPES):
            continue
        stack.extend(child for child, _, _ in iter_children(current))


def _small_bindings(small: cst.CSTNode, scope: Scope, stmt: cst.CSTNode) -> Iterator[Binding]:
    yield from _walrus(small, scope, stmt)
    if isinstance(small, cst.Assign):
        for target in small.targets:
            yield from _assign_bindings(target.target, small.value, scope, stmt)
    elif isinstance(small, cst.AnnAssign) and small.value is not None:
        yield from _assign_bindings(small.target, small.value, scope, stmt)
    elif isinstance(small, cst.AugAssign):
        for name in assigned_names(small.target):
            yield Binding(name, scope, stmt, OTHER)
    else:
        yield from import_bindings(small, scope, stmt)


def _pattern_names(pattern: cst.CSTNode) -> set[str]:
    """Names a `case` pattern captures."""
    found: set[str] = set()
    stack = [pattern]
    while stack:
        node = stack.pop()
        if isinstance(node, (cst.MatchAs, cst.MatchStar)) and node.name is not None:
            found.add(node.name.value)
        elif isinstance(node, cst.MatchMapping) and node.rest is not None:
            found.add(node.rest.value)
        stack.extend(child for child, _, _ in iter_children(node))
    return found


def _meet(a: tuple[Bound, bool], b: tuple[Bound, bool]) -> Bound:
    """Names bound on both paths; a path that never completes does not constrain. A name
    both paths assign keeps the binding of each (`alternatives`)."""
    if a[1] and b[1]:
        return {**a[0], **b[0]}
    if a[1]:
        return dict(b[0])
    if b[1]:
        return dict(a[0])
    found: Bound = {}
    for name, first in a[0].items():
        second = b[0].get(name)
        if second is None:
            continue
        options = (*(first.alternatives or (first,)), *(second.alternatives or (second,)))
        if all(o.kind == ASSIGN for o in options):
            found[name] = replace(options[0], alternatives=options)
        else:
            found[name] = Binding(name, first.scope, first.stmt, OTHER)
    return found


class SurelyBound:
    """The bindings one scope surely made before a point of it (see the module doc).

    `loops_run`: a loop's body (and its target) counts after the loop. What each statement
    binds is kept: propagation asks about many points of one scope."""

    def __init__(self, scope: Scope, *, loops_run: bool) -> None:
        self.scope = scope
        self.loops_run = loops_run
        self._statements: dict[int, tuple[Bound, bool]] = {}

    def before(self, chain: Sequence[cst.CSTNode], index: int) -> Bound:
        """Bindings made for certain before statement `index` of `chain[-1]`, where `chain`
        runs from the scope's body (the module, a def's block) down to that block through
        every node between (compound statements, `else:`, handlers, cases). The last one
        per name."""
        found: Bound = {}
        for node, child in zip(chain, chain[1:]):
            if isinstance(node, _BLOCKS):
                for stmt in node.body:
                    if stmt is child:
                        break
                    found.update(self.statement(stmt)[0])
            else:
                found.update(self._entering(node, child))
        for stmt in list(getattr(chain[-1], "body", ()))[:index]:
            found.update(self.statement(stmt)[0])
        return found

    def _entering(self, node: cst.CSTNode, child: cst.CSTNode) -> Bound:
        """What is surely bound on the way from a compound statement into its `child`."""
        scope, tp = self.scope, type(node)
        found: Bound = {}
        if tp is cst.If or tp is cst.While:
            found.update((b.name, b) for b in _walrus(node.test, scope, node))  # type: ignore[attr-defined]
            if tp is cst.While and child is node.orelse and self.loops_run:  # type: ignore[attr-defined]
                found.update(self.block(node.body)[0])  # type: ignore[attr-defined]
        elif tp is cst.For:
            found.update((b.name, b) for b in _walrus(node.iter, scope, node))  # type: ignore[attr-defined]
            if child is node.body or self.loops_run:  # type: ignore[attr-defined]
                found.update(self._as_names(node.target, node))  # type: ignore[attr-defined]
            if child is node.orelse and self.loops_run:  # type: ignore[attr-defined]
                found.update(self.block(node.body)[0])  # type: ignore[attr-defined]
        elif tp in _TRY:
            if child is node.orelse:  # type: ignore[attr-defined]
                found.update(self.block(node.body)[0])  # type: ignore[attr-defined]
        elif tp is cst.ExceptHandler or tp is cst.ExceptStarHandler:
            if node.name is not None:  # type: ignore[attr-defined]
                found.update(self._as_names(node.name.name, node))  # type: ignore[attr-defined]
        elif tp is cst.With:
            found.update(self._with_items(node))  # type: ignore[arg-type]
        elif tp is cst.MatchCase:
            names = _pattern_names(node.pattern)  # type: ignore[attr-defined]
            found.update((n, Binding(n, scope, node, OTHER)) for n in names)
        return found

    def _as_names(self, target: cst.CSTNode, stmt: cst.CSTNode) -> Bound:
        return {n: Binding(n, self.scope, stmt, OTHER) for n in assigned_names(target)}

    def _with_items(self, stmt: cst.With) -> Bound:
        found: Bound = {}
        for item in stmt.items:
            found.update((b.name, b) for b in _walrus(item.item, self.scope, stmt))
            if item.asname is not None:
                found.update(self._as_names(item.asname.name, stmt))
        return found

    def block(self, block: cst.CSTNode | None) -> tuple[Bound, bool]:
        """(bindings surely made, whether the block never completes normally)."""
        if block is None:
            return {}, False
        found: Bound = {}
        for stmt in getattr(block, "body", ()):
            bound, ends = self.statement(stmt)
            found.update(bound)
            if ends:
                return found, True
        return found, False

    def statement(self, stmt: cst.CSTNode) -> tuple[Bound, bool]:
        """(bindings a statement surely made once it ran, whether it never completes); the
        mapping is shared: callers copy it before changing it."""
        found = self._statements.get(id(stmt))
        if found is None:
            found = self._statements[id(stmt)] = self._statement(stmt)
        return found

    def _statement(self, stmt: cst.CSTNode) -> tuple[Bound, bool]:
        scope, tp = self.scope, type(stmt)
        if tp is cst.SimpleStatementLine or tp is cst.SimpleStatementSuite:
            found: Bound = {}
            for small in stmt.body:  # type: ignore[attr-defined]
                found.update((b.name, b) for b in _small_bindings(small, scope, stmt))
            return found, ends_flow(stmt)
        if tp is cst.If:
            test = {b.name: b for b in _walrus(stmt.test, scope, stmt)}  # type: ignore[attr-defined]
            body = self.block(stmt.body)  # type: ignore[attr-defined]
            if _always_true(stmt):
                return {**test, **body[0]}, body[1]
            orelse = stmt.orelse  # type: ignore[attr-defined]
            if orelse is None:
                other: tuple[Bound, bool] = ({}, False)
            elif type(orelse) is cst.If:
                other = self.statement(orelse)
            else:
                other = self.block(orelse.body)
            return {**test, **_meet(body, other)}, body[1] and other[1]
        if tp in _LOOPS:
            found = {}
            if tp is cst.For:
                found.update((b.name, b) for b in _walrus(stmt.iter, scope, stmt))  # type: ignore[attr-defined]
            else:
                found.update((b.name, b) for b in _walrus(stmt.test, scope, stmt))  # type: ignore[attr-defined]
            if self.loops_run:
                if tp is cst.For:
                    found.update(self._as_names(stmt.target, stmt))  # type: ignore[attr-defined]
                found.update(self.block(stmt.body)[0])  # type: ignore[attr-defined]
                orelse = stmt.orelse  # type: ignore[attr-defined]
                if orelse is not None:
                    found.update(self.block(orelse.body)[0])
            return found, ends_flow(stmt)
        if tp in _TRY:
            result = self.block(stmt.body)  # type: ignore[attr-defined]
            orelse = stmt.orelse  # type: ignore[attr-defined]
            if orelse is not None and not result[1]:
                extra = self.block(orelse.body)
                result = ({**result[0], **extra[0]}, extra[1])
            for handler in stmt.handlers:  # type: ignore[attr-defined]
                caught = self.block(handler.body)
                result = (_meet(result, caught), result[1] and caught[1])
            final = stmt.finalbody  # type: ignore[attr-defined]
            if final is not None:
                extra = self.block(final.body)
                result = ({**result[0], **extra[0]}, result[1] or extra[1])
            return result
        if tp is cst.With:
            body = self.block(stmt.body)  # type: ignore[attr-defined]
            return {**self._with_items(stmt), **body[0]}, body[1]  # type: ignore[arg-type]
        if tp is cst.FunctionDef or tp is cst.ClassDef:
            name = stmt.name.value  # type: ignore[attr-defined]
            return {name: Binding(name, scope, stmt, OTHER)}, False
        if tp in (cst.IndentedBlock, cst.Else, cst.Finally):
            return self.block(stmt if tp is cst.IndentedBlock else stmt.body)  # type: ignore[attr-defined]
        if tp is cst.Match:
            return {}, False
        # a small statement of a one-line suite
        return {b.name: b for b in _small_bindings(stmt, scope, stmt)}, ends_flow(stmt)
