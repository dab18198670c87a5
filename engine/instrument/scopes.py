"""Which variables are bound, for sure, where the training loop starts, and to what.

`with flor.checkpointing(model=net)` placed right before the loop must not name a variable
that is unbound there (a NameError the original script never had), so only bindings that
dominate the loop count, by the rules of analysis/bindings.py: an `if`/`elif`/`else` (or a
`try` and its handlers) whose every branch binds a name (`if args.model == "rnn": model =
RNNModel(...) else: model = TransformerModel(...)`) binds it for certain, a branch that
never reaches the loop (`raise`, `sys.exit()`) does not count, and a loop's body does not
count after it (it may run zero times). Names follow Python's scoping: a function's own
locals shadow the module's, and a parameter is traced to the argument at the function's
one call site.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import libcst as cst

from florwb_engine.analysis import scopes
from florwb_engine.analysis.bindings import ASSIGN, PARAM, Binding, Scope, SurelyBound
from florwb_engine.analysis.scopes import parameters
from florwb_engine.instrument.syntax import strip_passthrough
from florwb_engine.instrument.tree import Tree

_BLOCKS = (cst.Module, cst.IndentedBlock, cst.SimpleStatementSuite)


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
        self._locals: dict[int, set[str]] = {}

    # -- what a scope binds --------------------------------------------------------------

    def local_names(self, scope: Scope) -> set[str]:
        """Every name bound anywhere in a function (Python makes them all local)."""
        if id(scope) not in self._locals:
            assert not isinstance(scope, cst.ClassDef)  # scopes here are functions or the module
            self._locals[id(scope)] = scopes.local_names(scope)
        return self._locals[id(scope)]

    def walk_scope(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        """Nodes of one scope: not into nested defs, classes, lambdas or comprehensions."""
        return scopes.scope_nodes(node)

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
        i = next((k for k in range(len(upto) - 1) if isinstance(upto[k + 1], _BLOCKS)), None)
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
