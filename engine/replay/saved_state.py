"""Planning replays from the script's own torch.save calls (mirrored by record/save_mirror).

A mirrored checkpoint is the user's file, not a `{"objects": ..., "rng": ...}` dict: which
objects of the script its tensors belong to is read from the `state` expression of the
torch.save call in the code the run executed. `torch.save({"model": net.state_dict(),
"opt": opt.state_dict()}, path)` maps key `model` to `net` and `opt` to `opt`;
`torch.save(net, path)` and `torch.save(net.state_dict(), path)` map the whole file to `net`;
`state = {...}` assigned before the call in the same scope is followed. Values that are not
state (`"epoch": epoch`, `loss.item()`) are left alone. A part that holds state florwb cannot
place (`make_state(net)`, `**extra`, a save outside the main loop's body) makes that save
unusable, and the plan says which, before the replay starts: a checkpoint restored with one
object missing would give wrong values, so those iterations are re-executed instead.

A save is used only when it holds the whole state the main loop updates (FLOR's rule: a
checkpoint restored with one object missing gives wrong values): the receivers of the
`.step()` calls and the state-like `.update()` calls (`_updates`) in the loop's body and in
the script's functions and methods it calls (optimizers, schedulers, GradScalers, EMAs),
with the arguments of
`scaler.step(opt)`, must each be saved or registered with flor.checkpointing. A plain SGD
without momentum has no state to save. A model saved alone while Adam trains it makes the
run re-execute from its first iteration instead, said in the plan (`loop_updates`,
`unheld_updates`).

Where the save sits in the main loop's body tells which state it holds: after the inner
loops (or at the end of a body without any) it is the iteration's end state, like
flor.checkpointing's; before them it is the state the iteration starts from, i.e. the end
state of the iteration before.
"""

from __future__ import annotations

import ast
import builtins
import json
from dataclasses import dataclass, field
from pathlib import Path

from florwb_engine import versions
from florwb_engine.flor_calls import imports_from_ast, iterates_loop
from florwb_engine.project import checkpoint_dir, store_dir

# calls that do not change training state: a save after them still holds the end state
_QUIET_CALLS = {
    "log",
    "print",
    "info",
    "debug",
    "warning",
    "error",
    "save",
    "write",
    "flush",
    "state_dict",
    "item",
    "format",
    "str",
    "float",
    "int",
    "len",
    "dict",
    "append",
    "set_postfix",
    "set_description",
    "round",
    "min",
    "max",
    "time",
    "perf_counter",
    "join",
}

END = "end"
START = "start"


@dataclass
class SaveMap:
    """How one torch.save call site maps onto the script's objects."""

    line: int
    position: str | None = None  # END or START; None when unusable
    targets: list[list] = field(default_factory=list)  # [keys, expression, required]
    problem: str | None = None  # why the save cannot be used


@dataclass
class SavedState:
    """What a run's mirrored saves give its replay."""

    mirrored: dict[str, str] = field(default_factory=dict)  # iteration -> manifest file
    saved_map: dict[str, list[list]] = field(default_factory=dict)  # site_key -> targets
    sizes: dict[int, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    # objects the main loop updates that neither the saves nor flor.checkpointing hold:
    # expression -> the call that updates it (`opt` -> `opt.step()`)
    unheld: dict[str, str] = field(default_factory=dict)


def site_key(script: str | None, line: int | None) -> str:
    """How a torch.save call site is named in the replay spec: `train.py:42`."""
    return f"{script}:{line}"


def plan_saved_state(
    project: Path,
    run_id: str,
    version: str | None,
    script: str | None,
    main_loop: str | None,
    mirrored: dict[int, tuple[str, int]],
) -> SavedState:
    """The usable mirrored checkpoints of a run (iteration -> manifest), with the map from
    each torch.save call site to the script's objects, and one note per save that cannot
    be used."""
    out = SavedState()
    if not mirrored or not version or not script or not main_loop:
        return out
    folder = checkpoint_dir(project) / run_id
    manifests: dict[int, dict] = {}
    for iteration, (name, _size) in mirrored.items():
        try:
            manifests[iteration] = json.loads((folder / name).read_text())
        except (OSError, ValueError) as exc:
            out.notes.append(f"mirrored checkpoint {name} unreadable ({exc}); not used")
    sites = sorted(
        {
            (s.get("script"), s.get("line"))
            for m in manifests.values()
            for s in m.get("saves", ())
            if s.get("line") is not None
        },
        key=lambda site: (str(site[0]), site[1]),
    )
    if not sites:
        return out
    try:
        old = versions.read_file(store_dir(project), version, script)
    except versions.VersionError as exc:
        out.notes.append(f"own torch.save checkpoints not used: code unavailable ({exc})")
        return out
    if old is None:
        return out
    try:
        tree = ast.parse(old.decode("utf-8", errors="replace"))
    except SyntaxError as exc:
        out.notes.append(f"own torch.save checkpoints not used: {script} does not parse ({exc})")
        return out
    maps: dict[int, SaveMap] = {}
    for site_script, line in sites:
        if site_script != script:
            out.notes.append(
                f"torch.save in {site_script}:{line} is outside {script}: its checkpoints "
                "are not used (florwb maps saves written in the training script)"
            )
            continue
        maps[line] = map_save(tree, line, main_loop)
    for line, m in sorted(maps.items()):
        if m.problem:
            out.notes.append(
                f"torch.save at {script}:{line}: {m.problem}; its checkpoints not used"
            )
    usable = {line: m for line, m in maps.items() if m.problem is None}
    positions = {m.position for m in usable.values()}
    if len(positions) > 1:  # saves at the start and the end of the body: use the end ones
        usable = {line: m for line, m in usable.items() if m.position == END}
    if not usable:
        return out
    held = {target[1] for m in usable.values() for target in m.targets}
    out.unheld = unheld_updates(tree, main_loop, held | registered_objects(tree))
    if out.unheld:
        return out
    shift = -1 if next(iter(usable.values())).position == START else 0
    out.saved_map = {site_key(script, line): m.targets for line, m in usable.items()}
    for iteration, manifest in manifests.items():
        lines = {s.get("line") for s in manifest.get("saves", ()) if s.get("script") == script}
        if not lines & set(usable):
            continue
        effective = iteration + shift
        if effective >= 0:
            out.mirrored[str(effective)] = mirrored[iteration][0]
            out.sizes[effective] = mirrored[iteration][1]
    if shift:
        out.notes.append(
            "own torch.save runs before the inner loops: each is used as the state the "
            "iteration before ended with"
        )
    return out


def map_save(tree: ast.Module, line: int, main_loop: str) -> SaveMap:
    """How the torch.save call at `line` maps onto the script's objects."""
    out = SaveMap(line)
    found = _find_save(tree, line)
    if found is None:
        out.problem = "no torch.save call found at that line of the run's code"
        return out
    call, chain = found
    imports = imports_from_ast(tree)
    loop_index = next(
        (
            i
            for i, node in enumerate(chain)
            if isinstance(node, ast.For) and iterates_loop(node, imports, main_loop)
        ),
        None,
    )
    if loop_index is None:
        out.problem = f"it is not in the body of the main loop {main_loop!r}"
        return out
    inner = chain[loop_index + 1 :]
    if any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) for n in inner):
        out.problem = "it is in a function defined inside the main loop"
        return out
    if any(isinstance(n, (ast.For, ast.While, ast.AsyncFor)) for n in inner):
        out.problem = "it is inside a loop nested in the main loop"
        return out
    loop = chain[loop_index]
    assert isinstance(loop, ast.For)
    statement = inner[0] if inner else None
    if not isinstance(statement, ast.stmt) or statement not in loop.body:
        out.problem = "it is not in the body of the main loop"
        return out
    out.position = _position(loop.body, loop.body.index(statement))
    if out.position is None:
        out.problem = (
            "it sits between statements that change state, so florwb cannot tell which "
            "iteration's state it holds"
        )
        return out
    state = (
        call.args[0]
        if call.args
        else next((k.value for k in call.keywords if k.arg == "obj"), None)
    )
    if state is None:
        out.problem = "it names no state to save"
        return out
    scope = _scope(chain, loop_index)
    targets, problems = _targets(state, [], scope, line, set())
    bound = _bound(chain[0])
    for keys, expression, required in list(targets):
        root = _root(expression)
        if root is not None and root not in bound:
            targets.remove([keys, expression, required])
            if required:
                problems.append(f"`{expression}` (not defined where the main loop runs)")
    if problems:
        out.problem = "cannot map " + ", ".join(problems) + " to an object of the script"
    elif not targets:
        out.problem = "it saves no object florwb can restore"
    out.targets = targets
    return out


def _find_save(tree: ast.AST, line: int) -> tuple[ast.Call, list[ast.AST]] | None:
    """The torch.save call at `line` and its ancestors, outermost first."""

    def visit(node: ast.AST, chain: list[ast.AST]):
        for child in ast.iter_child_nodes(node):
            lineno = getattr(child, "lineno", None)
            end = getattr(child, "end_lineno", None)
            if lineno is not None and end is not None and not lineno <= line <= end:
                continue
            if isinstance(child, ast.Call) and _name_of(child.func) == "save":
                return child, chain
            found = visit(child, [*chain, child])
            if found:
                return found
        return None

    return visit(tree, [tree])


def _position(body: list[ast.stmt], index: int) -> str | None:
    loops = [i for i, s in enumerate(body) if _has_loop(s)]
    if loops:
        if index > loops[-1]:
            return END if all(_quiet(s) for s in body[index + 1 :]) else None
        if index < loops[0]:
            return START if all(_quiet(s) for s in body[:index]) else None
        return None
    if all(_quiet(s) for s in body[index + 1 :]):
        return END
    if all(_quiet(s) for s in body[:index]):
        return START
    return None


def _has_loop(statement: ast.stmt) -> bool:
    return any(isinstance(n, (ast.For, ast.While, ast.AsyncFor)) for n in ast.walk(statement))


def _quiet(statement: ast.stmt) -> bool:
    """A statement that cannot change training state: logging, printing, saving, plain
    assignments of such calls, and ifs made of them."""
    if isinstance(statement, (ast.Pass, ast.Continue)):
        return True
    if isinstance(statement, ast.If):
        return all(_quiet(s) for s in statement.body + statement.orelse)
    if isinstance(statement, (ast.Expr, ast.Assign, ast.AnnAssign, ast.AugAssign)):
        value = statement.value
        if value is None:
            return True
        if isinstance(statement, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
            if not all(isinstance(t, ast.Name) for t in targets):
                return False
        return all(
            _name_of(c.func) in _QUIET_CALLS for c in ast.walk(value) if isinstance(c, ast.Call)
        )
    return False


def _scope(chain: list[ast.AST], loop_index: int) -> list[ast.stmt]:
    """Statements of the scope the main loop runs in, flattened, for following `state = ...`."""
    for node in reversed(chain[: loop_index + 1]):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Module)):
            return [s for s in ast.walk(node) if isinstance(s, ast.stmt)]
    return []


def _targets(
    expr: ast.expr, keys: list, scope: list[ast.stmt], line: int, seen: set[str]
) -> tuple[list[list], list[str]]:
    """[keys, expression, required] per object `expr` saves, and what it cannot map."""
    if isinstance(expr, ast.Call) and _name_of(expr.func) == "state_dict" and not expr.args:
        receiver = expr.func.value if isinstance(expr.func, ast.Attribute) else None
        if receiver is not None and _reference(receiver):
            return [[keys, ast.unparse(receiver), True]], []
        return [], [_label(keys, expr)]
    if isinstance(expr, ast.Dict):
        return _dict_targets(list(zip(expr.keys, expr.values)), keys, scope, line, seen)
    if isinstance(expr, ast.Call) and _name_of(expr.func) == "dict" and not expr.args:
        pairs = [(ast.Constant(k.arg) if k.arg else None, k.value) for k in expr.keywords]
        return _dict_targets(pairs, keys, scope, line, seen)
    if isinstance(expr, ast.Name):
        assigned = _assignment(scope, expr.id, line)
        if assigned is not None and expr.id not in seen and _followed(assigned):
            return _targets(assigned, keys, scope, line, seen | {expr.id})
        return [[keys, expr.id, not keys]], []
    if _reference(expr):
        return [[keys, ast.unparse(expr), not keys]], []
    if _holds_state(expr) or not keys:
        return [], [_label(keys, expr)]
    return [], []  # a computed value (loss.item(), a constant): data, not state


def _dict_targets(pairs, keys, scope, line, seen) -> tuple[list[list], list[str]]:
    targets: list[list] = []
    problems: list[str] = []
    for key, value in pairs:
        if key is None:
            problems.append(f"`**{ast.unparse(value)}`")
            continue
        if not isinstance(key, ast.Constant) or not isinstance(key.value, (str, int)):
            if _holds_state(value):
                problems.append(_label(keys, value))
            continue
        if isinstance(value, ast.Constant):
            continue
        found, missing = _targets(value, [*keys, key.value], scope, line, seen)
        targets += found
        problems += missing
    return targets, problems


def _bound(module: ast.AST) -> set[str]:
    """Names bound anywhere in the script (assignments, parameters, imports, definitions)
    or builtins: a target whose name is bound nowhere cannot be found at replay."""
    names: set[str] = set(dir(builtins))
    for node in ast.walk(module):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
    return names


def _root(expression: str) -> str | None:
    try:
        node = ast.parse(expression, mode="eval").body
    except SyntaxError:
        return None
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _followed(value: ast.expr) -> bool:
    """`state = {...}`, `state = dict(...)` or `sd = net.state_dict()` is followed to what
    it holds; `net = Net()` is the object itself."""
    if isinstance(value, ast.Dict):
        return True
    return isinstance(value, ast.Call) and _name_of(value.func) in ("dict", "state_dict")


def _assignment(scope: list[ast.stmt], name: str, line: int) -> ast.expr | None:
    """The value of the last `name = ...` before `line` in the scope."""
    best: ast.Assign | None = None
    for statement in scope:
        if (
            isinstance(statement, ast.Assign)
            and statement.lineno < line
            and any(isinstance(t, ast.Name) and t.id == name for t in statement.targets)
            and (best is None or statement.lineno > best.lineno)
        ):
            best = statement
    return best.value if best is not None else None


def _reference(expr: ast.expr) -> bool:
    """A name, attribute chain or constant subscript: something found again at replay."""
    if isinstance(expr, ast.Name):
        return True
    if isinstance(expr, ast.Attribute):
        return _reference(expr.value)
    if isinstance(expr, ast.Subscript):
        return isinstance(expr.slice, ast.Constant) and _reference(expr.value)
    return False


def _holds_state(expr: ast.expr) -> bool:
    return any(isinstance(c, ast.Call) and _name_of(c.func) == "state_dict" for c in ast.walk(expr))


def _label(keys: list, expr: ast.expr) -> str:
    text = ast.unparse(expr)
    text = text if len(text) <= 40 else text[:37] + "..."
    return f"`{text}`" + (f" (key {'/'.join(map(str, keys))})" if keys else "")


def _name_of(func: ast.expr) -> str | None:
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return None


# methods whose receiver is training state that a step changes (optimizer, scheduler,
# GradScaler, EMA); `scaler.step(opt)` steps its argument too
_UPDATING = frozenset({"step", "update"})
_STEPS_ARGUMENT = frozenset({"step"})


def loop_updates(tree: ast.Module, main_loop: str) -> dict[str, str]:
    """Objects the main loop updates, as expressions of the scope the loop runs in, each
    with the call that does it. Calls to the script's functions (`train_one_epoch(net,
    opt)`) and to methods of the class holding the loop (`self._run_epoch()`) are followed,
    their parameters replaced by the arguments of the call."""
    imports = imports_from_ast(tree)
    loop = next(
        (
            n
            for n in ast.walk(tree)
            if isinstance(n, ast.For) and iterates_loop(n, imports, main_loop)
        ),
        None,
    )
    if loop is None:
        return {}
    functions = {
        n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
    }
    methods = {
        f.name: f
        for c in ast.walk(tree)
        if isinstance(c, ast.ClassDef) and any(n is loop for n in ast.walk(c))
        for f in c.body
        if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
    }
    found: dict[str, str] = {}
    _updates_in(loop.body, {}, functions, methods, found, set())
    return found


def _updates_in(
    body: list[ast.stmt],
    names: dict[str, str],
    functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef],
    methods: dict[str, ast.FunctionDef | ast.AsyncFunctionDef],
    found: dict[str, str],
    seen: set[str],
) -> None:
    for statement in body:
        for node in ast.walk(statement):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            if isinstance(func, ast.Attribute) and _updates(func, node):
                updated = [func.value]
                if func.attr in _STEPS_ARGUMENT:
                    updated += [a for a in node.args if _reference(a)]
                call = f"{_renamed(func.value, names)}.{func.attr}()"
                for expr in updated:
                    if _reference(expr):
                        found.setdefault(_renamed(expr, names), call)
            callee = None
            if isinstance(func, ast.Name) and func.id in functions:
                callee = functions[func.id]
            elif (
                isinstance(func, ast.Attribute)
                and isinstance(func.value, ast.Name)
                and func.value.id == "self"
                and func.attr in methods
            ):
                callee = methods[func.attr]
            if callee is None or callee.name in seen:
                continue
            params = [a.arg for a in callee.args.posonlyargs + callee.args.args]
            if callee in methods.values() and params[:1] == ["self"]:
                params = params[1:]
            inner = {
                param: _renamed(arg, names)
                for param, arg in zip(params, node.args)
                if _reference(arg)
            }
            inner.update(
                {
                    k.arg: _renamed(k.value, names)
                    for k in node.keywords
                    if k.arg and _reference(k.value)
                }
            )
            if "self" in names:
                inner["self"] = names["self"]
            _updates_in(callee.body, inner, functions, methods, found, seen | {callee.name})


def _updates(func: ast.Attribute, call: ast.Call) -> bool:
    """`opt.step()`, `sched.step()`, `scaler.step(opt)`, `scaler.update()`, `ema.update(net)`;
    not `bar.update(1)` or `metrics.update({...})` (a progress bar, a dict of numbers)."""
    if func.attr not in _UPDATING:
        return False
    if func.attr == "step" or not (call.args or call.keywords):
        return True
    receiver = ast.unparse(func.value).lower()
    return "ema" in receiver or "average" in receiver or "swa" in receiver


def _renamed(expr: ast.expr, names: dict[str, str]) -> str:
    """`expr` as text, a followed function's parameter replaced by the call's argument
    (`optimizer` in `train(net, opt)` -> `opt`)."""
    text = ast.unparse(expr)
    root = _root(text)
    if root is not None and root in names:
        return names[root] + text[len(root) :]
    return text


def registered_objects(tree: ast.Module) -> set[str]:
    """The expressions given to `flor.checkpointing(...)`: their state is checkpointed."""
    imports = imports_from_ast(tree)
    return {
        ast.unparse(k.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and imports.api_of_ast(node.func) == "checkpointing"
        for k in node.keywords
        if k.arg and _reference(k.value)
    }


def unheld_updates(tree: ast.Module, main_loop: str, held: set[str]) -> dict[str, str]:
    """What the main loop updates that no held expression covers (`self.opt` is covered
    by `self.opt` or by `self`), stateless optimizers (plain SGD) aside."""
    out = {}
    for updated, call in loop_updates(tree, main_loop).items():
        if any(updated == h or updated.startswith(h + ".") for h in held):
            continue
        if _stateless_optimizer(tree, updated):
            continue
        out[updated] = call
    return out


def _stateless_optimizer(tree: ast.Module, expression: str) -> bool:
    """`opt = torch.optim.SGD(params, lr=...)` without momentum: stepping it keeps no state."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Assign) or len(node.targets) != 1:
            continue
        if ast.unparse(node.targets[0]) != expression or not isinstance(node.value, ast.Call):
            continue
        call = node.value
        if _name_of(call.func) != "SGD":
            return False
        keywords = {k.arg: k.value for k in call.keywords if k.arg}
        momentum = keywords.get("momentum", call.args[2] if len(call.args) > 2 else None)
        return momentum is None or (isinstance(momentum, ast.Constant) and not momentum.value)
    return False


def use_saved_state(project: Path, plan, facts) -> None:
    """Add a ready run's usable own-save checkpoints to its plan (`RunPlan`) and to the
    checkpoints its cost model sees (`RunFacts`), with the plan's notes on what cannot be
    used. Where the run has flor.checkpointing files too, an iteration counts as
    checkpointed only when it has both: each restores objects the other may not hold."""
    found = plan_saved_state(
        project, plan.run_id, plan.version, plan.script, plan.main_loop, facts.mirrored
    )
    plan.notes.extend(found.notes)
    if found.unheld:
        _re_execute(plan, facts, found.unheld)
        return
    if not found.mirrored:
        return
    plan.mirrored = found.mirrored
    plan.saved_map = found.saved_map
    own = {int(i): (name, found.sizes.get(int(i), 0)) for i, name in found.mirrored.items()}
    if facts.checkpoints:
        facts.checkpoints = {
            i: (path, size + own[i][1]) for i, (path, size) in facts.checkpoints.items() if i in own
        }
    else:
        facts.checkpoints = own
    plan.notes.append(
        f"restores from the script's own torch.save ({len(own)} checkpoints): "
        + "; ".join(
            f"line {line}: " + ", ".join(_describe(t) for t in targets)
            for line, targets in sorted(
                (int(key.rsplit(":", 1)[1]), targets) for key, targets in found.saved_map.items()
            )
        )
    )


def _describe(target: list) -> str:
    keys, expression, required = target
    text = f"{'/'.join(map(str, keys))} -> {expression}" if keys else expression
    return text if required else text + " (if it has state)"


def _re_execute(plan, facts, unheld: dict[str, str]) -> None:
    """Replay the run from its first iteration, in one segment: its own saves leave out
    state the loop updates, and a segment restored from them would start with that state
    fresh (Adam's moments, a scheduler's step count). flor.checkpointing's files of such a
    run do not hold it either, or it would be held."""
    from florwb_engine.contract.replay_spec import INNER

    loop = plan.main_loop or "main"
    what = ", ".join(f"{expr} ({call})" for expr, call in sorted(unheld.items()))
    plan.notes.append(
        f"the script's own torch.save does not hold {what}, which the {loop} loop updates: "
        f"not restored from it; the {loop} loop is re-executed from its first iteration, "
        "in one segment"
    )
    plan.from_start = True
    plan.mode = INNER
    facts.checkpoints = {}
