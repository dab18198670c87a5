"""What state a placed statement reads that checkpoints may not hold (issue 11, item 1).

A checkpoint holds the registered objects' state_dicts, the RNG states and, since this
module exists, the registered modules' gradients. A replay that skips inner loops (OUTER)
or starts a segment from a checkpoint (INNER) is right only if the statement reads nothing
else that the skipped or earlier iterations changed. Two kinds are recognised here, from
the code alone:

- gradients: `.grad`, `clip_grad_norm_`/`clip_grad_value_`, directly or in a module-level
  function the statement calls. Right when the run's checkpoints hold gradients
  (`checkpoint.holds_grads`), otherwise the main loop is re-executed from its first
  iteration in one segment;
- state changed in the main loop that no checkpoint holds: an object defined outside the
  main loop that the loop (or a function) changes in place (`losses.append(...)`,
  `stats["n"] += 1`, `self.seen += 1`, `sched.step()` on an unregistered scheduler), which
  the statement reads. Re-executed from the first iteration in one segment.

A statement in a function whose call sites florwb cannot follow is refused: its loop path
(and so the replay mode) would be a guess.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass, field

from florwb_engine.flor_calls import FlorImports, ast_call_name, imports_from_ast, iterates_loop
from florwb_engine.propagate import Placement, find_log_statements

# Methods that leave their receiver as it was; any other method call on an object counts
# as changing it (a wrong "changed" only costs a slower, still right, replay).
_PURE_METHODS = frozenset(
    """item size numel mean sum norm detach cpu cuda to clone float double half int long bool
    numpy tolist keys values items get copy format parameters named_parameters state_dict
    dim view reshape flatten max min argmax argmin abs pow sqrt exp log t type eq ne lt gt
    le ge std var count index join split startswith endswith lower upper strip replace
    children modules buffers named_buffers named_modules named_children squeeze unsqueeze
    expand contiguous softmax log_softmax all any nonzero chunk unbind matmul mm bmm
    sigmoid tanh relu sub add mul div prod cumsum allclose equal isfinite isnan
    total_seconds tobytes astype""".split()
)
_GRAD_CALLS = frozenset({"clip_grad_norm_", "clip_grad_value_", "clip_grad_norm"})


@dataclass
class StateReads:
    """What the placed statements need beyond the checkpointed state, and why."""

    refused: str | None = None  # a statement whose place in the loops is unknown
    grads: list[str] = field(default_factory=list)  # statements reading gradients
    unheld: dict[str, list[str]] = field(default_factory=dict)  # statement -> state read


def state_reads(code: str, placed: dict[str, Placement], main_loop: str | None) -> StateReads:
    """The state the statements in `placed` read in the (propagated) `code`."""
    found = StateReads()
    known = {s.line: s for s in find_log_statements(code)}
    for name, placement in placed.items():
        statement = known.get(placement.old_line or -1)
        if statement is not None and not statement.where_known:
            function = next(
                (c.removeprefix("def ") for c in reversed(statement.chain) if c.startswith("def ")),
                "a function",
            )
            found.refused = (
                f"{name} sits in `{function}`, whose call sites florwb cannot follow (never "
                "called, stored, or called from different loops): where it runs is unknown"
            )
            return found
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return found
    imports = imports_from_ast(tree)
    calls = _log_calls(tree, imports, {p.old_line for p in placed.values()})
    functions = {
        node.name: node
        for node in tree.body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    }
    main = _main_loop(tree, imports, main_loop)
    changed = _changed_paths(tree, main, _registered(tree, imports)) if main else set()
    modules = _imported(tree)
    changed = {p for p in changed if p[0] not in modules}
    for name, placement in placed.items():
        if not placement.loop_path:
            continue  # before the main loop: runs from the script's start, as recorded
        call = calls.get((placement.old_line, name))
        if call is None or len(call.args) < 2:
            continue
        value = call.args[1]
        if _reads_grads(value, functions):
            found.grads.append(name)
        reads = _read_paths(value)
        hit = sorted(
            {".".join(m) for m in changed for r in reads if _overlap(r, m)},
        )
        if hit:
            found.unheld[name] = hit
    return found


def _log_calls(
    tree: ast.Module, imports: FlorImports, lines: set[int | None]
) -> dict[tuple[int | None, str], ast.Call]:
    out: dict[tuple[int | None, str], ast.Call] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.lineno in lines:
            name = ast_call_name(node, imports, "log")
            if name is not None:
                out[(node.lineno, name)] = node
    return out


def _main_loop(tree: ast.Module, imports: FlorImports, main_loop: str | None) -> ast.For | None:
    return next(
        (
            n
            for n in ast.walk(tree)
            if isinstance(n, ast.For) and iterates_loop(n, imports, main_loop)
        ),
        None,
    )


def _registered(tree: ast.Module, imports: FlorImports) -> set[tuple[str, ...]]:
    """Paths of the objects given to `flor.checkpointing(...)`: their changes are held."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and imports.api_of_ast(node.func) == "checkpointing":
            for kw in node.keywords:
                path = _path(kw.value)
                if path:
                    found.add(path)
    return found


def _path(node: ast.AST) -> tuple[str, ...] | None:
    """`a.b.c` as ("a", "b", "c"); subscripts stop the path (`a.b[0]` -> ("a", "b"))."""
    parts: list[str] = []
    while True:
        if isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        elif isinstance(node, ast.Subscript):
            parts.clear()
            node = node.value
        elif isinstance(node, ast.Name):
            parts.append(node.id)
            return tuple(reversed(parts))
        else:
            return None


def _changed_paths(
    tree: ast.Module, main: ast.For, registered: set[tuple[str, ...]]
) -> set[tuple[str, ...]]:
    """Objects defined outside the main loop that the loop, or any function or method
    (constructors aside), changes in place. The loop's own variables are left out: they
    are re-bound by the code that runs, and mode.py handles reads of inner-loop ones."""
    found: set[tuple[str, ...]] = set()
    bound_in_loop = _bound(main)
    found |= {p for p in _mutations(main, registered) if p[0] not in bound_in_loop}
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name != "__init__":
            local = _bound(node) | {a.arg for a in node.args.args + node.args.kwonlyargs}
            found |= {
                p for p in _mutations(node, registered) if p[0] == "self" or p[0] not in local
            }
    return {
        p
        for p in found
        if not any(p == r for r in registered)  # a registered object's own method calls
    }


def _imported(tree: ast.Module) -> set[str]:
    """Names bound by imports: `torch.manual_seed(0)` or `random.shuffle(x)` in the loop
    change the RNGs (checkpointed), not a module the statement reads."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                names.add((alias.asname or alias.name).split(".")[0])
    return names


def _bound(node: ast.AST) -> set[str]:
    return {
        n.id
        for n in ast.walk(node)
        if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del))
    }


def _mutations(node: ast.AST, registered: set[tuple[str, ...]]) -> set[tuple[str, ...]]:
    """Paths changed in place: attribute/subscript targets, augmented assignments to them,
    receivers of methods that are not known to be pure."""
    out: set[tuple[str, ...]] = set()
    for sub in ast.walk(node):
        targets: list[ast.AST] = []
        if isinstance(sub, ast.Assign):
            targets = list(sub.targets)
        elif isinstance(sub, (ast.AugAssign, ast.AnnAssign)):
            targets = [sub.target]
        elif isinstance(sub, ast.Delete):
            targets = list(sub.targets)
        for target in targets:
            for t in ast.walk(target):
                if isinstance(t, (ast.Attribute, ast.Subscript)) and isinstance(
                    t.ctx, (ast.Store, ast.Del)
                ):
                    path = _path(t)
                    if path and len(path) > (0 if isinstance(t, ast.Subscript) else 1):
                        out.add(path)
        if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute):
            if sub.func.attr not in _PURE_METHODS:
                called = _path(sub.func)
                # `self.net(x)` calls the module `self.net`: record that path, which is
                # left out when it is registered, rather than changing all of `self`
                path = called if called in registered else _path(sub.func.value)
                if path:
                    out.add(path)
    return out


def _read_paths(node: ast.AST) -> set[tuple[str, ...]]:
    """The longest `a.b.c` paths an expression reads."""
    out: set[tuple[str, ...]] = set()
    inner: set[int] = set()
    for sub in ast.walk(node):
        if id(sub) in inner:
            continue
        if isinstance(sub, (ast.Attribute, ast.Name)) and isinstance(sub.ctx, ast.Load):
            path = _path(sub)
            if path:
                out.add(path)
                inner |= {id(n) for n in ast.walk(sub)}
    return out


def _overlap(read: tuple[str, ...], changed: tuple[str, ...]) -> bool:
    """Whether reading `read` sees a change to `changed`: one is a prefix of the other.
    `self.x` changed in a method is matched by attribute name against any object's `x`
    (`net.count` when the module's forward does `self.count += 1`)."""
    if changed[0] == "self" and read[0] != "self":
        changed, read = changed[1:], read[1:]
        if not changed:
            return False
    n = min(len(read), len(changed))
    return n > 0 and read[:n] == changed[:n]


def _reads_grads(value: ast.AST, functions: Mapping[str, ast.AST]) -> bool:
    seen: set[str] = set()
    stack = [value]
    while stack:
        node = stack.pop()
        for sub in ast.walk(node):
            if isinstance(sub, ast.Attribute) and sub.attr == "grad":
                return True
            if isinstance(sub, ast.Call):
                func = sub.func
                called = (
                    func.attr
                    if isinstance(func, ast.Attribute)
                    else func.id
                    if isinstance(func, ast.Name)
                    else None
                )
                if called in _GRAD_CALLS:
                    return True
                if called is not None and called in functions and called not in seen:
                    seen.add(called)
                    stack.append(functions[called])
    return False
