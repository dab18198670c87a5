"""Which variables are bound, for sure, where the training loop starts, and to what.

`with flor.checkpointing(model=net)` placed right before the loop must not name a variable
that is unbound there (a NameError the original script never had), so only bindings that
dominate the loop count, by the rules of analysis/bindings.py: an `if`/`elif`/`else` (or a
`try` and its handlers) whose every branch binds a name (`if args.model == "rnn": model =
RNNModel(...) else: model = TransformerModel(...)`) binds it for certain, a branch that
never reaches the loop (`raise`, `sys.exit()`) does not count, and a loop's body does not
count after it (it may run zero times). Names follow Python's scoping (analysis/scopes.py):
a function's own locals shadow the enclosing scopes' names, a class body's names are not
its methods', and a parameter is traced to the argument at the function's one call site.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import libcst as cst

from florwb_engine.analysis.bindings import ASSIGN, PARAM, Binding, Scope, SurelyBound
from florwb_engine.analysis.scopes import (
    BLOCK_TYPES,
    MODULE,
    LexicalScope,
    ScopeTree,
    parameters,
    scope_nodes,
)
from florwb_engine.instrument.script_index import Tree
from florwb_engine.instrument.syntax import strip_passthrough


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


class Scopes:
    """Name resolution for one script, along the path the training code runs through.

    `points` maps a scope (by id) to the statement in it through which execution reaches
    the training loop (the call of main(), the call of train(), ...): that is where the
    names of an enclosing scope are looked up.
    """

    def __init__(self, tree: Tree) -> None:
        self.tree = tree
        self.points: dict[int, cst.CSTNode] = {}
        self._scope_tree: ScopeTree | None = None

    @property
    def scope_tree(self) -> ScopeTree:
        if self._scope_tree is None:
            self._scope_tree = ScopeTree(self.tree.module)
        return self._scope_tree

    # -- what a scope binds --------------------------------------------------------------

    def local_names(self, scope: Scope) -> set[str]:
        """Every name bound anywhere in a function (Python makes them all local)."""
        return self.scope_tree.scope(scope).local_names()

    def walk_scope(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        """Nodes of one scope: not into nested defs, classes, lambdas or comprehensions."""
        return scope_nodes(node)

    def dominating(self, scope: Scope, point: cst.CSTNode) -> dict[str, Binding]:
        """Bindings certainly made in `scope` before `point` runs (the last one per name).
        A loop's body does not count after it: what this names runs in the user's
        training, and a loop may run zero times (analysis/bindings.py)."""
        lineage = [point, *self.tree.ancestors(point)]
        at = next((i for i, node in enumerate(lineage) if node is scope), None)
        upto = lineage[:at] if at is not None else []
        if isinstance(scope, cst.Module) and upto:
            upto.append(scope)  # the module is its own body
        # the statement holding `point`: the deepest node right in a block
        i = next((k for k in range(len(upto) - 1) if isinstance(upto[k + 1], BLOCK_TYPES)), None)
        chain = list(reversed(upto[i + 1 :])) if i is not None else []
        index = None
        if i is not None:
            body = getattr(chain[-1], "body", ())
            index = next((k for k, stmt in enumerate(body) if stmt is upto[i]), None)
        found: dict[str, Binding] = {}
        if isinstance(scope, cst.FunctionDef):
            for param in parameters(scope):
                found[param.name.value] = Binding(param.name.value, scope, scope, PARAM)
        if index is None:  # `point` is not in `scope`
            return found
        found.update(SurelyBound(scope, loops_run=False).before(chain, index))
        return found

    def visible(self, scope: Scope, point: cst.CSTNode) -> dict[str, Binding]:
        """Names usable at `point` with certainty, innermost scope first: a function's
        locals shadow the enclosing scopes' names; a class body's names are not its
        methods'."""
        found: dict[str, Binding] = {}
        shadowed: set[str] = set()
        current = self.scope_tree.scope(scope)
        at: cst.CSTNode = point
        while True:
            assert isinstance(current.node, (cst.Module, cst.FunctionDef))
            for name, binding in self.dominating(current.node, at).items():
                if name not in found and name not in shadowed:
                    found[name] = binding
            if current.kind != MODULE:
                shadowed |= current.local_names()
            parent = current.enclosing()
            if parent is None:
                return found
            through = self.points.get(id(parent.node))
            at = through if through is not None else self._statement_in(parent, current.node)
            current = parent

    def _statement_in(self, scope: LexicalScope, node: cst.CSTNode) -> cst.CSTNode:
        """The statement of `scope`'s own code that holds `node` (a def in a class: the
        class statement): the names bound before it are the ones `node` can count on."""
        current = node
        for above in self.tree.ancestors(node):
            if isinstance(above, BLOCK_TYPES) and self.scope_tree.block_scope(above) is scope:
                return current
            current = above
        return current

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
