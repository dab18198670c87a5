"""Recognising flor calls: which names refer to florwb (or flordb, or flor) in a script.

Users write `import florwb as flor`, `import florwb`, `import flordb as flor`, `import flor`
(the 2021 package) or `from florwb import log`; a call is a log (or loop, or arg) call only
through one of the names those imports bind. Propagation, the instrumenter and replay
planning all recognise calls through this one module, so a script that one of them sees as
logging, the others do too. Every analysis of a script is on libcst (engine/analysis);
Python's `ast` serves one reader, for speed: propagation's line numbers of log calls
(`ast_log_call_lines`, which spares libcst's position pass).
"""

from __future__ import annotations

import ast
import bisect
from collections.abc import Iterable
from dataclasses import dataclass, field

import libcst as cst

# The packages whose API florwb implements: florwb itself, flordb (PyPI, 2023-) and flor (the
# 2021 package). A script logs through any of them the same way.
FLOR_MODULES = ("florwb", "flordb", "flor")


@dataclass(frozen=True)
class FlorImports:
    """Local names bound to a flor module and to its functions in one Python module."""

    modules: dict[str, str] = field(default_factory=dict)  # alias -> "florwb" | "flordb" | "flor"
    functions: dict[str, str] = field(default_factory=dict)  # local name -> api name

    @property
    def module_alias(self) -> str | None:
        """The alias to write `<alias>.log(...)` with, preferring `flor`."""
        if not self.modules:
            return None
        return "flor" if "flor" in self.modules else sorted(self.modules)[0]

    @property
    def module_name(self) -> str | None:
        alias = self.module_alias
        return self.modules[alias] if alias else None

    def local_for(self, api: str) -> str | None:
        """A from-imported local name for an api function (`from florwb import log`)."""
        for local, target in sorted(self.functions.items()):
            if target == api:
                return local
        return None

    def api_of(self, func: cst.BaseExpression) -> str | None:
        """ "log" for `flor.log` / `log` (when imported so), else None."""
        if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name):
            if func.value.value in self.modules:
                return func.attr.value
            return None
        if isinstance(func, cst.Name):
            return self.functions.get(func.value)
        return None

    def alias_of(self, *modules: str) -> str | None:
        """The local name bound to the first of `modules` imported, preferring `flor`."""
        for module in modules:
            bound = sorted(a for a, m in self.modules.items() if m == module)
            if bound:
                return "flor" if "flor" in bound else bound[0]
        return None

    def log_ref(self) -> cst.BaseExpression | None:
        """An expression that calls `log` in this module, or None if it has no way to."""
        alias = self.module_alias
        if alias is not None:
            return cst.Attribute(value=cst.Name(alias), attr=cst.Name("log"))
        local = self.local_for("log")
        return cst.Name(local) if local else None

    @property
    def bound_names(self) -> frozenset[str]:
        return frozenset(self.modules) | frozenset(self.functions)


def imports_from_nodes(nodes: Iterable[cst.CSTNode]) -> FlorImports:
    """Collect flor imports from libcst Import/ImportFrom nodes (anywhere in a module)."""
    modules: dict[str, str] = {}
    functions: dict[str, str] = {}
    for node in nodes:
        if isinstance(node, cst.Import):
            for alias in node.names:
                dotted = _dotted(alias.name)
                if dotted in FLOR_MODULES:
                    local = _asname(alias) or dotted
                    modules[local] = dotted
        elif isinstance(node, cst.ImportFrom):
            if node.relative or node.module is None:
                continue
            if _dotted(node.module) not in FLOR_MODULES or isinstance(node.names, cst.ImportStar):
                continue
            for alias in node.names:
                name = _dotted(alias.name)
                functions[_asname(alias) or name] = name
    return FlorImports(modules, functions)


def top_level_imports(module: cst.Module) -> FlorImports:
    """The flor imports among a module's top-level statements (what the instrumenter uses
    to decide whether a script already imports florwb, and under which name)."""
    return imports_from_nodes(
        small
        for stmt in module.body
        if isinstance(stmt, cst.SimpleStatementLine)
        for small in stmt.body
        if isinstance(small, (cst.Import, cst.ImportFrom))
    )


def loop_call_name(call: cst.Call, imports: FlorImports) -> str | None:
    """The literal name of `<alias>.loop("<name>", ...)` in libcst, else None."""
    if imports.api_of(call.func) != "loop":
        return None
    name_arg, _ = call_args(call)
    return literal_string(name_arg.value) if name_arg is not None else None


ANY_LOOP = object()  # iterates_loop_cst's `name` for a flor.loop of any name


def iterates_loop_cst(node: cst.For, imports: FlorImports, name: str | object | None) -> bool:
    """Whether a `for` statement iterates `<flor>.loop(name, ...)` (its iterable holds the
    call, e.g. `for x in flor.loop("epoch", range(n))` or `enumerate(flor.loop(...))`):
    how replay planning finds the main loop's body in the run's code. No name: no loop;
    `name=ANY_LOOP`: any flor.loop."""
    if name is None:
        return False
    stack: list[cst.CSTNode] = [node.iter]
    while stack:
        sub = stack.pop()
        if type(sub) is cst.Call:
            if name is ANY_LOOP:
                if imports.api_of(sub.func) == "loop":
                    return True
            elif loop_call_name(sub, imports) == name:
                return True
        stack.extend(sub.children)
    return False


def _dotted(expr: cst.BaseExpression) -> str:
    if isinstance(expr, cst.Name):
        return expr.value
    if isinstance(expr, cst.Attribute):
        return f"{_dotted(expr.value)}.{expr.attr.value}"
    return ""


def _asname(alias: cst.ImportAlias) -> str | None:
    if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
        return alias.asname.name.value
    return None


def literal_string(expr: cst.BaseExpression) -> str | None:
    """The value of a plain (non-f, non-bytes) string literal, else None."""
    if type(expr) is cst.SimpleString:
        raw = expr.value
        if raw[:1] in "\"'" and "\\" not in raw:  # no prefix, no escapes: just unquote
            quote = 3 if raw[:3] in ('"""', "'''") and len(raw) >= 6 else 1
            return raw[quote:-quote]
    if isinstance(expr, (cst.SimpleString, cst.ConcatenatedString)):
        try:
            value = expr.evaluated_value
        except Exception:  # noqa: BLE001 - libcst raises various errors on odd literals
            return None
        return value if isinstance(value, str) else None
    return None


def call_args(call: cst.Call) -> tuple[cst.Arg | None, cst.Arg | None]:
    """The (name, value) arguments of a `log(name, value)` / `loop(name, vals)` call."""
    positional = [a for a in call.args if a.keyword is None and not a.star]
    keywords = {a.keyword.value: a for a in call.args if a.keyword is not None}
    first = positional[0] if positional else keywords.get("name")
    second = positional[1] if len(positional) > 1 else None
    for keyword in ("value", "vals", "iterable"):
        if second is None:
            second = keywords.get(keyword)
    return first, second


def log_call_parts(
    call: cst.Call, imports: FlorImports, api: str = "log"
) -> tuple[str, cst.Arg, cst.Arg] | None:
    """(name, name arg, value arg) when `call` is `<alias>.<api>("<literal>", value)`."""
    if imports.api_of(call.func) != api:
        return None
    name_arg, value_arg = call_args(call)
    if name_arg is None or value_arg is None:
        return None
    name = literal_string(name_arg.value)
    if name is None:
        return None
    return name, name_arg, value_arg


def ast_log_call_lines(
    tree: ast.Module, imports: FlorImports, source: str | None = None
) -> list[tuple[int, int, str]]:
    """(line, column, name) of every log call with a literal name, in source order.

    Used to give libcst nodes line numbers without libcst's (slow) position pass: both
    parsers see the same log calls in the same order. With the source text, only the
    statements spanning a line that mentions one of the log names are searched.
    """
    modules = set(imports.modules)
    functions = {local for local, api in imports.functions.items() if api == "log"}
    if not modules and not functions:
        return []
    wanted_lines: list[int] | None = None
    if source is not None:
        needles = tuple(modules | functions)
        wanted_lines = [
            i for i, text in enumerate(source.splitlines(), 1) if any(n in text for n in needles)
        ]
    found: list[tuple[int, int, str]] = []
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if wanted_lines is not None and isinstance(node, (ast.stmt, ast.expr)):
            i = bisect.bisect_left(wanted_lines, node.lineno)
            if i == len(wanted_lines) or wanted_lines[i] > (node.end_lineno or node.lineno):
                continue  # no line of this node mentions a log name
        stack.extend(ast.iter_child_nodes(node))
        if type(node) is not ast.Call:
            continue
        func = node.func
        if type(func) is ast.Attribute:
            if func.attr != "log" or type(func.value) is not ast.Name:
                continue
            if func.value.id not in modules:
                continue
        elif type(func) is ast.Name:
            if func.id not in functions:
                continue
        else:
            continue
        positional = [a for a in node.args if not isinstance(a, ast.Starred)]
        keywords = {k.arg: k.value for k in node.keywords if k.arg}
        name_node = positional[0] if positional else keywords.get("name")
        has_value = len(positional) > 1 or "value" in keywords
        if has_value and isinstance(name_node, ast.Constant) and isinstance(name_node.value, str):
            found.append((func.lineno, func.col_offset, name_node.value))
    found.sort()
    return found
