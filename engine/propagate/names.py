"""Which names the old version defines where: the scopes of analysis/scopes.py, asked at
the matching tree's preorder positions (what an expression reads: analysis/names.py).

A statement may only go where everything it reads already exists; an insertion that reads
an undefined name would crash the replay or, worse, read a different variable. A name
read at an insertion point is looked up by Python's scoping (analysis/scopes.py): the
point's own scope, enclosing functions, the module, builtins. A name of the point's own
scope counts only if it is bound earlier in it and, by the flow of the scope
(analysis/bindings.py), on every path to the point: a name bound in only one branch of an
`if` (or only in a `try` body, not its handlers) may be unbound there and does not count;
bindings in a loop body count after the loop (loops are assumed to run); a binding only
*later* in the same function, even inside an enclosing loop, does not. A name of an
enclosing scope (or one a `global`/`nonlocal` names) counts wherever some code binds it.
"""

from __future__ import annotations

import libcst as cst

from florwb_engine.analysis.bindings import SurelyBound
from florwb_engine.analysis.names import BUILTIN_NAMES
from florwb_engine.analysis.scopes import LexicalScope, ScopeTree
from florwb_engine.propagate.match_tree import TNode, Tree


class _Positions:
    """One scope's bindings as preorder positions, and what its flow surely binds."""

    __slots__ = ("root", "names", "surely", "definite")

    def __init__(self, scope: LexicalScope, tree: Tree) -> None:
        body = scope.body
        self.root = tree.of(body) if body is not None else None
        self.names: dict[str, list[int]] = {}
        self.surely: SurelyBound | None = None
        self.definite: dict[tuple[int, int], frozenset[str]] = {}


class Bindings:
    """The old version's scopes, queried as "is `x` defined at this position"."""

    def __init__(self, tree: Tree) -> None:
        self.tree = tree
        self.scopes = ScopeTree(tree.module)
        self.module_scope = self.scopes.root
        self._positions: dict[int, _Positions] = {}

    def scope_of_block(self, block: TNode) -> LexicalScope:
        return self.scopes.block_scope(block.node)

    def module_binds(self, name: str) -> bool:
        return self.module_scope.binds(name)

    def binds_anywhere(self, name: str) -> bool:
        """Some statement binds `name` (a lambda's parameter or a comprehension's variable
        is no statement's: an insertion never lands inside either)."""
        return any(s.binds(name) for s in self.scopes.scopes if s.body is not None)

    def is_defined(
        self, name: str, scope: LexicalScope, pos: int, at: tuple[TNode, int] | None = None
    ) -> bool:
        """True if `name` can be read at preorder position `pos` inside `scope`.

        With `at` = (block, index), the statement position `pos` stands for, a name of
        the scope itself must also be bound on every path to it (not in one branch only).
        """
        if name in BUILTIN_NAMES:
            return True
        owner = scope.lookup(name)
        if owner is None:
            return self.module_scope.star
        if owner is not scope:
            return True
        if not any(p < pos for p in self._bound_at(scope, name)):
            return False
        return at is None or self._surely_bound(scope, name, *at)

    def _scope_positions(self, scope: LexicalScope) -> _Positions:
        found = self._positions.get(id(scope))
        if found is None:
            found = self._positions[id(scope)] = _Positions(scope, self.tree)
        return found

    def _bound_at(self, scope: LexicalScope, name: str) -> list[int]:
        """Positions of the scope's own code that bind `name`."""
        positions = self._scope_positions(scope)
        found = positions.names.get(name)
        if found is None:
            by_cst = self.tree.by_cst
            nodes = scope.bindings.get(name, ())
            found = positions.names[name] = [by_cst[id(node)].idx for node in nodes]
        return found

    def _surely_bound(self, scope: LexicalScope, name: str, block: TNode, index: int) -> bool:
        """`name` (bound in `scope`) is bound on every path to statement `index` of
        `block`, a block of `scope`."""
        positions = self._scope_positions(scope)
        root = positions.root
        if root is None or not root.contains(block):
            return True
        if any(not root.contains_idx(p) for p in self._bound_at(scope, name)):
            return True  # a parameter
        key = (block.idx, index)
        surely = positions.definite.get(key)
        if surely is None:
            chain = [block.node]
            for above in block.ancestors():
                if above.idx < root.idx:
                    break
                chain.append(above.node)
            chain.reverse()
            if positions.surely is None:
                owner = scope.node
                assert isinstance(owner, (cst.Module, cst.FunctionDef, cst.ClassDef))
                positions.surely = SurelyBound(owner, loops_run=True)
            bound = positions.surely.before(chain, index)
            surely = positions.definite[key] = frozenset(bound)
        return name in surely
