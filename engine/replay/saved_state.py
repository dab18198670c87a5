"""Planning replays from the script's own torch.save calls (mirrored by record/save_mirror).

A mirrored checkpoint is the user's file, not a `{"objects": ..., "rng": ...}` dict: which
objects of the script its tensors belong to is read from the `state` expression of the
torch.save call in the code the run executed. `torch.save({"model": net.state_dict(),
"opt": opt.state_dict()}, path)` maps key `model` to `net` and `opt` to `opt`;
`torch.save(net, path)` and `torch.save(net.state_dict(), path)` map the whole file to `net`;
`state = {...}` is followed to the values that reach the call (what engine/analysis's
`SurelyBound` says is bound there; an if/else's branches must agree). Values that are not
state (`"epoch": epoch`, `loss.item()`) are left alone. A part that holds state florwb cannot
place (`make_state(net)`, `**extra`, a save outside the main loop's body) makes that save
unusable, and the plan says which, before the replay starts: a checkpoint restored with one
object missing would give wrong values, so those iterations are re-executed instead.

A save is used only when it holds the whole state the main loop updates (FLOR's rule: a
checkpoint restored with one object missing gives wrong values): the receivers of the
`.step()` calls and the state-like `.update()` calls (`_updates`) in the loop's body and in
the script's functions and methods it calls (optimizers, schedulers, GradScalers, EMAs),
with the arguments of `scaler.step(opt)`, must each be saved or registered with
flor.checkpointing. A plain SGD without momentum (made by no other call) has no state to
save. A model saved alone while Adam trains it makes the run re-execute from its first
iteration instead, said in the plan (`loop_updates`, `unheld_updates`).

Where the save sits in the main loop's body tells which state it holds: after the inner
loops (or at the end of a body without any) it is the iteration's end state, like
flor.checkpointing's; before them it is the state the iteration starts from, i.e. the end
state of the iteration before.

The script is read with libcst through engine/analysis, like every other analysis of it;
expressions are written one way (`self.net`, `nets[0]`, `d['m']`), which is how
record/restore_saves.py looks them up in the training process.
"""

from __future__ import annotations

import builtins
import json
import re
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import libcst as cst

from florwb_engine import versions
from florwb_engine.analysis.bindings import ASSIGN, Bound, Scope, SurelyBound
from florwb_engine.analysis.loop_state import loop_state, main_loop_of
from florwb_engine.analysis.mutations import names_bound_anywhere
from florwb_engine.analysis.nodes import Parsed, iter_children, parse, walk
from florwb_engine.analysis.purity import QUIET_CALLS
from florwb_engine.analysis.scopes import scope_nodes
from florwb_engine.flor_calls import imports_from_nodes, iterates_loop_cst
from florwb_engine.project import checkpoint_dir, store_dir

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
    manifests = _manifests(checkpoint_dir(project) / run_id, mirrored, out.notes)
    sites = _sites(manifests)
    if not sites:
        return out
    try:
        old = versions.read_file(store_dir(project), version, script)
    except versions.VersionError as exc:
        out.notes.append(f"own torch.save checkpoints not used: code unavailable ({exc})")
        return out
    if old is None:
        return out
    code = old.decode("utf-8", errors="replace")
    if parse(code) is None:
        out.notes.append(f"own torch.save checkpoints not used: {script} does not parse")
        return out
    usable = _usable_maps(code, script, sites, main_loop, out.notes)
    if not usable:
        return out
    held = {target[1] for m in usable.values() for target in m.targets}
    registered = set(loop_state(code, main_loop).registered)
    out.unheld = unheld_updates(code, main_loop, held | registered)
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


def _manifests(
    folder: Path, mirrored: dict[int, tuple[str, int]], notes: list[str]
) -> dict[int, dict]:
    """The readable manifests of the mirrored checkpoints, by iteration."""
    manifests: dict[int, dict] = {}
    for iteration, (name, _size) in mirrored.items():
        try:
            manifests[iteration] = json.loads((folder / name).read_text())
        except (OSError, ValueError) as exc:
            notes.append(f"mirrored checkpoint {name} unreadable ({exc}); not used")
    return manifests


def _sites(manifests: dict[int, dict]) -> list[tuple[str | None, int]]:
    """The torch.save call sites (script, line) the manifests name, in order."""
    return sorted(
        {
            (s.get("script"), s.get("line"))
            for m in manifests.values()
            for s in m.get("saves", ())
            if s.get("line") is not None
        },
        key=lambda site: (str(site[0]), site[1]),
    )


def _usable_maps(
    code: str,
    script: str,
    sites: list[tuple[str | None, int]],
    main_loop: str,
    notes: list[str],
) -> dict[int, SaveMap]:
    """The maps of the sites that can be used, by line; a note for each that cannot. Where
    saves sit both at the start and at the end of the body, the end ones are used."""
    maps: dict[int, SaveMap] = {}
    for site_script, line in sites:
        if site_script != script:
            notes.append(
                f"torch.save in {site_script}:{line} is outside {script}: its checkpoints "
                "are not used (florwb maps saves written in the training script)"
            )
            continue
        maps[line] = map_save(code, line, main_loop)
    for line, m in sorted(maps.items()):
        if m.problem:
            notes.append(f"torch.save at {script}:{line}: {m.problem}; its checkpoints not used")
    usable = {line: m for line, m in maps.items() if m.problem is None}
    if len({m.position for m in usable.values()}) > 1:
        usable = {line: m for line, m in usable.items() if m.position == END}
    return usable


def map_save(source: str, line: int, main_loop: str) -> SaveMap:
    """How the torch.save call at `line` of `source` maps onto the script's objects."""
    out = SaveMap(line)
    parsed = parse(source)
    found = _find_save(parsed, line) if parsed is not None else None
    if parsed is None or found is None:
        out.problem = "no torch.save call found at that line of the run's code"
        return out
    call, chain = found
    imports = imports_from_nodes(walk(parsed.module))
    loop_index = next(
        (
            i
            for i, node in enumerate(chain)
            if type(node) is cst.For and iterates_loop_cst(node, imports, main_loop)
        ),
        None,
    )
    if loop_index is None:
        out.problem = f"it is not in the body of the main loop {main_loop!r}"
        return out
    loop = chain[loop_index]
    assert isinstance(loop, cst.For)
    inner = chain[loop_index + 1 :]
    body = list(getattr(loop.body, "body", ()))
    out.problem = _placement_problem(loop, inner, body)
    if out.problem:
        return out
    out.position = _position(body, next(i for i, s in enumerate(body) if s is inner[1]))
    if out.position is None:
        out.problem = (
            "it sits between statements that change state, so florwb cannot tell which "
            "iteration's state it holds"
        )
        return out
    positional = _positional(call)
    state = (
        positional[0].value
        if positional
        else next((a.value for a in call.args if a.keyword and a.keyword.value == "obj"), None)
    )
    if state is None:
        out.problem = "it names no state to save"
        return out
    out.targets, out.problem = _mapped(state, parsed.module, chain, loop_index)
    return out


def _placement_problem(loop: cst.For, inner: list[cst.CSTNode], body: list) -> str | None:
    """Why a save at the end of `inner` (the nodes from the main loop down to it) is not
    where its state can be told, or None."""
    if any(isinstance(n, (cst.FunctionDef, cst.Lambda)) for n in inner):
        return "it is in a function defined inside the main loop"
    if any(isinstance(n, (cst.For, cst.While)) for n in inner):
        return "it is inside a loop nested in the main loop"
    if len(inner) < 2 or inner[0] is not loop.body or not any(s is inner[1] for s in body):
        return "it is not in the body of the main loop"
    return None


def _mapped(
    state: cst.BaseExpression, module: cst.Module, chain: list[cst.CSTNode], loop_index: int
) -> tuple[list[list], str | None]:
    """The targets of a save's `state` expression, and why it cannot be used (or None):
    names are followed to the values bound to them where the save runs."""
    targets, problems = _targets(state, [], _site(chain, loop_index), frozenset())
    bound = names_bound_anywhere(module) | set(dir(builtins))
    for keys, expression, required in list(targets):
        root = _root(expression)
        if root is not None and root not in bound:
            targets.remove([keys, expression, required])
            if required:
                problems.append(f"`{expression}` (not defined where the main loop runs)")
    if problems:
        return targets, "cannot map " + ", ".join(problems) + " to an object of the script"
    if not targets:
        return targets, "it saves no object florwb can restore"
    return targets, None


def _find_save(parsed: Parsed, line: int) -> tuple[cst.Call, list[cst.CSTNode]] | None:
    """The torch.save call at `line` and its ancestors, outermost first."""
    positions = parsed.positions

    def visit(node: cst.CSTNode, chain: list[cst.CSTNode]):
        for child, _, _ in iter_children(node):
            span = positions.get(child)
            if span is not None and not span.start.line <= line <= span.end.line:
                continue
            if type(child) is cst.Call and _name_of(child.func) == "save":
                return child, chain
            found = visit(child, [*chain, child])
            if found:
                return found
        return None

    return visit(parsed.module, [parsed.module])


@dataclass(frozen=True)
class _Site:
    """Where a save runs: what is surely bound there, and to what (the last binding on
    every path), and every value the scope the main loop runs in assigns to each name
    (what may reach the save, through a branch or from an earlier iteration)."""

    bound: Bound
    assigned: dict[str, list[cst.BaseExpression]]


def _site(chain: list[cst.CSTNode], loop_index: int) -> _Site:
    """The `_Site` of the statement holding the save, in the scope the main loop runs in
    (the function holding it, or the module)."""
    start = 0
    scope: Scope = chain[0]  # type: ignore[assignment]
    for i in range(loop_index, -1, -1):
        if type(chain[i]) is cst.FunctionDef:
            scope, start = chain[i], i + 1  # type: ignore[assignment]
            break
    blocks = (cst.Module, cst.IndentedBlock, cst.SimpleStatementSuite)
    last = max(i for i in range(start, len(chain) - 1) if type(chain[i]) in blocks)
    statements = list(getattr(chain[last], "body", ()))
    index = next(i for i, s in enumerate(statements) if s is chain[last + 1])
    bound = SurelyBound(scope, loops_run=True).before(chain[start : last + 1], index)
    assigned: dict[str, list[cst.BaseExpression]] = {}
    for node in scope_nodes(chain[start]):
        if type(node) is cst.Assign:
            for target in node.targets:
                if type(target.target) is cst.Name:
                    assigned.setdefault(target.target.value, []).append(node.value)
        elif type(node) is cst.AnnAssign and node.value is not None:
            if type(node.target) is cst.Name:
                assigned.setdefault(node.target.value, []).append(node.value)
    return _Site(bound, assigned)


def _position(body: list[cst.CSTNode], index: int) -> str | None:
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


def _has_loop(statement: cst.CSTNode) -> bool:
    return any(isinstance(n, (cst.For, cst.While)) for n in walk(statement))


def _quiet(node: cst.CSTNode) -> bool:
    """A statement that cannot change training state: logging, printing, saving, plain
    assignments of such calls, and ifs made of them."""
    tp = type(node)
    if tp in (cst.SimpleStatementLine, cst.SimpleStatementSuite, cst.IndentedBlock, cst.Else):
        inner = node.body  # type: ignore[attr-defined]
        return _quiet(inner) if tp is cst.Else else all(_quiet(s) for s in inner)
    if tp is cst.Pass or tp is cst.Continue:
        return True
    if isinstance(node, cst.If):
        return _quiet(node.body) and (node.orelse is None or _quiet(node.orelse))
    if tp not in (cst.Expr, cst.Assign, cst.AnnAssign, cst.AugAssign):
        return False
    value = node.value  # type: ignore[attr-defined]
    if value is None:
        return True
    if tp is cst.Assign:
        targets = [t.target for t in node.targets]  # type: ignore[attr-defined]
    else:
        targets = [] if tp is cst.Expr else [node.target]  # type: ignore[attr-defined]
    if not all(type(t) is cst.Name for t in targets):
        return False
    return all(_name_of(c.func) in QUIET_CALLS for c in walk(value) if type(c) is cst.Call)


def _targets(
    expr: cst.BaseExpression, keys: list, site: _Site, seen: frozenset[str]
) -> tuple[list[list], list[str]]:
    """[keys, expression, required] per object `expr` saves, and what it cannot map."""
    tp = type(expr)
    if isinstance(expr, cst.Call) and _name_of(expr.func) == "state_dict" and not _positional(expr):
        func = expr.func
        receiver = func.value if type(func) is cst.Attribute else None
        if receiver is not None and _reference(receiver):
            return [[keys, _text(receiver), True]], []
        return [], [_label(keys, expr)]
    if tp is cst.Dict:
        pairs = [
            (_key(e.key) if type(e) is cst.DictElement else None, e.value)
            for e in expr.elements  # type: ignore[attr-defined]
        ]
        return _dict_targets(pairs, keys, site, seen)
    if isinstance(expr, cst.Call) and _name_of(expr.func) == "dict" and not _positional(expr):
        pairs = [(a.keyword.value if a.keyword else None, a.value) for a in expr.args]
        return _dict_targets(pairs, keys, site, seen)
    if tp is cst.Name:
        name = expr.value  # type: ignore[attr-defined]
        followed = _follow(name, keys, site, seen) if name not in seen else None
        return followed if followed is not None else ([[keys, name, not keys]], [])
    if _reference(expr):
        return [[keys, _text(expr), not keys]], []
    if _holds_state(expr) or not keys:
        return [], [_label(keys, expr)]
    return [], []  # a computed value (loss.item(), a constant): data, not state


def _dict_targets(
    pairs: list[tuple[object, cst.BaseExpression]], keys: list, site: _Site, seen: frozenset[str]
) -> tuple[list[list], list[str]]:
    targets: list[list] = []
    problems: list[str] = []
    for key, value in pairs:
        if key is None:
            problems.append(f"`**{_text(value)}`")
            continue
        if key is _NOT_CONSTANT:
            if _holds_state(value):
                problems.append(_label(keys, value))
            continue
        if _constant(value) is not _NOT_CONSTANT:
            continue
        found, missing = _targets(value, [*keys, key], site, seen)
        targets += found
        problems += missing
    return targets, problems


def _follow(
    name: str, keys: list, site: _Site, seen: frozenset[str]
) -> tuple[list[list], list[str]] | None:
    """`state = {...}`, `state = dict(...)` or `sd = net.state_dict()` followed to what it
    holds; None where the name is the object itself (`net = Net()`). The binding surely
    reaching the save is followed (each branch's, where an if/else binds it); where that
    is None (`state = None` before the loop, `state = {...}` in an `if`) or nothing, every
    such value the scope assigns to it, which must all hold the same objects."""
    binding = site.bound.get(name)
    if binding is None:
        values = [v for v in site.assigned.get(name, ()) if _followed(v)]
    else:
        options = binding.alternatives or (binding,)
        if not all(o.kind == ASSIGN and o.index is None for o in options):
            return None  # a loop target, an import, a `with ... as`: the object itself
        values = [o.value for o in options if not _is_none(o.value)]  # type: ignore[misc]
        if not values:  # `state = None` before the loop, set in an `if` of its body
            values = [v for v in site.assigned.get(name, ()) if _followed(v)]
        elif not all(_followed(v) for v in values):
            return None
    if not values:
        return None
    results = [_targets(v, keys, site, seen | {name}) for v in values]
    if all(r == results[0] for r in results):
        return results[0]
    return [], [f"`{name}` (it may hold different objects where the save runs)"]


def _is_none(value: cst.BaseExpression | None) -> bool:
    return value is None or (type(value) is cst.Name and value.value == "None")


def _followed(value: cst.BaseExpression) -> bool:
    """`state = {...}`, `state = dict(...)` or `sd = net.state_dict()` is followed to what
    it holds; `net = Net()` is the object itself."""
    if type(value) is cst.Dict:
        return True
    return type(value) is cst.Call and _name_of(value.func) in ("dict", "state_dict")


_NOT_CONSTANT = object()
_NAMED_CONSTANTS = {"None": None, "True": True, "False": False}


def _constant(node: cst.CSTNode) -> object:
    """The value of a literal constant (a string, a number, None, True, False, ...), or
    _NOT_CONSTANT."""
    tp = type(node)
    if tp in (cst.SimpleString, cst.ConcatenatedString, cst.Integer, cst.Float, cst.Imaginary):
        try:
            value = node.evaluated_value  # type: ignore[attr-defined]
        except Exception:  # noqa: BLE001 - libcst raises various errors on odd literals
            return _NOT_CONSTANT
        return _NOT_CONSTANT if value is None else value
    if isinstance(node, cst.Name) and node.value in _NAMED_CONSTANTS:
        return _NAMED_CONSTANTS[node.value]
    if tp is cst.Ellipsis:
        return ...
    return _NOT_CONSTANT


def _key(node: cst.BaseExpression) -> object:
    """A dict key florwb can name: a string or an integer constant; else _NOT_CONSTANT."""
    value = _constant(node)
    return value if isinstance(value, (str, int)) else _NOT_CONSTANT


def _index(node: cst.Subscript) -> object:
    """The constant of `x[<constant>]`, or _NOT_CONSTANT."""
    if len(node.slice) != 1:
        return _NOT_CONSTANT
    index = node.slice[0].slice
    if type(index) is not cst.Index or index.star is not None:
        return _NOT_CONSTANT
    return _constant(index.value)


def _reference(expr: cst.BaseExpression) -> bool:
    """A name, attribute chain or constant subscript: something found again at replay."""
    if isinstance(expr, cst.Name):
        return True
    if isinstance(expr, cst.Attribute):
        return _reference(expr.value)
    if isinstance(expr, cst.Subscript):
        return _index(expr) is not _NOT_CONSTANT and _reference(expr.value)
    return False


def _text(expr: cst.CSTNode) -> str:
    """A reference written one way (`self.net`, `nets[0]`, `d['model']`), as the replay
    worker looks it up; other expressions as written, on one line."""
    tp = type(expr)
    if tp is cst.Name:
        return expr.value  # type: ignore[attr-defined]
    if tp is cst.Attribute and _reference(expr):  # type: ignore[arg-type]
        return f"{_text(expr.value)}.{expr.attr.value}"  # type: ignore[attr-defined]
    if tp is cst.Subscript and _reference(expr):  # type: ignore[arg-type]
        return f"{_text(expr.value)}[{_index(expr)!r}]"  # type: ignore[arg-type, attr-defined]
    return " ".join(cst.Module([]).code_for_node(expr).split())


_ROOT = re.compile(r"[^\W\d]\w*")


def _root(expression: str) -> str | None:
    """The name a reference's text starts from (`self` of `self.opt`)."""
    found = _ROOT.match(expression)
    return found.group() if found else None


def _holds_state(expr: cst.CSTNode) -> bool:
    return any(type(c) is cst.Call and _name_of(c.func) == "state_dict" for c in walk(expr))


def _label(keys: list, expr: cst.CSTNode) -> str:
    text = _text(expr)
    text = text if len(text) <= 40 else text[:37] + "..."
    return f"`{text}`" + (f" (key {'/'.join(map(str, keys))})" if keys else "")


def _name_of(func: cst.BaseExpression) -> str | None:
    if type(func) is cst.Attribute:
        return func.attr.value
    if type(func) is cst.Name:
        return func.value
    return None


def _positional(call: cst.Call) -> list[cst.Arg]:
    """A call's positional arguments, `*args` included (what Python fills parameters
    with in order)."""
    return [a for a in call.args if a.keyword is None and a.star != "**"]


# methods whose receiver is training state that a step changes (optimizer, scheduler,
# GradScaler, EMA); `scaler.step(opt)` steps its argument too
_UPDATING = frozenset({"step", "update"})
_STEPS_ARGUMENT = frozenset({"step"})


def loop_updates(source: str, main_loop: str) -> dict[str, str]:
    """Objects the main loop updates, as expressions of the scope the loop runs in, each
    with the call that does it. Calls to the script's functions (`train_one_epoch(net,
    opt)`) and to methods of the class holding the loop (`self._run_epoch()`) are followed,
    their parameters replaced by the arguments of the call."""
    parsed = parse(source)
    if parsed is None:
        return {}
    module = parsed.module
    found_loop = main_loop_of(module, imports_from_nodes(walk(module)), main_loop)
    if found_loop is None:
        return {}
    loop = found_loop[0]
    functions = {s.name.value: s for s in module.body if type(s) is cst.FunctionDef}
    methods = {
        f.name.value: f
        for c in walk(module)
        if type(c) is cst.ClassDef and any(n is loop for n in walk(c))
        for f in getattr(c.body, "body", ())
        if type(f) is cst.FunctionDef
    }
    found: dict[str, str] = {}
    _updates_in(loop.body, {}, functions, methods, found, frozenset())
    return found


def _breadth_first(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """`node` and the nodes below it, level by level: the first call that updates an
    object names it."""
    queue = deque([node])
    while queue:
        current = queue.popleft()
        yield current
        queue.extend(child for child, _, _ in iter_children(current))


def _updates_in(
    body: cst.BaseSuite,
    names: dict[str, str],
    functions: dict[str, cst.FunctionDef],
    methods: dict[str, cst.FunctionDef],
    found: dict[str, str],
    seen: frozenset[str],
) -> None:
    for statement in body.body:
        for node in _breadth_first(statement):
            if type(node) is not cst.Call:
                continue
            func = node.func
            if type(func) is cst.Attribute and _updates(func, node):
                updated = [func.value]
                if func.attr.value in _STEPS_ARGUMENT:
                    updated += [a.value for a in _positional(node) if not a.star]
                call = f"{_renamed(func.value, names)}.{func.attr.value}()"
                for expr in updated:
                    if _reference(expr):
                        found.setdefault(_renamed(expr, names), call)
            callee = _callee(func, functions, methods)
            if callee is None or callee.name.value in seen:
                continue
            params = [p.name.value for p in (*callee.params.posonly_params, *callee.params.params)]
            if any(callee is m for m in methods.values()) and params[:1] == ["self"]:
                params = params[1:]
            inner = {
                param: _renamed(arg.value, names)
                for param, arg in zip(params, _positional(node))
                if not arg.star and _reference(arg.value)
            }
            inner.update(
                {
                    a.keyword.value: _renamed(a.value, names)
                    for a in node.args
                    if a.keyword is not None and _reference(a.value)
                }
            )
            if "self" in names:
                inner["self"] = names["self"]
            _updates_in(callee.body, inner, functions, methods, found, seen | {callee.name.value})


def _callee(
    func: cst.BaseExpression,
    functions: dict[str, cst.FunctionDef],
    methods: dict[str, cst.FunctionDef],
) -> cst.FunctionDef | None:
    """The script's function (`train(...)`) or the loop's class's method (`self._epoch()`)
    a call runs, or None."""
    if type(func) is cst.Name:
        return functions.get(func.value)
    if type(func) is cst.Attribute and type(func.value) is cst.Name and func.value.value == "self":
        return methods.get(func.attr.value)
    return None


def _updates(func: cst.Attribute, call: cst.Call) -> bool:
    """`opt.step()`, `sched.step()`, `scaler.step(opt)`, `scaler.update()`, `ema.update(net)`;
    not `bar.update(1)` or `metrics.update({...})` (a progress bar, a dict of numbers)."""
    if func.attr.value not in _UPDATING:
        return False
    if func.attr.value == "step" or not call.args:
        return True
    receiver = _text(func.value).lower()
    return "ema" in receiver or "average" in receiver or "swa" in receiver


def _renamed(expr: cst.BaseExpression, names: dict[str, str]) -> str:
    """`expr` as text, a followed function's parameter replaced by the call's argument
    (`optimizer` in `train(net, opt)` -> `opt`)."""
    text = _text(expr)
    root = expr
    while type(root) in (cst.Attribute, cst.Subscript):
        root = root.value  # type: ignore[attr-defined]
    if type(root) is cst.Name and root.value in names and text.startswith(root.value):
        return names[root.value] + text[len(root.value) :]
    return text


def unheld_updates(source: str, main_loop: str, held: set[str]) -> dict[str, str]:
    """What the main loop updates that no held expression covers (`self.opt` is covered
    by `self.opt` or by `self`), stateless optimizers (plain SGD) aside."""
    parsed = parse(source)
    out = {}
    for updated, call in loop_updates(source, main_loop).items():
        if any(updated == h or updated.startswith(h + ".") for h in held):
            continue
        if parsed is not None and _stateless_optimizer(parsed.module, updated):
            continue
        out[updated] = call
    return out


def _stateless_optimizer(module: cst.Module, expression: str) -> bool:
    """`opt = torch.optim.SGD(params, lr=...)` without momentum, and `opt` made by no other
    call: stepping it keeps no state."""
    made = [
        assign.value
        for assign in walk(module)
        if type(assign) is cst.Assign
        and len(assign.targets) == 1
        and type(assign.value) is cst.Call
        and _text(assign.targets[0].target) == expression
    ]
    return bool(made) and all(_plain_sgd(call) for call in made)


def _plain_sgd(call: cst.Call) -> bool:
    if _name_of(call.func) != "SGD":
        return False
    keywords = {a.keyword.value: a.value for a in call.args if a.keyword is not None}
    positional = _positional(call)
    momentum = keywords.get("momentum", positional[2].value if len(positional) > 2 else None)
    return momentum is None or (
        _constant(momentum) is not _NOT_CONSTANT and not _constant(momentum)
    )


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
