"""The parsed script with the indexes every analysis needs: parents, lines, functions.

Built once per script. Node identity is the key everywhere (libcst nodes compare by value,
so two identical `model.train()` calls would collide in a dict keyed by the node itself).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from florwb_engine.instrument.errors import InstrumentError


@dataclass
class Function:
    """A `def` anywhere in the script, with what the analyses ask about it."""

    node: cst.FunctionDef
    name: str
    in_class: bool  # a method: the instrumenter does not follow calls into methods
    references: list[cst.Name] = field(default_factory=list)  # uses of the name (not the def)
    calls: list[cst.Call] = field(default_factory=list)  # the uses that call it directly


class _Indexer(cst.CSTVisitor):
    def __init__(self) -> None:
        self.parents: dict[int, cst.CSTNode] = {}
        self.children: dict[int, list[cst.CSTNode]] = {}
        self.stack: list[cst.CSTNode] = []
        self.functions: list[Function] = []
        self.names: list[cst.Name] = []
        self.calls: list[cst.Call] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        if self.stack:
            self.parents[id(node)] = self.stack[-1]
            self.children.setdefault(id(self.stack[-1]), []).append(node)
        if isinstance(node, cst.FunctionDef):
            in_class = bool(self.stack) and isinstance(self._owner(), cst.ClassDef)
            self.functions.append(Function(node, node.name.value, in_class))
        elif isinstance(node, cst.Name):
            self.names.append(node)
        elif isinstance(node, cst.Call):
            self.calls.append(node)
        self.stack.append(node)
        return True

    def on_leave(self, original_node: cst.CSTNode) -> None:
        self.stack.pop()

    def _owner(self) -> cst.CSTNode | None:
        """The nearest enclosing def or class of the node being visited."""
        for node in reversed(self.stack):
            if isinstance(node, (cst.ClassDef, cst.FunctionDef)):
                return node
        return None


class Tree:
    """A script's syntax tree with parent links, line numbers and a function index."""

    def __init__(self, source: str) -> None:
        try:  # compile, not just parse: `return` outside a function parses but never runs
            compile(source, "<script>", "exec", flags=ast.PyCF_ONLY_AST, dont_inherit=True)
            compile(source, "<script>", "exec", dont_inherit=True)
        except SyntaxError as exc:
            raise InstrumentError(f"does not parse: line {exc.lineno}: {exc.msg}") from None
        except ValueError as exc:
            raise InstrumentError(f"does not parse: {exc}") from None
        try:
            self.module = cst.parse_module(source)
        except cst.ParserSyntaxError as exc:
            raise InstrumentError(f"does not parse: line {exc.raw_line}: {exc.message}") from None
        self.source = source
        wrapper = MetadataWrapper(self.module, unsafe_skip_copy=True)
        self._positions = wrapper.resolve(PositionProvider)
        indexer = _Indexer()
        self.module.visit(indexer)
        self.parents = indexer.parents
        self._children = indexer.children
        self.functions = indexer.functions
        self.calls = indexer.calls
        self.by_name: dict[str, list[Function]] = {}
        for function in self.functions:
            self.by_name.setdefault(function.name, []).append(function)
        self.names = indexer.names
        self._index_references()

    def _index_references(self) -> None:
        defined = {id(f.node.name) for f in self.functions}
        for name in self.names:
            if id(name) in defined or self._is_attribute_or_keyword(name):
                continue
            for function in self.by_name.get(name.value, ()):
                function.references.append(name)
                parent = self.parent(name)
                if isinstance(parent, cst.Call) and parent.func is name:
                    function.calls.append(parent)

    def is_variable(self, name: cst.Name) -> bool:
        """Whether a Name node reads or binds a variable (not `x.name` or `f(name=...)`)."""
        parent = self.parent(name)
        if isinstance(parent, cst.AsName) or (
            isinstance(parent, cst.ImportAlias) and parent.asname is None
        ):
            return True  # `import x as name`, `import name`
        return not self._is_attribute_or_keyword(name)

    def _is_attribute_or_keyword(self, name: cst.Name) -> bool:
        """`x.name`, `f(name=1)`, `import a as name`: not a use of a variable `name`."""
        parent = self.parent(name)
        if isinstance(parent, cst.Attribute) and parent.attr is name:
            return True
        if isinstance(parent, cst.Arg) and parent.keyword is name:
            return True
        if isinstance(parent, (cst.Param, cst.ClassDef)) and parent.name is name:
            return True
        return isinstance(parent, (cst.ImportAlias, cst.AsName))

    # -- navigation --------------------------------------------------------------------

    def parent(self, node: cst.CSTNode) -> cst.CSTNode | None:
        return self.parents.get(id(node))

    def children(self, node: cst.CSTNode) -> list[cst.CSTNode]:
        """A node's children in source order (libcst's `.children` re-visits every time)."""
        return self._children.get(id(node), [])

    def ancestors(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        current = self.parent(node)
        while current is not None:
            yield current
            current = self.parent(current)

    def line(self, node: cst.CSTNode) -> int:
        """1-based line where the node's own code starts (after its leading comments)."""
        return self._positions[node].start.line

    def column(self, node: cst.CSTNode) -> int:
        """0-based column where the node's own code starts."""
        return self._positions[node].start.column

    def scope_of(self, node: cst.CSTNode) -> cst.Module | cst.FunctionDef:
        """The function a node runs in, or the module; lambdas and classes are looked past."""
        for ancestor in self.ancestors(node):
            if isinstance(ancestor, cst.FunctionDef):
                return ancestor
        return self.module

    def statement_of(self, node: cst.CSTNode) -> cst.CSTNode:
        """The statement (simple line or compound) that holds `node`."""
        current: cst.CSTNode = node
        while not isinstance(current, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            parent = self.parent(current)
            if parent is None:
                return current
            current = parent
        return current

    def function(self, node: cst.FunctionDef) -> Function:
        for function in self.functions:
            if function.node is node:
                return function
        raise KeyError(node.name.value)

    def walk(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        """Every node below `node` (itself included), depth first."""
        stack = [node]
        while stack:
            current = stack.pop()
            yield current
            stack.extend(reversed(self.children(current)))

    def walk_code(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        """Like walk, but not into class bodies (methods are not followed)."""
        stack = [node]
        while stack:
            current = stack.pop()
            yield current
            if isinstance(current, cst.ClassDef) and current is not node:
                continue
            stack.extend(reversed(self.children(current)))
