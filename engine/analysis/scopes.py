"""Python's scopes over libcst: the nodes of one scope, a function's parameters, its
`global` declarations and every name it makes local.

A name assigned anywhere in a function is local to all of it (unless declared `global` or
`nonlocal`); nested defs, classes, lambdas and comprehensions have scopes of their own.
The instrumenter resolves names along the path the training code runs through with these,
and the loop-state analysis tells a helper's locals from the globals it changes.
"""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from florwb_engine.analysis.bindings import import_bindings
from florwb_engine.analysis.names import assigned_names
from florwb_engine.analysis.nodes import NESTED_SCOPES, iter_children


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
    names = {p.name.value for p in parameters(function)}
    for star in (function.params.star_arg, function.params.star_kwarg):
        if isinstance(star, cst.Param):
            names.add(star.name.value)
    return names


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
    names: set[str] = set()
    declared: set[str] = set()
    if isinstance(scope, cst.FunctionDef):
        names |= parameter_names(scope)
    body = scope.body if isinstance(scope, cst.FunctionDef) else scope
    for node in scope_nodes(body):
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
            names.update(b.name for b in import_bindings(node, scope, node))
    return names - declared
