"""Which variables are bound, for sure, where the training loop starts, and to what.

`with flor.checkpointing(model=net)` placed right before the loop must not name a variable
that is unbound there (a NameError the original script never had), so only bindings that
dominate the loop count: assignments earlier in the same block or in an enclosing block of
the same function (`with` bodies count, they always run; `if`/`for`/`try` bodies do not).
An `if`/`elif`/`else` whose every branch binds a name (`if args.model == "rnn": model =
RNNModel(...) else: model = TransformerModel(...)`) binds it for certain too; a branch that
ends in `raise` never reaches the loop and does not count. Names follow Python's scoping:
a function's own locals shadow the module's, and a parameter is traced to the argument at
the function's one call site.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

import libcst as cst

from florwb_engine.analysis.names import assigned_names
from florwb_engine.analysis.nodes import NESTED_SCOPES
from florwb_engine.instrument.syntax import strip_passthrough
from florwb_engine.instrument.tree import Tree

Scope = cst.Module | cst.FunctionDef
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
    # An if/else binding the name in each branch: the binding of every branch (this
    # binding is the first of them).
    alternatives: tuple[Binding, ...] = ()


@dataclass(frozen=True, eq=False)
class Origin:
    """The expression that created an object, where it ran, and the tuple element taken."""

    expr: cst.BaseExpression
    scope: Scope
    stmt: cst.CSTNode
    index: int | None = None

    @property
    def key(self) -> tuple[int, int | None]:
        return id(self.expr), self.index


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


def statement_bindings(stmt: cst.CSTNode, scope: Scope) -> Iterator[Binding]:
    """Bindings a statement makes for certain once it ran (`with` bodies included)."""
    if isinstance(stmt, cst.SimpleStatementLine):
        for small in stmt.body:
            yield from _small_bindings(small, scope, stmt)
    elif isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
        yield Binding(stmt.name.value, scope, stmt, OTHER)
    elif isinstance(stmt, cst.If):
        yield from _branch_bindings(stmt, scope)
    elif isinstance(stmt, cst.With):
        for item in stmt.items:
            if item.asname is not None:
                for name in assigned_names(item.asname.name):
                    yield Binding(name, scope, stmt, OTHER)
        body = stmt.body
        for inner in body.body:
            if isinstance(body, cst.SimpleStatementSuite):
                yield from _small_bindings(inner, scope, stmt)
            else:
                yield from statement_bindings(inner, scope)


def _block_bindings(block: cst.BaseSuite, scope: Scope, stmt: cst.CSTNode) -> dict[str, Binding]:
    found: dict[str, Binding] = {}
    for inner in block.body:
        if isinstance(block, cst.SimpleStatementSuite):
            bindings = _small_bindings(inner, scope, stmt)
        else:
            bindings = statement_bindings(inner, scope)
        for binding in bindings:
            found[binding.name] = binding
    return found


def _ends_in_raise(block: cst.BaseSuite) -> bool:
    last = block.body[-1] if block.body else None
    if isinstance(last, cst.SimpleStatementLine):
        return any(isinstance(small, cst.Raise) for small in last.body)
    return isinstance(last, cst.Raise)


def _branch_bindings(stmt: cst.If, scope: Scope) -> Iterator[Binding]:
    """Names bound in every branch of an if/elif/else chain that has an `else`."""
    blocks: list[cst.BaseSuite] = []
    node: cst.If = stmt
    while True:
        blocks.append(node.body)
        if isinstance(node.orelse, cst.If):
            node = node.orelse
        elif isinstance(node.orelse, cst.Else):
            blocks.append(node.orelse.body)
            break
        else:
            return  # no else: one path binds nothing
    branches = [_block_bindings(b, scope, stmt) for b in blocks if not _ends_in_raise(b)]
    if not branches:
        return
    for name, first in branches[0].items():
        if not all(name in branch for branch in branches[1:]):
            continue
        alternatives = tuple(branch[name] for branch in branches)
        if len(alternatives) == 1:
            yield first
        elif all(b.kind == ASSIGN for b in alternatives):
            yield replace(first, alternatives=alternatives)
        else:
            yield Binding(name, scope, stmt, OTHER)


def _small_bindings(small: cst.CSTNode, scope: Scope, stmt: cst.CSTNode) -> Iterator[Binding]:
    if isinstance(small, cst.Assign):
        for target in small.targets:
            yield from _assign_bindings(target.target, small.value, scope, stmt)
    elif isinstance(small, cst.AnnAssign) and small.value is not None:
        yield from _assign_bindings(small.target, small.value, scope, stmt)
    elif isinstance(small, cst.AugAssign):
        for name in assigned_names(small.target):
            yield Binding(name, scope, stmt, OTHER)
    elif isinstance(small, (cst.Import, cst.ImportFrom)) and not isinstance(
        small.names, cst.ImportStar
    ):
        for alias in small.names:
            if alias.asname is not None:
                yield from (
                    Binding(n, scope, stmt, OTHER) for n in assigned_names(alias.asname.name)
                )
            else:
                node: cst.BaseExpression = alias.name
                while isinstance(node, cst.Attribute):
                    node = node.value
                if isinstance(node, cst.Name):
                    yield Binding(node.value, scope, stmt, OTHER)


def parameters(function: cst.FunctionDef) -> list[cst.Param]:
    params = function.params
    return [*params.posonly_params, *params.params, *params.kwonly_params]


class Scopes:
    """Name resolution for one script, along the path the training code runs through.

    `points` maps a scope (by id) to the statement in it through which execution reaches
    the training loop (the call of main(), the call of train(), ...): that is where the
    names of an enclosing scope are looked up.
    """

    def __init__(self, tree: Tree) -> None:
        self.tree = tree
        self.points: dict[int, cst.CSTNode] = {}
        self._locals: dict[int, set[str]] = {}

    # -- what a scope binds --------------------------------------------------------------

    def local_names(self, scope: Scope) -> set[str]:
        """Every name bound anywhere in a function (Python makes them all local)."""
        if id(scope) in self._locals:
            return self._locals[id(scope)]
        names: set[str] = set()
        declared: set[str] = set()
        if isinstance(scope, cst.FunctionDef):
            names.update(p.name.value for p in parameters(scope))
            for star in (scope.params.star_arg, scope.params.star_kwarg):
                if isinstance(star, cst.Param):
                    names.add(star.name.value)
        body = scope.body if isinstance(scope, cst.FunctionDef) else scope
        for node in self.walk_scope(body):
            if isinstance(node, (cst.Global, cst.Nonlocal)):
                declared.update(n.name.value for n in node.names)
            elif isinstance(node, (cst.Assign, cst.AnnAssign, cst.AugAssign)):
                targets = node.targets if isinstance(node, cst.Assign) else [node]
                for target in targets:
                    names.update(assigned_names(target.target))
            elif isinstance(node, cst.For):
                names.update(assigned_names(node.target))
            elif isinstance(node, cst.AsName):
                names.update(assigned_names(node.name))
            elif isinstance(node, (cst.FunctionDef, cst.ClassDef)) and node is not scope:
                names.add(node.name.value)
            elif isinstance(node, cst.NamedExpr):
                names.update(assigned_names(node.target))
            elif isinstance(node, (cst.Import, cst.ImportFrom)):
                for binding in _small_bindings(node, scope, node):
                    names.add(binding.name)
        names -= declared
        self._locals[id(scope)] = names
        return names

    def walk_scope(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        """Nodes of one scope: not into nested defs, classes, lambdas or comprehensions."""
        stack = [node]
        while stack:
            current = stack.pop()
            yield current
            if current is not node and isinstance(current, NESTED_SCOPES):
                continue
            stack.extend(reversed(self.tree.children(current)))

    def dominating(self, scope: Scope, point: cst.CSTNode) -> dict[str, Binding]:
        """Bindings certainly made in `scope` before `point` runs (the last one per name)."""
        levels: list[tuple[list, int]] = []
        child: cst.CSTNode = point
        for ancestor in self.tree.ancestors(point):
            if isinstance(ancestor, (cst.Module, cst.IndentedBlock, cst.SimpleStatementSuite)):
                body = list(ancestor.body)
                index = next((i for i, s in enumerate(body) if s is child), None)
                if index is not None:
                    levels.append((body, index))
            if ancestor is scope:
                break
            child = ancestor
        found: dict[str, Binding] = {}
        if isinstance(scope, cst.FunctionDef):
            for param in parameters(scope):
                found[param.name.value] = Binding(param.name.value, scope, scope, PARAM)
        for body, index in reversed(levels):
            for stmt in body[:index]:
                for binding in statement_bindings(stmt, scope):
                    found[binding.name] = binding
        return found

    def parent_scope(self, scope: Scope) -> Scope | None:
        if isinstance(scope, cst.Module):
            return None
        return self.tree.scope_of(scope)

    def visible(self, scope: Scope, point: cst.CSTNode) -> dict[str, Binding]:
        """Names usable at `point` with certainty, innermost scope first."""
        found: dict[str, Binding] = {}
        shadowed: set[str] = set()
        current: Scope | None = scope
        at: cst.CSTNode | None = point
        while current is not None and at is not None:
            for name, binding in self.dominating(current, at).items():
                if name not in found and name not in shadowed:
                    found[name] = binding
            if isinstance(current, cst.FunctionDef):
                shadowed |= self.local_names(current)
            parent = self.parent_scope(current)
            at = self.points.get(id(parent)) if parent is not None else None
            if parent is not None and at is None:
                at = self.tree.statement_of(current)  # names bound before the def
            current = parent
        return found

    def lookup(self, name: str, scope: Scope, point: cst.CSTNode) -> Binding | None:
        return self.visible(scope, point).get(name)

    # -- where a value comes from ----------------------------------------------------------

    def origin(self, binding: Binding, depth: int = 0) -> Origin | None:
        """The expression that created the object a binding names, following aliases
        (`model = net`), passthrough calls (`net.to(device)`) and parameters."""
        if depth > 12:
            return None
        if binding.kind == PARAM:
            return self._argument_origin(binding, depth)
        if binding.kind != ASSIGN or binding.value is None:
            return None
        value = strip_passthrough(binding.value)
        if binding.index is None and isinstance(value, cst.Name):
            earlier = self.lookup(value.value, binding.scope, binding.stmt)
            if earlier is None or earlier is binding:
                return None
            return self.origin(earlier, depth + 1)
        return Origin(value, binding.scope, binding.stmt, binding.index)

    def expression_origin(
        self, expr: cst.BaseExpression, scope: Scope, stmt: cst.CSTNode, depth: int = 0
    ) -> Origin | None:
        expr = strip_passthrough(expr)
        if isinstance(expr, cst.Name):
            binding = self.lookup(expr.value, scope, stmt)
            return self.origin(binding, depth + 1) if binding is not None else None
        return Origin(expr, scope, stmt)

    def _argument_origin(self, binding: Binding, depth: int) -> Origin | None:
        function = binding.scope
        assert isinstance(function, cst.FunctionDef)
        info = self.tree.function(function)
        if len(info.references) != 1 or len(info.calls) != 1:
            return None
        call = info.calls[0]
        names = [p.name.value for p in parameters(function)]
        position = names.index(binding.name)
        argument: cst.BaseExpression | None = None
        positional = [a for a in call.args if a.keyword is None and not a.star]
        if any(a.star for a in call.args):
            return None
        for arg in call.args:
            if arg.keyword is not None and arg.keyword.value == binding.name:
                argument = arg.value
        if argument is None and position < len(positional):
            if position < len(function.params.posonly_params) + len(function.params.params):
                argument = positional[position].value
        if argument is None:
            return None
        caller = self.tree.scope_of(call)
        return self.expression_origin(argument, caller, self.tree.statement_of(call), depth)
