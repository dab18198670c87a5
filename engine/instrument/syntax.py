"""Small, pure questions about libcst nodes, shared by the analyses.

Kept apart from the analyses so each of them reads as policy ("is this a training loop?")
rather than as tree plumbing ("is this an Attribute whose value is a Name?").
"""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

# Methods that return the object they are called on (or an equivalent one that holds the
# same state): `Net().to(device)` is still the model built by `Net()`.
PASSTHROUGH_METHODS = frozenset(
    {
        "to",
        "cuda",
        "cpu",
        "float",
        "double",
        "half",
        "bfloat16",
        "train",
        "eval",
        "requires_grad_",
        "share_memory",
        "to_empty",
    }
)


def dotted(node: cst.CSTNode | None) -> str | None:
    """`torch.optim.SGD` for the expression torch.optim.SGD; None for anything else."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        left = dotted(node.value)
        return f"{left}.{node.attr.value}" if left else None
    return None


def call_name(node: cst.CSTNode | None) -> str | None:
    """The dotted name a call calls (`torch.optim.SGD` for `torch.optim.SGD(...)`)."""
    return dotted(node.func) if isinstance(node, cst.Call) else None


def method_name(node: cst.CSTNode) -> str | None:
    """`step` for `anything.step(...)`; None when the node is not a method call."""
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
        return node.func.attr.value
    return None


def receiver_root(node: cst.BaseExpression) -> str | None:
    """The variable at the root of `model.fc.parameters` style chains (here `model`)."""
    while isinstance(node, (cst.Attribute, cst.Subscript)):
        node = node.value
    return node.value if isinstance(node, cst.Name) else None


def strip_passthrough(node: cst.BaseExpression) -> cst.BaseExpression:
    """`Net().to(device).train()` -> `Net()`: the call that built the object."""
    while (
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Attribute)
        and node.func.attr.value in PASSTHROUGH_METHODS
    ):
        node = node.func.value
    return node


def is_backward_call(node: cst.CSTNode) -> bool:
    """`loss.backward()`, `scaler.scale(loss).backward()`, `torch.autograd.backward(...)`."""
    if not isinstance(node, cst.Call):
        return False
    if isinstance(node.func, cst.Attribute) and node.func.attr.value == "backward":
        return True
    name = call_name(node)
    return name is not None and name.endswith("autograd.backward")


def literal_value(node: cst.BaseExpression) -> bool:
    """Whether `node` is a literal hyperparameter value: a number, a plain string, a bool.

    Byte strings, f-strings and None are left alone: `--kwargs` parses a value as the type
    of its default, and those types give no useful parsing.
    """
    if isinstance(node, (cst.Integer, cst.Float)):
        return True
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, (cst.Minus, cst.Plus)):
        return isinstance(node.expression, (cst.Integer, cst.Float))
    if isinstance(node, cst.SimpleString):
        return not set(node.prefix.lower()) & {"b", "f"}
    return isinstance(node, cst.Name) and node.value in ("True", "False")


def block_statements(node: cst.CSTNode) -> list[cst.BaseStatement | cst.BaseSmallStatement]:
    """The statements of a body (module, indented block or one-line suite)."""
    if isinstance(node, (cst.Module, cst.IndentedBlock, cst.SimpleStatementSuite)):
        return list(node.body)
    return []


def sub_blocks(stmt: cst.CSTNode) -> Iterator[cst.BaseSuite]:
    """The blocks a compound statement runs (if/elif/else, try/except/finally, with, loops)."""
    if isinstance(stmt, cst.If):
        yield stmt.body
        if isinstance(stmt.orelse, cst.If):
            yield from sub_blocks(stmt.orelse)
        elif isinstance(stmt.orelse, cst.Else):
            yield stmt.orelse.body
    elif isinstance(stmt, (cst.Try, cst.TryStar)):
        yield stmt.body
        for handler in stmt.handlers:
            yield handler.body
        if stmt.orelse is not None:
            yield stmt.orelse.body
        if stmt.finalbody is not None:
            yield stmt.finalbody.body
    elif isinstance(stmt, (cst.With, cst.For, cst.While)):
        yield stmt.body
        if not isinstance(stmt, cst.With) and stmt.orelse is not None:
            yield stmt.orelse.body
    elif isinstance(stmt, cst.Match):
        for case in stmt.cases:
            yield case.body


def is_main_guard(stmt: cst.CSTNode) -> bool:
    """`if __name__ == "__main__":`, which always runs when the script is run."""
    if not isinstance(stmt, cst.If) or not isinstance(stmt.test, cst.Comparison):
        return False
    test = stmt.test
    if len(test.comparisons) != 1 or not isinstance(test.comparisons[0].operator, cst.Equal):
        return False
    sides = [test.left, test.comparisons[0].comparator]
    names = [s for s in sides if isinstance(s, cst.Name) and s.value == "__name__"]
    strings = [
        s
        for s in sides
        if isinstance(s, cst.SimpleString) and s.evaluated_value in ("__main__", b"__main__")
    ]
    return len(names) == 1 and len(strings) == 1


def string_literal(node: cst.CSTNode) -> str | None:
    """The text of a plain string literal, else None."""
    if isinstance(node, cst.SimpleString) and not set(node.prefix.lower()) & {"b", "f"}:
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    return None
