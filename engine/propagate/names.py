"""Which names the old version defines where (what an expression reads: analysis/names.py).

A statement may only go where everything it reads already exists; an insertion that reads
an undefined name would crash the replay or, worse, read a different variable. The analysis
follows Python's scoping (function locals, closures, globals, builtins; comprehension and
lambda scopes do not leak) and follows the flow of the scope (analysis/bindings.py): at an
insertion point a local name counts as defined only if it is bound on every path to it. A
name bound in only one branch of an `if` (or only in a `try` body, not its handlers) may
be unbound there and does not count; bindings in a loop body count after the loop (loops
are assumed to run); a binding only *later* in the same function, even inside an enclosing
loop, does not.
"""

from __future__ import annotations

import bisect
from typing import Any

import libcst as cst

from florwb_engine.analysis.bindings import SurelyBound
from florwb_engine.analysis.names import BUILTIN_NAMES, COMPREHENSIONS
from florwb_engine.propagate.tree import TNode, Tree


class Scope:
    """One Python scope of the old version: where each name is bound (preorder positions)."""

    __slots__ = (
        "kind",
        "parent",
        "bindings",
        "globals",
        "star",
        "root",
        "_by_pos",
        "_definite",
        "_surely",
    )

    def __init__(self, kind: str, parent: Scope | None, root: TNode | None = None) -> None:
        self.kind = kind
        self.parent = parent
        self.root = root  # the scope's body block (the module itself for the module scope)
        self.bindings: dict[str, list[int]] = {}
        self.globals: set[str] = set()
        self.star = False
        self._by_pos: tuple[list[int], list[str]] | None = None
        self._definite: dict[tuple[int, int], frozenset[str]] = {}
        self._surely: SurelyBound | None = None

    def bind(self, name: str, pos: int) -> None:
        self.bindings.setdefault(name, []).append(pos)

    def names_in(self, tn: TNode) -> set[str]:
        """Names this scope binds inside a subtree."""
        if self._by_pos is None:
            pairs = sorted((p, n) for n, ps in self.bindings.items() for p in ps)
            self._by_pos = ([p for p, _ in pairs], [n for _, n in pairs])
        positions, names = self._by_pos
        lo = bisect.bisect_left(positions, tn.idx)
        hi = bisect.bisect_right(positions, tn.end)
        return set(names[lo:hi])

    def surely_bound(self, name: str, block: TNode, index: int) -> bool:
        """`name` (bound in this scope) is bound on every path to statement `index` of
        `block`, a block of this scope."""
        positions = self.bindings[name]
        root = self.root
        if root is None or not root.contains(block):
            return True
        if any(not root.contains_idx(p) for p in positions):
            return True  # a parameter
        key = (block.idx, index)
        surely = self._definite.get(key)
        if surely is None:
            chain = [block.node]
            for above in block.ancestors():
                if above.idx < root.idx:
                    break
                chain.append(above.node)
            chain.reverse()
            if self._surely is None:
                owner = root.parent.node if root.parent is not None else root.node
                assert isinstance(owner, (cst.Module, cst.FunctionDef, cst.ClassDef))
                self._surely = SurelyBound(owner, loops_run=True)
            bound = self._surely.before(chain, index)
            surely = self._definite[key] = frozenset(bound)
        return name in surely


class Bindings:
    """Name bindings of a whole module, queried as "is `x` defined at this position"."""

    def __init__(self, tree: Tree) -> None:
        self.module_scope = Scope("module", None, tree.root)
        self.block_scope: dict[int, Scope] = {}
        self._collect(tree.root)

    def scope_of_block(self, block: TNode) -> Scope:
        return self.block_scope[block.idx]

    def module_binds(self, name: str) -> bool:
        return name in self.module_scope.bindings

    def is_defined(
        self, name: str, scope: Scope, pos: int, at: tuple[TNode, int] | None = None
    ) -> bool:
        """True if `name` can be read at preorder position `pos` inside `scope`.

        With `at` = (block, index), the statement position `pos` stands for, a name of
        the scope itself must also be bound on every path to it (not in one branch only).
        """
        if name in BUILTIN_NAMES:
            return True
        module = self.module_scope
        if name in scope.globals:
            return name in module.bindings or module.star
        if name in scope.bindings:
            if not any(p < pos for p in scope.bindings[name]):
                return False
            return at is None or scope.surely_bound(name, *at)
        outer = scope.parent
        while outer is not None:
            if outer.kind != "class" and name in outer.bindings:
                return True
            outer = outer.parent
        return module.star

    def _collect(self, root: TNode) -> None:
        # dispatch on exact types: isinstance() against libcst's ABC-based classes is slow
        stack: list[tuple[TNode, Scope, bool]] = [(root, self.module_scope, False)]
        while stack:
            tn, scope, binding = stack.pop()
            node: Any = tn.node  # narrowed by the exact-type dispatch below
            tp = type(node)
            if binding:
                if tp is cst.Name:
                    scope.bind(node.value, tn.idx)
                else:
                    deeper = tp in _TARGET_CONTAINERS
                    stack.extend((c, scope, deeper) for c in tn.children)
                continue
            if tp in _BLOCK_TYPES:
                self.block_scope[tn.idx] = scope
                stack.extend((c, scope, False) for c in tn.children)
            elif tp is cst.FunctionDef:
                scope.bind(node.name.value, tn.idx)
                inner = Scope("function", scope, _body(tn))
                for c in tn.children:
                    if c.field in ("params", "body", "type_parameters"):
                        stack.append((c, inner, False))
                    elif c.field != "name":
                        stack.append((c, scope, False))
            elif tp is cst.ClassDef:
                scope.bind(node.name.value, tn.idx)
                inner = Scope("class", scope, _body(tn))
                for c in tn.children:
                    if c.field == "body":
                        stack.append((c, inner, False))
                    elif c.field != "name":
                        stack.append((c, scope, False))
            elif tp in _OWN_SCOPES:
                continue
            elif tp is cst.Param:
                scope.bind(node.name.value, tn.idx)
            elif tp in _TARGET_OWNERS or (tp is cst.AnnAssign and node.value is not None):
                for c in tn.children:
                    stack.append((c, scope, c.field == "target"))
            elif tp is cst.AsName:
                for c in tn.children:
                    stack.append((c, scope, c.field == "name"))
            elif tp is cst.ImportAlias:
                if node.asname is not None and type(node.asname.name) is cst.Name:
                    scope.bind(node.asname.name.value, tn.idx)
                else:
                    head = node.name
                    while type(head) is cst.Attribute:
                        head = head.value
                    if type(head) is cst.Name:
                        scope.bind(head.value, tn.idx)
            elif tp is cst.ImportFrom:
                if type(node.names) is cst.ImportStar:
                    scope.star = True
                stack.extend((c, scope, False) for c in tn.children)
            elif tp is cst.Global:
                scope.globals.update(item.name.value for item in node.names)
            elif tp is cst.Nonlocal:
                continue
            elif tp is cst.MatchAs or tp is cst.MatchStar:
                if node.name is not None:
                    scope.bind(node.name.value, tn.idx)
                stack.extend((c, scope, False) for c in tn.children if c.field != "name")
            else:
                stack.extend((c, scope, False) for c in tn.children)


def _body(tn: TNode) -> TNode | None:
    return next((c for c in tn.children if c.field == "body"), None)


_BLOCK_TYPES = frozenset({cst.Module, cst.IndentedBlock})
_OWN_SCOPES = frozenset({cst.Lambda, *COMPREHENSIONS})
_TARGET_OWNERS = frozenset({cst.AssignTarget, cst.AugAssign, cst.For, cst.NamedExpr})
_TARGET_CONTAINERS = frozenset({cst.Tuple, cst.List, cst.StarredElement, cst.Element})
