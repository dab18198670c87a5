"""Applying planned changes to the tree, keyed by the identity of the original nodes.

Each change is a function from the transformed node to its replacement, so everything
the plan does not name is emitted byte for byte as parsed (libcst keeps comments,
blank lines and formatting on the nodes themselves). Wrapping a loop in `with` re-indents
its body; libcst re-indents continuation lines inside brackets with it and leaves the
contents of multi-line strings alone, so the code means what it meant.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import libcst as cst

Edit = Callable[[cst.CSTNode], cst.CSTNode]
LINE_LENGTH = 88  # where the `with` line is split, as black and ruff format would


class Editor(cst.CSTTransformer):
    def __init__(self, edits: dict[int, list[Edit]]) -> None:
        super().__init__()
        self.edits = edits

    def on_leave(self, original_node, updated_node):
        result = super().on_leave(original_node, updated_node)
        for edit in self.edits.get(id(original_node), ()):
            result = edit(result)
        return result


class Builder:
    """New code in the script's own style: its quote character and indentation."""

    def __init__(self, module: cst.Module, alias: str) -> None:
        self.alias = alias
        self.indent = module.default_indent
        self.quote = _quote_style(module)

    def string(self, text: str) -> cst.SimpleString:
        return cst.SimpleString(f"{self.quote}{text}{self.quote}")

    def _attr(self, name: str) -> cst.Attribute:
        return cst.Attribute(cst.Name(self.alias), cst.Name(name))

    def arg_call(self, name: str, default: cst.BaseExpression) -> cst.Call:
        """`flor.arg("name", default)`, the default expression kept as written."""
        return cst.Call(self._attr("arg"), [cst.Arg(self.string(name)), cst.Arg(default)])

    def loop_iter(self, name: str, iterable: cst.BaseExpression) -> cst.BaseExpression:
        """`flor.loop("name", it)`; `enumerate(it)` becomes `enumerate(flor.loop("name", it))`
        so the loop keeps its length (the total shown in progress) and its index."""
        if (
            isinstance(iterable, cst.Call)
            and isinstance(iterable.func, cst.Name)
            and iterable.func.value == "enumerate"
            and iterable.args
            and iterable.args[0].keyword is None
            and not iterable.args[0].star
        ):
            first = iterable.args[0]
            wrapped = first.with_changes(value=self._loop_call(name, first.value))
            return iterable.with_changes(args=[wrapped, *iterable.args[1:]])
        return self._loop_call(name, iterable)

    def while_as_for(self, name: str, node: cst.While) -> cst.For:
        """`while cond:` -> `for _florwb_iteration in flor.loop("name", iter(lambda:
        bool(cond), False)):`: the condition is tested before each iteration as the
        `while` tested it (the iterator stops the first time it is false), `break` and
        `continue` keep their meaning, and flor.loop counts the iterations, so the loop
        records, checkpoints and replays like a `for` loop. `while True:` never ends by
        itself; the loop ends where its `break` is."""
        test = node.test
        truth = test if _is_bool(test) else cst.Call(cst.Name("bool"), [cst.Arg(test)])
        condition = cst.Call(
            cst.Name("iter"),
            [
                cst.Arg(cst.Lambda(cst.Parameters(), truth)),
                cst.Arg(cst.Name("False")),
            ],
        )
        return cst.For(
            target=cst.Name("_florwb_iteration"),
            iter=self._loop_call(name, condition),
            body=node.body,
            leading_lines=node.leading_lines,
            whitespace_after_for=cst.SimpleWhitespace(" "),
            whitespace_before_in=cst.SimpleWhitespace(" "),
            whitespace_after_in=cst.SimpleWhitespace(" "),
            whitespace_before_colon=node.whitespace_before_colon,
        )

    def _loop_call(self, name: str, iterable: cst.BaseExpression) -> cst.Call:
        return cst.Call(self._attr("loop"), [cst.Arg(self.string(name)), cst.Arg(iterable)])

    def checkpointing(
        self, pairs: list[tuple[str, str]], loop: cst.BaseStatement, column: int
    ) -> cst.With:
        """`with flor.checkpointing(model=net, ...):` around `loop`, which keeps its
        comments above the `with`; split over lines when it would be too long."""
        inner = ", ".join(f"{key}={name}" for key, name in pairs)
        head = f"with {self.alias}.checkpointing({inner}):"
        if column + len(head) <= LINE_LENGTH:
            text = f"{head}\n    pass\n"
        elif column + len(self.indent) + len(inner) + 1 <= LINE_LENGTH:
            text = f"with {self.alias}.checkpointing(\n{self.indent}{inner}\n):\n    pass\n"
        else:
            lines = "".join(f"{self.indent}{key}={name},\n" for key, name in pairs)
            text = f"with {self.alias}.checkpointing(\n{lines}):\n    pass\n"
        template = cst.parse_statement(text)
        assert isinstance(template, cst.With)
        moved = loop.with_changes(leading_lines=())
        return template.with_changes(
            body=cst.IndentedBlock(body=[moved]),
            leading_lines=loop.leading_lines,  # type: ignore[attr-defined]
        )

    def statement(self, code: str) -> cst.SimpleStatementLine:
        stmt = cst.parse_statement(code + "\n")
        assert isinstance(stmt, cst.SimpleStatementLine)
        return stmt

    def log_call(self, name: str, expression: str) -> cst.SimpleStatementLine:
        """`flor.log("name", expression)`."""
        q = self.quote
        return self.statement(f"{self.alias}.log({q}{name}{q}, {expression})")

    def record_arg(self, namespace: str, dest: str) -> cst.SimpleStatementLine:
        """`args.lr = flor.arg("lr", args.lr)`."""
        q = self.quote
        return self.statement(
            f"{namespace}.{dest} = {self.alias}.arg({q}{dest}{q}, {namespace}.{dest})"
        )


def _is_bool(test: cst.BaseExpression) -> bool:
    """A condition that is a bool already (`True`, `a < b`, `not x`), compared with the
    iterator's sentinel as it is."""
    if isinstance(test, cst.Name):
        return test.value in ("True", "False")
    if isinstance(test, cst.UnaryOperation):
        return isinstance(test.operator, cst.Not)
    return isinstance(test, cst.Comparison)


def _quote_style(module: cst.Module) -> str:
    """The quote character most of the script's strings use (double when tied)."""
    counts = {'"': 0, "'": 0}

    class Counter(cst.CSTVisitor):
        def visit_SimpleString(self, node: cst.SimpleString) -> None:
            if len(node.quote) == 1:
                counts[node.quote] += 1

        def visit_FormattedString(self, node: cst.FormattedString) -> None:
            quote = node.start.lstrip("fFrRbB")
            if len(quote) == 1:
                counts[quote] += 1

    module.visit(Counter())
    return "'" if counts["'"] > counts['"'] else '"'


def insert_after(extra: Sequence[cst.BaseStatement]) -> Edit:
    def edit(node: cst.CSTNode) -> cst.CSTNode:
        return cst.FlattenSentinel([node, *extra])  # type: ignore[return-value]

    return edit
