"""Which names an expression reads and which names a target binds, by Python's scoping:
comprehension and lambda scopes do not leak, attribute and keyword names are not reads.
Propagation checks that a placed statement reads only names that exist; the loop-state
analysis finds the names a loop reads before it assigns them."""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Iterator

import libcst as cst

from florwb_engine.analysis.nodes import iter_children


def assigned_names(target: cst.CSTNode) -> Iterator[str]:
    """Every plain name an assignment / for / with target binds, in source order
    (`a, (b, *c)` -> a, b, c); `x.y` and `x[i]` bind none."""
    if isinstance(target, cst.Name):
        yield target.value
    elif isinstance(target, (cst.Tuple, cst.List)):
        for element in target.elements:
            yield from assigned_names(element.value)
    elif isinstance(target, (cst.StarredElement, cst.Element)):
        yield from assigned_names(target.value)


def target_names(target: cst.CSTNode) -> set[str]:
    """`assigned_names` as a set."""
    return set(assigned_names(target))


BUILTIN_NAMES = frozenset(dir(builtins)) | frozenset(
    {"__name__", "__file__", "__doc__", "__spec__", "__loader__", "__package__", "__builtins__"}
)

COMPREHENSIONS = (cst.ListComp, cst.SetComp, cst.GeneratorExp, cst.DictComp)


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
        for param in all_parameters(params):
            inner.add(param.name.value)
            if param.default is not None:
                _free(param.default, bound, out)
        _free(node.body, frozenset(inner), out)
        return
    if isinstance(node, COMPREHENSIONS):
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


def all_parameters(params: cst.Parameters) -> Iterable[cst.Param]:
    """Every parameter, `*args` and `**kwargs` included, in order."""
    yield from params.posonly_params
    yield from params.params
    if isinstance(params.star_arg, cst.Param):
        yield params.star_arg
    yield from params.kwonly_params
    if params.star_kwarg is not None:
        yield params.star_kwarg
