"""The `flor.loop`s of a source: where each sits, what it binds and what its body reads.

Replay planning decides its mode from these (is a statement before or after the main
loop; does the main loop's body read what its inner loops set), taking them from the
propagation result (`PropagationResult.loops`) instead of parsing the code on its own.
Loops are recognised through the script's flor imports (florwb_engine.flor_calls), so
`import florwb as fw` ... `fw.loop("epoch", ...)` counts and `other.loop(...)` does not.
"""

from __future__ import annotations

import ast

from florwb_engine.flor_calls import FlorImports, ast_call_name, imports_from_ast
from florwb_engine.propagate.model import FlorLoop


def flor_loops(source: str) -> tuple[FlorLoop, ...]:
    """Every `for ... in <flor>.loop("<name>", ...)` of `source`, in source order.

    A source that does not parse has no loops (propagation never returns such code)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return ()
    imports = imports_from_ast(tree)
    if not imports.modules and not imports.functions:
        return ()
    found: list[tuple[ast.For, str, tuple[str, ...]]] = []
    _collect(tree, imports, (), found)
    named = {id(node) for node, _name, _path in found}
    loops = []
    for node, name, path in found:
        binds = frozenset(
            n.id
            for n in ast.walk(node)
            if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del))
        )
        loops.append(
            FlorLoop(
                name=name,
                path=path,
                first_line=node.lineno,
                last_line=node.end_lineno or node.lineno,
                binds=binds,
                reads=frozenset(_body_reads(node, named)),
            )
        )
    loops.sort(key=lambda loop: loop.first_line)
    return tuple(loops)


def _collect(
    node: ast.AST,
    imports: FlorImports,
    path: tuple[str, ...],
    out: list[tuple[ast.For, str, tuple[str, ...]]],
) -> None:
    for child in ast.iter_child_nodes(node):
        inner = path
        if isinstance(child, (ast.For, ast.AsyncFor)):
            name = _loop_name(child.iter, imports)
            if name is not None and isinstance(child, ast.For):
                inner = (*path, name)
                out.append((child, name, inner))
        _collect(child, imports, inner, out)


def _loop_name(expr: ast.expr, imports: FlorImports) -> str | None:
    """The flor.loop name a for loop iterates over, also when wrapped (`enumerate(...)`)."""
    for node in ast.walk(expr):
        if isinstance(node, ast.Call):
            name = ast_call_name(node, imports, "loop")
            if name is not None:
                return name
    return None


def _body_reads(loop: ast.For, named: set[int]) -> set[str]:
    """Names the loop's body reads outside the flor.loops nested in it."""
    reads: set[str] = set()
    stack: list[ast.AST] = list(loop.body)
    while stack:
        node = stack.pop()
        if id(node) in named:
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            reads.add(node.id)
        stack.extend(ast.iter_child_nodes(node))
    return reads
