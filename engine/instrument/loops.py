"""Finding the training loops: the loop around `loss.backward()`, and the loop around that.

A statement "trains" when it calls `.backward()` or calls (directly, by name) a function of
the script that trains. From the top of the module, execution is followed into the
statements and functions that train until the first `for` loop that trains: that is the
outer (epoch) loop. The same search inside its body finds the inner (step) loops.
Functions are only followed when they are called from exactly one place, so the loops
inside run once per run, which is what replay assumes of the outer loop.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from florwb_engine.analysis.bindings import Scope
from florwb_engine.instrument.result import Note
from florwb_engine.instrument.scopes import Scopes
from florwb_engine.instrument.syntax import (
    block_statements,
    call_name,
    is_backward_call,
    string_literal,
    sub_blocks,
)
from florwb_engine.instrument.tree import Function, Tree

FOR, PROBLEM = "for", "problem"
# Loop variables too generic to name a loop after: the batch itself or a bare index (so
# are names under three characters and names starting with "_"). A loop over them is
# named "step"; the README says so.
GENERIC_LOOP_NAMES = frozenset(
    {
        "batch",
        "batch_id",
        "batch_idx",
        "batch_index",
        "data",
        "example",
        "idx",
        "index",
        "inputs",
        "item",
        "sample",
    }
)


@dataclass
class Found:
    """A training loop, or a reason one could not be used, met while following the code."""

    kind: str  # FOR or PROBLEM
    node: cst.CSTNode
    scope: Scope
    reason: str = ""


@dataclass
class Loop:
    """A training loop to wrap (or already wrapped) in `flor.loop`."""

    node: cst.For | cst.While  # a `while` loop is rewritten as a `for` over flor.loop
    scope: Scope
    name: str
    wrapped: bool  # already iterates a flor.loop


@dataclass
class TrainingLoops:
    outer: Loop | None = None
    inner: list[Loop] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)
    refusal: str | None = None  # why nothing can be instrumented


class LoopFinder:
    def __init__(self, tree: Tree, scopes: Scopes, alias: str) -> None:
        self.tree = tree
        self.scopes = scopes
        self.alias = alias
        self.training = self._training_functions()

    # -- which code trains -------------------------------------------------------------

    def _callable(self, name: str) -> list[Function]:
        return [f for f in self.tree.by_name.get(name, []) if not f.in_class]

    def _training_functions(self) -> set[int]:
        """ids of the defs that train, directly or through calls (a fixed point)."""
        direct: dict[int, set[str]] = {}
        training: set[int] = set()
        for function in self.tree.functions:
            called: set[str] = set()
            for node in self.tree.walk_code(function.node.body):
                if is_backward_call(node):
                    training.add(id(function.node))
                elif isinstance(node, cst.Call) and isinstance(node.func, cst.Name):
                    called.add(node.func.value)
            direct[id(function.node)] = called
        changed = True
        while changed:
            changed = False
            for function in self.tree.functions:
                if id(function.node) in training:
                    continue
                if any(
                    id(f.node) in training
                    for name in direct[id(function.node)]
                    for f in self._callable(name)
                ):
                    training.add(id(function.node))
                    changed = True
        return training

    def trains(self, node: cst.CSTNode) -> bool:
        for inner in self.tree.walk_code(node):
            if is_backward_call(inner):
                return True
            if isinstance(inner, cst.Call) and isinstance(inner.func, cst.Name):
                if any(id(f.node) in self.training for f in self._callable(inner.func.value)):
                    return True
        return False

    # -- following the code ------------------------------------------------------------

    def search(self, statements: list, scope: Scope, path: tuple[int, ...]) -> list[Found]:
        """Training loops (or problems) reached from these statements, not looking inside
        the loops found."""
        found: list[Found] = []
        for stmt in statements:
            if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)) or not self.trains(stmt):
                continue
            if isinstance(stmt, cst.For) and stmt.asynchronous is None:
                found.append(Found(FOR, stmt, scope))
            elif isinstance(stmt, cst.While) and stmt.orelse is None:
                found.append(Found(FOR, stmt, scope))  # becomes a for loop (edits.while_as_for)
            elif isinstance(stmt, (cst.While, cst.For)):
                kind = (
                    "a `while` loop with an `else:`"
                    if isinstance(stmt, cst.While)
                    else "an `async for` loop"
                )
                found.append(
                    Found(
                        PROBLEM,
                        stmt,
                        scope,
                        f"the training loop at line {self.tree.line(stmt)} is {kind}: "
                        "flor.loop wraps an iterable; rewrite it as a `for` loop "
                        "(e.g. `for step in range(n):`)",
                    )
                )
            elif isinstance(stmt, cst.BaseCompoundStatement) and not isinstance(stmt, cst.With):
                for block in sub_blocks(stmt):
                    found += self.search(block_statements(block), scope, path)
            elif isinstance(stmt, cst.With):
                found += self.search(block_statements(stmt.body), scope, path)
            else:
                found += self._follow_calls(stmt, scope, path)
        return found

    def _follow_calls(self, stmt: cst.CSTNode, scope: Scope, path: tuple[int, ...]) -> list[Found]:
        found: list[Found] = []
        for node in self.tree.walk_code(stmt):
            if not (isinstance(node, cst.Call) and isinstance(node.func, cst.Name)):
                continue
            functions = self._callable(node.func.value)
            if not any(id(f.node) in self.training for f in functions):
                continue
            name = node.func.value
            line = self.tree.line(node)
            if len(functions) > 1:
                reason = f"{name}() is defined {len(functions)} times; cannot tell which runs"
                found.append(Found(PROBLEM, node, scope, reason))
                continue
            function = functions[0]
            if id(function.node) in path:
                found.append(Found(PROBLEM, node, scope, f"{name}() is recursive"))
                continue
            if len(function.references) > 1:
                lines = ", ".join(str(self.tree.line(r)) for r in function.references)
                reason = (
                    f"the training loop is in {name}(), which is used in "
                    f"{len(function.references)} places (lines {lines}): one run would "
                    "enter its loops several times and replay could not tell them apart"
                )
                found.append(Found(PROBLEM, node, scope, reason))
                continue
            if function.node.asynchronous is not None:
                reason = f"{name}() (line {line}) is async; async training is not supported"
                found.append(Found(PROBLEM, node, scope, reason))
                continue
            self.scopes.points[id(scope)] = stmt
            found += self.search(
                block_statements(function.node.body), function.node, (*path, id(function.node))
            )
        return found

    # -- the result ----------------------------------------------------------------------

    def find(self) -> TrainingLoops:
        result = TrainingLoops()
        found = self.search(list(self.tree.module.body), self.tree.module, ())
        loops = [f for f in found if f.kind == FOR]
        problems = [f for f in found if f.kind == PROBLEM]
        if not found:
            result.refusal = self._why_none()
            return result
        if len(found) > 1:
            if problems and not loops:
                result.refusal = problems[0].reason
            else:
                lines = ", ".join(str(self.tree.line(f.node)) for f in found)
                result.refusal = (
                    f"{len(found)} separate training loops (lines {lines}): replay needs one "
                    "outer loop per run; instrument one of them by hand"
                )
            return result
        if problems:
            result.refusal = problems[0].reason
            return result
        outer_found = loops[0]
        outer: cst.For | cst.While = outer_found.node  # type: ignore[assignment]
        self.scopes.points.pop(id(outer_found.scope), None)
        inner_found = self.search(
            block_statements(outer.body), outer_found.scope, (id(outer_found.scope),)
        )
        inner_loops = [f for f in inner_found if f.kind == FOR]
        for problem in (f for f in inner_found if f.kind == PROBLEM):
            result.notes.append(
                Note(
                    self.tree.line(problem.node),
                    f"inner loop left as is: {problem.reason}",
                    done=False,
                )
            )
        outer_name = "epoch" if inner_loops else self._variable_name(outer) or "step"
        result.outer = self._loop(outer, outer_found.scope, outer_name)
        used = {result.outer.name}
        for k, f in enumerate(inner_loops):
            node: cst.For | cst.While = f.node  # type: ignore[assignment]
            name = "step" if k == 0 else self._variable_name(node) or f"step{k + 1}"
            if name in used:
                name = f"step{k + 1}"
            used.add(name)
            result.inner.append(self._loop(node, f.scope, name))
            for deeper in self.search(block_statements(node.body), f.scope, (id(f.scope),)):
                result.notes.append(
                    Note(
                        self.tree.line(deeper.node),
                        "loop inside the step loop left as is (two loop levels are "
                        "instrumented: epoch and step)",
                        done=False,
                    )
                )
        return result

    def _why_none(self) -> str:
        backward = [n for n in self.tree.calls if is_backward_call(n)]
        if not backward:
            return "no training loop found: no `.backward()` call in the script"
        first = backward[0]
        line = self.tree.line(first)
        owners = [
            a for a in self.tree.ancestors(first) if isinstance(a, (cst.FunctionDef, cst.ClassDef))
        ]
        if any(isinstance(o, cst.ClassDef) for o in owners):
            cls = next(o for o in owners if isinstance(o, cst.ClassDef))
            return (
                f"the training step (line {line}) is in a method of class "
                f"{cls.name.value}; methods are not followed, instrument it by hand"
            )
        if owners:
            function = self.tree.function(owners[-1])  # type: ignore[arg-type]
            if not function.calls:
                how = "never calls" if not function.references else "only passes as a value"
                return (
                    f"the training code (line {line}) is in {function.name}(), which the "
                    f"script {how}; cannot tell when or how often it runs"
                )
        return f"no training loop found: `.backward()` at line {line} is not inside a `for` loop"

    # -- naming and wrapping -------------------------------------------------------------

    def _loop(self, node: cst.For | cst.While, scope: Scope, name: str) -> Loop:
        if isinstance(node, cst.While):
            return Loop(node, scope, name, False)
        existing = self.existing_loop_name(node.iter)
        if existing is not None:
            return Loop(node, scope, existing or name, True)
        return Loop(node, scope, name, False)

    def existing_loop_name(self, iterable: cst.BaseExpression) -> str | None:
        """The name of the flor.loop a loop already iterates ("" if not a literal)."""
        call = iterable
        if call_name(call) == "enumerate" and isinstance(call, cst.Call) and call.args:
            if call_name(call.args[0].value) == f"{self.alias}.loop":
                call = call.args[0].value
        if call_name(call) != f"{self.alias}.loop" or not isinstance(call, cst.Call):
            return None
        return (string_literal(call.args[0].value) or "") if call.args else ""

    @staticmethod
    def _variable_name(node: cst.For | cst.While) -> str | None:
        """`for epoch in ...` -> "epoch"; `for step, (x, y) in enumerate(...)` -> "step"."""
        if isinstance(node, cst.While):
            return None
        target: cst.BaseExpression = node.target
        if (
            isinstance(target, cst.Tuple)
            and call_name(node.iter) == "enumerate"
            and target.elements
        ):
            target = target.elements[0].value
        if not isinstance(target, cst.Name):
            return None
        name = target.value
        if len(name) < 3 or name.startswith("_") or name in GENERIC_LOOP_NAMES:
            return None
        return name
