"""What a statement may change: the names and `self.` attributes whose value it can alter.

Used when a statement's nearest anchor moved below statements that preceded it in the new
version (propagation.py, `_check_crossing`): the placement is refused only when one of those
statements may change what the log statement reads. A statement that merely *reads* the
logged name (`if x is None: return`, `print(x)`) cannot change the logged value, so it
does not force a refusal; one that rebinds it, assigns into it (`x[i] = ...`,
`x.attr = ...`), calls a method on it (`x.append(...)`) or passes it to a call
(`f(x)`, which may mutate it) does, unless the call is one that only reads
(`print(x)`, `len(x)`, `x.item()`: PURE_FUNCTIONS, PURE_METHODS, which propagation.py
also uses to tell a harmless re-computation).

Names are returned as plain identifiers; attributes of `self` as ".attr". The marker
`ANY_SELF` stands for "any attribute of self" (a call of a method of `self`).
"""

from __future__ import annotations

import libcst as cst

from florwb_engine.propagate.tree import iter_children

ANY_SELF = ".*"

# Calls that only read: computing them once more in the old version changes nothing.
PURE_METHODS = frozenset(
    """item mean sum norm std var max min abs detach cpu numpy tolist float double half
    clone size numel dim exp log sqrt pow argmax argmin softmax log_softmax flatten view
    reshape squeeze unsqueeze t transpose to get_last_lr get_lr parameters
    named_parameters values keys items copy get format lower upper round isnan isinf all
    any prod cumsum stack cat tensor zeros_like ones_like shape count""".split()
)
PURE_FUNCTIONS = frozenset(
    """len float int str bool abs max min sum round sorted list tuple dict set repr
    isinstance any all zip enumerate range map filter getattr hasattr type""".split()
)


def _roots(target: cst.CSTNode, found: set[str]) -> None:
    """The names (or ".attr" of self) an assignment target writes into."""
    node = target
    while True:
        if isinstance(node, (cst.Tuple, cst.List)):
            for element in node.elements:
                _roots(element.value, found)
            return
        if isinstance(node, cst.StarredElement):
            node = node.value
            continue
        if isinstance(node, cst.Name):
            found.add(node.value)
            return
        if isinstance(node, cst.Attribute):
            if isinstance(node.value, cst.Name) and node.value.value == "self":
                found.add("." + node.attr.value)
                return
            node = node.value
            continue
        if isinstance(node, cst.Subscript):
            node = node.value
            continue
        return  # a call result or another expression: nothing named is written


# builtins that only read their arguments, besides PURE_FUNCTIONS
_READ_ONLY_BUILTINS = frozenset(
    "print callable issubclass id hash format ord chr divmod pow dir vars".split()
)


def _read_only(func: cst.BaseExpression) -> bool:
    """A call that changes neither its receiver nor its arguments: pure methods and
    builtins, and exception constructors (`ValueError(f"bad {x}")`)."""
    if isinstance(func, cst.Attribute):
        return func.attr.value in PURE_METHODS
    if isinstance(func, cst.Name):
        name = func.value
        return (
            name in PURE_FUNCTIONS
            or name in _READ_ONLY_BUILTINS
            or name.endswith(("Error", "Exception", "Warning"))
        )
    return False


def may_change(node: cst.CSTNode) -> set[str]:
    """Names and self attributes whose value running `node` may change."""
    found: set[str] = set()
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, cst.AssignTarget):
            _roots(n.target, found)
        elif isinstance(n, (cst.AugAssign, cst.AnnAssign)):
            _roots(n.target, found)
        elif isinstance(n, (cst.For, cst.CompFor)):
            _roots(n.target, found)
        elif isinstance(n, cst.AsName):
            _roots(n.name, found)
        elif isinstance(n, cst.NamedExpr):
            _roots(n.target, found)
        elif isinstance(n, cst.Del):
            _roots(n.target, found)
        elif isinstance(n, (cst.FunctionDef, cst.ClassDef)):
            found.add(n.name.value)
            continue  # its body runs later, if ever
        elif isinstance(n, (cst.Global, cst.Nonlocal)):
            found.update(item.name.value for item in n.names)
        elif isinstance(n, cst.Call):
            func = n.func
            if _read_only(func):
                stack.extend(child for child, _, _ in iter_children(n))
                continue  # `print(x)`, `len(x)`, `x.to(device)`: reads x and its arguments
            if isinstance(func, cst.Attribute):
                base = func.value
                if isinstance(base, cst.Name) and base.value == "self":
                    found.add(ANY_SELF)
                else:
                    _roots(base, found)
            for arg in n.args:
                value = arg.value
                if isinstance(value, (cst.Name, cst.Attribute, cst.Subscript)):
                    _roots(value, found)
                    if isinstance(value, cst.Name) and value.value == "self":
                        found.add(ANY_SELF)
        stack.extend(child for child, _, _ in iter_children(n))
    return found


def changes_any(node: cst.CSTNode, reads: set[str]) -> bool:
    """Whether running `node` may change one of `reads` (names, ".attr" of self)."""
    changed = may_change(node)
    if changed & reads:
        return True
    return ANY_SELF in changed and any(r.startswith(".") for r in reads)
