"""What state a placed statement reads that checkpoints may not hold.

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

from collections.abc import Mapping
from dataclasses import dataclass, field

import libcst as cst

from florwb_engine.analysis.loop_state import main_loop_of, registered_paths
from florwb_engine.analysis.mutations import (
    Dotted,
    bound_names,
    imported_names,
    mutated_paths,
    read_paths,
)
from florwb_engine.analysis.nodes import parse, walk
from florwb_engine.flor_calls import (
    FlorImports,
    imports_from_nodes,
    log_call_parts,
)
from florwb_engine.propagate import Placement, find_log_statements
from florwb_engine.propagate.source import code_and_lines

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
    parsed = parse(code)
    if parsed is None:
        return found
    module = parsed.module
    nodes = list(walk(module))
    imports = imports_from_nodes(nodes)
    values = _logged_values(module, nodes, imports, {p.old_line for p in placed.values()})
    functions = {s.name.value: s for s in module.body if isinstance(s, cst.FunctionDef)}
    loop = main_loop_of(module, imports, main_loop)
    main = loop[0] if loop else None
    changed = _changed_paths(nodes, main, registered_paths(module, imports)) if main else set()
    modules = imported_names(module)
    changed = {p for p in changed if p[0] not in modules}
    for name, placement in placed.items():
        if not placement.loop_path:
            continue  # before the main loop: runs from the script's start, as recorded
        value = values.get((placement.old_line, name))
        if value is None:
            continue
        if _reads_grads(value, functions):
            found.grads.append(name)
        reads = read_paths(value)
        hit = sorted(
            {".".join(m) for m in changed for r in reads if _overlap(r, m)},
        )
        if hit:
            found.unheld[name] = hit
    return found


def _logged_values(
    module: cst.Module, nodes: list[cst.CSTNode], imports: FlorImports, lines: set[int | None]
) -> dict[tuple[int | None, str], cst.BaseExpression]:
    """The value expression of each `flor.log("<name>", value)` on one of `lines`."""
    calls: list[tuple[cst.Call, str, cst.BaseExpression]] = []
    for node in nodes:
        if type(node) is cst.Call:
            parts = log_call_parts(node, imports)
            if parts is not None:
                calls.append((node, parts[0], parts[2].value))
    _code, at = code_and_lines(module, [c for c, _, _ in calls])
    return {
        (at.get(id(call)), name): value for call, name, value in calls if at.get(id(call)) in lines
    }


def _changed_paths(
    nodes: list[cst.CSTNode], main: cst.For, registered: frozenset[Dotted]
) -> set[Dotted]:
    """Objects defined outside the main loop that the loop, or any function or method
    (constructors aside), changes in place. The loop's own variables are left out: they
    are re-bound by the code that runs, and mode.py handles reads of inner-loop ones."""
    found: set[Dotted] = set()
    bound_in_loop = bound_names(main)
    found |= {p for p in mutated_paths(main, registered) if p[0] not in bound_in_loop}
    for node in nodes:
        if isinstance(node, cst.FunctionDef) and node.name.value != "__init__":
            params = node.params
            local = bound_names(node) | {
                p.name.value for p in (*params.params, *params.kwonly_params)
            }
            found |= {
                p for p in mutated_paths(node, registered) if p[0] == "self" or p[0] not in local
            }
    return {
        p
        for p in found
        if not any(p == r for r in registered)  # a registered object's own method calls
    }


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


def _reads_grads(value: cst.CSTNode, functions: Mapping[str, cst.FunctionDef]) -> bool:
    seen: set[str] = set()
    stack: list[cst.CSTNode] = [value]
    while stack:
        node = stack.pop()
        for sub in walk(node):
            if isinstance(sub, cst.Attribute) and sub.attr.value == "grad":
                return True
            if isinstance(sub, cst.Call):
                func = sub.func
                called = (
                    func.attr.value
                    if isinstance(func, cst.Attribute)
                    else func.value
                    if isinstance(func, cst.Name)
                    else None
                )
                if called in _GRAD_CALLS:
                    return True
                if called is not None and called in functions and called not in seen:
                    seen.add(called)
                    stack.append(functions[called])
    return False
