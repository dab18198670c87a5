"""Propagation on real code evolving in realistic ways: correct / wrong / refused shares.

The propagation target (at most 0.5% wrong placements, at least 99% correct) is set on a
held-out set of real before/after pairs that this repository does not have. This is the
closest honest stand-in: real Python code already on this machine (the installed torch,
textual, duckdb, libcst packages and the standard library, read at run time, never
committed), with pairs generated the way code evolves.

One pair:

* a window of consecutive top-level statements (<= ~220 lines) of a real module holding a
  chosen *anchor* statement inside a function; `import florwb as flor` goes on top;
* the NEW file is that window with a probe `flor.log("probe", <name>)` right after the
  anchor, at its indentation. The anchor is a statement alone on its line(s); the probe
  reads the name the anchor binds (an assignment to a plain name), or, for a compound
  anchor (if/for/while/with/try), a parameter of the function (bound on every path);
* the OLD file is the window with 1 to 3 realistic edits (the shapes real histories show):
  `move` (statements of the anchor's block moved up or down, past independent siblings
  only: nothing one binds is touched by a statement it crosses), `else` (an early-return
  `if` followed by the rest of the block <-> an `if/else` whose branches both end the
  flow), `wrap` (statements around the anchor wrapped in `if cond:` / `try: ... except
  Exception: raise` / `with ctx:`), `unwrap` (the if/with/try around the anchor removed,
  its body dedented), `neighbour` (the statement just before/after the anchor rewritten:
  call arguments changed shape), `anchor_args` (the anchor's own call arguments changed),
  `trailing` (blank and comment lines after blocks and around the anchor), `insert`
  (new statements next to the anchor), `delete` (a sibling deleted), `rename` (a local
  variable renamed in the whole function: when it is the probe's name, the expected probe
  reads the old name), `args` (arguments of other calls changed), and rarely
  `anchor_deleted` (the anchor itself is gone).

Expected outcome, by construction: the old text with the probe inserted right after the
last line of the anchor's counterpart, at its indentation, byte for byte (the anchor is
tracked through every edit). `correct` = the output is exactly that; `refused` = the
statement was not placed (with a reason); `wrong` = placed, but not there. When the anchor
was deleted (`anchor_deleted`, its only edit) there is no right place for a statement
logging what it computed; two outcomes count as correct there: a refusal, and a placement
where the anchor stood (right after its surviving predecessor and right before its
surviving successor in the same block, at the block's start when it came first, the old
text unchanged otherwise) provided the name it reads is bound there on every path.
Anything else is wrong.

Every output is also checked independently of the engine: it must compile, and the probe
must be reachable and read a name bound on every path to it (a small flow analysis over
Python's `ast` below). Violations are counted as `unsafe` (and are wrong placements).

Prints per-shape counts, a sample of wrong placements (--show N), and:
RESULT propagate_wild_pairs / propagate_wild_correct_pct / propagate_wild_wrong_pct /
propagate_wild_refused_pct / propagate_wild_unsafe / propagate_wild_cli_agree.
A sample of pairs (--cli N) also goes through the `florwb propagate` CLI, whose output must
equal the in-process result. Fixed seed: the same machine gives the same pairs.
"""

from __future__ import annotations

import argparse
import ast
import collections
import os
import random
import re
import subprocess
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from florwb_engine.propagate import PropagationError, propagate  # noqa: E402
from florwb_engine.propagate.propagation import clear_caches  # noqa: E402

HEADER = "import florwb as flor\n\n\n"
WINDOW_LINES = 220
PACKAGES = ("torch", "textual", "duckdb", "libcst")
SHAPE_WEIGHTS = {
    "move": 14,
    "else": 8,
    "wrap": 10,
    "unwrap": 8,
    "neighbour": 10,
    "anchor_args": 6,
    "trailing": 10,
    "insert": 10,
    "delete": 8,
    "rename": 10,
    "args": 8,
}
ANCHOR_DELETED_SHARE = 0.03
_COMPOUND = (ast.If, ast.For, ast.While, ast.With, ast.Try, ast.AsyncFor, ast.AsyncWith)
_ENDS = (ast.Return, ast.Raise, ast.Continue, ast.Break)


# -- sources ---------------------------------------------------------------------------------
def source_files() -> list[Path]:
    """Python files of the installed packages and the standard library (sorted)."""
    site = Path(sysconfig.get_paths()["purelib"])
    roots = [site / p for p in PACKAGES if (site / p).is_dir()]
    roots.append(Path(sysconfig.get_paths()["stdlib"]))
    skip = {"site-packages", "test", "tests", "idlelib", "lib2to3", "__pycache__"}
    files: list[Path] = []
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            if not set(path.relative_to(root).parts) & skip:
                files.append(path)
    return files


def read_source(path: Path) -> str | None:
    try:
        text = path.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    if "\r" in text or "\t" in text or "\f" in text or len(text) > 120_000:
        return None
    if not text.endswith("\n"):
        text += "\n"
    return text


# -- the tracked old text ----------------------------------------------------------------------
@dataclass
class Line:
    text: str
    anchor: bool = False  # first line of the anchor statement
    pred: bool = False  # first line of the anchor's predecessor (for anchor_deleted)
    succ: bool = False  # first line of the anchor's successor (for anchor_deleted)


@dataclass
class Pair:
    new: str
    old_lines: list[Line]
    probe_name: str
    compound_anchor: bool
    shapes: list[str] = field(default_factory=list)
    anchor_deleted: bool = False

    @property
    def old(self) -> str:
        return "".join(ln.text for ln in self.old_lines)


def _parse(text: str) -> ast.Module | None:
    try:
        return ast.parse(text)
    except (SyntaxError, ValueError, RecursionError):
        return None


def _blocks(node: ast.AST):
    """(owner, field, body) for every statement list under node."""
    for owner in ast.walk(node):
        for name in ("body", "orelse", "finalbody"):
            body = getattr(owner, name, None)
            if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
                yield owner, name, body
        for handler in getattr(owner, "handlers", []) or []:
            yield handler, "body", handler.body
        if isinstance(owner, ast.Match):
            for case in owner.cases:
                yield case, "body", case.body


@dataclass
class Located:
    tree: ast.Module
    stmt: ast.stmt
    body: list[ast.stmt]
    index: int
    chain: list[tuple[ast.AST, list[ast.stmt]]]  # (owner, body) outermost first
    function: ast.FunctionDef | ast.AsyncFunctionDef


def _indent(text: str) -> int:
    return len(text) - len(text.lstrip(" "))


def locate(lines: list[Line], flag: str = "anchor") -> Located | None:
    """The statement starting at the flagged line, its block and enclosing blocks."""
    tree = _parse("".join(ln.text for ln in lines))
    if tree is None:
        return None
    at = next((i for i, ln in enumerate(lines) if getattr(ln, flag)), None)
    if at is None:
        return None
    lineno, col = at + 1, _indent(lines[at].text)
    parents: dict[int, tuple[ast.AST, list[ast.stmt]]] = {}
    for owner, _, body in _blocks(tree):
        for s in body:
            parents[id(s)] = (owner, body)
    parents_of_owner: dict[int, ast.AST] = {}
    for owner in ast.walk(tree):
        for child in ast.iter_child_nodes(owner):
            parents_of_owner[id(child)] = owner
    for _owner, _, body in _blocks(tree):
        for i, s in enumerate(body):
            if s.lineno == lineno and s.col_offset == col:
                chain: list[tuple[ast.AST, list[ast.stmt]]] = []
                node: ast.AST = s
                function = None
                while id(node) in parents:
                    o, b = parents[id(node)]
                    chain.insert(0, (o, b))
                    if function is None and isinstance(o, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        function = o
                    node = o
                    if isinstance(o, ast.ExceptHandler):
                        node = parents_of_owner[id(o)]
                if function is None:
                    return None
                return Located(tree, s, body, i, chain, function)
    return None


def _names(node: ast.AST) -> tuple[set[str], set[str]]:
    """(bound, read) plain names and `self.x` attributes (as '.x') under node."""
    bound: set[str] = set()
    read: set[str] = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            (read if isinstance(n.ctx, ast.Load) else bound).add(n.id)
        elif isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name):
            key = f"{n.value.id}.{n.attr}"
            (read if isinstance(n.ctx, ast.Load) else bound).add(key)
        elif isinstance(n, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
            bound.add(n.name)
        elif isinstance(n, ast.alias):
            bound.add((n.asname or n.name).split(".")[0])
    return bound, read


def _independent(a: ast.stmt, b: ast.stmt) -> bool:
    ba, ra = _names(a)
    bb, rb = _names(b)
    return not (ba & (bb | rb) or bb & ra)


def _span(s: ast.stmt) -> tuple[int, int]:
    """0-based [first, last] line indexes of a statement (decorators included)."""
    first = min([s.lineno] + [d.lineno for d in getattr(s, "decorator_list", [])])
    return first - 1, s.end_lineno - 1  # type: ignore[operator]


def _alone(lines: list[Line], s: ast.stmt) -> bool:
    """The statement has its lines to itself (no `a; b`, no one-line block)."""
    first, last = _span(s)
    if lines[first].text[: s.col_offset].strip():
        return False
    tail = lines[last].text[s.end_col_offset :].strip()  # type: ignore[misc]
    return tail == "" or tail.startswith("#")


def _reindent(lines: list[Line], first: int, last: int, delta: int) -> bool:
    """Shift lines [first, last] by delta spaces (False when a line cannot be dedented)."""
    for i in range(first, last + 1):
        text = lines[i].text
        if not text.strip():
            continue
        if delta < 0 and _indent(text) < -delta:
            return False
    for i in range(first, last + 1):
        text = lines[i].text
        if not text.strip():
            continue
        lines[i].text = " " * delta + text if delta > 0 else text[-delta:]
    return True


def _rewrite(lines: list[Line], s: ast.stmt, node: ast.stmt) -> None:
    """Replace statement s's lines by `ast.unparse(node)` at its indentation."""
    first, last = _span(s)
    pad = " " * s.col_offset
    anchor, pred = lines[first].anchor, lines[first].pred
    try:
        text = ast.unparse(node)
    except (ValueError, RecursionError):
        return
    new = [Line(pad + t + "\n") for t in text.split("\n")]
    new[0].anchor, new[0].pred = anchor, pred
    lines[first : last + 1] = new


_KEYWORDS = ("strict", "check", "verbose", "inplace", "copy", "timeout", "default")


def _mutate_calls(node: ast.stmt, rng: random.Random, heavy: bool) -> bool:
    """Change the arguments of the calls in a statement (shape of real edits)."""
    calls = [n for n in ast.walk(node) if isinstance(n, ast.Call)]
    if not calls:
        return False
    for call in rng.sample(calls, k=len(calls) if heavy else 1):
        choice = rng.randrange(4 if not heavy else 3)
        if choice == 0 or (heavy and call.args):
            call.keywords.append(
                ast.keyword(arg=rng.choice(_KEYWORDS), value=ast.Constant(rng.choice([True, 0])))
            )
        if choice == 1 and call.args:
            call.args.pop(rng.randrange(len(call.args)))
        elif choice == 2 or heavy:
            call.args = [ast.Call(ast.Name("list", ast.Load()), call.args, [])] + (
                [ast.Constant(rng.randint(1, 9))] if heavy else []
            )
        elif choice == 3:
            call.args.append(ast.Constant(rng.randint(0, 99)))
    return True


# -- edits of the old version --------------------------------------------------------------------
def edit_move(pair: Pair, rng: random.Random) -> bool:
    loc = locate(pair.old_lines)
    if loc is None:
        return False
    body, a = loc.body, loc.index
    movable = [
        i
        for i, s in enumerate(body)
        if i != a
        and not isinstance(s, _ENDS + (ast.Delete, ast.Global, ast.Nonlocal))
        and not (i == 0 and _docstring(s))
        and not isinstance(s, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))
        and _alone(pair.old_lines, s)
    ]
    before = [i for i in movable if i < a]
    pool = before if before and rng.random() < 0.7 else movable
    if not pool:
        return False
    i = rng.choice(pool)
    k = 2 if i + 1 < len(body) and i + 1 != a and i + 1 in movable and rng.random() < 0.3 else 1
    group = body[i : i + k]
    targets = []
    for t in range(len(body) + 1):
        if i <= t <= i + k or (t == 0 and _docstring(body[0])):
            continue
        crossed = body[i + k : t] if t > i else body[t:i]
        if any(isinstance(c, _ENDS) for c in crossed):
            continue
        if all(_independent(g, c) for g in group for c in crossed):
            targets.append(t)
    if not targets:
        return False
    t = rng.choice(targets)
    first, _ = _span(group[0])
    _, last = _span(group[-1])
    moved = pair.old_lines[first : last + 1]
    if t < len(body):
        dest = _span(body[t])[0]
    else:
        dest = _span(body[-1])[1] + 1
    lines = pair.old_lines
    if dest > first:
        lines[dest:dest] = moved
        del lines[first : last + 1]
    else:
        del lines[first : last + 1]
        lines[dest:dest] = moved
    return True


def _docstring(s: ast.stmt) -> bool:
    return (
        isinstance(s, ast.Expr)
        and isinstance(s.value, ast.Constant)
        and isinstance(s.value.value, str)
    )


def edit_else(pair: Pair, rng: random.Random) -> bool:
    """Early-return `if` + rest of block <-> `if/else` whose branches both end the flow."""
    loc = locate(pair.old_lines)
    if loc is None:
        return False
    lines = pair.old_lines
    options = []
    # the anchor or one of its ancestors sits after an early-return `if` in its block
    nodes = [loc.stmt] + [o for o, _ in reversed(loc.chain) if isinstance(o, ast.stmt)]
    bodies = [loc.body] + [b for _, b in reversed(loc.chain[:-1])]
    for node, body in zip(nodes, bodies):
        if node not in body:
            continue
        j = body.index(node)
        for i in range(j):
            s = body[i]
            if (
                isinstance(s, ast.If)
                and not s.orelse
                and isinstance(s.body[-1], _ENDS)
                and _alone(lines, s)
            ):
                options.append(("flatten_old", s, body))
    for owner, _ in loc.chain:
        if (
            isinstance(owner, ast.If)
            and owner.orelse
            and not (len(owner.orelse) == 1 and isinstance(owner.orelse[0], ast.If))
            and isinstance(owner.body[-1], _ENDS)
        ):
            options.append(("unflatten_old", owner, None))
    if not options:
        return False
    kind, s, body = rng.choice(options)
    if kind == "flatten_old":
        # old version: the rest of the block goes under `else:`
        rest_first = s.end_lineno  # 0-based index of the line after the if
        rest_last = _span(body[-1])[1]
        if not _reindent(lines, rest_first, rest_last, 4):
            return False
        lines.insert(rest_first, Line(" " * s.col_offset + "else:\n"))
        return True
    # old version: `else:` removed, its body dedented after the if
    first = _span(s.orelse[0])[0]
    at = first - 1
    while at > 0 and (lines[at].text.strip().startswith("#") or not lines[at].text.strip()):
        at -= 1
    if lines[at].text.strip() != "else:" or _indent(lines[at].text) != s.col_offset:
        return False
    delta = s.orelse[0].col_offset - s.col_offset
    if not _reindent(lines, at + 1, _span(s.orelse[-1])[1], -delta):
        return False
    del lines[at]
    return True


_CONDITIONS = ("verbose", "self.training", "debug", "not self._closed", "kwargs")


def edit_wrap(pair: Pair, rng: random.Random) -> bool:
    loc = locate(pair.old_lines)
    if loc is None:
        return False
    body, a = loc.body, loc.index
    lo = 1 if _docstring(body[0]) else 0
    if a < lo or isinstance(loc.stmt, (ast.Global, ast.Nonlocal)):
        return False
    start = rng.choice([lo, rng.randint(lo, a)])
    stop = rng.choice([len(body) - 1, rng.randint(a, len(body) - 1)])
    run = body[start : stop + 1]
    if any(isinstance(s, (ast.Global, ast.Nonlocal)) for s in run):
        return False
    if not all(_alone(pair.old_lines, s) for s in run):
        return False
    first, last = _span(run[0])[0], _span(run[-1])[1]
    pad = " " * run[0].col_offset
    if not _reindent(pair.old_lines, first, last, 4):
        return False
    style = rng.randrange(3)
    if style == 0:
        cond = rng.choice(_CONDITIONS)
        pair.old_lines.insert(first, Line(f"{pad}if {cond}:\n"))
    elif style == 1:
        pair.old_lines[last + 1 : last + 1] = [
            Line(f"{pad}except Exception:\n"),
            Line(f"{pad}    raise\n"),
        ]
        pair.old_lines.insert(first, Line(f"{pad}try:\n"))
    else:
        pair.old_lines.insert(first, Line(f"{pad}with self._lock:\n"))
    return True


def edit_unwrap(pair: Pair, rng: random.Random) -> bool:
    loc = locate(pair.old_lines)
    if loc is None:
        return False
    options = []
    for (owner, body), (_, outer) in zip(loc.chain[1:], loc.chain[:-1]):
        if isinstance(owner, (ast.If, ast.With, ast.Try)) and owner in outer:
            if getattr(owner, "body", None) is body and _alone(pair.old_lines, owner):
                options.append(owner)
    if not options:
        return False
    s = rng.choice(options)
    lines = pair.old_lines
    first, last = _span(s)
    body_first, body_last = _span(s.body[0])[0], _span(s.body[-1])[1]
    delta = s.body[0].col_offset - s.col_offset
    if not _reindent(lines, body_first, body_last, -delta):
        return False
    kept = lines[body_first : body_last + 1]
    lines[first : last + 1] = kept
    return True


def edit_neighbour(pair: Pair, rng: random.Random) -> bool:
    loc = locate(pair.old_lines)
    if loc is None:
        return False
    near = [
        i
        for i in (loc.index - 1, loc.index + 1)
        if 0 <= i < len(loc.body)
        and not isinstance(loc.body[i], _COMPOUND + (ast.FunctionDef, ast.ClassDef))
        and _alone(pair.old_lines, loc.body[i])
    ]
    if not near:
        return False
    s = loc.body[rng.choice(near)]
    node = ast.parse(ast.unparse(s)).body[0]
    if not _mutate_calls(node, rng, heavy=True):
        return False
    _rewrite(pair.old_lines, s, node)
    return True


def edit_anchor_args(pair: Pair, rng: random.Random) -> bool:
    loc = locate(pair.old_lines)
    if loc is None or pair.compound_anchor or not _alone(pair.old_lines, loc.stmt):
        return False
    node = ast.parse(ast.unparse(loc.stmt)).body[0]
    if not _mutate_calls(node, rng, heavy=False):
        return False
    _rewrite(pair.old_lines, loc.stmt, node)
    return True


def edit_args(pair: Pair, rng: random.Random) -> bool:
    loc = locate(pair.old_lines)
    if loc is None:
        return False
    candidates = [
        s
        for s in ast.walk(loc.function)
        if isinstance(s, ast.stmt)
        and not isinstance(s, _COMPOUND + (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))
        and s is not loc.stmt
        and any(isinstance(n, ast.Call) for n in ast.walk(s))
        and _alone(pair.old_lines, s)
    ]
    if not candidates:
        return False
    s = rng.choice(candidates)
    node = ast.parse(ast.unparse(s)).body[0]
    _mutate_calls(node, rng, heavy=False)
    _rewrite(pair.old_lines, s, node)
    return True


_COMMENTS = ("# TODO: revisit", "# noqa", "# keep in sync with the caller", "# fallback")


def edit_trailing(pair: Pair, rng: random.Random) -> bool:
    loc = locate(pair.old_lines)
    if loc is None:
        return False
    lines = pair.old_lines
    spots = []
    for s in ast.walk(loc.function):
        if isinstance(s, _COMPOUND) and s is not loc.function:
            spots.append((s.end_lineno, _indent(lines[_span(s)[1]].text)))
    first, last = _span(loc.stmt)
    spots.append((last + 1, loc.stmt.col_offset))
    spots.append((first, loc.stmt.col_offset))
    if not spots:
        return False
    for at, pad in rng.sample(spots, k=min(len(spots), rng.randint(1, 3))):
        new = [Line("\n")] if rng.random() < 0.5 else []
        new.append(Line(" " * pad + rng.choice(_COMMENTS) + "\n"))
        if rng.random() < 0.5:
            new.append(Line("\n"))
        lines[at:at] = new
        if _parse("".join(ln.text for ln in lines)) is None:
            del lines[at : at + len(new)]
    return True


def _fresh(pair: Pair, base: str) -> str:
    text = pair.new + pair.old
    name = base
    k = 0
    while re.search(rf"\b{name}\b", text):
        k += 1
        name = f"{base}{k}"
    return name


def edit_insert(pair: Pair, rng: random.Random) -> bool:
    loc = locate(pair.old_lines)
    if loc is None:
        return False
    first, last = _span(loc.stmt)
    pad = " " * loc.stmt.col_offset
    name = _fresh(pair, rng.choice(["n_items", "started", "_count", "retries"]))
    at = rng.choice([first, last + 1])
    # a statement inserted after the anchor may read what it binds, one before it may not
    read = pair.probe_name if at > first and not pair.compound_anchor else "1"
    statement = rng.choice(
        [
            f"{name} = 0",
            f'logger.debug("{name} %s", {read})',
            "self._check_state()",
            "_warn_deprecated()",
            f"{name} = time.monotonic()",
        ]
    )
    pair.old_lines.insert(at, Line(pad + statement + "\n"))
    return True


def edit_delete(pair: Pair, rng: random.Random) -> bool:
    loc = locate(pair.old_lines)
    if loc is None or len(loc.body) < 3:
        return False
    options = [
        s
        for i, s in enumerate(loc.body)
        if i != loc.index
        and not isinstance(s, _ENDS + (ast.Global, ast.Nonlocal))
        and not (i == 0 and _docstring(s))
        and pair.probe_name not in _names(s)[0]
        and _alone(pair.old_lines, s)
    ]
    if not options:
        return False
    s = rng.choice(options)
    first, last = _span(s)
    del pair.old_lines[first : last + 1]
    return True


def edit_rename(pair: Pair, rng: random.Random) -> bool:
    loc = locate(pair.old_lines)
    if loc is None:
        return False
    # the outermost function: a name renamed in it is renamed in its closures too
    function = next(
        o for o, _ in loc.chain if isinstance(o, (ast.FunctionDef, ast.AsyncFunctionDef))
    )
    bound = set()
    for n in ast.walk(function):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            bound.add(n.id)
    declared = {
        name
        for n in ast.walk(function)
        if isinstance(n, (ast.Global, ast.Nonlocal))
        for name in n.names
    }
    bound -= declared | {"self", "cls"}
    if not bound:
        return False
    wanted = pair.probe_name if pair.probe_name in bound and rng.random() < 0.5 else None
    name = wanted or rng.choice(sorted(bound))
    new_name = _fresh(pair, rng.choice([f"{name}_", f"new_{name}", f"{name}_val", f"_{name}"]))
    spots = []
    for n in ast.walk(function):
        if isinstance(n, ast.Name) and n.id == name:
            spots.append((n.lineno - 1, n.col_offset, n.end_col_offset))
        elif isinstance(n, ast.arg) and n.arg == name:
            return False  # a parameter: callers pass it by keyword, not a local rename
    lines = pair.old_lines
    for row, start, end in sorted(spots, reverse=True):
        text = lines[row].text
        if text[start:end] != name:
            return False
    for row, start, end in sorted(spots, reverse=True):
        text = lines[row].text
        lines[row].text = text[:start] + new_name + text[end:]
    if name == pair.probe_name:
        pair.probe_name = new_name
    return True


def edit_anchor_deleted(pair: Pair, rng: random.Random) -> bool:
    loc = locate(pair.old_lines)
    if loc is None or len(loc.body) < 2 or not _alone(pair.old_lines, loc.stmt):
        return False
    if loc.index > 0:
        pair.old_lines[_span(loc.body[loc.index - 1])[0]].pred = True
    if loc.index + 1 < len(loc.body):
        pair.old_lines[_span(loc.body[loc.index + 1])[0]].succ = True
    first, last = _span(loc.stmt)
    del pair.old_lines[first : last + 1]
    pair.anchor_deleted = True
    return True


EDITS = {
    "move": edit_move,
    "else": edit_else,
    "wrap": edit_wrap,
    "unwrap": edit_unwrap,
    "neighbour": edit_neighbour,
    "anchor_args": edit_anchor_args,
    "trailing": edit_trailing,
    "insert": edit_insert,
    "delete": edit_delete,
    "rename": edit_rename,
    "args": edit_args,
}


# -- choosing anchors ------------------------------------------------------------------------------
def _params(f: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    a = f.args
    names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
    return [n for n in names if n not in ("self", "cls")]


def candidates(tree: ast.Module, lines: list[str]):
    """(function, block, index, probe name, compound?) for anchors in functions."""
    for f in ast.walk(tree):
        if not isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        params = _params(f)
        declared = {
            n for s in ast.walk(f) if isinstance(s, (ast.Global, ast.Nonlocal)) for n in s.names
        }
        for owner, _, body in _blocks(f):
            if owner is not f and isinstance(
                owner, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
            ):
                continue
            if _inside_nested(f, owner):
                continue
            for i, s in enumerate(body):
                if isinstance(s, _ENDS) or any(isinstance(p, _ENDS) for p in body[:i]):
                    continue
                if not _line_alone(lines, s):
                    continue
                name = None
                compound = False
                if isinstance(s, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                    targets = s.targets if isinstance(s, ast.Assign) else [s.target]
                    if len(targets) == 1 and isinstance(targets[0], ast.Name):
                        name = targets[0].id
                    if isinstance(s, ast.AnnAssign) and s.value is None:
                        name = None
                elif isinstance(s, _COMPOUND) and params:
                    name, compound = params[0], True
                    # a parameter re-bound inside the function is not bound on every path
                    if any(
                        isinstance(n, ast.Name) and n.id == name and not isinstance(n.ctx, ast.Load)
                        for n in ast.walk(f)
                    ):
                        name = None
                if name is None or name in declared or name in ("flor", "self", "cls"):
                    continue
                yield f, s, name, compound


def _inside_nested(f: ast.AST, owner: ast.AST) -> bool:
    for n in ast.walk(f):
        if n is not f and isinstance(
            n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)
        ):
            if any(m is owner for m in ast.walk(n)):
                return True
    return False


def _line_alone(lines: list[str], s: ast.stmt) -> bool:
    first = min([s.lineno] + [d.lineno for d in getattr(s, "decorator_list", [])]) - 1
    if lines[first][: s.col_offset].strip():
        return False
    tail = lines[s.end_lineno - 1][s.end_col_offset :].strip()  # type: ignore[index,misc]
    return tail == "" or tail.startswith("#")


def make_pair(text: str, tree: ast.Module, rng: random.Random) -> Pair | None:
    lines = text.splitlines(keepends=True)
    anchors = list(candidates(tree, lines))
    if not anchors:
        return None
    f, anchor, name, compound = rng.choice(anchors)
    # window: consecutive top-level statements around the one holding the anchor
    top = tree.body
    k = next(i for i, s in enumerate(top) if s.lineno <= anchor.lineno <= s.end_lineno)
    lo, hi = k, k
    while True:
        grow = []
        if lo > 0:
            grow.append("lo")
        if hi + 1 < len(top):
            grow.append("hi")
        if not grow:
            break
        side = rng.choice(grow)
        nlo, nhi = (lo - 1, hi) if side == "lo" else (lo, hi + 1)
        if _span(top[nhi])[1] - _span(top[nlo])[0] > WINDOW_LINES:
            break
        lo, hi = nlo, nhi
    first, last = _span(top[lo])[0], _span(top[hi])[1]
    if last - first > 3 * WINDOW_LINES:
        return None
    window = lines[first : last + 1]
    shift = len(HEADER.splitlines()) - first
    a_first, a_last = _span(anchor)
    pad = " " * anchor.col_offset
    probe = f'{pad}flor.log("probe", {name})\n'
    header = [Line(t) for t in HEADER.splitlines(keepends=True)]
    old_lines = header + [Line(t) for t in window]
    old_lines[a_first + shift].anchor = True
    new_lines = [ln.text for ln in old_lines]
    new_lines.insert(a_last + shift + 1, probe)
    new = "".join(new_lines)
    if _parse(new) is None or probe_safe(new) is not None:
        return None  # e.g. after an if/else whose branches all return: never runs
    return Pair(new, old_lines, name, compound)


def evolve(pair: Pair, rng: random.Random) -> bool:
    """Apply 1-3 edits to the old version; False when nothing applied."""
    if rng.random() < ANCHOR_DELETED_SHARE:
        if not edit_anchor_deleted(pair, rng):
            return False
        pair.shapes.append("anchor_deleted")
        return True
    names = list(SHAPE_WEIGHTS)
    weights = [SHAPE_WEIGHTS[n] for n in names]
    wanted = rng.choice([1, 1, 2, 2, 3])
    tries = 0
    while len(pair.shapes) < wanted and tries < 12:
        tries += 1
        shape = rng.choices(names, weights)[0]
        saved = [Line(ln.text, ln.anchor, ln.pred, ln.succ) for ln in pair.old_lines]
        saved_name = pair.probe_name
        ok = EDITS[shape](pair, rng)
        if ok and _parse(pair.old) is not None and locate(pair.old_lines) is not None:
            pair.shapes.append(shape)
        else:
            pair.old_lines, pair.probe_name = saved, saved_name
    return bool(pair.shapes)


# -- expected outcome and an independent safety check ---------------------------------------------
def expected_after(pair: Pair, flag: str) -> str | None:
    """The old text with the probe right after the flagged statement's last line."""
    loc = locate(pair.old_lines, flag)
    if loc is None:
        return None
    last = _span(loc.stmt)[1]
    texts = [ln.text for ln in pair.old_lines]
    texts.insert(last + 1, f'{" " * loc.stmt.col_offset}flor.log("probe", {pair.probe_name})\n')
    return "".join(texts)


def in_gap(pair: Pair, code: str) -> bool:
    """The probe was inserted where the deleted anchor stood: between its surviving
    predecessor and successor in the same block (the old text unchanged otherwise)."""
    out = code.splitlines(keepends=True)
    at = [i for i, t in enumerate(out) if t.strip().startswith('flor.log("probe",')]
    if len(at) != 1 or "".join(out[: at[0]] + out[at[0] + 1 :]) != pair.old:
        return False
    p = at[0]
    tree = _parse(code)
    if tree is None:
        return False
    old = pair.old_lines

    def flagged(node: ast.stmt | None, flag: str) -> bool:
        if node is None:
            return not any(getattr(ln, flag) for ln in old)
        first = _span(node)[0]
        return getattr(old[first if first < p else first - 1], flag)

    for _, _, body in _blocks(tree):
        for j, s in enumerate(body):
            if s.lineno - 1 != p:
                continue
            before = body[j - 1] if j > 0 else None
            after = body[j + 1] if j + 1 < len(body) else None
            return flagged(before, "pred") and flagged(after, "succ")
    return False


def probe_safe(code: str) -> str | None:
    """None when the probe compiles, is reachable and reads a name bound on every path."""
    try:
        tree = ast.parse(code)
        compile(tree, "<propagated>", "exec")
    except SyntaxError as exc:
        return f"does not compile: {exc.msg}"
    found: list[str] = []
    module_names = set()
    for s in tree.body:
        module_names |= (
            _names(s)[0]
            if not isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            else set()
        )
        if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            module_names.add(s.name)
    import builtins

    known = module_names | set(dir(builtins))

    def is_probe(s: ast.stmt) -> bool:
        return (
            isinstance(s, ast.Expr)
            and isinstance(s.value, ast.Call)
            and isinstance(s.value.func, ast.Attribute)
            and s.value.func.attr == "log"
            and s.value.args
            and isinstance(s.value.args[0], ast.Constant)
            and s.value.args[0].value == "probe"
        )

    def run(body: list[ast.stmt], bound: frozenset[str] | None) -> frozenset[str] | None:
        """Names bound on every path after body (None: the flow ended)."""
        for s in body:
            if bound is None:
                if _contains_probe(s):
                    found.append("unreachable")
                continue  # the flow ended: anything after it is unreachable
            if is_probe(s):
                reads = {n.id for n in ast.walk(s) if isinstance(n, ast.Name)}
                missing = reads - bound - known
                if missing:
                    found.append(f"possibly unbound: {sorted(missing)}")
                else:
                    found.append("ok")
                continue
            bound = step(s, bound)
        return bound

    def step(s: ast.stmt, bound: frozenset[str]) -> frozenset[str] | None:
        if isinstance(s, _ENDS):
            return None
        if isinstance(s, ast.If):
            a = run(s.body, bound)
            b = run(s.orelse, bound)
            return _join(a, b)
        if isinstance(s, (ast.For, ast.AsyncFor, ast.While)):
            target = _names(s.target)[0] if not isinstance(s, ast.While) else set()
            run(s.body, bound | target)
            after = run(s.orelse, bound)
            if _breaks(s.body):
                after = _join(after, bound)  # a `break` skips the else
            if isinstance(s, ast.While) and isinstance(s.test, ast.Constant) and s.test.value:
                return None if not any(isinstance(n, ast.Break) for n in ast.walk(s)) else after
            return after
        if isinstance(s, (ast.With, ast.AsyncWith)):
            extra = frozenset().union(
                *(_names(i.optional_vars)[0] for i in s.items if i.optional_vars)
            )
            return run(s.body, bound | extra)
        if isinstance(s, ast.Try):
            body = run(s.body, bound)
            body = run(s.orelse, body) if body is not None else None
            outs = [body]
            for h in s.handlers:
                outs.append(run(h.body, bound | ({h.name} if h.name else set())))
            out = outs[0]
            for o in outs[1:]:
                out = _join(out, o)
            if s.finalbody:
                fin = run(s.finalbody, bound)
                if fin is None:
                    return None
                out = out | fin if out is not None else None
            return out
        if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return bound | {s.name}
        if isinstance(s, ast.Match):
            outs = [run(c.body, bound | _names(c.pattern)[0]) for c in s.cases]
            out: frozenset[str] | None = bound  # no case may match
            for o in outs:
                out = _join(out, o)
            return out
        return bound | _names(s)[0]

    for f in ast.walk(tree):
        if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
            is_probe(s) for s in _direct_statements(f)
        ):
            a = f.args
            params = {x.arg for x in a.posonlyargs + a.args + a.kwonlyargs}
            params |= {x.arg for x in (a.vararg, a.kwarg) if x is not None}
            outer = set()
            for g in ast.walk(tree):
                if isinstance(g, (ast.FunctionDef, ast.AsyncFunctionDef)) and g is not f:
                    if any(m is f for m in ast.walk(g)):
                        outer |= {n.id for n in ast.walk(g) if isinstance(n, ast.Name)}
                        outer |= {x.arg for x in ast.walk(g) if isinstance(x, ast.arg)}
            declared = {
                n for s in ast.walk(f) if isinstance(s, (ast.Global, ast.Nonlocal)) for n in s.names
            }
            run(f.body, frozenset(params | outer | declared))
    if not found and any(is_probe(s) for s in _direct_statements(tree)):
        run(tree.body, frozenset())
    if not found:
        return "probe not found in the output"
    bad = [x for x in found if x != "ok"]
    return bad[0] if bad else None


def _join(a: frozenset[str] | None, b: frozenset[str] | None) -> frozenset[str] | None:
    if a is None:
        return b
    if b is None:
        return a
    return a & b


def _breaks(body: list[ast.stmt]) -> bool:
    """A `break` of this loop (not of loops nested in it) somewhere in its body."""
    stack = list(body)
    while stack:
        s = stack.pop()
        if isinstance(s, ast.Break):
            return True
        if isinstance(s, (ast.For, ast.AsyncFor, ast.While)):
            continue
        if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        for _, _, inner in _blocks_direct(s):
            stack.extend(inner)
    return False


def _contains_probe(s: ast.stmt) -> bool:
    return any(
        isinstance(n, ast.Constant) and n.value == "probe" for n in ast.walk(s)
    ) and "flor" in ast.unparse(s)


def _direct_statements(f: ast.AST):
    """Statements of a function, not those of functions/classes nested in it."""
    stack = list(f.body)  # type: ignore[attr-defined]
    while stack:
        s = stack.pop()
        yield s
        if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        for _, _, body in _blocks_direct(s):
            stack.extend(body)


def _blocks_direct(s: ast.stmt):
    for name in ("body", "orelse", "finalbody"):
        body = getattr(s, name, None)
        if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
            yield s, name, body
    for h in getattr(s, "handlers", []) or []:
        yield h, "body", h.body
    for c in getattr(s, "cases", []) or []:
        yield c, "body", c.body


# -- the run ---------------------------------------------------------------------------------------
@dataclass
class Outcome:
    pair: Pair
    verdict: str  # correct / wrong / refused / skipped
    code: str
    reason: str | None
    unsafe: str | None


def classify(pair: Pair) -> Outcome:
    try:
        result = propagate(pair.new, pair.old)
    except PropagationError as exc:
        return Outcome(pair, "skipped", "", str(exc), None)
    placement = next(p for p in result.placements if p.name == "probe")
    if placement.status == "unplaced":
        # the anchor deleted: a refusal is an expected outcome
        verdict = "correct" if pair.anchor_deleted else "refused"
        return Outcome(pair, verdict, result.code, placement.reason, None)
    if placement.status != "inserted":
        return Outcome(pair, "skipped", result.code, placement.status, None)
    unsafe = probe_safe(result.code)
    if pair.anchor_deleted:
        right = in_gap(pair, result.code)
    else:
        right = result.code == expected_after(pair, "anchor")
    verdict = "correct" if right and unsafe is None else "wrong"
    return Outcome(pair, verdict, result.code, placement.reason, unsafe)


def generate(n: int, seed: int) -> list[Pair]:
    rng = random.Random(seed)
    files = source_files()
    rng.shuffle(files)
    pairs: list[Pair] = []
    for path in files:
        if len(pairs) >= n:
            break
        text = read_source(path)
        if text is None:
            continue
        tree = _parse(text)
        if tree is None:
            continue
        for _ in range(2):  # up to two pairs per module
            pair = make_pair(text, tree, rng)
            if pair is None or not evolve(pair, rng):
                continue
            if _parse(pair.old) is None or pair.old == pair.new:
                continue
            try:
                compile(pair.old, "<old>", "exec")
                compile(pair.new, "<new>", "exec")
            except SyntaxError:
                continue
            if not pair.anchor_deleted and expected_after(pair, "anchor") is None:
                continue
            pairs.append(pair)
    return pairs[:n]


def _diff(a: str, b: str) -> str:
    import difflib

    return "".join(
        difflib.unified_diff(a.splitlines(True), b.splitlines(True), "expected", "output", n=2)
    )


def cli_agree(outcomes: list[Outcome], k: int, seed: int) -> tuple[int, int]:
    """(agreeing, tried): `florwb propagate NEW OLD` prints the in-process code."""
    rng = random.Random(seed + 1)
    sample = rng.sample(outcomes, k=min(k, len(outcomes)))
    script = Path(sys.executable).with_name("florwb")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "florwb.cli"]
    agree = 0
    with tempfile.TemporaryDirectory() as tmp:
        for i, o in enumerate(sample):
            new, old = Path(tmp, f"new{i}.py"), Path(tmp, f"old{i}.py")
            new.write_text(o.pair.new)
            old.write_text(o.pair.old)
            done = subprocess.run(
                [*command, "propagate", str(new), str(old)], capture_output=True, text=True
            )
            code = o.code if o.verdict != "skipped" else None
            if done.returncode == 0 and done.stdout == code:
                agree += 1
    return agree, len(sample)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--show", type=int, default=0, help="print N wrong placements")
    parser.add_argument("--show-refused", type=int, default=0)
    parser.add_argument("--cli", type=int, default=40, help="pairs also run through the CLI")
    parser.add_argument("--dump", type=Path, help="write wrong pairs here (new/old/expected)")
    args = parser.parse_args()
    sys.setrecursionlimit(10_000)
    start = time.perf_counter()
    pairs = generate(args.pairs, args.seed)
    generated = time.perf_counter() - start
    outcomes = []
    start = time.perf_counter()
    for pair in pairs:
        outcomes.append(classify(pair))
        clear_caches()
    elapsed = time.perf_counter() - start
    counted = [o for o in outcomes if o.verdict != "skipped"]
    verdicts = collections.Counter(o.verdict for o in counted)
    by_shape: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for o in counted:
        for shape in set(o.pair.shapes):
            by_shape[shape][o.verdict] += 1
    print(f"# {len(pairs)} pairs generated in {generated:.1f} s, propagated in {elapsed:.1f} s")
    print(f"# skipped (engine error / already present): {len(outcomes) - len(counted)}")
    for shape in sorted(by_shape):
        c = by_shape[shape]
        total = sum(c.values())
        print(
            f"#   {shape:15s} {total:5d} pairs  correct {c['correct']:5d}  "
            f"wrong {c['wrong']:4d}  refused {c['refused']:4d}"
        )
    unsafe = [o for o in counted if o.unsafe is not None]
    for o in unsafe[:5]:
        print(f"# unsafe placement ({'+'.join(o.pair.shapes)}): {o.unsafe}")
    wrong = [o for o in counted if o.verdict == "wrong"]
    if args.dump:
        args.dump.mkdir(parents=True, exist_ok=True)
    for i, o in enumerate(wrong):
        expected = expected_after(o.pair, "anchor") or "(anchor deleted)\n"
        if i < args.show:
            print(
                f"\n## WRONG {i}: shapes {o.pair.shapes} probe={o.pair.probe_name} "
                f"unsafe={o.unsafe} reason={o.reason}"
            )
            print(_diff(expected, o.code)[:3000])
        if args.dump:
            d = args.dump / f"{i:03d}"
            d.mkdir(exist_ok=True)
            (d / "new.py").write_text(o.pair.new)
            (d / "old.py").write_text(o.pair.old)
            (d / "expected.py").write_text(expected)
            (d / "output.py").write_text(o.code)
            (d / "shapes.txt").write_text(" ".join(o.pair.shapes) + "\n")
    refused = [o for o in counted if o.verdict == "refused"]
    reasons = collections.Counter(re.sub(r"`[^`]*`", "`…`", o.reason or "") for o in refused)
    for reason, count in reasons.most_common(8):
        print(f"# refused {count:4d}: {reason}")
    for i, o in enumerate(refused if args.dump else []):
        d = args.dump / f"refused{i:03d}"
        d.mkdir(exist_ok=True)
        (d / "new.py").write_text(o.pair.new)
        (d / "old.py").write_text(o.pair.old)
        (d / "expected.py").write_text(expected_after(o.pair, "anchor") or "")
        (d / "shapes.txt").write_text(" ".join(o.pair.shapes) + f"\n{o.reason}\n")
    for o in refused[: args.show_refused]:
        print(f"\n## REFUSED shapes {o.pair.shapes}: {o.reason}")
        print(_diff(o.pair.old, expected_after(o.pair, "anchor") or "")[:2500])
    if args.cli:
        agree, tried = cli_agree(counted, args.cli, args.seed)
        print(f"RESULT propagate_wild_cli_agree {agree}/{tried}")
    n = len(counted) or 1
    print(f"RESULT propagate_wild_pairs {len(counted)}")
    print(f"RESULT propagate_wild_correct_pct {100 * verdicts['correct'] / n:.2f} %")
    print(f"RESULT propagate_wild_wrong_pct {100 * verdicts['wrong'] / n:.2f} %")
    print(f"RESULT propagate_wild_refused_pct {100 * verdicts['refused'] / n:.2f} %")
    print(f"RESULT propagate_wild_unsafe {len(unsafe)}")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
