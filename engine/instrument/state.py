"""The training state to register with `flor.checkpointing`: models, optimizers, LR
schedulers and GradScalers bound where the outer loop starts.

An object's kind comes from the call that built it (`torch.optim.AdamW(...)`,
`lr_scheduler.StepLR(...)`, `torch.amp.GradScaler(...)`, `nn.Sequential(...)`, a class of
the script deriving from `nn.Module`, a factory function of the script returning one), then
from what the optimizer trains (`SGD(net.parameters())` makes `net` a model), then from
how the loop uses it (`opt.zero_grad()` + `opt.step()`, `scaler.scale(...)`). Anything
else the loop calls `.step()` on is reported: it may hold state replay would miss.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from florwb_engine.analysis.bindings import ASSIGN, PARAM, Binding, Scope
from florwb_engine.analysis.names import assigned_names
from florwb_engine.instrument.result import Note
from florwb_engine.instrument.scopes import Origin, Scopes
from florwb_engine.instrument.syntax import (
    call_name,
    dotted,
    method_name,
    receiver_root,
    strip_passthrough,
)
from florwb_engine.instrument.tree import Tree

MODEL, OPTIMIZER, SCHEDULER, SCALER = "model", "optimizer", "scheduler", "scaler"
KINDS = (MODEL, OPTIMIZER, SCHEDULER, SCALER)

OPTIMIZERS = frozenset(
    {
        "SGD",
        "Adam",
        "AdamW",
        "Adamax",
        "Adagrad",
        "Adadelta",
        "Adafactor",
        "ASGD",
        "LBFGS",
        "NAdam",
        "RAdam",
        "RMSprop",
        "Rprop",
        "SparseAdam",
        "Muon",
        "Lion",
        "LAMB",
        "Lamb",
    }
)
SCHEDULERS = frozenset(
    {
        "LambdaLR",
        "MultiplicativeLR",
        "StepLR",
        "MultiStepLR",
        "ConstantLR",
        "LinearLR",
        "ExponentialLR",
        "PolynomialLR",
        "CosineAnnealingLR",
        "ChainedScheduler",
        "SequentialLR",
        "ReduceLROnPlateau",
        "CyclicLR",
        "OneCycleLR",
        "CosineAnnealingWarmRestarts",
        "SWALR",
        "get_linear_schedule_with_warmup",
        "get_cosine_schedule_with_warmup",
    }
)
# Calls whose result holds the state of their first argument's kind.
WRAPPERS = frozenset({"compile", "DataParallel", "DistributedDataParallel", "deepcopy"})
MODEL_FACTORIES = frozenset({"AveragedModel", "create_model", "from_pretrained"})


@dataclass
class State:
    """Variables to register, per kind, in the order they were bound."""

    objects: dict[str, list[str]] = field(default_factory=lambda: {k: [] for k in KINDS})
    notes: list[Note] = field(default_factory=list)

    def registrations(self) -> list[tuple[str, str]]:
        """(keyword, variable) pairs: `model=net` when a kind has one object, else the
        variable names (`netG=netG, netD=netD`)."""
        pairs: list[tuple[str, str]] = []
        for kind in KINDS:
            names = self.objects[kind]
            if len(names) == 1:
                pairs.append((kind, names[0]))
            else:
                pairs.extend((name, name) for name in names)
        seen: set[str] = set()
        unique = []
        for key, name in pairs:
            if key in seen:
                key = name
            if key not in seen:
                seen.add(key)
                unique.append((key, name))
        return unique

    @property
    def complete(self) -> bool:
        return bool(self.objects[MODEL] and self.objects[OPTIMIZER])


class StateFinder:
    def __init__(self, tree: Tree, scopes: Scopes) -> None:
        self.tree = tree
        self.scopes = scopes
        self.classes = {
            n.name.value: n for n in tree.walk(tree.module) if isinstance(n, cst.ClassDef)
        }

    # -- kinds ---------------------------------------------------------------------------

    def kind(self, origin: Origin | None, depth: int = 0) -> str | None:
        if origin is None or depth > 8:
            return None
        expr = strip_passthrough(origin.expr)
        name = call_name(expr)
        if name is None or not isinstance(expr, cst.Call):
            return None
        last = name.rsplit(".", 1)[-1]
        local = [f for f in self.tree.by_name.get(name, []) if not f.in_class]
        if origin.index is not None:
            return self._returned_kind(local, origin.index, depth) if len(local) == 1 else None
        if last == "GradScaler":
            return SCALER
        if last in SCHEDULERS or "lr_scheduler." in name:
            return SCHEDULER
        if last in OPTIMIZERS:
            return OPTIMIZER
        if last in MODEL_FACTORIES:
            return MODEL
        if last in WRAPPERS and expr.args:
            inner = self.scopes.expression_origin(expr.args[0].value, origin.scope, origin.stmt)
            return self.kind(inner, depth + 1)
        if name.startswith(("nn.", "torch.nn.")) and last[:1].isupper():
            return None if last.endswith("Loss") else MODEL  # losses hold no training state
        if name.startswith("models.") or ".models." in name:
            return MODEL
        if name in self.classes:
            return self._class_kind(self.classes[name], depth)
        if len(local) == 1:
            return self._returned_kind(local, None, depth)
        return None

    def _binding_kind(self, binding: Binding, origin: Origin) -> str | None:
        """The kind of what a name holds; bound in each branch of an if/else, the one
        kind the branches that are known agree on (`RNNModel(...)` or
        `TransformerModel(...)`: a model either way)."""
        if not binding.alternatives:
            return self.kind(origin)
        kinds = set()
        for alternative in binding.alternatives:
            found = self.scopes.origin(alternative)
            kinds.add(self.kind(found) if found is not None else None)
        kinds.discard(None)
        return kinds.pop() if len(kinds) == 1 else None

    def _class_kind(self, node: cst.ClassDef, depth: int) -> str | None:
        for base in node.bases:
            base_name = dotted(base.value) or ""
            last = base_name.rsplit(".", 1)[-1]
            if last.endswith("Module"):
                return MODEL
            if last.endswith("Optimizer"):
                return OPTIMIZER
            if last.endswith(("LRScheduler", "_LRScheduler")):
                return SCHEDULER
            if base_name in self.classes and depth < 8:
                found = self._class_kind(self.classes[base_name], depth + 1)
                if found:
                    return found
        return None

    def _returned_kind(self, functions: list, index: int | None, depth: int) -> str | None:
        """The kind a factory function of the script returns (element `index` of a tuple)."""
        function = functions[0].node
        kinds = set()
        for node in self.scopes.walk_scope(function.body):
            if not isinstance(node, cst.Return) or node.value is None:
                continue
            value = node.value
            if index is not None:
                if not isinstance(value, cst.Tuple) or index >= len(value.elements):
                    return None
                value = value.elements[index].value
            stmt = self.tree.statement_of(node)
            origin = self.scopes.expression_origin(value, function, stmt)
            kinds.add(self.kind(origin, depth + 1))
        return kinds.pop() if len(kinds) == 1 else None

    # -- what the outer loop can register ------------------------------------------------

    def find(self, loop: cst.For | cst.While, scope: Scope) -> State:
        state = State()
        visible = self.scopes.visible(scope, loop)
        used = self._used_names(loop)
        by_key: dict[tuple[int, int | None], tuple[str, Origin]] = {}
        for name, binding in visible.items():
            origin = self.scopes.origin(binding) if binding.kind != "other" else None
            if origin is None:
                continue
            previous = by_key.get(origin.key)
            if previous is None or (name in used and previous[0] not in used):
                by_key[origin.key] = (name, origin)
        kinds: dict[str, str] = {}
        origins: dict[str, Origin] = {}
        for name, origin in by_key.values():
            origins[name] = origin
            found = self._binding_kind(visible[name], origin)
            if found:
                kinds[name] = found
        for name, origin in list(origins.items()):
            if kinds.get(name) != OPTIMIZER:
                continue
            for model_key in self._trained_models(origin):
                entry = by_key.get(model_key)
                if entry is not None and entry[0] not in kinds:
                    kinds[entry[0]] = MODEL
        self._by_usage(loop, scope, visible, kinds)
        rebound = self._rebound_in(loop, scope)
        for name, kind in sorted(kinds.items(), key=lambda kv: self._order(visible[kv[0]])):
            if name in rebound:
                state.notes.append(
                    Note(
                        rebound[name],
                        f"{kind} `{name}` is assigned again inside the training loop; "
                        "not registered (a checkpoint would hold the old object)",
                        done=False,
                    )
                )
                continue
            state.objects[kind].append(name)
        self._unknown_steppers(loop, kinds, state)
        return state

    def _order(self, binding: Binding) -> tuple[int, int]:
        if binding.kind == PARAM:
            return (0, 0)
        return (1, self.tree.line(binding.stmt))

    def _used_names(self, loop: cst.For | cst.While) -> set[str]:
        return {n.value for n in self.tree.walk(loop) if isinstance(n, cst.Name)}

    def _trained_models(self, optimizer: Origin) -> list[tuple[int, int | None]]:
        """Keys of the objects whose `.parameters()` an optimizer constructor is given."""
        keys: list[tuple[int, int | None]] = []
        expr = strip_passthrough(optimizer.expr)
        if not isinstance(expr, cst.Call):
            return keys
        for arg in expr.args:
            for node in self.tree.walk(arg):
                if method_name(node) not in ("parameters", "named_parameters"):
                    continue
                root = receiver_root(node.func.value)  # type: ignore[attr-defined]
                if root is None:
                    continue
                binding = self.scopes.lookup(root, optimizer.scope, optimizer.stmt)
                origin = self.scopes.origin(binding) if binding is not None else None
                if origin is not None:
                    keys.append(origin.key)
        return keys

    def _method_calls(self, loop: cst.For | cst.While) -> dict[str, set[str]]:
        calls: dict[str, set[str]] = {}
        for node in self.tree.walk(loop):
            method = method_name(node)
            if method is None or not isinstance(node, cst.Call):
                continue
            receiver = node.func.value  # type: ignore[attr-defined]
            if isinstance(receiver, cst.Name):
                calls.setdefault(receiver.value, set()).add(method)
            if method == "step" and isinstance(receiver, cst.Name):
                for arg in node.args:  # scaler.step(optimizer)
                    if isinstance(arg.value, cst.Name):
                        calls.setdefault(arg.value.value, set()).add("<stepped by scaler>")
        return calls

    def _by_usage(
        self,
        loop: cst.For | cst.While,
        scope: Scope,
        visible: dict[str, Binding],
        kinds: dict[str, str],
    ) -> None:
        calls = self._method_calls(loop)
        for name, methods in calls.items():
            if name not in visible or name in kinds or visible[name].kind == "other":
                continue
            if {"zero_grad", "step"} <= methods or "<stepped by scaler>" in methods:
                kinds[name] = OPTIMIZER
            elif {"scale", "update"} <= methods:
                kinds[name] = SCALER
        if MODEL not in kinds.values():
            self._model_by_usage(loop, scope, visible, kinds, calls)

    def _model_by_usage(
        self,
        loop: cst.For | cst.While,
        scope: Scope,
        visible: dict[str, Binding],
        kinds: dict[str, str],
        calls: dict[str, set[str]],
    ) -> None:
        """No model known by construction: the object the loop puts in train mode or
        takes parameters from, else what the optimizer was built from, else the object
        the loop calls (`model(x)`) that was built by a call (losses excepted)."""

        def unknown(name: str) -> bool:
            return name in visible and name not in kinds and visible[name].kind == ASSIGN

        found = [n for n, m in calls.items() if unknown(n) and m & {"train", "eval", "parameters"}]
        if not found:
            for name, kind in kinds.items():
                origin = self.scopes.origin(visible[name]) if name in visible else None
                if kind == OPTIMIZER and origin is not None and isinstance(origin.expr, cst.Call):
                    root = _params_root(origin.expr)
                    if root and unknown(root) and root not in found:
                        found.append(root)
        if not found:
            for node in self.tree.walk(loop):
                if isinstance(node, cst.Call) and isinstance(node.func, cst.Name):
                    name = node.func.value
                    origin = self.scopes.origin(visible[name]) if unknown(name) else None
                    built_by = call_name(origin.expr) if origin is not None else None
                    if built_by and not built_by.lower().endswith("loss") and name not in found:
                        found.append(name)
        for name in found:
            kinds[name] = MODEL

    def _rebound_in(self, loop: cst.For | cst.While, scope: Scope) -> dict[str, int]:
        rebound: dict[str, int] = {}
        for node in self.scopes.walk_scope(loop):
            targets: list[cst.BaseExpression] = []
            if isinstance(node, cst.Assign):
                targets = [t.target for t in node.targets]
            elif isinstance(node, cst.AnnAssign) and node.value is not None:
                targets = [node.target]
            elif isinstance(node, cst.For):
                targets = [node.target]
            for target in targets:
                for name in assigned_names(target):
                    rebound.setdefault(name, self.tree.line(node))
        return rebound

    def _unknown_steppers(
        self, loop: cst.For | cst.While, kinds: dict[str, str], state: State
    ) -> None:
        for node in self.tree.walk(loop):
            if method_name(node) != "step":
                continue
            receiver = node.func.value  # type: ignore[attr-defined]
            name = receiver.value if isinstance(receiver, cst.Name) else None
            if name is None or kinds.get(name) in (OPTIMIZER, SCHEDULER, SCALER):
                continue
            if any(n.line == self.tree.line(node) for n in state.notes):
                continue
            state.notes.append(
                Note(
                    self.tree.line(node),
                    f"`{name}.step()` is called in the training loop but `{name}` is not a "
                    "recognised optimizer or scheduler bound before the loop; not registered "
                    "(add it to flor.checkpointing by hand if it has state)",
                    done=False,
                )
            )


def _params_root(optimizer: cst.Call) -> str | None:
    """The variable whose parameters an optimizer is built from: `net` in `SGD(net, ...)`,
    `SGD(net.parameters(), lr=args.lr)` or `SGD(params=net.fc.parameters())`; never a
    hyperparameter such as `args` in `lr=args.lr`."""
    params = [a for a in optimizer.args if a.keyword is None and not a.star][:1] + [
        a for a in optimizer.args if a.keyword is not None and a.keyword.value == "params"
    ]
    if not params:
        return None
    value = params[0].value
    if method_name(value) in ("parameters", "named_parameters"):
        value = value.func.value  # type: ignore[attr-defined]
    return receiver_root(value)
