"""Python's scopes over libcst: which scope holds which variable, and the nodes of one scope.

A name bound anywhere in a function is local to all of it, unless declared `global` (the
module's) or `nonlocal` (an enclosing function's); defs, classes, lambdas and
comprehensions open scopes of their own (a comprehension's variables do not leak, its
`:=` binds in the enclosing scope); code nested in a class body does not see the class's
names; a star import may bind any name. `ScopeTree` is the one model of this: propagation
asks it whether a name read at an insertion point is the point's own scope's, an enclosing
one's or nobody's (and then, for its own scope, analysis/bindings.py whether it is bound
on every path there); the instrumenter resolves names along the path the training code
runs through with it. The loop-state analysis tells a helper's locals from the globals it
changes with the one-scope helpers below.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import libcst as cst

from florwb_engine.analysis.bindings import import_bindings
from florwb_engine.analysis.names import all_parameters
from florwb_engine.analysis.nodes import (
    FIELDS_CACHE,
    KINDS,
    NESTED_SCOPES,
    NODE,
    fields_of,
    iter_children,
    kind_of,
)


def scope_nodes(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """`node` and the nodes of its scope below it, in source order: not into nested defs,
    classes, lambdas or comprehensions (those nodes themselves are yielded)."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        if current is not node and isinstance(current, NESTED_SCOPES):
            continue
        stack.extend(reversed([child for child, _, _ in iter_children(current)]))


def parameters(function: cst.FunctionDef) -> list[cst.Param]:
    """The named parameters (positional-only, plain, keyword-only), in order."""
    params = function.params
    return [*params.posonly_params, *params.params, *params.kwonly_params]


def parameter_names(function: cst.FunctionDef) -> set[str]:
    """Every parameter's name, `*args` and `**kwargs` included."""
    return {p.name.value for p in all_parameters(function.params)}


def declared_globals(function: cst.FunctionDef) -> set[str]:
    """Names the function declares `global`."""
    return {
        item.name.value
        for node in scope_nodes(function.body)
        if isinstance(node, cst.Global)
        for item in node.names
    }


def local_names(scope: cst.Module | cst.FunctionDef) -> set[str]:
    """Every name bound anywhere in a function (Python makes them all local), parameters
    included, less those declared `global` or `nonlocal`; for the module, its globals."""
    return ScopeTree(scope).root.local_names()


# -- the scope model ------------------------------------------------------------------------------

MODULE, FUNCTION, CLASS, LAMBDA, COMPREHENSION = (
    "module",
    "function",
    "class",
    "lambda",
    "comprehension",
)
_KINDS: dict[type, str] = {
    cst.Module: MODULE,
    cst.FunctionDef: FUNCTION,
    cst.ClassDef: CLASS,
    cst.Lambda: LAMBDA,
    cst.ListComp: COMPREHENSION,
    cst.SetComp: COMPREHENSION,
    cst.DictComp: COMPREHENSION,
    cst.GeneratorExp: COMPREHENSION,
}
BLOCK_TYPES = (cst.Module, cst.IndentedBlock, cst.SimpleStatementSuite)
# nodes that bind nothing and hold nothing that could: most of a module's nodes
_LEAVES = frozenset(
    {cst.Name, cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString, cst.Pass, cst.Ellipsis}
)


class LexicalScope:
    """One Python scope (the module, a def, a class body, a lambda, a comprehension) and
    the variables it holds.

    `bindings` maps a name to the nodes of this scope's own code that bind it: a target's
    `Name`, a `Param`, the `def`/`class` itself, an `import`, a pattern's capture. Where
    nested code declares a name `global` (`nonlocal`) and binds it, the variable is the
    module's (the enclosing function's): those nodes are in the owner's `bound_elsewhere`,
    not in the nested scope's `bindings`.
    """

    __slots__ = (
        "kind",
        "node",
        "parent",
        "bindings",
        "bound_elsewhere",
        "annotated",
        "globals",
        "nonlocals",
        "star",
    )

    def __init__(self, kind: str, node: cst.CSTNode, parent: LexicalScope | None) -> None:
        self.kind = kind
        self.node = node
        self.parent = parent
        self.bindings: dict[str, list[cst.CSTNode]] = {}
        self.bound_elsewhere: dict[str, list[cst.CSTNode]] = {}
        self.annotated: set[str] = set()  # a function's `x: int`: local, yet bound by nothing
        self.globals: set[str] = set()
        self.nonlocals: set[str] = set()
        self.star = False  # `from m import *` here: any name may be bound

    def bind(self, name: str, node: cst.CSTNode) -> None:
        found = self.bindings.get(name)
        if found is None:
            self.bindings[name] = [node]
        else:
            found.append(node)

    @property
    def body(self) -> cst.CSTNode | None:
        """The block this scope's statements run in: the module itself, a def's or a
        class's body; none for a lambda or a comprehension."""
        if self.kind == MODULE:
            return self.node
        if self.kind in (FUNCTION, CLASS):
            return self.node.body  # type: ignore[attr-defined]
        return None

    @property
    def module(self) -> LexicalScope:
        scope = self
        while scope.parent is not None:
            scope = scope.parent
        return scope

    def binds(self, name: str) -> bool:
        """Some code binds this scope's variable `name` (its own, or nested code's that
        declares it `global`/`nonlocal`)."""
        return name in self.bindings or name in self.bound_elsewhere

    def holds(self, name: str) -> bool:
        """`name` is this scope's variable (a function's annotated-only name too)."""
        return name in self.bindings or name in self.bound_elsewhere or name in self.annotated

    def local_names(self) -> set[str]:
        """The names whose variables this scope holds. In a function a name bound anywhere
        is local throughout (Python decides at compile time), and so is one only
        annotated (`x: int`)."""
        return {*self.bindings, *self.bound_elsewhere, *self.annotated}

    def lookup(self, name: str) -> LexicalScope | None:
        """The scope whose variable a read of `name` here reads: this one if it holds it;
        the module for a `global`; for a `nonlocal` the nearest enclosing function that
        holds it, for a free name the nearest enclosing function or the module. Class
        bodies are not visible to the code nested in them (methods, lambdas,
        comprehensions). None where no scope binds it: a builtin, a star import's name or
        an undefined one."""
        if name in self.globals:
            module = self.module
            return module if module.kind == MODULE and module.binds(name) else None
        nonlocal_ = name in self.nonlocals
        if not nonlocal_ and self.holds(name):
            return self
        outer = self.parent
        while outer is not None:
            if nonlocal_ and outer.kind == MODULE:
                return None
            if outer.kind != CLASS and outer.holds(name):
                return outer
            outer = outer.parent
        return None

    def enclosing(self) -> LexicalScope | None:
        """The nearest enclosing scope whose names code here can see (class bodies are
        skipped)."""
        outer = self.parent
        while outer is not None and outer.kind == CLASS:
            outer = outer.parent
        return outer

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        name = getattr(self.node, "name", None)
        return f"<{self.kind} scope {name.value if isinstance(name, cst.Name) else ''}>"


_Stack = list[tuple[cst.CSTNode, LexicalScope]]


class ScopeTree:
    """Every scope of a module (or of one def alone, for its locals), built in one walk."""

    def __init__(self, root: cst.Module | cst.FunctionDef) -> None:
        self.root = LexicalScope(_KINDS[type(root)], root, None)
        self.scopes: list[LexicalScope] = [self.root]  # outer scopes before inner ones
        self._by_node: dict[int, LexicalScope] = {id(root): self.root}
        self._by_block: dict[int, LexicalScope] = {}
        pending: _Stack = [(root, self.root)]
        if isinstance(root, cst.FunctionDef):
            pending = []
            _enter_def(root, self.root, pending, None)
        self._walk(pending)
        self._route_declarations()

    def scope(self, node: cst.CSTNode) -> LexicalScope:
        """The scope a module, def, class, lambda or comprehension node opens."""
        return self._by_node[id(node)]

    def block_scope(self, block: cst.CSTNode) -> LexicalScope:
        """The scope whose code a block (the module, an indented block, a one-line
        suite) is."""
        return self._by_block[id(block)]

    def open(self, node: cst.CSTNode, parent: LexicalScope) -> LexicalScope:
        scope = LexicalScope(_KINDS[type(node)], node, parent)
        self.scopes.append(scope)
        self._by_node[id(node)] = scope
        return scope

    def _walk(self, stack: _Stack) -> None:
        """Records what every node on `stack` and below binds, and the scopes it opens.
        Dispatch is on exact types: `isinstance` against libcst's ABC-based classes is
        slow, and this visits every node of a module."""
        pop = stack.pop
        leaves, handlers, by_block = _LEAVES, _HANDLERS, self._by_block
        while stack:
            node, scope = pop()
            tp = type(node)
            if tp in leaves:
                continue
            handler = handlers.get(tp)
            if handler is not None:
                handler(self, node, scope, stack)
                continue
            if tp is cst.IndentedBlock or tp is cst.Module or tp is cst.SimpleStatementSuite:
                by_block[id(node)] = scope
            _push_children(node, scope, stack)

    def _route_declarations(self) -> None:
        """A name code declares `global` (`nonlocal`) is the module's (the enclosing
        function's) variable: its bindings move there. Outer scopes come first, so an
        enclosing function already holds what its own declarations left it."""
        for scope in self.scopes:
            if scope.kind == MODULE:
                continue
            for name in scope.globals | scope.nonlocals:
                nodes = scope.bindings.pop(name, None)
                scope.annotated.discard(name)
                owner = scope.lookup(name)
                if name in scope.globals and owner is None and scope.module.kind == MODULE:
                    owner = scope.module  # bound only here, yet the module's
                if nodes and owner is not None and owner is not scope:
                    owner.bound_elsewhere.setdefault(name, []).extend(nodes)


def _push_children(node: cst.CSTNode, scope: LexicalScope, stack: _Stack) -> None:
    """`node`'s children onto the stack, to be walked in source order (iter_children,
    inlined: this runs for most nodes of a module)."""
    kids: _Stack = []
    tp = type(node)
    for name in FIELDS_CACHE.get(tp) or fields_of(tp):
        value: Any = getattr(node, name, None)
        vt = type(value)
        if vt is tuple or vt is list:
            for child in value:
                kind = KINDS.get(type(child))
                if kind is None:
                    kind = kind_of(type(child))
                if kind == NODE:
                    kids.append((child, scope))
        else:
            kind = KINDS.get(vt)
            if kind is None:
                kind = kind_of(vt)
            if kind == NODE:
                kids.append((value, scope))
    kids.reverse()
    stack.extend(kids)


def _bind_target(target: cst.CSTNode, scope: LexicalScope, stack: _Stack) -> None:
    """Binds the names of an assignment / for / with / except target; `x.y` and `x[i]`
    bind nothing and are walked as the reads they hold."""
    tp = type(target)
    if tp is cst.Name:
        scope.bind(target.value, target)  # type: ignore[attr-defined]
    elif tp is cst.Tuple or tp is cst.List:
        for element in target.elements:  # type: ignore[attr-defined]
            _bind_target(element.value, scope, stack)
    elif tp is cst.StarredElement:
        _bind_target(target.value, scope, stack)  # type: ignore[attr-defined]
    else:
        stack.append((target, scope))


def _enter_def(
    node: cst.FunctionDef | cst.ClassDef,
    inner: LexicalScope,
    stack: _Stack,
    outer: LexicalScope | None,
) -> None:
    """Parameters and the body are the new scope's; decorators, defaults, annotations and
    bases run in the enclosing one (absent when a def is analysed alone)."""
    pending: _Stack = []
    if outer is not None:
        pending.extend((d, outer) for d in node.decorators)
    if type(node) is cst.FunctionDef:
        for param in all_parameters(node.params):
            inner.bind(param.name.value, param)
            if outer is not None:
                pending.extend((p, outer) for p in (param.annotation, param.default) if p)
        if outer is not None and node.returns is not None:
            pending.append((node.returns, outer))
    elif outer is not None:
        pending.extend((arg, outer) for arg in (*node.bases, *node.keywords))  # type: ignore[union-attr]
    if node.type_parameters is not None:
        pending.append((node.type_parameters, inner))
    pending.append((node.body, inner))
    pending.reverse()
    stack.extend(pending)


def _def(tree: ScopeTree, node: Any, scope: LexicalScope, stack: _Stack) -> None:
    scope.bind(node.name.value, node)
    _enter_def(node, tree.open(node, scope), stack, scope)


def _lambda(tree: ScopeTree, node: Any, scope: LexicalScope, stack: _Stack) -> None:
    inner = tree.open(node, scope)
    pending: _Stack = []
    for param in all_parameters(node.params):
        inner.bind(param.name.value, param)
        if param.default is not None:
            pending.append((param.default, scope))
    pending.append((node.body, inner))
    pending.reverse()
    stack.extend(pending)


def _comprehension(tree: ScopeTree, node: Any, scope: LexicalScope, stack: _Stack) -> None:
    """The first iterable runs in the enclosing scope; the targets, conditions, later
    iterables and the element are the comprehension's."""
    inner = tree.open(node, scope)
    pending: _Stack = []
    loop = node.for_in
    outermost = True
    while loop is not None:
        pending.append((loop.iter, scope if outermost else inner))
        outermost = False
        _bind_target(loop.target, inner, pending)
        pending.extend((condition.test, inner) for condition in loop.ifs)
        loop = loop.inner_for_in
    if type(node) is cst.DictComp:
        pending.extend(((node.key, inner), (node.value, inner)))
    else:
        pending.append((node.elt, inner))
    pending.reverse()
    stack.extend(pending)


def _assign(tree: ScopeTree, node: Any, scope: LexicalScope, stack: _Stack) -> None:
    stack.append((node.value, scope))
    for target in node.targets:
        _bind_target(target.target, scope, stack)


def _ann_assign(tree: ScopeTree, node: Any, scope: LexicalScope, stack: _Stack) -> None:
    stack.append((node.annotation, scope))
    if node.value is not None:
        stack.append((node.value, scope))
        _bind_target(node.target, scope, stack)
    elif type(node.target) is cst.Name:
        if scope.kind == FUNCTION:
            scope.annotated.add(node.target.value)
    else:
        stack.append((node.target, scope))


def _aug_assign(tree: ScopeTree, node: Any, scope: LexicalScope, stack: _Stack) -> None:
    stack.append((node.value, scope))
    _bind_target(node.target, scope, stack)


def _for(tree: ScopeTree, node: Any, scope: LexicalScope, stack: _Stack) -> None:
    if node.orelse is not None:
        stack.append((node.orelse, scope))
    stack.append((node.body, scope))
    stack.append((node.iter, scope))
    _bind_target(node.target, scope, stack)


def _named_expr(tree: ScopeTree, node: Any, scope: LexicalScope, stack: _Stack) -> None:
    """`:=` in a comprehension binds in the scope around it (PEP 572)."""
    owner = scope
    while owner.kind == COMPREHENSION and owner.parent is not None:
        owner = owner.parent
    stack.append((node.value, scope))
    _bind_target(node.target, owner, stack)


def _as_name(tree: ScopeTree, node: Any, scope: LexicalScope, stack: _Stack) -> None:
    """`with ... as x`, `except E as x` (an import's `as` is the import's)."""
    _bind_target(node.name, scope, stack)


def _import(tree: ScopeTree, node: Any, scope: LexicalScope, stack: _Stack) -> None:
    if isinstance(node.names, cst.ImportStar):
        scope.star = True
        return
    for binding in import_bindings(node, node, node):
        scope.bind(binding.name, node)


def _global(tree: ScopeTree, node: Any, scope: LexicalScope, stack: _Stack) -> None:
    scope.globals.update(item.name.value for item in node.names)


def _nonlocal(tree: ScopeTree, node: Any, scope: LexicalScope, stack: _Stack) -> None:
    scope.nonlocals.update(item.name.value for item in node.names)


def _capture(tree: ScopeTree, node: Any, scope: LexicalScope, stack: _Stack) -> None:
    """A `case` pattern's capture (`case Point(x=px)`, `case [first, *rest]`,
    `case {**others}`)."""
    name = node.rest if type(node) is cst.MatchMapping else node.name
    if name is not None:
        scope.bind(name.value, node)
    _push_children(node, scope, stack)


_HANDLERS: dict[type, Callable[[ScopeTree, Any, LexicalScope, _Stack], None]] = {
    cst.FunctionDef: _def,
    cst.ClassDef: _def,
    cst.Lambda: _lambda,
    cst.ListComp: _comprehension,
    cst.SetComp: _comprehension,
    cst.DictComp: _comprehension,
    cst.GeneratorExp: _comprehension,
    cst.Assign: _assign,
    cst.AnnAssign: _ann_assign,
    cst.AugAssign: _aug_assign,
    cst.For: _for,
    cst.NamedExpr: _named_expr,
    cst.AsName: _as_name,
    cst.Import: _import,
    cst.ImportFrom: _import,
    cst.Global: _global,
    cst.Nonlocal: _nonlocal,
    cst.MatchAs: _capture,
    cst.MatchStar: _capture,
    cst.MatchMapping: _capture,
}
