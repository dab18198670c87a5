"""flor.iteration blocks a replay cannot reach: those inside a function the script never
calls itself, such as a web framework's request handler (`@app.route` ... `with
flor.iteration("document", None, name): ... flor.commit()`). What ran there came from a
request, which no replay can send again; the plan says so instead of re-running the
script (which would start the server). A flor.iteration the script reaches by its own
code (a `for` or `while` over documents) replays like the code around it.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from florwb_engine.analysis.nodes import iter_children, parse, walk
from florwb_engine.flor_calls import imports_from_nodes, literal_string


@dataclass(frozen=True)
class Unreachable:
    first_line: int
    last_line: int
    iteration: str  # the flor.iteration's name, as written
    function: str


def unreachable_iterations(code: str) -> list[Unreachable]:
    """The flor.iteration blocks of `code` inside functions nothing in it calls."""
    parsed = parse(code)
    if parsed is None:
        return []
    module = parsed.module
    imports = imports_from_nodes(walk(module))
    if not imports.modules and not imports.functions:
        return []
    called: set[str] | None = None
    found = []
    for func in walk(module):
        if type(func) is not cst.FunctionDef:
            continue
        for node in walk(func):
            if type(node) is not cst.With:
                continue
            for item in node.items:
                call = item.item
                if type(call) is not cst.Call or imports.api_of(call.func) != "iteration":
                    continue
                if called is None:
                    called = _called_names(module)
                if func.name.value in called:
                    continue
                name = _as_written(module, call)
                where = parsed.positions[node]
                found.append(Unreachable(where.start.line, where.end.line, name, func.name.value))
    return found


def iteration_names(code: str) -> set[str]:
    """The literal names of the flor.iterations in `code`."""
    parsed = parse(code)
    if parsed is None:
        return set()
    nodes = list(walk(parsed.module))
    imports = imports_from_nodes(nodes)
    names = set()
    for node in nodes:
        if type(node) is cst.Call and imports.api_of(node.func) == "iteration" and node.args:
            first = node.args[0]
            name = literal_string(first.value) if first.keyword is None and not first.star else None
            if name is not None:
                names.add(name)
    return names


def _as_written(module: cst.Module, call: cst.Call) -> str:
    """The iteration's first argument as Python writes it back (`'document'`), "?" if none."""
    positional = [a for a in call.args if a.keyword is None]
    if not positional:
        return "?"
    literal = literal_string(positional[0].value)
    if literal is not None:
        return repr(literal)
    return positional[0].star + module.code_for_node(positional[0].value)


def _called_names(module: cst.Module) -> set[str]:
    """Names the module calls or hands on as values (`f()`, `obj.f()`, `map(f, xs)`, a
    thread's `target=f`), decorators left out: a decorator registers a function with
    something else that calls it, like a web framework. Names only bound (a `def`'s own,
    an assignment's target, a parameter, an import, a keyword) are no use of a value."""
    names: set[str] = set()
    stack: list[cst.CSTNode] = [module]
    while stack:
        node = stack.pop()
        tp = type(node)
        if tp is cst.Name:
            names.add(node.value)  # type: ignore[attr-defined]
        elif tp is cst.Attribute:
            names.add(node.attr.value)  # type: ignore[attr-defined]
            stack.append(node.value)  # type: ignore[attr-defined]
        elif tp is cst.FunctionDef or tp is cst.ClassDef:
            skip = {"name", "decorators"}
            stack.extend(c for c, field, _ in iter_children(node) if field not in skip)
        elif tp is cst.Param:
            stack.extend(c for c, field, _ in iter_children(node) if field != "name")
        elif tp is cst.Arg:
            stack.append(node.value)  # type: ignore[attr-defined]
        elif tp in _BINDS_ONLY:
            continue
        elif tp in _TARGET_FIELD:
            target = _TARGET_FIELD[tp]
            for child, field, _ in iter_children(node):
                if field == target:
                    _target_reads(child, stack)
                else:
                    stack.append(child)
        else:
            stack.extend(child for child, _, _ in iter_children(node))
    return names


# statements whose names are bound, never read as values
_BINDS_ONLY = (cst.Import, cst.ImportFrom, cst.Global, cst.Nonlocal)
# the field of a node that binds names (a plain name there is assigned, not used)
_TARGET_FIELD = {
    cst.AssignTarget: "target",
    cst.AugAssign: "target",
    cst.AnnAssign: "target",
    cst.For: "target",
    cst.CompFor: "target",
    cst.NamedExpr: "target",
    cst.Del: "target",
    cst.AsName: "name",
}


def _target_reads(target: cst.CSTNode, stack: list[cst.CSTNode]) -> None:
    """What an assignment target uses: `a.b = v` uses a, `a[i] = v` a and i, `x = v` none."""
    tp = type(target)
    if tp is cst.Tuple or tp is cst.List:
        for element in target.elements:  # type: ignore[attr-defined]
            _target_reads(element.value, stack)
    elif tp is cst.StarredElement:
        _target_reads(target.value, stack)  # type: ignore[attr-defined]
    elif tp is cst.Attribute:
        stack.append(target.value)  # type: ignore[attr-defined]
    elif tp is not cst.Name:
        stack.append(target)


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
