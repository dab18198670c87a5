"""Hyperparameters that become `flor.arg`: module-level literals and argparse arguments.

Module level: `lr = 0.01` becomes `lr = flor.arg("lr", 0.01)`, only for a name bound once
in the module (a counter reassigned later, or a name some function declares `global`, is
state, not a hyperparameter). Without `--kwargs` flor.arg returns the default, so the
script behaves as before.

argparse: after `args = parser.parse_args()` one line per argument,
`args.lr = flor.arg("lr", args.lr)`. This records the value the run really used (default,
command-line flag, or `--kwargs` override, in increasing precedence), and in replay
flor.arg hands back that recorded value. The alternative, `default=flor.arg("lr", 0.01)`,
records the default even when `--lr 0.05` was passed, so the catalog would hold a value the
run never used and a replay would train with the wrong one.
"""

from __future__ import annotations

import keyword
from dataclasses import dataclass, field

import libcst as cst

from florwb_engine.analysis.bindings import ASSIGN
from florwb_engine.analysis.names import assigned_names
from florwb_engine.instrument.result import Note
from florwb_engine.instrument.scopes import Scopes
from florwb_engine.instrument.syntax import (
    call_name,
    dotted,
    is_main_guard,
    literal_value,
    method_name,
    string_literal,
)
from florwb_engine.instrument.tree import Tree


@dataclass
class LiteralArg:
    """`name = <literal>` at module level: the literal becomes flor.arg(name, literal)."""

    name: str
    value: cst.BaseExpression
    line: int


@dataclass
class ParsedArgs:
    """`target = parser.parse_args()` (or a call of a function returning it): record each
    argument right after this statement."""

    stmt: cst.SimpleStatementLine
    target: str
    dests: list[str]
    line: int


@dataclass
class Hyperparameters:
    literals: list[LiteralArg] = field(default_factory=list)
    parsed: list[ParsedArgs] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)


class HyperparameterFinder:
    def __init__(self, tree: Tree, scopes: Scopes, alias: str, after_index: int) -> None:
        self.tree = tree
        self.scopes = scopes
        self.alias = alias
        self.after_index = after_index  # module body index after which flor is imported

    def find(self) -> Hyperparameters:
        found = Hyperparameters()
        self._literals(found)
        self._argparse(found)
        return found

    # -- module-level literals -----------------------------------------------------------

    def _module_statements(self) -> list[cst.CSTNode]:
        """Statements that always run at module level: the body and the main guard's."""
        out: list[cst.CSTNode] = []
        for index, stmt in enumerate(self.tree.module.body):
            if index <= self.after_index:
                continue
            out.append(stmt)
            if is_main_guard(stmt):
                out.extend(stmt.body.body)  # type: ignore[union-attr]
        return out

    def _binding_lines(self) -> dict[str, list[int]]:
        """Where each module-level name is bound (or declared global in a function)."""
        lines: dict[str, list[int]] = {}
        module = self.tree.module
        for node in self.scopes.walk_scope(module):
            names: list[str] = []
            if isinstance(node, cst.Assign):
                names = [n for t in node.targets for n in assigned_names(t.target)]
            elif isinstance(node, (cst.AnnAssign, cst.AugAssign)):
                names = list(assigned_names(node.target))
            elif isinstance(node, cst.For):
                names = list(assigned_names(node.target))
            elif isinstance(node, (cst.AsName, cst.NamedExpr)):
                names = list(
                    assigned_names(node.name if isinstance(node, cst.AsName) else node.target)
                )
            elif isinstance(node, (cst.FunctionDef, cst.ClassDef)):
                names = [node.name.value]
            elif isinstance(node, cst.ImportAlias) and node.asname is None:
                names = [(dotted(node.name) or "").split(".")[0]]
            for name in names:
                lines.setdefault(name, []).append(self.tree.line(node))
        for node in self.tree.walk(module):
            if isinstance(node, cst.Global):
                for item in node.names:
                    lines.setdefault(item.name.value, []).append(self.tree.line(node))
        return lines

    def _literals(self, found: Hyperparameters) -> None:
        bound = self._binding_lines()
        for stmt in self._module_statements():
            if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
                continue
            small = stmt.body[0]
            if isinstance(small, cst.Assign) and len(small.targets) == 1:
                target, value = small.targets[0].target, small.value
            elif isinstance(small, cst.AnnAssign) and small.value is not None:
                target, value = small.target, small.value
            else:
                continue
            if not isinstance(target, cst.Name) or not literal_value(value):
                continue
            name = target.value
            if name.startswith("__") or name == self.alias:
                continue
            line = self.tree.line(stmt)
            where = bound.get(name, [])
            if len(where) > 1:
                others = ", ".join(str(n) for n in where if n != line)
                found.notes.append(
                    Note(
                        line,
                        f"`{name}` is also assigned or declared global at line(s) {others}: "
                        "a variable, not a hyperparameter; left as is",
                        done=False,
                    )
                )
                continue
            found.literals.append(LiteralArg(name, value, line))

    # -- argparse --------------------------------------------------------------------------

    def _argparse(self, found: Hyperparameters) -> None:
        literal_names = {lit.name for lit in found.literals}
        for stmt, target, parse in self._parse_sites():
            line = self.tree.line(stmt)
            dests, notes = self._dests(parse)
            found.notes.extend(notes)
            if dests is None:
                continue
            existing = self._already_recorded(stmt, target)
            todo = []
            for dest in dests:
                if dest in existing:
                    continue
                if dest in literal_names:
                    found.notes.append(
                        Note(
                            line,
                            f"argument `{dest}` has the name of a module-level "
                            f"hyperparameter; only the module-level one is recorded",
                            done=False,
                        )
                    )
                    continue
                todo.append(dest)
            if todo:
                found.parsed.append(ParsedArgs(stmt, target, todo, line))

    def _parse_sites(self):
        """(statement to insert after, namespace variable, the parse_args call)."""
        for call in self.tree.calls:
            if method_name(call) not in ("parse_args", "parse_known_args"):
                continue
            parent = self.tree.parent(call)
            if isinstance(parent, cst.Assign):
                target = self._namespace_target(parent, call)
                stmt = self.tree.parent(parent)
                if target and isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1:
                    yield stmt, target, call
            elif isinstance(parent, cst.Return):
                yield from self._returned_parse(parent, call)

    @staticmethod
    def _namespace_target(assign: cst.Assign, call: cst.Call) -> str | None:
        if len(assign.targets) != 1:
            return None
        target: cst.BaseExpression = assign.targets[0].target
        if method_name(call) == "parse_known_args":
            if isinstance(target, (cst.Tuple, cst.List)) and target.elements:
                target = target.elements[0].value
            else:
                return None
        return target.value if isinstance(target, cst.Name) else None

    def _returned_parse(self, ret: cst.Return, call: cst.Call):
        """`def get_args(): ... return parser.parse_args()` called once as `args = get_args()`."""
        if method_name(call) != "parse_args":
            return
        function = self.tree.scope_of(ret)
        if not isinstance(function, cst.FunctionDef):
            return
        info = self.tree.function(function)
        if len(info.calls) != 1 or len(info.references) != 1:
            return
        site = info.calls[0]
        assign = self.tree.parent(site)
        if not isinstance(assign, cst.Assign) or len(assign.targets) != 1:
            return
        target = assign.targets[0].target
        stmt = self.tree.parent(assign)
        if isinstance(target, cst.Name) and isinstance(stmt, cst.SimpleStatementLine):
            if len(stmt.body) == 1:
                yield stmt, target.value, call

    def _dests(self, parse: cst.Call) -> tuple[list[str] | None, list[Note]]:
        """The attribute names parse_args sets, from the add_argument calls beside it."""
        line = self.tree.line(parse)
        receiver = parse.func.value  # type: ignore[attr-defined]
        scope = self.tree.scope_of(parse)
        stmt = self.tree.statement_of(parse)
        if not isinstance(receiver, cst.Name):
            return None, [
                Note(
                    line,
                    "argparse parser is not a plain variable; arguments not recorded",
                    done=False,
                )
            ]
        parser = receiver.value
        binding = self.scopes.dominating(scope, stmt).get(parser)
        if (
            binding is None
            or binding.kind != ASSIGN
            or not (call_name(binding.value) or "").endswith("ArgumentParser")
        ):
            return None, [
                Note(
                    line,
                    f"argparse parser `{parser}` is not created in the same function; "
                    "arguments not recorded",
                    done=False,
                )
            ]
        receivers = {parser}
        calls = [n for n in self.scopes.walk_scope(scope) if isinstance(n, cst.Call)]
        for node in self.scopes.walk_scope(scope):
            if isinstance(node, cst.Assign) and method_name(node.value) in (
                "add_argument_group",
                "add_mutually_exclusive_group",
            ):
                for target in node.targets:
                    receivers.update(assigned_names(target.target))
        notes: list[Note] = []
        dests: list[str] = []
        for call in calls:
            method = method_name(call)
            owner = call.func.value if isinstance(call.func, cst.Attribute) else None
            if not isinstance(owner, cst.Name) or owner.value not in receivers:
                continue
            if method == "add_subparsers":
                return None, [
                    Note(
                        line,
                        "argparse subcommands are not supported; arguments not recorded",
                        done=False,
                    )
                ]
            if method != "add_argument":
                continue
            dest = self._dest(call)
            if dest is None:
                notes.append(
                    Note(
                        self.tree.line(call),
                        "argument with computed option names or dest; not recorded",
                        done=False,
                    )
                )
            elif dest and dest not in dests:
                dests.append(dest)
        return dests, notes

    @staticmethod
    def _dest(call: cst.Call) -> str | None:
        """argparse's dest for an add_argument call; "" for arguments with no value
        (help, version, SUPPRESS); None when it cannot be known without running."""
        options: list[str] = []
        dest = None
        for arg in call.args:
            if arg.keyword is None:
                text = string_literal(arg.value)
                if text is None or arg.star:
                    return None
                options.append(text)
            elif arg.keyword.value == "dest":
                dest = string_literal(arg.value)
                if dest is None:
                    return None
            elif arg.keyword.value == "action" and string_literal(arg.value) in (
                "help",
                "version",
            ):
                return ""
            elif arg.keyword.value == "default" and (dotted(arg.value) or "").endswith("SUPPRESS"):
                return ""
        if dest is None:
            longs = [o for o in options if o.startswith("--")]
            shorts = [o for o in options if o.startswith("-") and not o.startswith("--")]
            if longs:
                dest = longs[0][2:].replace("-", "_")
            elif shorts:
                dest = shorts[0][1:].replace("-", "_")
            elif options:
                dest = options[0]
            else:
                return None
        if not dest.isidentifier() or keyword.iskeyword(dest):
            return None
        return dest

    def _already_recorded(self, stmt: cst.SimpleStatementLine, target: str) -> set[str]:
        """Arguments the statements after the parse already record (`args.lr = flor.arg(...)`)."""
        block = self.tree.parent(stmt)
        body = list(getattr(block, "body", []))
        index = next((i for i, s in enumerate(body) if s is stmt), len(body))
        done = set()
        for later in body[index + 1 :]:
            if not isinstance(later, cst.SimpleStatementLine):
                continue
            for small in later.body:
                if not isinstance(small, cst.Assign) or len(small.targets) != 1:
                    continue
                t = small.targets[0].target
                if (
                    isinstance(t, cst.Attribute)
                    and dotted(t.value) == target
                    and call_name(small.value) == f"{self.alias}.arg"
                ):
                    done.add(t.attr.value)
        return done
