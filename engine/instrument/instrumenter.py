"""`instrument(source)`: a plain training script in, the instrumented script and a report out.

The steps are independent analyses over one parsed tree (training loops, state, hyper-
parameters), a plan of edits keyed by node, and one transformation. Every step skips what
is already instrumented, so instrumenting the output again changes nothing. The result is
compiled before it is returned: the instrumenter never hands back code that does not parse.
"""

from __future__ import annotations

import libcst as cst

from florwb_engine.flor_calls import top_level_imports
from florwb_engine.instrument.hyperparams import HyperparameterFinder, Hyperparameters
from florwb_engine.instrument.losses import find_loss_logs
from florwb_engine.instrument.result import (
    INSTRUMENTED,
    PARTIAL,
    REFUSED,
    UNCHANGED,
    InstrumentResult,
    Note,
)
from florwb_engine.instrument.scopes import Scopes
from florwb_engine.instrument.script_index import Tree
from florwb_engine.instrument.state import StateFinder
from florwb_engine.instrument.syntax import call_name
from florwb_engine.instrument.training_loops import Loop, LoopFinder, TrainingLoops
from florwb_engine.instrument.tree_edits import Builder, Edit, Editor, insert_after

DEFAULT_ALIAS = "flor"


def instrument(source: str) -> InstrumentResult:
    """Instrument a training script's source. Raises InstrumentError if it does not parse."""
    return _Instrumenter(Tree(source)).run()


class _Instrumenter:
    def __init__(self, tree: Tree) -> None:
        self.tree = tree
        self.edits: dict[int, list[Edit]] = {}
        self.notes: list[Note] = []

    def add(self, node: cst.CSTNode, edit: Edit) -> None:
        self.edits.setdefault(id(node), []).append(edit)

    def refused(self, reason: str) -> InstrumentResult:
        source = self.tree.source
        return InstrumentResult(source, source, REFUSED, [Note(1, reason, False)], reason)

    def run(self) -> InstrumentResult:
        tree = self.tree
        imports = top_level_imports(tree.module)
        alias = imports.alias_of("florwb")
        other = imports.alias_of("flordb", "flor")
        if other and not alias:
            package = imports.modules[other]
            return self.refused(
                f"the script imports {package} as `{other}`: florwb is a drop-in replacement, "
                f"change it to `import florwb as {other}` and run florwb instrument again"
            )
        if alias is None:
            clash = next(
                (n for n in tree.names if n.value == DEFAULT_ALIAS and tree.is_variable(n)), None
            )
            if clash is not None:
                return self.refused(
                    f"the name `{DEFAULT_ALIAS}` is already used at line {tree.line(clash)}; "
                    f"rename it, or add `import florwb as flor` at the top yourself"
                )
        name = alias or DEFAULT_ALIAS
        scopes = Scopes(tree)
        finder = LoopFinder(tree, scopes, name)
        loops = finder.find()
        if loops.refusal or loops.outer is None:
            return self.refused(loops.refusal or "no training loop found")
        self.builder = Builder(tree.module, name)
        self.notes += loops.notes

        result = InstrumentResult(tree.source, tree.source, UNCHANGED)
        self._plan_loops(loops, result)
        self._plan_loss_logs(loops.outer, finder.training)
        self._plan_checkpointing(loops.outer, StateFinder(tree, scopes), result)
        import_index = self._import_index(alias)
        hyper = HyperparameterFinder(tree, scopes, name, import_index if alias else -1).find()
        self._plan_hyperparameters(hyper, result)

        module = tree.module.visit(Editor(self.edits))
        if alias is None:
            module = self._add_import(module, import_index)
        code = module.code
        try:
            compile(code, "<instrumented>", "exec", dont_inherit=True)
        except SyntaxError as exc:  # a bug here, never the user's: say so, change nothing
            return self.refused(f"internal error: the instrumented code does not compile ({exc})")
        result.code = code
        result.notes = self.notes
        if code == tree.source:
            result.status = UNCHANGED
        else:
            result.status = PARTIAL if any(not n.done for n in self.notes) else INSTRUMENTED
        return result

    # -- loops -------------------------------------------------------------------------

    def _plan_loops(self, loops: TrainingLoops, result: InstrumentResult) -> None:
        assert loops.outer is not None
        result.outer_loop = loops.outer.name
        result.inner_loops = [loop.name for loop in loops.inner]
        for loop, role in [(loops.outer, "outer"), *((inner, "inner") for inner in loops.inner)]:
            if loop.wrapped:
                continue
            self.add(loop.node, self._wrap_iter(loop))
            self.notes.append(
                Note(
                    self.tree.line(loop.node),
                    f'{role} training loop -> {self.builder.alias}.loop("{loop.name}", ...)',
                )
            )

    def _wrap_iter(self, loop: Loop) -> Edit:
        def edit(node: cst.CSTNode) -> cst.CSTNode:
            if isinstance(node, cst.While):
                return self.builder.while_as_for(loop.name, node)
            assert isinstance(node, cst.For)
            return node.with_changes(iter=self.builder.loop_iter(loop.name, node.iter))

        return edit

    # -- logging the loss ----------------------------------------------------------------

    def _plan_loss_logs(self, outer: Loop, training: set[int]) -> None:
        """When the script logs nothing, log each loss it calls `.backward()` on, so a
        replay has recorded values to check its own against."""
        alias = self.builder.alias
        if any(call_name(c) == f"{alias}.log" for c in self.tree.calls):
            return
        logs = find_loss_logs(self.tree, outer.node, training, alias)
        self.notes += logs.notes
        for stmt, names in logs.after:
            lines = [self.builder.log_call(name, name) for name in names]
            self.add(stmt, insert_after(lines))

    # -- checkpointing -----------------------------------------------------------------

    def _plan_checkpointing(
        self, outer: Loop, finder: StateFinder, result: InstrumentResult
    ) -> None:
        tree = self.tree
        line = tree.line(outer.node)
        alias = self.builder.alias
        existing = [c for c in tree.calls if call_name(c) == f"{alias}.checkpointing"]
        if existing:
            around = any(
                isinstance(a, cst.With)
                and any(call_name(item.item) == f"{alias}.checkpointing" for item in a.items)
                for a in tree.ancestors(outer.node)
            )
            if not around:
                self.notes.append(
                    Note(
                        tree.line(existing[0]),
                        f"{alias}.checkpointing is already used here (not directly around "
                        f"the {outer.name} loop); left as is",
                        done=False,
                    )
                )
            return
        state = finder.find(outer.node, outer.scope)
        self.notes += state.notes
        if not state.complete:
            missing = [k for k in ("model", "optimizer") if not state.objects[k]]
            self.notes.append(
                Note(
                    line,
                    f"{alias}.checkpointing not added: no {' and no '.join(missing)} bound "
                    f"before the {outer.name} loop could be identified, and checkpoints "
                    "without them could not be replayed; add "
                    f"`with {alias}.checkpointing(model=..., optimizer=...):` around "
                    "this loop by hand",
                    done=False,
                )
            )
            return
        pairs = state.registrations()
        result.checkpointed = dict(pairs)
        column = tree.column(outer.node)

        def edit(node: cst.CSTNode) -> cst.CSTNode:
            return self.builder.checkpointing(pairs, node, column)  # type: ignore[arg-type]

        self.add(outer.node, edit)
        listed = ", ".join(f"{k}={v}" for k, v in pairs)
        self.notes.append(
            Note(line, f"{alias}.checkpointing({listed}) around the {outer.name} loop")
        )

    # -- hyperparameters ---------------------------------------------------------------

    def _plan_hyperparameters(self, hyper: Hyperparameters, result: InstrumentResult) -> None:
        self.notes += hyper.notes
        alias = self.builder.alias
        for literal in hyper.literals:
            value_code = self.tree.module.code_for_node(literal.value)

            def edit(node: cst.CSTNode, name: str = literal.name) -> cst.CSTNode:
                return self.builder.arg_call(name, node)  # type: ignore[arg-type]

            self.add(literal.value, edit)
            result.args.append(literal.name)
            self.notes.append(
                Note(literal.line, f'{literal.name} -> {alias}.arg("{literal.name}", {value_code})')
            )
        for parsed in hyper.parsed:
            lines = [self.builder.record_arg(parsed.target, d) for d in parsed.dests]
            self.add(parsed.stmt, insert_after(lines))
            result.args.extend(parsed.dests)
            self.notes.append(
                Note(
                    parsed.line,
                    f"argparse arguments recorded after parsing: {', '.join(parsed.dests)} "
                    f'({parsed.target}.X = {alias}.arg("X", {parsed.target}.X))',
                )
            )

    # -- the import --------------------------------------------------------------------

    def _import_index(self, alias: str | None) -> int:
        """Module body index of the florwb import, or of the statement to add it after
        (the last import of the leading imports, else the docstring; -1: at the top)."""
        body = self.tree.module.body
        if alias is not None:
            for index, stmt in enumerate(body):
                if isinstance(stmt, cst.SimpleStatementLine) and any(
                    isinstance(s, cst.Import) and any(a.evaluated_name == "florwb" for a in s.names)
                    for s in stmt.body
                ):
                    return index
        last = -1
        for index, stmt in enumerate(body):
            if not isinstance(stmt, cst.SimpleStatementLine):
                break
            if all(isinstance(s, (cst.Import, cst.ImportFrom)) for s in stmt.body):
                last = index
            elif (
                index == 0
                and isinstance(stmt.body[0], cst.Expr)
                and isinstance(stmt.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
            ):
                last = 0
            else:
                break
        return last

    def _add_import(self, module: cst.Module, index: int) -> cst.Module:
        stmt = self.builder.statement(f"import florwb as {DEFAULT_ALIAS}")
        body = list(module.body)
        if index >= 0:
            line, where = self.tree.line(self.tree.module.body[index]), "below this line"
        else:
            line, where = 1, "at the top"
        body.insert(index + 1, stmt)
        self.notes.append(Note(line, f"added `import florwb as {DEFAULT_ALIAS}` {where}"))
        return module.with_changes(body=body)
