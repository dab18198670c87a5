"""What running a piece of code may change, and what an expression reads.

Two questions, one walk over libcst:

- `may_change` (propagation's crossing check): the names and `self.` attributes whose
  value a statement may alter. A statement that merely *reads* a name (`if x is None:
  return`, `print(x)`) does not change it; one that rebinds it, assigns into it
  (`x[i] = ...`, `x.attr = ...`), calls a method on it (`x.append(...)`) or passes it to a
  call (`f(x)`, which may mutate it) does, unless the call only reads (purity.py).
  Names are plain identifiers; attributes of `self` are ".attr"; `ANY_SELF` stands for
  "any attribute of self" (a call of a method of `self`).
- `mutated_paths` (replay planning, the loop-state analysis): the objects, as dotted paths
  (`("stats", "n")`), that code changes *in place* — attribute and subscript targets,
  and receivers of methods that are not known to only read. Rebinding a plain name is
  not an in-place change.
"""

from __future__ import annotations

import libcst as cst

from florwb_engine.analysis.names import target_names
from florwb_engine.analysis.nodes import iter_children
from florwb_engine.analysis.purity import PURE_METHODS, read_only

ANY_SELF = ".*"

Dotted = tuple[str, ...]


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
            if read_only(func):
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


def path_of(node: cst.CSTNode) -> Dotted | None:
    """`a.b.c` as ("a", "b", "c"); subscripts stop the path (`a.b[0]` -> ("a", "b"))."""
    parts: list[str] = []
    while True:
        if isinstance(node, cst.Attribute):
            parts.append(node.attr.value)
            node = node.value
        elif isinstance(node, cst.Subscript):
            parts.clear()
            node = node.value
        elif isinstance(node, cst.Name):
            parts.append(node.value)
            return tuple(reversed(parts))
        else:
            return None


def _written_paths(target: cst.CSTNode, out: set[Dotted]) -> None:
    """Objects an assignment target changes in place: `a.b = `, `a[i] = `, in tuples too."""
    if isinstance(target, (cst.Tuple, cst.List)):
        for element in target.elements:
            _written_paths(element.value, out)
    elif isinstance(target, cst.StarredElement):
        _written_paths(target.value, out)
    elif isinstance(target, (cst.Attribute, cst.Subscript)):
        path = path_of(target)
        if path and len(path) > (0 if isinstance(target, cst.Subscript) else 1):
            out.add(path)


# Functions that change the object they are given: `next(batches)` advances an iterator a
# loop draws from (a fresh one at a segment's start would give other batches), `shuffle`
# (random's, numpy's) reorders a list in place.
ADVANCING_FUNCTIONS = frozenset({"next", "shuffle"})


def _advances_argument(func: cst.BaseExpression) -> bool:
    name = func.attr.value if isinstance(func, cst.Attribute) else getattr(func, "value", None)
    return name in ADVANCING_FUNCTIONS


def mutated_paths(
    node: cst.CSTNode,
    registered: frozenset[Dotted] = frozenset(),
    ignored_methods: frozenset[str] = frozenset(),
) -> set[Dotted]:
    """Paths `node` changes in place: attribute/subscript targets (assigned, augmented,
    deleted) and receivers of methods not known to only read. A call of a registered
    object (`self.net(x)` with `self.net` registered) is recorded as that object, which
    callers leave out, rather than as a change of all of `self`. `ignored_methods` are
    calls that change nothing the caller cares about (purity.OUTPUT_METHODS)."""
    out: set[Dotted] = set()
    stack = [node]
    while stack:
        sub = stack.pop()
        tp = type(sub)
        if tp is cst.AssignTarget or tp is cst.AugAssign or tp is cst.AnnAssign:
            _written_paths(sub.target, out)  # type: ignore[attr-defined]
        elif tp is cst.Del:
            _written_paths(sub.target, out)  # type: ignore[attr-defined]
        elif tp is cst.Call:
            func = sub.func  # type: ignore[attr-defined]
            method = func.attr.value if type(func) is cst.Attribute else None
            if _advances_argument(func) and sub.args:  # type: ignore[attr-defined]
                path = path_of(sub.args[0].value)  # type: ignore[attr-defined]
                if path:
                    out.add(path)
            elif (
                method is not None and method not in PURE_METHODS and method not in ignored_methods
            ):
                called = path_of(func)
                path = called if called in registered else path_of(func.value)
                if path:
                    out.add(path)
        stack.extend(child for child, _, _ in iter_children(sub))
    return out


def read_paths(node: cst.CSTNode) -> set[Dotted]:
    """The longest `a.b.c` paths an expression reads (`net.fc.weight.norm()` reads
    ("net", "fc", "weight", "norm")); keyword names and attribute names are not reads."""
    out: set[Dotted] = set()
    stack = [node]
    while stack:
        sub = stack.pop()
        tp = type(sub)
        if tp is cst.Name:
            out.add((sub.value,))  # type: ignore[attr-defined]
            continue
        if tp is cst.Attribute:
            path = path_of(sub)
            if path:
                out.add(path)
                continue
            stack.append(sub.value)  # type: ignore[attr-defined]
            continue
        if tp is cst.Arg:
            stack.append(sub.value)  # type: ignore[attr-defined]
            continue
        stack.extend(child for child, _, _ in iter_children(sub))
    return out


def bound_names(node: cst.CSTNode) -> set[str]:
    """Every plain name `node` binds or deletes (assignment, augmented and annotated
    assignment, for and comprehension targets, `as` names, walrus, del), nested blocks
    included; definitions and imports are not counted."""
    found: set[str] = set()
    stack = [node]
    while stack:
        sub = stack.pop()
        tp = type(sub)
        if tp in (cst.AssignTarget, cst.AugAssign, cst.For, cst.CompFor, cst.NamedExpr, cst.Del):
            found |= target_names(sub.target)  # type: ignore[attr-defined]
        elif tp is cst.AnnAssign and sub.value is not None:  # type: ignore[attr-defined]
            found |= target_names(sub.target)  # type: ignore[attr-defined]
        elif tp is cst.AsName:
            found |= target_names(sub.name)  # type: ignore[attr-defined]
        stack.extend(child for child, _, _ in iter_children(sub))
    return found


def imported_names(node: cst.CSTNode) -> set[str]:
    """Names bound by imports anywhere in `node` (`torch`, `np`, `os` of `os.path`)."""
    names: set[str] = set()
    stack: list[cst.CSTNode] = [node]
    while stack:
        sub = stack.pop()
        if isinstance(sub, (cst.Import, cst.ImportFrom)):
            if isinstance(sub.names, cst.ImportStar):
                continue
            for alias in sub.names:
                if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                    names.add(alias.asname.name.value)
                else:
                    head: cst.BaseExpression = alias.name
                    while isinstance(head, cst.Attribute):
                        head = head.value
                    if isinstance(head, cst.Name):
                        names.add(head.value)
            continue
        stack.extend(child for child, _, _ in iter_children(sub))
    return names


def names_bound_anywhere(module: cst.Module) -> set[str]:
    """Every name the module binds in any of its scopes (assignments, `for` and `as`
    targets, parameters, imports, defs and classes): a name bound nowhere cannot be found
    in any frame of the script."""
    found = bound_names(module) | imported_names(module)
    stack: list[cst.CSTNode] = [module]
    while stack:
        sub = stack.pop()
        tp = type(sub)
        if tp is cst.AnnAssign:
            found |= target_names(sub.target)  # type: ignore[attr-defined]
        elif tp is cst.Param:
            found.add(sub.name.value)  # type: ignore[attr-defined]
        elif tp is cst.FunctionDef or tp is cst.ClassDef:
            found.add(sub.name.value)  # type: ignore[attr-defined]
        stack.extend(child for child, _, _ in iter_children(sub))
    return found
