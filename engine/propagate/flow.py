"""Control flow of the old version: which statements end the flow, which names surely exist.

A placement must be able to run and must read only names that exist when it runs. Both
questions follow branches: an `if/else` (or a `try`) whose every branch returns, raises,
breaks or continues ends the flow, so nothing placed after it would ever run; and a name
bound in only one branch of an `if` may be unbound after it. Loops are assumed to run
their body at least once (training loops do; refusing every name a loop body binds would
refuse most hindsight statements after a loop), and a `while True:` without `break`
never ends normally.
"""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst

from florwb_engine.propagate.tree import TNode

_FLOW_ENDERS = (cst.Return, cst.Raise, cst.Continue, cst.Break)
_TRY = (cst.Try, cst.TryStar)
_LOOPS = (cst.For, cst.While)
_SCOPES = (cst.FunctionDef, cst.ClassDef, cst.Lambda)

# names bound inside a node's span (the caller's scope only), as a function of the node
NamesIn = Callable[[TNode], set[str]]


def _child(tn: TNode, field: str) -> TNode | None:
    for c in tn.children:
        if c.field == field:
            return c
    return None


def _children(tn: TNode, field: str) -> list[TNode]:
    return [c for c in tn.children if c.field == field]


def _block_ends(block: TNode | None) -> bool:
    return block is not None and any(ends_flow(c) for c in block.children)


def _else_body(tn: TNode) -> TNode | None:
    """The block an `else:`/`finally:` clause (or an `elif`, as an If) stands for."""
    if isinstance(tn.node, cst.If):
        return tn
    return _child(tn, "body")


def ends_flow(tn: TNode) -> bool:
    """True when a statement never completes normally: nothing after it in its block runs.

    `return`/`raise`/`continue`/`break` (or `sys.exit()`); an if/elif/else whose every
    branch ends; a try
    whose body (or else) and every handler end, or whose finally ends; a with whose body
    ends; a `while True:` without `break`.
    """
    node = tn.node
    tp = type(node)
    if tp is cst.SimpleStatementLine or tp is cst.SimpleStatementSuite:
        return any(_small_ends(small) for small in node.body)  # type: ignore[attr-defined]
    if tp in _FLOW_ENDERS or tp is cst.Expr:  # a small statement of a one-line suite
        return _small_ends(node)
    if tp in (cst.IndentedBlock, cst.Module):
        return _block_ends(tn)
    if tp is cst.If:
        if _always_true(tn):
            return _block_ends_or_suite(_child(tn, "body"))
        orelse = _child(tn, "orelse")
        if orelse is None:
            return False
        return _block_ends_or_suite(_child(tn, "body")) and ends_flow(_else_body(orelse) or orelse)
    if tp is cst.Else or tp is cst.Finally:
        return _block_ends_or_suite(_child(tn, "body"))
    if tp in _TRY:
        final = _child(tn, "finalbody")
        if final is not None and ends_flow(final):
            return True
        orelse = _child(tn, "orelse")
        normal = _block_ends_or_suite(_child(tn, "body")) or (
            orelse is not None and ends_flow(orelse)
        )
        handlers = _children(tn, "handlers")
        return normal and all(_block_ends_or_suite(_child(h, "body")) for h in handlers)
    if tp is cst.With:
        return _block_ends_or_suite(_child(tn, "body"))
    if tp is cst.While:
        test = node.test  # type: ignore[attr-defined]
        if type(test) is cst.Name and test.value == "True" and _child(tn, "orelse") is None:
            body = _child(tn, "body")
            return body is not None and not _breaks(body)
    return False


_EXITS = frozenset({"exit", "quit", "sys.exit", "os._exit"})


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


def _always_true(tn: TNode) -> bool:
    """`if True:` (its body always runs)."""
    test = tn.node.test  # type: ignore[attr-defined]
    return type(test) is cst.Name and test.value == "True"


def _block_ends_or_suite(block: TNode | None) -> bool:
    if block is None:
        return False
    if type(block.node) is cst.SimpleStatementSuite:
        return ends_flow(block)
    return _block_ends(block)


def _breaks(tn: TNode) -> bool:
    """A `break` that leaves this loop body (not one of a nested loop or function)."""
    for c in tn.children:
        tp = type(c.node)
        if tp is cst.Break:
            return True
        if tp in _LOOPS or tp in _SCOPES:
            continue
        if _breaks(c):
            return True
    return False


class DefiniteNames:
    """Names of one scope that are bound on every path to a position (see module doc)."""

    def __init__(self, root: TNode, names_in: NamesIn) -> None:
        self.root = root
        self.names_in = names_in
        self._cache: dict[tuple[int, int], frozenset[str]] = {}

    def at(self, block: TNode, index: int) -> frozenset[str]:
        """Names surely bound before statement `index` of `block` (a block of this scope)."""
        key = (block.idx, index)
        cached = self._cache.get(key)
        if cached is None:
            out: set[str] = set()
            self._walk(self.root, block, index, out)
            cached = self._cache[key] = frozenset(out)
        return cached

    # -- walking towards a position -----------------------------------------------------------
    def _walk(self, block: TNode, target: TNode, index: int, out: set[str]) -> None:
        for stmt in block.children:
            if block is target:
                if stmt.key is None or stmt.key >= index:
                    return
                out |= self._binds(stmt)[0]
            elif stmt.contains(target):
                self._enter(stmt, target, index, out)
                return
            else:
                out |= self._binds(stmt)[0]

    def _into(self, tn: TNode | None, target: TNode, index: int, out: set[str]) -> bool:
        """Walk into `tn` (a block, or an elif) when it holds the target; True if it did."""
        if tn is None or not tn.contains(target):
            return False
        if tn is target or type(tn.node) in (cst.IndentedBlock, cst.SimpleStatementSuite):
            self._walk(tn, target, index, out)
        else:
            self._enter(tn, target, index, out)
        return True

    def _enter(self, stmt: TNode, target: TNode, index: int, out: set[str]) -> None:
        """Follow the path into the statement that holds the target block."""
        tp = type(stmt.node)
        body = _child(stmt, "body")
        if tp is cst.If:
            out |= self._field_names(stmt, "test")
            if not self._into(body, target, index, out):
                orelse = _child(stmt, "orelse")
                if orelse is not None:
                    self._into(_else_body(orelse), target, index, out)
            return
        if tp in _LOOPS:
            out |= self._field_names(stmt, "target") | self._field_names(stmt, "test")
            if not self._into(body, target, index, out):
                out |= self._block(body)[0]
                orelse = _child(stmt, "orelse")
                if orelse is not None:
                    self._into(_else_body(orelse), target, index, out)
            return
        if tp in _TRY:
            if self._into(body, target, index, out):
                return
            for handler in _children(stmt, "handlers"):
                if handler.contains(target):
                    out |= self._field_names(handler, "name")
                    self._into(_child(handler, "body"), target, index, out)
                    return
            orelse = _child(stmt, "orelse")
            if orelse is not None and orelse.contains(target):
                out |= self._block(body)[0]
                self._into(_else_body(orelse), target, index, out)
                return
            final = _child(stmt, "finalbody")
            if final is not None:
                self._into(_else_body(final), target, index, out)
            return
        if tp is cst.With:
            out |= self._field_names(stmt, "items")
            self._into(body, target, index, out)
            return
        if tp is cst.Match:
            for case in _children(stmt, "cases"):
                if case.contains(target):
                    out |= self._field_names(case, "pattern")
                    self._into(_child(case, "body"), target, index, out)
                    return

    # -- what a finished statement surely binds -----------------------------------------------
    def _field_names(self, tn: TNode, field: str) -> set[str]:
        names: set[str] = set()
        for c in tn.children:
            if c.field == field:
                names |= self.names_in(c)
        return names

    def _block(self, block: TNode | None) -> tuple[set[str], bool]:
        """(names surely bound, whether the block never completes normally)."""
        if block is None:
            return set(), False
        names: set[str] = set()
        for stmt in block.children:
            bound, ends = self._binds(stmt)
            names |= bound
            if ends:
                return names, True
        return names, False

    def _binds(self, stmt: TNode) -> tuple[set[str], bool]:
        tp = type(stmt.node)
        if tp is cst.If:
            test = self._field_names(stmt, "test")
            body = self._block(_child(stmt, "body"))
            if _always_true(stmt):
                return test | body[0], body[1]
            orelse = _child(stmt, "orelse")
            if orelse is None:
                other: tuple[set[str], bool] = (set(), False)
            else:
                inner = _else_body(orelse)
                other = self._binds(orelse) if inner is orelse else self._block(inner)
            return test | _meet(body, other), body[1] and other[1]
        if tp in _LOOPS:
            names = self._field_names(stmt, "target") | self._field_names(stmt, "test")
            names |= self._block(_child(stmt, "body"))[0]
            orelse = _child(stmt, "orelse")
            if orelse is not None:
                names |= self._block(_else_body(orelse))[0]
            return names, ends_flow(stmt)
        if tp in _TRY:
            body = self._block(_child(stmt, "body"))
            orelse = _child(stmt, "orelse")
            if orelse is not None and not body[1]:
                extra = self._block(_else_body(orelse))
                body = (body[0] | extra[0], extra[1])
            result = body
            for handler in _children(stmt, "handlers"):
                caught = self._block(_child(handler, "body"))
                result = (_meet(result, caught), result[1] and caught[1])
            final = _child(stmt, "finalbody")
            if final is not None:
                extra = self._block(_else_body(final))
                result = (result[0] | extra[0], result[1] or extra[1])
            return result
        if tp is cst.With:
            body = self._block(_child(stmt, "body"))
            return self._field_names(stmt, "items") | body[0], body[1]
        if tp is cst.Match:
            return set(), False
        if tp in (cst.FunctionDef, cst.ClassDef):
            return self.names_in(stmt), False  # its name (inner scopes are not ours)
        if tp is cst.IndentedBlock or tp is cst.SimpleStatementSuite:
            return self._block(stmt)
        return self.names_in(stmt), ends_flow(stmt)


def _meet(a: tuple[set[str], bool], b: tuple[set[str], bool]) -> set[str]:
    """Names bound on both paths; a path that never completes does not constrain."""
    if a[1]:
        return set(b[0]) if not b[1] else a[0] | b[0]
    if b[1]:
        return set(a[0])
    return a[0] & b[0]
