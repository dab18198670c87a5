"""Which losses to log when the script logs nothing: the variable each `.backward()` runs on.

A hands-free run with no `flor.log` gives a replay nothing to check its values against, so
the instrumenter adds `flor.log("loss", loss)` right after the statement that calls
`loss.backward()` (also `scaler.scale(loss).backward()` and `torch.autograd.backward(loss)`).
flor.log turns a one-element tensor into a number at the call, so the tensor itself is
logged and the script's own `.item()` calls stay as they were. Each backward call logs its
own variable (a GAN's `errD.backward()` and `errG.backward()` give `errD` and `errG`).
A loss that is an expression (`(a + b).backward()`) has no name to log it under: nothing is
added and the report says why.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from florwb_engine.instrument.result import Note
from florwb_engine.instrument.script_index import Tree
from florwb_engine.instrument.syntax import call_name, is_backward_call


@dataclass
class LossLogs:
    """Statements to add a log after (by statement, the names in order) and the notes."""

    after: list[tuple[cst.SimpleStatementLine, list[str]]] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)


def loss_variable(call: cst.Call) -> cst.BaseExpression | None:
    """The expression a backward call differentiates: `loss` in `loss.backward()`,
    `scaler.scale(loss).backward()` and `torch.autograd.backward(loss)`."""
    if (call_name(call) or "").endswith("autograd.backward"):
        return call.args[0].value if call.args else None
    func = call.func
    if isinstance(func, cst.Attribute) and func.attr.value == "backward":
        target = func.value
        if (
            isinstance(target, cst.Call)
            and isinstance(target.func, cst.Attribute)
            and target.func.attr.value == "scale"
            and target.args
        ):
            return target.args[0].value
        return target
    return None


def find_loss_logs(tree: Tree, inside: cst.CSTNode, training: set[int], alias: str) -> LossLogs:
    """Backward calls in the training loop `inside`, or in a function that trains (by id in
    `training`, the functions the loop reaches), and what to log after each."""
    found = LossLogs()
    by_statement: dict[int, tuple[cst.SimpleStatementLine, list[str]]] = {}
    for call in tree.calls:
        if not is_backward_call(call) or not _in_training_code(tree, call, inside, training):
            continue
        line = tree.line(call)
        loss = loss_variable(call)
        if not isinstance(loss, cst.Name):
            shown = tree.module.code_for_node(loss) if loss is not None else "?"
            found.notes.append(
                Note(
                    line,
                    f"no {alias}.log of the loss added: the backward call differentiates "
                    f"`{shown}`, an expression, not a variable; assign it to a variable "
                    f'(`loss = ...`) or add `{alias}.log("loss", ...)` by hand',
                    done=False,
                )
            )
            continue
        stmt = tree.statement_of(call)
        block = tree.parent(stmt)
        if not isinstance(stmt, cst.SimpleStatementLine) or not isinstance(
            block, (cst.IndentedBlock, cst.Module)
        ):
            found.notes.append(
                Note(
                    line,
                    f"no {alias}.log of `{loss.value}` added: the backward call shares its "
                    "line with an `if`/`for`/`with` header; put it on a line of its own",
                    done=False,
                )
            )
            continue
        entry = by_statement.setdefault(id(stmt), (stmt, []))
        if loss.value in entry[1] or _logged_earlier_in_block(tree, block, stmt, loss.value):
            continue
        entry[1].append(loss.value)
        found.notes.append(
            Note(
                line,
                f'{alias}.log("{loss.value}", {loss.value}) added after the backward call '
                "(logged values let a replay check its own)",
            )
        )
    found.after = [entry for entry in by_statement.values() if entry[1]]
    return found


def _in_training_code(tree: Tree, call: cst.Call, inside: cst.CSTNode, training: set[int]) -> bool:
    for ancestor in tree.ancestors(call):
        if ancestor is inside:
            return True
        if isinstance(ancestor, cst.ClassDef):
            return False
        if isinstance(ancestor, cst.FunctionDef):
            return id(ancestor) in training
    return False


def _logged_earlier_in_block(tree: Tree, block: cst.CSTNode, stmt: cst.CSTNode, name: str) -> bool:
    """A backward of the same variable earlier in the same block already logs it: one
    value per name and iteration (`loss.backward(retain_graph=True)` twice)."""
    for other in block.body:  # type: ignore[attr-defined]
        if other is stmt:
            return False
        if not isinstance(other, cst.SimpleStatementLine):
            continue
        for node in tree.walk(other):
            if isinstance(node, cst.Call) and is_backward_call(node):
                loss = loss_variable(node)
                if isinstance(loss, cst.Name) and loss.value == name:
                    return True
    return False
