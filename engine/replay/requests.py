"""flor.iteration blocks a replay cannot reach: those inside a function the script never
calls itself, such as a web framework's request handler (`@app.route` ... `with
flor.iteration("document", None, name): ... flor.commit()`). What ran there came from a
request, which no replay can send again; the plan says so instead of re-running the
script (which would start the server). A flor.iteration the script reaches by its own
code (a `for` or `while` over documents) replays like the code around it.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from florwb_engine.flor_calls import imports_from_ast


@dataclass(frozen=True)
class Unreachable:
    first_line: int
    last_line: int
    iteration: str  # the flor.iteration's name, as written
    function: str


def unreachable_iterations(code: str) -> list[Unreachable]:
    """The flor.iteration blocks of `code` inside functions nothing in it calls."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return []
    imports = imports_from_ast(tree)
    called = _called_names(tree)
    found = []
    for func in ast.walk(tree):
        if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)) or func.name in called:
            continue
        for node in ast.walk(func):
            if not isinstance(node, (ast.With, ast.AsyncWith)):
                continue
            for item in node.items:
                call = item.context_expr
                if isinstance(call, ast.Call) and imports.api_of_ast(call.func) == "iteration":
                    name = ast.unparse(call.args[0]) if call.args else "?"
                    end = node.end_lineno or node.lineno
                    found.append(Unreachable(node.lineno, end, name, func.name))
    return found


def iteration_names(code: str) -> set[str]:
    """The literal names of the flor.iterations in `code`."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return set()
    imports = imports_from_ast(tree)
    return {
        node.args[0].value
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and imports.api_of_ast(node.func) == "iteration"
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    }


def _called_names(tree: ast.AST) -> set[str]:
    """Names the module calls or hands on as values (`f()`, `obj.f()`, `map(f, xs)`, a
    thread's `target=f`), decorators left out: a decorator registers a function with
    something else that calls it, like a web framework."""
    decorators = {
        id(d)
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        for d in node.decorator_list
    }
    names: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in decorators:
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            names.add(node.attr)
    return names


def refusal(code: str, placed: dict[str, int | None]) -> str | None:
    """Why the statements `placed` (name -> line in `code`) cannot be replayed, if one sits
    in an unreachable flor.iteration."""
    blocks = unreachable_iterations(code)
    for name, line in placed.items():
        for b in blocks:
            if line is not None and b.first_line <= line <= b.last_line:
                return (
                    f"{name} sits in flor.iteration({b.iteration}, ...) in {b.function}(), "
                    "which the script never calls itself (a request handler): a web request "
                    "cannot be replayed"
                )
    return None
