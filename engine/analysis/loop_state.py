"""The state a training loop carries from one iteration to the next (FLOR's SkipBlock side
effects), found in the code.

A replay segment that starts from a checkpoint restores the registered objects (model,
optimizer, ...) and the RNGs; the plain variables the loop body keeps across iterations
would start at their pre-loop values. Three answers, for the checkpointed main `flor.loop`:

- `carried`: names the body (nested blocks included, and module-level functions it calls
  that assign `global`s) assigns *and* reads before assigning in some iteration — live at
  the top of the body and defined in it: a batch prefetched at the end of the body, a
  running reward, a best-so-far, an EMA, an iteration counter. The loop's own target and
  the objects registered in `flor.checkpointing` are not carried (the checkpoint holds
  them). Saved with each checkpoint, restored at a segment's start.
- `mutated_objects`: objects defined outside the loop that it changes in place
  (`sched.step()`, `losses.append(x)`, `d[k] = v`) and that no registered object holds;
  restoring from a checkpoint is right only when this is empty (whole state or none).
- `leaves`: names an inner loop assigns that the rest of the outer body reads after it
  (`loss`, `running_loss`, `correct`): what skipping that inner loop would leave stale.
  An inner loop is a flor.loop one flor.loop deep, as the replay counts them: in the
  main loop's body (inside plain `for`/`while` loops and blocks too) or in a module-level
  function it calls; every main loop of that name counts (a script may run two).
  `inner_leaves` says it per inner flor.loop, by the lines of its `for` header, with all
  the names that loop assigns: the recording memoizes those where the loop ends (its
  frame's line is in the header), since a statement added later may read any of them.

It also says where the main loop sits (`lines`) and whether its body has code after its
last nested flor.loop (`tail`): the replay mode and the checkpoint moment follow from them.

Liveness follows the structure of the code: `if` branches join, handlers may start
anywhere in their `try`, `break` goes to the loop's exit and `continue` to its head; inner
loops are assumed to run their body at least once (training loops do), so a name set in an
inner loop before any read is not live before it. Misses here would restore a wrong
value, so where the code is unclear the analysis errs towards more carried names.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import libcst as cst
from libcst.metadata import CodeRange

from florwb_engine.analysis.mutations import (
    Dotted,
    bound_names,
    imported_names,
    mutated_paths,
    path_of,
)
from florwb_engine.analysis.names import free_names, target_names
from florwb_engine.analysis.nodes import Parsed, iter_children, parse, walk
from florwb_engine.analysis.purity import OUTPUT_METHODS
from florwb_engine.analysis.scopes import (
    declared_globals,
    local_names,
    parameter_names,
    scope_nodes,
)
from florwb_engine.flor_calls import ANY_LOOP, FlorImports, imports_from_nodes, iterates_loop_cst


@dataclass(frozen=True)
class LoopState:
    """What the main loop keeps across iterations (see the module doc)."""

    found: bool = False  # whether the main loop was found in the source
    at_module: bool = True  # the loop runs at module level (its names are globals)
    carried: tuple[str, ...] = ()
    # carried names that are module globals although the loop runs in a function
    global_names: frozenset[str] = frozenset()
    mutated_objects: tuple[str, ...] = ()
    leaves: tuple[str, ...] = ()
    # per inner flor.loop: (first line of its `for` header, last line of it, names it
    # leaves, names it assigns)
    inner_leaves: tuple[tuple[int, int, tuple[str, ...], tuple[str, ...]], ...] = ()
    registered: tuple[str, ...] = field(default=())  # flor.checkpointing's objects
    # names an inner loop assigns that the main body reads before its first inner loop
    before_inner: tuple[str, ...] = ()
    lines: tuple[int, int] = (0, 0)  # the main loop's first and last line
    # a main loop of that name has lines after the last flor.loop nested in it
    tail: bool = False


@functools.lru_cache(maxsize=32)
def loop_state(source: str, main_loop: str | None, line: int | None = None) -> LoopState:
    """The loop state of the first (outermost) `for ... in flor.loop(main_loop, ...)`, or,
    with `line`, of the `for` whose header spans that line (what the running loop's frame
    says: found also where flor is imported in a way the code does not show). Kept per
    source: planning asks it of each run's code several times (memoized names, whole
    state), and runs of one version share their code."""
    parsed = parse(source)
    if parsed is None:
        return LoopState()
    module = parsed.module
    imports = imports_from_nodes(walk(module))
    if line is not None:
        found = _loop_at(parsed, line)
    else:
        found = main_loop_of(module, imports, main_loop)
    if found is None:
        return LoopState()
    loop, function = found
    others = [] if line is not None else _other_main_loops(module, imports, main_loop, loop)
    registered = registered_paths(module, imports)
    functions = {s.name.value: s for s in module.body if isinstance(s, cst.FunctionDef)}
    summaries = {name: _summary(fn) for name, fn in functions.items()}
    summaries = {name: s for name, s in summaries.items() if s[0] or s[1]}
    live = _Liveness(summaries)
    targets = target_names(loop.target)
    head = _head(live, loop)
    defined = _scope_defs(loop.body)
    helper_defs: set[str] = set()
    for name in _called_names(loop.body):
        if name in summaries:
            helper_defs |= summaries[name][1]
    excluded = (
        targets
        | {p[0] for p in registered}
        | imported_names(module)
        | set(functions)
        | {s.name.value for s in module.body if isinstance(s, cst.ClassDef)}
    )
    carried = (head & (defined | helper_defs)) - excluded
    global_names: frozenset[str] = frozenset()
    if function is not None:
        local = local_names(function)
        global_names = frozenset(n for n in carried if n not in local)
    mains = [(loop, head), *((other, _head(live, other)) for other in others)]
    positions = parsed.positions
    per_loop = [
        (first, last, tuple(sorted(names - excluded)), tuple(sorted(assigned - excluded)))
        for first, last, names, assigned in _inner_leaves(
            positions, mains, functions, summaries, imports
        )
    ]
    leaves = {name for _, _, names, _ in per_loop for name in names}
    inner_assigned = {name for _, _, _, assigned in per_loop for name in assigned}
    before = _before_first_inner(loop.body, imports, functions, live) & inner_assigned
    return LoopState(
        found=True,
        at_module=function is None,
        carried=tuple(sorted(carried)),
        global_names=global_names,
        mutated_objects=tuple(
            sorted(".".join(p) for p in _mutated(module, loop, functions, registered))
        ),
        leaves=tuple(sorted(leaves)),
        inner_leaves=tuple(sorted(per_loop)),
        registered=tuple(sorted(".".join(p) for p in registered)),
        before_inner=tuple(sorted(before)),
        lines=(positions[loop].start.line, positions[loop].end.line),
        tail=any(_has_tail(positions, main, imports) for main, _ in mains),
    )


# -- finding things ---------------------------------------------------------------------------


def main_loop_of(
    module: cst.Module, imports: FlorImports, name: str | None
) -> tuple[cst.For, cst.FunctionDef | None] | None:
    """The outermost `for` over `flor.loop(name)` (breadth first), and the function it runs in."""
    queue: list[tuple[cst.CSTNode, cst.FunctionDef | None]] = [(module, None)]
    while queue:
        level: list[tuple[cst.CSTNode, cst.FunctionDef | None]] = []
        for node, function in queue:
            if isinstance(node, cst.For) and iterates_loop_cst(node, imports, name):
                return node, function
            inner = node if isinstance(node, cst.FunctionDef) else function
            level.extend((child, inner) for child, _, _ in iter_children(node))
        queue = level
    return None


def _other_main_loops(
    module: cst.Module, imports: FlorImports, name: str | None, main: cst.For
) -> list[cst.For]:
    """The other `for`s over `flor.loop(name)` not nested in one of that name: a script
    that trains twice (`epoch` loops of a pretraining and a fine-tuning)."""
    found: list[cst.For] = []
    stack: list[cst.CSTNode] = [module]
    while stack:
        node = stack.pop()
        if type(node) is cst.For and iterates_loop_cst(node, imports, name):
            if node is not main:
                found.append(node)
            continue
        stack.extend(child for child, _, _ in iter_children(node))
    return found


def _head(live: _Liveness, loop: cst.For) -> set[str]:
    """What the loop's body reads before assigning it, the back edge followed: the names
    live at the top of the body."""
    head: set[str] = set()
    for _ in range(6):  # the back edge: the body's live-in is live after the body
        body_in = live.block(loop.body, head, _Ctx(set(), head))
        if body_in <= head:
            break
        head |= body_in
    return head


def _has_tail(
    positions: Mapping[cst.CSTNode, CodeRange], main: cst.For, imports: FlorImports
) -> bool:
    """Whether the main loop's body has lines after the last flor.loop nested in it."""
    ends = [
        positions[node].end.line
        for node in walk(main.body)
        if type(node) is cst.For and iterates_loop_cst(node, imports, ANY_LOOP)
    ]
    return bool(ends) and max(ends) < positions[main].end.line


def _loop_at(parsed: Parsed, line: int) -> tuple[cst.For, cst.FunctionDef | None] | None:
    """The innermost `for` whose header (from `for` to the colon) spans `line`."""
    positions = parsed.positions
    best: tuple[int, cst.For, cst.FunctionDef | None] | None = None
    stack: list[tuple[cst.CSTNode, cst.FunctionDef | None]] = [(parsed.module, None)]
    while stack:
        node, function = stack.pop()
        if isinstance(node, cst.For):
            start = positions[node].start.line
            header_end = positions[node.body].start.line
            if start <= line <= header_end and (best is None or start > best[0]):
                best = (start, node, function)
        inner = node if isinstance(node, cst.FunctionDef) else function
        stack.extend((child, inner) for child, _, _ in iter_children(node))
    return (best[1], best[2]) if best is not None else None


def registered_paths(module: cst.Module, imports: FlorImports) -> frozenset[Dotted]:
    """Paths of the objects given to `flor.checkpointing(...)`: their changes are held.
    Only names and attribute chains (`net`, `self.opt`): a path cannot tell `nets[0]` from
    `nets[1]`, so an object registered by subscript vouches for nothing around it."""
    found: set[Dotted] = set()
    for node in walk(module):
        if type(node) is cst.Call and imports.api_of(node.func) == "checkpointing":
            for arg in node.args:
                if arg.keyword is not None and _plain_path(arg.value):
                    path = path_of(arg.value)
                    if path:
                        found.add(path)
    return frozenset(found)


def _plain_path(node: cst.BaseExpression) -> bool:
    while isinstance(node, cst.Attribute):
        node = node.value
    return isinstance(node, cst.Name)


def _scope_defs(node: cst.CSTNode) -> set[str]:
    """Plain names `node` binds in its own scope (nested defs and comprehensions aside)."""
    found: set[str] = set()
    for sub in scope_nodes(node):
        tp = type(sub)
        if tp in (cst.AssignTarget, cst.AugAssign, cst.For, cst.NamedExpr):
            found |= target_names(sub.target)  # type: ignore[attr-defined]
        elif tp is cst.AnnAssign and sub.value is not None:  # type: ignore[attr-defined]
            found |= target_names(sub.target)  # type: ignore[attr-defined]
        elif tp is cst.AsName:
            found |= target_names(sub.name)  # type: ignore[attr-defined]
    return found


def _called_names(node: cst.CSTNode) -> set[str]:
    """Names of plain functions called (`evaluate(acc)`), in this scope."""
    return {
        sub.func.value
        for sub in scope_nodes(node)
        if type(sub) is cst.Call and type(sub.func) is cst.Name
    }


def _inner_leaves(
    positions: Mapping[cst.CSTNode, CodeRange],
    mains: list[tuple[cst.For, set[str]]],
    functions: dict[str, cst.FunctionDef],
    summaries: dict[str, tuple[set[str], set[str]]],
    imports: FlorImports,
) -> list[tuple[int, int, set[str], set[str]]]:
    """Names an inner flor.loop assigns that the code after it reads (before the body or
    the function holding it ends, a `return` included): in each main loop's body, and in
    the module-level functions it calls (transitively; a pytorch-cifar `train()` whose step
    loop leaves `batch_idx` for its `return`). A replay that skips such a loop must put
    them back. What is live after each loop is noted in one pass; a main loop's body
    ends where its next iteration starts, so what that reads before assigning (its head)
    counts too: `if epoch: print(loss)` at the top of the body reads the last iteration's
    loss. Per loop, with the lines its `for` header spans."""
    scopes: list[tuple[cst.CSTNode, set[str]]] = []
    seen: set[str] = set()
    for main, head in mains:
        scopes.append((main.body, head))
        for fn in _called_functions(main, functions):
            if fn.name.value not in seen:
                seen.add(fn.name.value)
                scopes.append((fn.body, set()))
    found: dict[int, tuple[cst.For, set[str]]] = {}
    for scope, at_end in scopes:
        live = _Liveness(summaries, imports=imports)
        live.block(scope, set(at_end), _Ctx(set(), set(at_end)))
        for inner, after in live.after_loops:
            # a loop inside a plain loop is seen once per pass over that loop's body
            _, before = found.setdefault(id(inner), (inner, set()))
            before |= after
    out = []
    for inner, after in found.values():
        assigned = _scope_defs(inner)
        start = positions[inner].start.line
        out.append((start, positions[inner.body].start.line, assigned & after, assigned))
    return out


def _before_first_inner(
    body: cst.CSTNode,
    imports: FlorImports,
    functions: dict[str, cst.FunctionDef],
    live: _Liveness,
) -> set[str]:
    """Names the main loop's body reads before its first inner flor.loop can begin. A
    segment that starts at f > 0 runs iteration f - 1 from its top with the state from
    before the main loop and restores f - 1's checkpoint only where that inner loop
    begins, so what this code reads of the last iteration has no value there. The
    statement holding the first inner loop (or a call of a module-level function, which
    may run one) counts with everything it reads, to err towards more names."""
    statements = list(getattr(body, "body", ()))
    reads: set[str] = set()
    prefix: list[cst.CSTNode] = []
    for stmt in statements:
        nodes = list(walk(stmt))
        if any(type(n) is cst.For and iterates_loop_cst(n, imports, ANY_LOOP) for n in nodes):
            reads = _reads(stmt.iter) if type(stmt) is cst.For else _reads(stmt)
            break
        if any(
            type(n) is cst.Call and type(n.func) is cst.Name and n.func.value in functions
            for n in nodes
        ):
            reads = _reads(stmt)
            break
        prefix.append(stmt)
    ctx = _Ctx(set(), set())
    for stmt in reversed(prefix):
        reads = live.stmt(stmt, reads, ctx)
    return reads


def _called_functions(
    loop: cst.For, functions: dict[str, cst.FunctionDef]
) -> list[cst.FunctionDef]:
    """The module-level functions the loop's body calls, and those they call, once each."""
    found: list[cst.FunctionDef] = []
    seen: set[str] = set()
    calls = _called_names(loop.body)
    while calls:
        name = calls.pop()
        if name in seen or name not in functions:
            continue
        seen.add(name)
        found.append(functions[name])
        calls |= _called_names(functions[name].body)
    return found


def _summary(function: cst.FunctionDef) -> tuple[set[str], set[str]]:
    """(globals the function reads before assigning them, globals it assigns): what a call
    of it means for the caller's loop state."""
    declared = declared_globals(function)
    if not declared:
        return set(), set()
    live = _Liveness({}).block(function.body, set(), _Ctx(set(), set()))
    return live & declared, _scope_defs(function.body) & declared


def _mutated(
    module: cst.Module,
    loop: cst.For,
    functions: dict[str, cst.FunctionDef],
    registered: frozenset[Dotted],
) -> set[Dotted]:
    """Objects defined outside the loop that the loop, or a module-level function it calls
    (transitively), changes in place, less what a registered object holds."""
    bound = bound_names(loop)
    found = {p for p in mutated_paths(loop.body, registered, OUTPUT_METHODS) if p[0] not in bound}
    for fn in _called_functions(loop, functions):
        local = local_names(fn)
        found |= {
            p for p in mutated_paths(fn.body, registered, OUTPUT_METHODS) if p[0] not in local
        }
    imported = imported_names(module)
    return {
        p for p in found if p[0] not in imported and not any(p[: len(r)] == r for r in registered)
    }


# -- liveness ---------------------------------------------------------------------------------


@dataclass
class _Ctx:
    break_live: set[str]  # live where a `break` goes (the loop's exit)
    continue_live: set[str]  # live where a `continue` goes (the loop's head)


def _reads(node: cst.CSTNode | None) -> set[str]:
    return set(free_names(node)[0]) if node is not None else set()


def _target_reads(target: cst.CSTNode) -> set[str]:
    """Names an assignment target reads: `x[i] = v` reads x and i, `a.b = v` reads a."""
    if isinstance(target, (cst.Tuple, cst.List)):
        out: set[str] = set()
        for element in target.elements:
            out |= _target_reads(element.value)
        return out
    if isinstance(target, cst.StarredElement):
        return _target_reads(target.value)
    if isinstance(target, cst.Attribute):
        return _reads(target.value)
    if isinstance(target, cst.Subscript):
        return _reads(target)
    return set()


class _Liveness:
    """Backward liveness over statements; `summaries` says what calling a module-level
    function reads and assigns of the globals (`global best` in a helper). With `imports`,
    what is live after each flor.loop not nested in another is noted (`after_loops`)."""

    def __init__(
        self,
        summaries: dict[str, tuple[set[str], set[str]]],
        imports: FlorImports | None = None,
    ):
        self.summaries = summaries
        self.imports = imports
        self.record = imports is not None
        self.after_loops: list[tuple[cst.For, set[str]]] = []

    def block(self, suite: cst.CSTNode, after: set[str], ctx: _Ctx) -> set[str]:
        live = set(after)
        body = getattr(suite, "body", ())
        if isinstance(suite, cst.SimpleStatementSuite):
            for small in reversed(body):
                live = self.small(small, live, ctx)
            return live
        for stmt in reversed(body):
            live = self.stmt(stmt, live, ctx)
        return live

    def _calls(self, node: cst.CSTNode) -> set[str]:
        if not self.summaries:
            return set()
        out: set[str] = set()
        for name in _called_names(node):
            summary = self.summaries.get(name)
            if summary is not None:
                out |= summary[0]
        return out

    def small(self, small: cst.CSTNode, after: set[str], ctx: _Ctx) -> set[str]:
        tp = type(small)
        calls = self._calls(small)
        if tp is cst.Assign:
            defs: set[str] = set()
            uses = _reads(small.value)  # type: ignore[attr-defined]
            for target in small.targets:  # type: ignore[attr-defined]
                defs |= target_names(target.target)
                uses |= _target_reads(target.target)
            return (after - defs) | uses | calls
        if tp is cst.AugAssign:
            return after | _reads(small.value) | _reads(small.target) | calls  # type: ignore[attr-defined]
        if tp is cst.AnnAssign:
            if small.value is None:  # type: ignore[attr-defined]
                return after
            defs = target_names(small.target)  # type: ignore[attr-defined]
            uses = _reads(small.value) | _target_reads(small.target)  # type: ignore[attr-defined]
            return (after - defs) | uses | calls
        if tp is cst.Return or tp is cst.Raise:
            return _reads(small) | calls
        if tp is cst.Break:
            return set(ctx.break_live)
        if tp is cst.Continue:
            return set(ctx.continue_live)
        if tp is cst.Del:
            return (after - target_names(small.target)) | _target_reads(small.target)  # type: ignore[attr-defined]
        if tp is cst.Import or tp is cst.ImportFrom:
            return after - imported_names(small)
        if tp in (cst.Global, cst.Nonlocal, cst.Pass):
            return after
        return after | _reads(small) | calls

    def stmt(self, stmt: cst.CSTNode, after: set[str], ctx: _Ctx) -> set[str]:
        tp = type(stmt)
        if tp is cst.SimpleStatementLine:
            live = after
            for small in reversed(stmt.body):  # type: ignore[attr-defined]
                live = self.small(small, live, ctx)
            return live
        if tp is cst.If:
            return self._if(stmt, after, ctx)  # type: ignore[arg-type]
        if tp is cst.For or tp is cst.While:
            if not self.record or tp is cst.While:
                return self._loop(stmt, after, ctx)
            assert self.imports is not None and isinstance(stmt, cst.For)
            if not iterates_loop_cst(stmt, self.imports, ANY_LOOP):
                return self._loop(stmt, after, ctx)  # a plain loop: flor.loops in it count
            self.after_loops.append((stmt, set(after)))
            self.record = False  # a flor.loop in this one is no inner loop of the main loop
            try:
                return self._loop(stmt, after, ctx)
            finally:
                self.record = True
        if tp is cst.Try or tp is cst.TryStar:
            return self._try(stmt, after, ctx)
        if tp is cst.With:
            items = set()
            bound = set()
            for item in stmt.items:  # type: ignore[attr-defined]
                items |= _reads(item.item) | self._calls(item.item)
                if item.asname is not None:
                    bound |= target_names(item.asname.name)
            return items | (self.block(stmt.body, after, ctx) - bound)  # type: ignore[attr-defined]
        if isinstance(stmt, cst.FunctionDef):
            reads = _reads(stmt.body) - _scope_defs(stmt.body) - parameter_names(stmt)
            for decorator in stmt.decorators:
                reads |= _reads(decorator.decorator)
            return (after - {stmt.name.value}) | reads
        if tp is cst.ClassDef:
            reads = set()
            for arg in stmt.bases:  # type: ignore[attr-defined]
                reads |= _reads(arg.value)
            return (after - {stmt.name.value}) | reads  # type: ignore[attr-defined]
        if tp is cst.Match:
            live = set(after)
            for case in stmt.cases:  # type: ignore[attr-defined]
                live |= self.block(case.body, after, ctx) | _reads(case.guard)
            return live | _reads(stmt.subject)  # type: ignore[attr-defined]
        return after | _reads(stmt)

    def _if(self, stmt: cst.If, after: set[str], ctx: _Ctx) -> set[str]:
        live = self.block(stmt.body, after, ctx)
        orelse = stmt.orelse
        if isinstance(orelse, cst.If):
            live |= self._if(orelse, after, ctx)
        elif isinstance(orelse, cst.Else):
            live |= self.block(orelse.body, after, ctx)
        else:
            live |= after
        return live | _reads(stmt.test) | self._calls(stmt.test)

    def _loop(self, stmt: cst.CSTNode, after: set[str], ctx: _Ctx) -> set[str]:
        """A loop whose body runs at least once: live before it is what its head needs and
        what the body reads before assigning, with the back edge to the head."""
        exit_live = set(after)
        orelse = getattr(stmt, "orelse", None)
        if isinstance(orelse, cst.Else):
            exit_live = self.block(orelse.body, after, ctx)
        if isinstance(stmt, cst.For):
            targets = target_names(stmt.target)
            head_reads = _reads(stmt.iter) | self._calls(stmt.iter)
        else:
            targets = set()
            head_reads = _reads(stmt.test) | self._calls(stmt.test)  # type: ignore[attr-defined]
        head = exit_live | head_reads
        inner_ctx = _Ctx(set(after), head)
        for _ in range(6):
            inner_ctx.continue_live = head
            body_in = self.block(stmt.body, head, inner_ctx) - targets  # type: ignore[attr-defined]
            grown = head | body_in
            if grown == head:
                break
            head = grown
        return head_reads | body_in

    def _try(self, stmt: cst.CSTNode, after: set[str], ctx: _Ctx) -> set[str]:
        body, handlers, orelse, final = _try_parts(stmt)
        fin = self.block(final, after, ctx) if final is not None else set(after)
        rest = self.block(orelse, fin, ctx) if orelse is not None else fin
        live = self.block(body, rest, ctx)
        for handler in handlers:
            bound = target_names(handler.name.name) if handler.name is not None else set()
            live |= (self.block(handler.body, fin, ctx) - bound) | _reads(handler.type)
        return live | fin


def _try_parts(
    stmt: cst.CSTNode,
) -> tuple[cst.CSTNode, list, cst.CSTNode | None, cst.CSTNode | None]:
    orelse = getattr(stmt, "orelse", None)
    final = getattr(stmt, "finalbody", None)
    return (
        stmt.body,  # type: ignore[attr-defined]
        list(stmt.handlers),  # type: ignore[attr-defined]
        orelse.body if orelse is not None else None,
        final.body if final is not None else None,
    )


def main(argv: list[str]) -> int:
    """`python -m florwb_engine.analysis.loop_state FILE LOOP LINE`: the carried names of
    the loop at FILE:LINE as JSON. A recording process runs the analysis this way, in a
    process of its own, so parsing never competes with training for the GIL."""
    import json

    path, name, line = argv
    found = loop_state(Path(path).read_text(encoding="utf-8"), name, int(line))
    print(
        json.dumps(
            {
                "found": found.found,
                "carried": list(found.carried),
                # what the recording memoizes: all an inner loop assigns
                "leaves": [
                    [first, last, list(assigned)] for first, last, _, assigned in found.inner_leaves
                ],
            }
        )
    )
    return 0


if __name__ == "__main__":
    import sys

    raise SystemExit(main(sys.argv[1:]))
