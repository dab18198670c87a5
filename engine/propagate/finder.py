"""Finding log statements in a source: where each sits, in which loops, what it reads.

Everything propagation, the statement diff and replay planning know about a source comes
from one `Analysis`: the libcst module (byte-exact), the matching tree over it, the
florwb imports and the log sites. Analyses are cached by source text, because the
workbench asks about the same versions again and again.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import cast

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from florwb_engine.analysis.names import free_names
from florwb_engine.flor_calls import (
    FlorImports,
    ast_log_call_lines,
    imports_from_nodes,
    log_call_parts,
)
from florwb_engine.propagate.errors import PropagationError
from florwb_engine.propagate.match_tree import TNode, Tree
from florwb_engine.propagate.model import STANDALONE, WRAPPED, LogStatement
from florwb_engine.propagate.names import Bindings
from florwb_engine.propagate.source import gc_paused, parse_source

# The nodes whose `body` is a sequence of statements, i.e. what a statement sits in.
Block = cst.Module | cst.IndentedBlock | cst.SimpleStatementSuite

_LOOPS = (cst.For, cst.While)
_SCOPES = (cst.FunctionDef, cst.ClassDef, cst.Lambda)


@dataclass(frozen=True)
class LogSite:
    """A log call with a literal name plus its libcst context (internal to the engine)."""

    name: str
    form: str
    call: cst.Call
    name_arg: cst.Arg
    value_arg: cst.Arg
    statement: cst.CSTNode  # SimpleStatementLine / compound statement (small stmt in a suite)
    small: cst.BaseSmallStatement | None  # the small statement holding the call, if any
    block: Block  # the Module / IndentedBlock / SimpleStatementSuite around `statement`
    index: int  # position of `statement` in `block.body`
    line: int
    loop_path: tuple[str, ...]
    chain: tuple[str, ...]
    reads: frozenset[str]
    read_nodes: tuple[cst.Name, ...]
    code: str
    loops: frozenset[int]  # ids of the loops it runs in (lexical + resolved call sites)
    functions: tuple[cst.CSTNode, ...]  # enclosing function definitions, outermost first
    where_known: bool = True  # False: in a function whose call sites cannot be followed

    @property
    def in_suite(self) -> bool:
        return isinstance(self.block, cst.SimpleStatementSuite)

    def to_statement(self) -> LogStatement:
        return LogStatement(
            name=self.name,
            line=self.line,
            form=self.form,
            code=self.code,
            loop_path=self.loop_path,
            reads=self.reads,
            chain=self.chain,
            where_known=self.where_known,
        )


class Analysis:
    """One parsed source with its log sites (see module docstring)."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.module, self.ast_tree = parse_source(source)
        self.tree = Tree(self.module)
        self.imports: FlorImports = imports_from_nodes(
            tn.node for tn in self.tree.nodes if tn.label in ("Import", "ImportFrom")
        )
        self._contexts: dict[int, tuple[tuple[str, ...] | None, frozenset[int]]] = {}
        self._loop_names: dict[int, str | None] = {}
        self._top_functions = {
            cast(cst.FunctionDef, c.node).name.value: c
            for c in self.tree.root.children
            if c.label == "FunctionDef"
        }
        self._calls, self._escapes = self._function_references()
        self.sites: list[LogSite] = self._find_sites()
        self._bindings: Bindings | None = None

    @property
    def bindings(self) -> Bindings:
        """Name bindings of this version (built once: propagating several statements, or
        from several versions, into this one reuses them)."""
        if self._bindings is None:
            self._bindings = Bindings(self.tree)
        return self._bindings

    # -- helpers used by propagation ------------------------------------------------------
    def code(self, node: cst.CSTNode) -> str:
        return self.module.code_for_node(node)

    def describe(self, node: cst.CSTNode, max_len: int = 60) -> str:
        """A one-line summary of a statement (its header for compound statements)."""
        text = header(node, self.code)
        text = " ".join(text.split())
        return text if len(text) <= max_len else text[: max_len - 3] + "..."

    def loop_name(self, loop: cst.CSTNode) -> str | None:
        """The `flor.loop` name a for loop iterates over (also inside enumerate(...))."""
        key = id(loop)
        if key not in self._loop_names:
            self._loop_names[key] = self._find_loop_name(loop)
        return self._loop_names[key]

    def _find_loop_name(self, loop: cst.CSTNode) -> str | None:
        if not isinstance(loop, cst.For):
            return None
        tn = self.tree.of(loop.iter)
        if tn is None:
            return None
        for sub in self.tree.nodes[tn.idx : tn.end + 1]:
            if sub.label == "Call":
                parts = log_call_parts(cast(cst.Call, sub.node), self.imports, api="loop")
                if parts is not None:
                    return parts[0]
        return None

    def context_of(self, tn: TNode) -> tuple[tuple[str, ...], frozenset[int]]:
        """(flor.loop names, loop ids) a node runs in, through resolvable call sites."""
        names, loops, _known = self._context(tn, frozenset())
        return names, loops

    def runs_where_known(self, tn: TNode) -> bool:
        """False when `tn` sits in a function whose call sites florwb cannot follow (never
        called, stored or returned, or called from different loops): its loop path then
        holds only the loops visible around it, and replay must not trust it."""
        return self._context(tn, frozenset())[2]

    # -- internals ------------------------------------------------------------------------
    def _context(
        self, tn: TNode, visiting: frozenset[int]
    ) -> tuple[tuple[str, ...], frozenset[int], bool]:
        names, loops, owner = self._lexical(tn)
        if owner is None:
            return names, loops, True
        prefix, outer = self._function_context(owner, visiting)
        if prefix is None and names and self._handed_over_outside_loops(owner, visiting):
            prefix = ()  # its own flor.loops are the whole path (an mp.spawn target, say)
        names = (prefix or ()) + names  # unknown callers: only the loops we can see
        return names, outer | loops, prefix is not None

    def _handed_over_outside_loops(self, func: TNode, visiting: frozenset[int]) -> bool:
        """True for a module-level function that is only named (never called) where no
        loop runs: handed to `mp.spawn`, a thread or a process as its target, it runs its
        own flor.loops from the top, not inside any loop of the caller."""
        fdef = cast(cst.FunctionDef, func.node)
        if func.parent is not self.tree.root or self._calls.get(fdef.name.value):
            return False
        references = [
            tn
            for tn in self.tree.nodes
            if tn.label == "Name"
            and tn.value == fdef.name.value
            and tn.field not in ("attr", "keyword", "name")
        ]
        for ref in references:
            _names, loops, known = self._context(ref, visiting | {func.idx})
            if loops or not known:
                return False
        return bool(references)

    def _lexical(self, tn: TNode) -> tuple[tuple[str, ...], frozenset[int], TNode | None]:
        """The flor.loops around `tn` up to its scope, and the function whose body that
        scope is (None at module level, in a class body or a lambda)."""
        names: list[str] = []
        loops: set[int] = set()
        child, anc = tn, tn.parent
        while anc is not None:
            node = anc.node
            if isinstance(node, _LOOPS) and child.field == "body":
                loops.add(id(node))
                name = self.loop_name(node)
                if name is not None:
                    names.append(name)
            elif isinstance(node, _SCOPES):
                owner = anc if isinstance(node, cst.FunctionDef) and child.field == "body" else None
                names.reverse()
                return tuple(names), frozenset(loops), owner
            child, anc = anc, anc.parent
        names.reverse()
        return tuple(names), frozenset(loops), None

    def _function_references(self) -> tuple[dict[str, list[TNode]], set[str]]:
        calls: dict[str, list[TNode]] = {name: [] for name in self._top_functions}
        escapes: set[str] = set()
        for tn in self.tree.nodes:
            if tn.label != "Name" or tn.value not in calls or tn.field in ("attr", "keyword"):
                continue
            parent = tn.parent
            if parent is None:
                continue
            if tn.field == "name" and isinstance(parent.node, cst.FunctionDef):
                continue
            site = _call_site(tn)
            if site is not None:
                calls[tn.value].append(site)
            else:
                escapes.add(tn.value)
        return calls, escapes

    def _call_sites(self, func: TNode) -> list[TNode] | None:
        """Where a function runs: its call sites, and the optimizer steps it is passed to
        (a closure runs inside `opt.step(closure)`). None when a reference is anything
        else (stored, returned, a hook): where it runs is then unknown.

        Module-level functions are found by name in the module, nested functions by name
        in the scope defining them, methods of a module-level class as `<x>.<name>`."""
        fdef = cast(cst.FunctionDef, func.node)
        name = fdef.name.value
        parent = func.parent
        if parent is self.tree.root:
            if name in self._escapes:
                return None
            return self._calls.get(name, [])
        holder = parent.parent if parent is not None else None
        if (
            holder is not None
            and isinstance(holder.node, cst.ClassDef)
            and holder.parent is self.tree.root
        ):
            sites: list[TNode] = []
            for tn in self.tree.nodes:
                if tn.label == "Name" and tn.value == name and tn.field == "attr" and tn.parent:
                    site = _call_site(tn.parent)
                    if site is None:
                        return None
                    sites.append(site)
            return sites
        scope = next((a for a in func.ancestors() if isinstance(a.node, _SCOPES)), self.tree.root)
        sites = []
        for tn in self.tree.nodes[scope.idx : scope.end + 1]:
            if tn.label != "Name" or tn.value != name or tn.field in ("attr", "keyword"):
                continue
            if tn.field == "name" and tn.parent is not None and tn.parent.node is fdef:
                continue
            site = _call_site(tn)
            if site is None:
                return None
            sites.append(site)
        return sites

    def _function_context(
        self, func: TNode, visiting: frozenset[int]
    ) -> tuple[tuple[str, ...] | None, frozenset[int]]:
        """Loops every call site of a function runs in (None: they differ or are unknown)."""
        cached = self._contexts.get(func.idx)
        if cached is not None:
            return cached
        sites = self._call_sites(func)
        if not sites or func.idx in visiting:
            return None, frozenset()
        paths: set[tuple[str, ...] | None] = set()
        loops: set[int] = set()
        for call in sites:
            if func.contains(call):
                continue  # recursion: runs where the outer call runs
            names, lex_loops, known = self._context(call, visiting | {func.idx})
            paths.add(names if known else None)
            loops |= lex_loops
        if not paths:
            return None, frozenset(loops)
        result = (paths.pop() if len(paths) == 1 else None), frozenset(loops)
        self._contexts[func.idx] = result
        return result

    def _find_sites(self) -> list[LogSite]:
        raw = []
        for tn in self.tree.nodes:
            if tn.label != "Call":
                continue
            parts = log_call_parts(cast(cst.Call, tn.node), self.imports)
            if parts is not None:
                raw.append((tn, parts))
        lines = self._lines([tn for tn, _ in raw], [parts[0] for _, parts in raw])
        sites = []
        for (tn, (name, name_arg, value_arg)), line in zip(raw, lines, strict=True):
            sites.append(self._site(tn, name, name_arg, value_arg, line))
        return sites

    def _lines(self, calls: list[TNode], names: list[str]) -> list[int]:
        found = ast_log_call_lines(self.ast_tree, self.imports, self.source)
        if [n for _, _, n in found] == names:
            return [line for line, _, _ in found]
        positions = MetadataWrapper(self.module, unsafe_skip_copy=True).resolve(PositionProvider)
        return [positions[tn.node].start.line for tn in calls]

    def _site(
        self, tn: TNode, name: str, name_arg: cst.Arg, value_arg: cst.Arg, line: int
    ) -> LogSite:
        small: cst.BaseSmallStatement | None = None
        statement: TNode | None = None
        chain: list[str] = []
        functions: list[cst.CSTNode] = []
        child, anc = tn, tn.parent
        while anc is not None:
            node = anc.node
            if statement is None:
                if isinstance(node, cst.BaseSmallStatement) and small is None:
                    small = node
                    if anc.parent is not None and isinstance(
                        anc.parent.node, cst.SimpleStatementSuite
                    ):
                        statement = anc
                elif isinstance(node, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
                    statement = anc
            if child.field == "body":
                entry = _chain_entry(anc, child, self.code)
                if entry:
                    chain.append(entry)
                if isinstance(node, cst.FunctionDef):
                    functions.append(node)
            child, anc = anc, anc.parent
        assert statement is not None and statement.parent is not None
        chain.reverse()
        functions.reverse()
        form = STANDALONE if isinstance(small, cst.Expr) and small.value is tn.node else WRAPPED
        reads, read_nodes = free_names(value_arg.value)
        loop_path, loops, known = self._context(tn, frozenset())
        if small is not None:
            code = self.code(small).strip().rstrip(";")
        else:
            code = header(statement.node, self.code)
        return LogSite(
            name=name,
            form=form,
            call=cast(cst.Call, tn.node),
            name_arg=name_arg,
            value_arg=value_arg,
            statement=statement.node,
            small=small,
            block=cast(Block, statement.parent.node),  # a statement's parent is a block
            index=statement.key if statement.key is not None else 0,
            line=line,
            loop_path=loop_path,
            chain=tuple(chain),
            reads=reads,
            read_nodes=tuple(read_nodes),
            code=code.strip(),
            loops=loops,
            functions=tuple(functions),
            where_known=known,
        )


_CHAIN_NODES = (cst.BaseCompoundStatement, cst.Else, cst.ExceptHandler, cst.Finally, cst.MatchCase)


def _chain_entry(anc: TNode, child: TNode, code) -> str | None:
    node = anc.node
    if not isinstance(node, _CHAIN_NODES):
        return None
    if isinstance(node, cst.If):
        if child.field != "body":
            return None
        keyword = "elif" if anc.field == "orelse" else "if"
        return f"{keyword} {' '.join(code(node.test).split())}"
    if isinstance(node, (cst.For, cst.While, cst.Try)) and child.field != "body":
        return None
    return " ".join(header(node, code).split()).rstrip(":")


def header(node: cst.CSTNode, code) -> str:
    """The first line of a compound statement, e.g. `for x in loader:`; else its code."""
    if isinstance(node, cst.FunctionDef):
        return f"def {node.name.value}"
    if isinstance(node, cst.ClassDef):
        return f"class {node.name.value}"
    if isinstance(node, cst.For):
        return f"for {code(node.target)} in {code(node.iter)}:"
    if isinstance(node, cst.While):
        return f"while {code(node.test)}:"
    if isinstance(node, cst.If):
        return f"if {code(node.test)}:"
    if isinstance(node, cst.With):
        return f"with {', '.join(code(i).rstrip(', ') for i in node.items)}:"
    if isinstance(node, cst.Else):
        return "else:"
    if isinstance(node, cst.Finally):
        return "finally:"
    if isinstance(node, (cst.Try, cst.TryStar)):
        return "try:"
    if isinstance(node, cst.ExceptHandler):
        return f"except {code(node.type)}:" if node.type is not None else "except:"
    if isinstance(node, cst.Match):
        return f"match {code(node.subject)}:"
    if isinstance(node, cst.MatchCase):
        return f"case {code(node.pattern)}:"
    if isinstance(node, cst.SimpleStatementLine):
        return "; ".join(code(s).strip().rstrip(";") for s in node.body)
    return code(node).strip()


@functools.lru_cache(maxsize=32)
def analysis_of(source: str) -> Analysis:
    return Analysis(source)


def analyze(source: str, label: str = "source") -> Analysis:
    """Parse and analyse a source (cached by text: analyses are never mutated).

    `label` names the source in the one-line PropagationError raised when it does not parse.
    """
    try:
        return analysis_of(source)
    except PropagationError as exc:
        raise PropagationError(f"{label} {exc}") from None


def find_log_statements(source: str) -> list[LogStatement]:
    """Every `flor.log("<literal>", expr)` in a source, in source order.

    Raises PropagationError (one line, with the file line) if the source does not parse.
    """
    with gc_paused():
        return [site.to_statement() for site in analyze(source, "source").sites]


def _call_site(ref: TNode) -> TNode | None:
    """The call that runs a function referenced at `ref`: the call itself (`f()`), or an
    optimizer's `step` it is handed to (`opt.step(closure)` calls it before returning);
    None for other uses. A function handed to anything else (a hook, a thread, a
    scheduler) runs at times florwb cannot tell."""
    parent = ref.parent
    if parent is None:
        return None
    if ref.field == "func" and parent.label == "Call":
        return parent
    call = parent.parent
    if ref.field == "value" and parent.label == "Arg" and call is not None:
        func = getattr(call.node, "func", None)
        if call.label == "Call" and isinstance(func, cst.Attribute) and func.attr.value == "step":
            return call
    return None
