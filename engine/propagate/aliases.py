"""Which local names refer to florwb/flordb in a module, and recognising their calls.

Users write `import florwb as flor`, `import florwb`, `import flordb as flor` or
`from florwb import log`; a log statement is only a log statement through one of those
names, so everything else (finding, placing, rewriting a statement for an old version that
imports florwb under another name) starts here.
"""

from __future__ import annotations

import ast
import bisect
from collections.abc import Iterable
from dataclasses import dataclass, field

import libcst as cst

FLOR_MODULES = ("florwb", "flordb")


@dataclass(frozen=True)
class FlorImports:
    """Local names bound to the florwb/flordb module and to its functions in one module."""

    modules: dict[str, str] = field(default_factory=dict)  # alias -> "florwb" | "flordb"
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
    """Collect florwb/flordb imports from Import/ImportFrom nodes (anywhere in a module)."""
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
