"""Which names an expression reads, and which names the old version defines where.

A statement may only go where everything it reads already exists; an insertion that reads
an undefined name would crash the replay or, worse, read a different variable. The analysis
follows Python's scoping (function locals, closures, globals, builtins; comprehension and
lambda scopes do not leak) and is positional: at an insertion point a local name counts as
defined only if some binding of it comes earlier in the source. Bindings in branches count
(a conditional definition usually holds at run time); a binding only *later* in the same
function, even inside an enclosing loop, does not.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable

import libcst as cst

from florwb_engine.propagate.tree import TNode, Tree, iter_children

BUILTIN_NAMES = frozenset(dir(builtins)) | frozenset(
    {"__name__", "__file__", "__doc__", "__spec__", "__loader__", "__package__", "__builtins__"}
)

_COMPREHENSIONS = (cst.ListComp, cst.SetComp, cst.GeneratorExp, cst.DictComp)


def target_names(target: cst.CSTNode) -> set[str]:
    """Names bound by an assignment / for / with target (`a`, `a, (b, *c)`), not `x.y`."""
    if isinstance(target, cst.Name):
        return {target.value}
    if isinstance(target, (cst.Tuple, cst.List)):
        names: set[str] = set()
        for element in target.elements:
            names |= target_names(element.value)
        return names
    if isinstance(target, (cst.StarredElement, cst.Element)):
        return target_names(target.value)
    return set()


def free_names(expr: cst.CSTNode) -> tuple[frozenset[str], list[cst.Name]]:
    """Free variable names read by an expression, and the Name nodes that read them."""
    nodes: list[cst.Name] = []
    _free(expr, frozenset(), nodes)
    return frozenset(n.value for n in nodes), nodes


def _free(node: cst.CSTNode, bound: frozenset[str], out: list[cst.Name]) -> None:
    if isinstance(node, cst.Name):
        if node.value not in bound:
            out.append(node)
        return
    if isinstance(node, cst.Attribute):
        _free(node.value, bound, out)
        return
    if isinstance(node, cst.Arg):
        _free(node.value, bound, out)
        return
    if isinstance(node, cst.NamedExpr):
        _free(node.value, bound, out)
        return
    if isinstance(node, cst.Lambda):
        params = node.params
        inner = set(bound)
        for param in _all_params(params):
            inner.add(param.name.value)
            if param.default is not None:
                _free(param.default, bound, out)
        _free(node.body, frozenset(inner), out)
        return
    if isinstance(node, _COMPREHENSIONS):
        comp_for = node.for_in
        _free(comp_for.iter, bound, out)  # the first iterable runs in the enclosing scope
        inner = set(bound)
        loops: list[cst.CompFor] = []
        current: cst.CompFor | None = comp_for
        while current is not None:
            inner |= target_names(current.target)
            loops.append(current)
            current = current.inner_for_in
        frozen = frozenset(inner)
        for i, loop in enumerate(loops):
            if i:
                _free(loop.iter, frozen, out)
            for cond in loop.ifs:
                _free(cond.test, frozen, out)
        if isinstance(node, cst.DictComp):
            _free(node.key, frozen, out)
            _free(node.value, frozen, out)
        else:
            _free(node.elt, frozen, out)
        return
    for child, _, _ in iter_children(node):
        _free(child, bound, out)


def self_attributes(expr: cst.CSTNode) -> list[cst.Attribute]:
    """`self.x` reads inside an expression (outermost `self.<attr>` of each chain)."""
    found: list[cst.Attribute] = []
    stack = [expr]
    while stack:
        node = stack.pop()
        if (
            isinstance(node, cst.Attribute)
            and isinstance(node.value, cst.Name)
            and node.value.value == "self"
        ):
            found.append(node)
            continue
        stack.extend(child for child, _, _ in iter_children(node))
    return found


def _all_params(params: cst.Parameters) -> Iterable[cst.Param]:
    yield from params.posonly_params
    yield from params.params
    if isinstance(params.star_arg, cst.Param):
        yield params.star_arg
    yield from params.kwonly_params
    if params.star_kwarg is not None:
        yield params.star_kwarg


class Scope:
    """One Python scope of the old version: where each name is bound (preorder positions)."""

    __slots__ = ("kind", "parent", "bindings", "globals", "star")

    def __init__(self, kind: str, parent: Scope | None) -> None:
        self.kind = kind
        self.parent = parent
        self.bindings: dict[str, list[int]] = {}
        self.globals: set[str] = set()
        self.star = False

    def bind(self, name: str, pos: int) -> None:
        self.bindings.setdefault(name, []).append(pos)


class Bindings:
    """Name bindings of a whole module, queried as "is `x` defined at this position"."""

    def __init__(self, tree: Tree) -> None:
        self.module_scope = Scope("module", None)
        self.block_scope: dict[int, Scope] = {}
        self._collect(tree.root)

    def scope_of_block(self, block: TNode) -> Scope:
        return self.block_scope[block.idx]

    def module_binds(self, name: str) -> bool:
        return name in self.module_scope.bindings

    def is_defined(self, name: str, scope: Scope, pos: int) -> bool:
        """True if `name` can be read at preorder position `pos` inside `scope`."""
        if name in BUILTIN_NAMES:
            return True
        module = self.module_scope
        if name in scope.globals:
            return name in module.bindings or module.star
        if name in scope.bindings:
            return any(p < pos for p in scope.bindings[name])
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
            node = tn.node
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
                inner = Scope("function", scope)
                for c in tn.children:
                    if c.field in ("params", "body", "type_parameters"):
                        stack.append((c, inner, False))
                    elif c.field != "name":
                        stack.append((c, scope, False))
            elif tp is cst.ClassDef:
                scope.bind(node.name.value, tn.idx)
                inner = Scope("class", scope)
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


_BLOCK_TYPES = frozenset({cst.Module, cst.IndentedBlock})
_OWN_SCOPES = frozenset({cst.Lambda, *_COMPREHENSIONS})
_TARGET_OWNERS = frozenset({cst.AssignTarget, cst.AugAssign, cst.For, cst.NamedExpr})
_TARGET_CONTAINERS = frozenset({cst.Tuple, cst.List, cst.StarredElement, cst.Element})
