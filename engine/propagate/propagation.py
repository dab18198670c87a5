"""Placing new log statements into an old version of a script.

For each log statement of the new source that the old one lacks, the two syntax trees are
matched (see matching.py) with the missing statements taken out of the new tree (wrapped
calls are replaced by the expression they wrap), so that the new tree describes the old
code plus unrelated edits. Then:

* standalone `flor.log(...)`: it goes right after the old counterpart of the *nearest*
  preceding statement that has one (walking back only past unmatched ones), or, with
  none, right before the counterpart of the nearest following statement, or at the start
  of the matched block when it came first. The old block is the one holding that anchor's
  counterpart unless the block matched by content similarity holds more of the new
  block's statements (code wrapped into or out of an if/try). When no statement of either
  block matches and both blocks have as many statements, it goes to the same position
  (anchor "positional", said in the reason). It goes right after a compound statement's
  last line: blank and comment lines that trailed the block move below it;
* wrapped `x = flor.log("x", e)`: the old statement matched to its statement is walked to
  the same place (same field, same keyword argument) and the *old* expression there is
  wrapped, because the old value is what the old run computed.

Every placement says how it was anchored: "exact" (the anchor is the same code in both
versions), "similar" (matched by similarity) or "positional".

A placement is refused, with a reason, when its block has no match, the match is
ambiguous, the place found lies in a different loop or function than in the new version,
the place can never run (after a statement, or an if/else or try, whose every branch
returns, raises, breaks or continues: analysis/bindings.py), the statement reads a name the
old version does not define on every path to that point (renamed variables are rewritten when
the matching shows the rename), or its nearest anchor moved above earlier statements that
may change what it reads (analysis/mutations.py). The output is checked with Python's parser;
nothing that does not parse is ever returned.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import cast

import libcst as cst

from florwb_engine.analysis.bindings import ends_flow
from florwb_engine.analysis.mutations import changes_any, may_change
from florwb_engine.analysis.names import BUILTIN_NAMES, self_attributes
from florwb_engine.analysis.nodes import walk
from florwb_engine.analysis.purity import pure_call
from florwb_engine.analysis.scopes import MODULE, LexicalScope
from florwb_engine.flor_calls import FlorImports, log_call_parts
from florwb_engine.propagate.errors import PropagationError
from florwb_engine.propagate.finder import Analysis, LogSite, analysis_of, analyze
from florwb_engine.propagate.match_tree import TNode, Tree, iter_children, subtree_hash
from florwb_engine.propagate.matching import Matching
from florwb_engine.propagate.model import (
    EXACT,
    INSERTED,
    POSITIONAL,
    PRESENT,
    SIMILAR,
    STANDALONE,
    UNPLACED,
    Placement,
    PropagationResult,
)
from florwb_engine.propagate.names import Bindings
from florwb_engine.propagate.placement_edits import (
    EditPlan,
    apply_edits,
    import_statement,
    log_call,
    replace_nodes,
)
from florwb_engine.propagate.source import code_and_lines, gc_paused, render_edits

_LOOPS = (cst.For, cst.While)
_BLOCKS = (cst.Module, cst.IndentedBlock)
_DOC_OWNERS = (cst.Module, cst.FunctionDef, cst.ClassDef)


class _Unplaced(Exception):
    """Internal: a statement cannot be placed; the message is the reported reason."""


class _Elsewhere(_Unplaced):
    """Internal: the place found lies in another loop or function than in the new version."""


class _Nested(Exception):
    """Internal: a wrapped log call inside another new log statement goes where it goes."""


@dataclass
class _Planned:
    site: LogSite
    loop_path: tuple[str, ...]
    call: cst.Call | None = None  # the log call as it appears in the output (for its line)
    anchor: str = SIMILAR  # how the place was found: exact / similar / positional
    note: str | None = None  # said in the placement's reason (e.g. placed by position)


@dataclass(frozen=True)
class _Target:
    """Where a standalone statement goes: before statement `index` of old `block`."""

    block: TNode
    index: int
    kind: str
    note: str | None
    problem: str | None = None  # why it must be refused after all, if the names allow it


def _nearest_first(
    before: list[TNode], placed_before: list[tuple[int, int, int, str]]
) -> list[TNode | tuple[int, int, int, str]]:
    """Preceding statements and already placed new statements, nearest first."""
    items: list[tuple[int, int, TNode | tuple[int, int, int, str]]] = [
        (c.key if c.key is not None else -1, 0, c) for c in before
    ]
    items += [(p[0], 1, p) for p in placed_before]
    items.sort(key=lambda x: (x[0], x[1]), reverse=True)
    return [item for _, _, item in items]


def propagate(
    new_source: str, old_source: str, names: Iterable[str] | None = None
) -> PropagationResult:
    """Place the new source's log statements that the old source lacks into the old source.

    `names` restricts the work to those statement names (each must exist in the new
    source). Returns the old code with the statements placed (byte-identical elsewhere)
    and one Placement per considered new statement, in new-source order.
    Raises PropagationError when a source does not parse or a requested name is unknown.
    """
    key = None if names is None else tuple(sorted(set(names)))
    return _propagate_cached(new_source, old_source, key)


@functools.lru_cache(maxsize=64)
def _propagate_cached(
    new_source: str, old_source: str, names: tuple[str, ...] | None
) -> PropagationResult:
    """Results by source text: the replay planner and the workbench's statement matrix
    ask for the same (today, old version) pairs again on every plan and refresh; a
    result is immutable, so it is shared. Parsed versions are cached too (finder.py), so
    a version propagated into for several statements is parsed once."""
    with gc_paused():
        new = analyze(new_source, "new version")
        old = analyze(old_source, "old version")
        wanted = None if names is None else set(names)
        if wanted is not None:
            unknown = sorted(wanted - {s.name for s in new.sites})
            if unknown:
                listed = ", ".join(repr(n) for n in unknown)
                raise PropagationError(f"no log statement named {listed} in the new version")
        return _Propagation(new, old, wanted).run()


def clear_caches() -> None:
    """Forget cached results and parsed versions (benchmarks measure cold runs)."""
    _propagate_cached.cache_clear()
    analysis_of.cache_clear()


class _Propagation:
    def __init__(self, new: Analysis, old: Analysis, wanted: set[str] | None) -> None:
        self.new = new
        self.old = old
        self.wanted = wanted
        self.present = _pair_present(new.sites, old.sites)
        self.missing = [s for s in new.sites if id(s) not in self.present]
        self._matching: Matching | None = None
        self._new_tree: Tree | None = None
        self._bindings: Bindings | None = None
        self._renames: dict[str, str] | None = None
        self.plan = EditPlan()
        self._import: tuple[str, str] | None = None  # (module, alias) to add to old
        self._import_pos: int | None = None
        self._old_self_attributes: frozenset[str] | None = None
        # new log statement -> (old block idx, index after it) once placed, as an anchor
        self._placed: dict[int, tuple[int, int, str]] = {}
        self._all_planned: dict[int, _Planned] = {}

    # -- lazily built analysis -------------------------------------------------------------
    @property
    def new_tree(self) -> Tree:
        if self._new_tree is None:
            skip: set[int] = set()
            unwrap: dict[int, cst.CSTNode] = {}
            missing_small = {id(s.small) for s in self.missing if s.form == STANDALONE}
            for site in self.missing:
                if site.form == STANDALONE:
                    line = site.statement
                    if isinstance(line, cst.SimpleStatementLine) and all(
                        id(small) in missing_small for small in line.body
                    ):
                        skip.add(id(line))
                    else:
                        skip.add(id(site.small))
                else:
                    unwrap[id(site.call)] = site.value_arg.value
            self._new_tree = self.new.tree.derived(skip, unwrap)
        return self._new_tree

    @property
    def matching(self) -> Matching:
        if self._matching is None:
            self._matching = Matching(self.new_tree, self.old.tree)
        return self._matching

    @property
    def bindings(self) -> Bindings:
        if self._bindings is None:
            self._bindings = self.old.bindings
        return self._bindings

    @property
    def renames(self) -> dict[str, str]:
        if self._renames is None:
            self._renames = self.matching.renames()
        return self._renames

    # -- driver ----------------------------------------------------------------------------
    def run(self) -> PropagationResult:
        considered = [s for s in self.new.sites if self.wanted is None or s.name in self.wanted]
        planned: dict[int, _Planned] = {}
        reasons: dict[int, str] = {}
        nested: list[LogSite] = []
        for site in considered:
            if id(site) in self.present:
                continue
            try:
                planned[id(site)] = self._place(site)
            except _Unplaced as exc:
                reasons[id(site)] = str(exc)
            except _Nested:
                nested.append(site)
        for site in nested:
            outer = self._outer_log(site)
            if outer is None or id(outer) not in self._all_planned:
                name = outer.name if outer is not None else "?"
                reasons[id(site)] = f"it is nested inside `{name}`, which could not be placed"
            else:
                host = self._all_planned[id(outer)]
                planned[id(site)] = _Planned(site, host.loop_path, host.call, host.anchor)
        code, lines = self._output(planned, reasons)
        placements = []
        for site in considered:
            old_site = self.present.get(id(site))
            if old_site is not None:
                note = None
                if old_site.form != site.form:
                    note = f"already logged in {old_site.form} form in the old version"
                placements.append(
                    Placement(
                        site.name,
                        site.line,
                        lines.get(id(old_site.call)),
                        PRESENT,
                        note,
                        old_site.loop_path,
                    )
                )
            elif id(site) in planned:
                plan = planned[id(site)]
                line = lines.get(id(plan.call)) if plan.call is not None else None
                placements.append(
                    Placement(
                        site.name,
                        site.line,
                        line,
                        INSERTED,
                        plan.note,
                        plan.loop_path,
                        anchor=plan.anchor,
                    )
                )
            else:
                placements.append(
                    Placement(
                        site.name, site.line, None, UNPLACED, reasons[id(site)], site.loop_path
                    )
                )
        return PropagationResult(code, tuple(placements))

    def _output(
        self, planned: dict[int, _Planned], reasons: dict[int, str]
    ) -> tuple[str, dict[int, int]]:
        """The output code, and the line of every log call we report on (by id)."""
        old = self.old
        present_calls = [s.call for s in self.present.values()]
        if not self.plan:
            return old.source, _lines_of(old, present_calls)
        if self._import is not None:
            module_name, alias = self._import
            index = _import_index(old.module)
            self.plan.insert(old.tree.root, index, import_statement(module_name, alias), True)
        module = apply_edits(old.tree, self.plan)
        calls = present_calls + [p.call for p in planned.values() if p.call is not None]
        rendered = render_edits(
            old.source,
            old.module,
            old.ast_tree,
            module,
            self.plan.insertions.get(old.tree.root.idx, {}),
            calls,
            _lines_of(old, present_calls),
        )
        code, lines = rendered if rendered is not None else code_and_lines(module, calls)
        try:
            ast.parse(code)
        except SyntaxError:
            # never hand back code that does not parse: give up on every placement
            for key in list(planned):
                del planned[key]
                reasons[key] = "placing it would not produce valid Python"
            return old.source, _lines_of(old, present_calls)
        return code, lines

    # -- placing one statement -------------------------------------------------------------
    def _place(self, site: LogSite) -> _Planned:
        if site.form == STANDALONE:
            planned = self._place_standalone(site)
        else:
            planned = self._place_wrapped(site)
        self._all_planned[id(site)] = planned
        return planned

    def _outer_log(self, site: LogSite) -> LogSite | None:
        """The missing standalone log statement a nested log call sits in."""
        for other in self.missing:
            if other is not site and other.form == STANDALONE and other.small is site.small:
                return other
        return None

    def _place_standalone(self, site: LogSite) -> _Planned:
        new, m = self.new, self.matching
        if site.in_suite:
            suite = self.new.tree.of(site.block)
            suite_owner = (
                suite.parent.node if suite is not None and suite.parent else site.statement
            )
            raise _Unplaced(
                f"it sits in a one-line block (`{new.describe(suite_owner)}`), "
                "which propagation does not split"
            )
        block = self.new_tree.of(site.block)
        assert block is not None
        before, after = self._neighbours(site, block)
        placed_before = [
            (i, *self._placed[id(s)])
            for i, s in enumerate(site.block.body[: site.index])
            if id(s) in self._placed
        ]
        if before and self._ambiguous(before[-1]) and not placed_before:
            raise _Unplaced(
                f"the statement before it (`{new.describe(before[-1].node)}`) "
                "matches several places in the old version"
            )
        matched_block = m.old_of(block)
        if matched_block is not None and not isinstance(matched_block.node, _BLOCKS):
            matched_block = None
        near, from_before = self._nearest_block(before, after, placed_before)
        similar_block = matched_block
        if near is not None and near is not matched_block:
            if matched_block is None or self._holds_more(near, matched_block, block):
                similar_block = near
        # The nearest matched predecessor's block comes first: its counterpart is the
        # anchor; walking past it to a farther one in the similar block would put the
        # statement above code wrapped into an if/with/try in the old version. The block
        # chosen by similarity is the fallback when that place lies in another loop or
        # function (a block moved out of a loop).
        choices: list[TNode | None] = [near] if near is not None and from_before else []
        if similar_block is not None and similar_block not in choices:
            choices.append(similar_block)
        elsewhere: _Elsewhere | None = None
        for old_block in choices or [None]:
            target = self._target(site, block, old_block, before, after, placed_before)
            try:
                self._check_enclosing(site, block, target.block)
            except _Elsewhere as exc:
                elsewhere = elsewhere or exc
                continue
            break
        else:
            assert elsewhere is not None
            raise elsewhere
        target_block, index = target.block, target.index
        index = _skip_docstring(target_block, index)
        for earlier in target_block.children[:index]:
            if ends_flow(earlier.node):
                raise _Unplaced(
                    f"the matching place in the old version comes after "
                    f"`{self.old.describe(earlier.node)}`, so it would never run"
                )
        unreachable = _unreachable_from(target_block)
        if unreachable is not None:
            raise _Unplaced(
                f"the matching place in the old version comes after "
                f"`{self.old.describe(unreachable.node)}`, so it would never run"
            )
        absorbed = self._absorbed_call(site, target_block)
        if absorbed is not None:
            absorbed_statement = _statement_of(absorbed)
            if absorbed_statement.key is not None:
                self._placed[id(site.statement)] = (
                    target_block.idx,
                    absorbed_statement.key + 1,
                    EXACT,
                )
            planned = self._wrap_old(site, absorbed)
            planned.anchor = EXACT
            return planned
        pos = (
            target_block.children[index].idx
            if index < len(target_block.children)
            else target_block.end + 1
        )
        at = (target_block, index)
        scope = self.bindings.scope_of_block(target_block)
        log_ref = self._log_ref(scope, pos, at)
        substitutions = self._substitutions(site, scope, pos, at)
        replacements: dict[int, cst.CSTNode] = {
            id(n): n.with_changes(value=substitutions[n.value])
            for n in site.read_nodes
            if n.value in substitutions
        }
        replacements.update(self._attribute_substitutions(site))
        if target.problem is not None:
            raise _Unplaced(target.problem)
        value = replace_nodes(site.value_arg.value, replacements)
        call = site.call.with_changes(
            func=log_ref if _code(log_ref) != _code(site.call.func) else site.call.func,
            args=tuple(
                a.with_changes(value=value) if a is site.value_arg else a for a in site.call.args
            ),
        )
        small = cst.Expr(value=call)
        statement = site.statement
        trailing = (
            statement.trailing_whitespace
            if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1
            else cst.TrailingWhitespace()
        )
        line = cst.SimpleStatementLine(body=[small], trailing_whitespace=trailing)
        self.plan.insert(target_block, index, line)
        self._placed[id(site.statement)] = (target_block.idx, index, target.kind)
        return _Planned(site, self.old.context_of(target_block)[0], call, target.kind, target.note)

    def _target(
        self,
        site: LogSite,
        block: TNode,
        old_block: TNode | None,
        before: list[TNode],
        after: list[TNode],
        placed_before: list[tuple[int, int, int, str]],
    ) -> _Target:
        """Where the statement goes in `old_block` (the new block's own place when None)."""
        new = self.new
        target: _Target | None = None
        if old_block is not None:
            target = self._anchor(before, after, old_block, placed_before, site)
            if target is None and not before:
                target = _Target(old_block, 0, self._kind(block.parent or block), None)
            if target is None:
                target = self._positional(block, old_block, before, after)
        else:
            target = self._positional(block, self._owner_block(block), before, after)
        if target is None:
            owner = block.parent
            if old_block is None and owner is not None and self._ambiguous(owner):
                raise _Unplaced(
                    f"its block (`{new.describe(owner.node)}`) matches several places "
                    "in the old version"
                )
            if old_block is None and owner is not None:
                raise _Unplaced(
                    f"its block (`{new.describe(owner.node)}`) has no match in the old version"
                )
            raise _Unplaced("no statement next to it has a match in the old version")
        return target

    def _check_crossing(
        self,
        site: LogSite,
        farther: list[TNode | tuple[int, int, int, str]],
        old_block: TNode,
        index: int,
    ) -> None:
        """Refuse when the place lies above the old counterpart of a farther predecessor
        that may change what the statement reads (rebinds it, assigns into it, calls a
        method on it, passes it to a call: analysis/mutations.py): it would log a value from before
        it. One that only reads it cannot change the logged value."""
        reads = _touched(site.value_arg.value) - {"self"}
        if not reads:
            return
        for item in farther:
            if not isinstance(item, TNode):
                continue
            mapped = self.matching.old_of(item)
            if mapped is None or mapped.parent is not old_block or mapped.key is None:
                continue
            if mapped.key >= index and changes_any(item.node, reads):
                raise _Unplaced(
                    f"the statements before it moved in the old version: its place "
                    f"(after the counterpart of the statement just before it) comes before "
                    f"`{self.old.describe(mapped.node)}`, which uses what it reads"
                )

    def _skipped_problem(
        self,
        site: LogSite,
        skipped: list[TNode | tuple[int, int, int, str]],
        old_block: TNode,
        index: int,
    ) -> str | None:
        """Why to refuse when the anchor is a farther predecessor and a nearer one that was walked
        past (no counterpart there) may change what the statement reads, unless its old
        counterpart runs before the place: the log would read a value from before that
        statement (`x = f(x)` edited beyond recognition, or wrapped into an if/with)."""
        reads = _touched(site.value_arg.value) - {"self"}
        if not reads:
            return None
        children = old_block.children
        pos = children[index].idx if index < len(children) else old_block.end + 1
        for item in skipped:
            if not isinstance(item, TNode) or not changes_any(item.node, reads):
                continue
            mapped = self.matching.old_of(item)
            if mapped is not None and mapped.end < pos:
                continue  # its counterpart comes (and runs) before the place
            changed = sorted(n.lstrip(".") for n in may_change(item.node) & reads) or ["self"]
            names = ", ".join(f"`{n}`" for n in changed)
            return (
                f"the statement before it (`{self.new.describe(item.node)}`) may change "
                f"{names}, which it reads, and has no counterpart before the matching place "
                "in the old version"
            )
        return None

    def _nearest_block(
        self,
        before: list[TNode],
        after: list[TNode],
        placed_before: list[tuple[int, int, int, str]],
    ) -> tuple[TNode | None, bool]:
        """The old block holding the counterpart of the nearest matched neighbour, and
        whether that neighbour precedes the statement."""
        nodes = self.old.tree.nodes
        for item in _nearest_first(before, placed_before):
            if isinstance(item, TNode):
                mapped = self.matching.old_of(item)
                if mapped is not None and mapped.parent is not None:
                    if isinstance(mapped.parent.node, _BLOCKS):
                        return mapped.parent, True
            else:
                return nodes[item[1]], True
        for c in after:
            mapped = self.matching.old_of(c)
            if mapped is not None and mapped.parent is not None:
                if isinstance(mapped.parent.node, _BLOCKS):
                    return mapped.parent, False
        return None, False

    def _holds_more(self, near: TNode, matched: TNode, block: TNode) -> bool:
        """Prefer the anchor's block over the block matched by content similarity unless
        the latter holds more counterparts of the new block's statements (code wrapped
        into or out of an if/try moves the statements, not the similarity of the blocks)."""
        if not isinstance(matched.node, _BLOCKS):
            return True
        counts = {near.idx: 0, matched.idx: 0}
        for c in block.children:
            mapped = self.matching.old_of(c)
            if mapped is not None and mapped.parent is not None and mapped.parent.idx in counts:
                counts[mapped.parent.idx] += 1
        return counts[near.idx] >= counts[matched.idx]

    def _owner_block(self, block: TNode) -> TNode | None:
        """The old block in the same slot of the old counterpart of the block's owner."""
        owner = block.parent
        if owner is None:
            return None
        mapped = self.matching.old_of(owner)
        if mapped is None:
            return None
        for c in mapped.children:
            if c.field == block.field and isinstance(c.node, _BLOCKS):
                return c
        return None

    def _positional(
        self, block: TNode, old_block: TNode | None, before: list[TNode], after: list[TNode]
    ) -> _Target | None:
        """Same position in a block of the same length when no statement of either
        matches (and no old compound statement stands where the new one is not one)."""
        if old_block is None or not before:
            return None
        m = self.matching
        if len(block.children) != len(old_block.children):
            return None
        if any(m.old_of(c) is not None for c in block.children):
            return None
        if any(m.new_of(c) is not None for c in old_block.children):
            return None
        for a, b in zip(block.children, old_block.children):
            if isinstance(b.node, cst.BaseCompoundStatement) and a.label != b.label:
                # `x += 1` / `with lock: x += 1`: the old block may wrap the anchor, and
                # after the whole block is another spot than right after it
                return None
        index = len(before)
        anchor = old_block.children[index - 1]
        note = (
            f"placed by position: no statement next to it matches; it goes after "
            f"`{self.old.describe(anchor.node)}`, statement {index} of {len(block.children)} "
            "in both versions"
        )
        return _Target(old_block, index, POSITIONAL, note)

    def _kind(self, new_node: TNode) -> str:
        """ "exact" when the anchor's old counterpart is the same code, else "similar"."""
        mapped = self.matching.old_of(new_node)
        return EXACT if mapped is not None and mapped.hash == new_node.hash else SIMILAR

    def _absorbed_call(self, site: LogSite, block: TNode) -> TNode | None:
        """An old computation of exactly the logged call, which the new version dropped.

        `flor.log("loss", train_epoch())` in the new version, where the old one has a bare
        `train_epoch()`, `x = train_epoch()` or `print(train_epoch())` that nothing in the
        new version matches: inserting the statement would run `train_epoch()` twice, so
        the old call is wrapped where it is instead. Only occurrences that run whenever
        their statement runs count (not inside lambdas, comprehensions, `a if c else b`).
        """
        value = site.value_arg.value
        if not any(type(n) is cst.Call and not pure_call(n) for n in walk(value)):
            return None  # re-computing e.g. `loss.item()` is harmless: insert as usual
        wanted = subtree_hash(value)
        found: list[TNode] = []
        nodes = self.old.tree.nodes
        conditional = False
        for statement, only_sometimes in _statements_run_with(block):
            if type(statement.node) is not cst.SimpleStatementLine:
                continue
            if self.matching.new_of(statement) is not None:
                continue
            for tn in nodes[statement.idx + 1 : statement.end + 1]:
                if tn.hash == wanted and _always_evaluated(tn, statement, self.old.imports):
                    found.append(tn)
                    conditional = conditional or only_sometimes
        if found and conditional:
            raise _Unplaced(
                "the old version computes the logged value only in some branches; "
                "logging it anew would compute it twice"
            )
        if len(found) > 1:
            raise _Unplaced("the old version computes the logged value in several places")
        return found[0] if found else None

    def _neighbours(self, site: LogSite, block: TNode) -> tuple[list[TNode], list[TNode]]:
        """Statements of the (stripped) new block before and after the log statement."""
        before = [c for c in block.children if c.key is not None and c.key < site.index]
        after = [c for c in block.children if c.key is not None and c.key > site.index]
        own = self.new_tree.of(site.statement)
        if own is not None and isinstance(site.statement, cst.SimpleStatementLine):
            body = list(site.statement.body)
            position = next(i for i, s in enumerate(body) if s is site.small)
            if any(id(s) != id(site.small) and self.new_tree.of(s) for s in body[:position]):
                before.append(own)
            else:
                after.insert(0, own)
        return before, after

    def _anchor(
        self,
        before: list[TNode],
        after: list[TNode],
        old_block: TNode,
        placed_before: list[tuple[int, int, int, str]],
        site: LogSite | None = None,
    ) -> _Target | None:
        """Insertion index in `old_block`: right after the counterpart of the *nearest*
        preceding statement (or new statement already placed) that has one there, else
        right before the counterpart of the nearest following statement.

        The nearest neighbour, not the one whose counterpart sits furthest down: when
        siblings moved between versions, the furthest one would pull the statement down.
        """
        m = self.matching
        order = _nearest_first(before, placed_before)
        for i, item in enumerate(order):
            if isinstance(item, TNode):
                mapped = m.old_of(item)
                if mapped is not None and mapped.parent is old_block and mapped.key is not None:
                    problem = None
                    if site is not None:
                        problem = self._skipped_problem(site, order[:i], old_block, mapped.key + 1)
                        self._check_crossing(site, order[i + 1 :], old_block, mapped.key + 1)
                    return _Target(old_block, mapped.key + 1, self._kind(item), None, problem)
            elif item[1] == old_block.idx:
                problem = None
                if site is not None:
                    problem = self._skipped_problem(site, order[:i], old_block, item[2])
                return _Target(old_block, item[2], item[3], None, problem)
        for c in after:
            mapped = m.old_of(c)
            if mapped is not None and mapped.parent is old_block and mapped.key is not None:
                return _Target(old_block, mapped.key, self._kind(c), None)
        return None

    def _ambiguous(self, tn: TNode) -> bool:
        """Unmatched because it (or an unmatched ancestor) had several equal candidates."""
        m = self.matching
        node: TNode | None = tn
        while node is not None and m.old_of(node) is None:
            if node.idx in m.ambiguous_new:
                return True
            node = node.parent
        return False

    def _check_enclosing(self, site: LogSite, block: TNode, target: TNode) -> None:
        """The place found must sit in the loops/functions matched to the new ones."""
        m, new, old = self.matching, self.new, self.old
        child: TNode = block
        for anc in block.ancestors():
            inside_body = child.field == "body"
            child = anc
            if not inside_body or not isinstance(anc.node, (*_LOOPS, cst.FunctionDef)):
                continue
            mapped = m.old_of(anc)
            if mapped is not None and not mapped.contains(target):
                raise _Elsewhere(
                    f"the matching place in the old version is outside `{new.describe(anc.node)}`"
                )
        child = target
        for anc in target.ancestors():
            inside_body = child.field == "body"
            child = anc
            if not inside_body or not isinstance(anc.node, _LOOPS):
                continue
            counterpart = m.new_of(anc)
            if counterpart is not None and id(counterpart.node) not in site.loops:
                raise _Elsewhere(
                    f"the matching place in the old version is inside "
                    f"`{old.describe(anc.node)}`, a loop it does not run in"
                )

    def _log_ref(
        self, scope: LexicalScope, pos: int, at: tuple[TNode, int] | None = None
    ) -> cst.BaseExpression:
        """How the old version calls `log` at this point (adding an import if it has none)."""
        imports, bindings = self.old.imports, self.bindings
        ref = imports.log_ref()
        if ref is not None:
            local = imports.module_alias or imports.local_for("log")
            assert local is not None
            if not bindings.is_defined(local, scope, pos, at):
                raise _Unplaced(f"the old version has not imported `{local}` at that point")
            return ref
        module_name = self.new.imports.module_name or "florwb"
        alias = self.new.imports.module_alias or "flor"
        if self._import is None:
            if bindings.binds_anywhere(alias):
                raise _Unplaced(f"the old version uses `{alias}` for something else")
            self._import = (module_name, alias)
            self._import_pos = self._import_position()
        assert self._import_pos is not None
        if scope is bindings.module_scope and pos < self._import_pos:
            raise _Unplaced("it would come before the florwb import the old version needs")
        return cst.Attribute(value=cst.Name(self._import[1]), attr=cst.Name("log"))

    def _import_position(self) -> int:
        root = self.old.tree.root
        index = _import_index(self.old.module)
        return root.children[index].idx if index < len(root.children) else root.end + 1

    def _substitutions(
        self, site: LogSite, scope: LexicalScope, pos: int, at: tuple[TNode, int] | None = None
    ) -> dict[str, str]:
        """Renames that make the statement read the old version's names; raises if none can."""
        bindings = self.bindings
        new_aliases = set(self.new.imports.modules)
        old_alias = self.old.imports.module_alias or (self._import[1] if self._import else None)
        substitutions: dict[str, str] = {}
        for name in sorted(site.reads):
            if name in new_aliases and old_alias is not None:
                if name != old_alias:
                    substitutions[name] = old_alias
                continue
            if bindings.is_defined(name, scope, pos, at) and not self._local_only_in_new(
                site, name, scope
            ):
                continue
            renamed = self._rename_of(site, name)
            if (
                renamed is not None
                and renamed not in site.reads
                and bindings.is_defined(renamed, scope, pos, at)
            ):
                substitutions[name] = renamed
                continue
            if bindings.is_defined(name, scope, pos) and not self._local_only_in_new(
                site, name, scope
            ):
                raise _Unplaced(
                    f"it reads `{name}`, which may be unbound at that point in the old "
                    "version (it is bound in only some branches before it)"
                )
            if bindings.module_binds(name) or bindings.binds_anywhere(name):
                raise _Unplaced(
                    f"it reads `{name}`, which the old version does not define at that point"
                )
            raise _Unplaced(f"it reads `{name}`, which the old version does not define")
        if len(set(substitutions.values())) != len(substitutions):
            raise _Unplaced("the renamed variables it reads collide in the old version")
        return substitutions

    def _rename_of(self, site: LogSite, name: str) -> str | None:
        """The old name of a variable the statement reads: as the matching inside its
        function shows it when that function uses the name elsewhere, else file-wide."""
        node = self.new_tree.of(site.block)
        while node is not None and node.label not in ("FunctionDef", "async FunctionDef"):
            node = node.parent
        if node is not None and self.matching.n2o[node.idx] >= 0:
            local, seen = self.matching.local_renames(node)
            if name in seen:
                return local.get(name)
        return self.renames.get(name)

    def _local_only_in_new(self, site: LogSite, name: str, scope: LexicalScope) -> bool:
        """`name` is defined at that point of the old version only as a builtin or because
        a star import might define anything, while the new version binds it as a local of
        the log statement's function (`list = []`, `input = ...`): that local is another
        thing than the builtin, and a star import never provides a local."""
        if scope.lookup(name) is not None:
            return False
        new_block = self.new.tree.of(site.block)
        if new_block is None:
            return False
        new_scope = self.new.bindings.scope_of_block(new_block)
        return new_scope.kind != MODULE and new_scope.binds(name)

    @property
    def old_self_attributes(self) -> frozenset[str]:
        if self._old_self_attributes is None:
            self._old_self_attributes = frozenset(
                a.attr.value for a in self_attributes(self.old.module)
            )
        return self._old_self_attributes

    def _attribute_substitutions(self, site: LogSite) -> dict[int, cst.CSTNode]:
        """`self.x` must exist in the old version, possibly under its matched old name."""
        if "self" not in site.reads:
            return {}
        replacements: dict[int, cst.CSTNode] = {}
        renames = None
        for attribute in self_attributes(site.value_arg.value):
            name = attribute.attr.value
            if name in self.old_self_attributes:
                continue
            if renames is None:
                renames = self.matching.attribute_renames()
            renamed = renames.get(name)
            if renamed is None or renamed not in self.old_self_attributes:
                raise _Unplaced(f"it reads `self.{name}`, which the old version never uses")
            replacements[id(attribute)] = attribute.with_changes(attr=cst.Name(renamed))
        return replacements

    def _place_wrapped(self, site: LogSite) -> _Planned:
        new, m, tree = self.new, self.matching, self.new_tree
        value = tree.of(site.value_arg.value)
        statement = tree.of(site.statement)
        if statement is None:
            raise _Nested()
        if value is None:
            raise _Unplaced("it wraps another new log call; only that one is placed")
        path: list[TNode] = [value]
        anchor: TNode | None = None
        node = value.parent
        while node is not None:
            if m.old_of(node) is not None:
                anchor = node
                break
            if node is statement:
                break
            path.append(node)
            node = node.parent
        if anchor is None:
            if self._ambiguous(statement):
                raise _Unplaced(
                    f"`{new.describe(site.statement)}` matches several places in the old version"
                )
            raise _Unplaced(f"`{new.describe(site.statement)}` has no match in the old version")
        current = m.old_of(anchor)
        assert current is not None
        for step in reversed(path):
            nxt = self._counterpart_child(step, current)
            if nxt is None or (step is not value and type(nxt.node) is not type(step.node)):
                raise _Unplaced(
                    "the old version has no expression at the matching place in "
                    f"`{self.old.describe(_statement_of(current).node)}`"
                )
            current = nxt
        new_block = tree.of(site.block)
        if new_block is not None:
            self._check_enclosing(site, new_block, _block_of(current))
        planned = self._wrap_old(site, current)
        planned.anchor = self._kind(anchor)
        return planned

    def _wrap_old(self, site: LogSite, target: TNode) -> _Planned:
        """Plan `<log>("<name>", <old expression>)` around an old expression."""
        if not isinstance(target.node, cst.BaseExpression):
            raise _Unplaced("the matching place in the old version holds no expression")
        if isinstance(target.node, cst.Call) and log_call_parts(target.node, self.old.imports):
            raise _Unplaced("the old version already logs that expression under another name")
        if target.idx in self.plan.wraps:
            raise _Unplaced("another statement already wraps the same old expression")
        block = _block_of(target)
        scope = self.bindings.scope_of_block(block)
        statement = _statement_of(target)
        at = (block, statement.key) if statement.key is not None else None
        log_ref = self._log_ref(scope, target.idx, at)
        name_literal = site.name_arg.value
        planned = _Planned(site, self.old.context_of(target)[0])

        def wrap(expr: cst.BaseExpression) -> cst.BaseExpression:
            planned.call = log_call(log_ref, name_literal, expr)
            return planned.call

        self.plan.wrap(target, wrap)
        return planned

    def _counterpart_child(self, step: TNode, old_parent: TNode) -> TNode | None:
        mapped = self.matching.old_of(step)
        if mapped is not None and mapped.parent is old_parent and mapped.field == step.field:
            return mapped
        candidates = [c for c in old_parent.children if c.field == step.field]
        if step.key is None:
            return candidates[0] if len(candidates) == 1 else None
        node = step.node
        if isinstance(node, cst.Arg) and node.keyword is not None:
            for c in candidates:
                if (
                    isinstance(c.node, cst.Arg)
                    and c.node.keyword is not None
                    and c.node.keyword.value == node.keyword.value
                ):
                    return c
            return None
        assert step.parent is not None
        siblings = [c for c in step.parent.children if c.field == step.field]
        if isinstance(node, cst.Arg):
            siblings = [c for c in siblings if _positional(c.node)]
            candidates = [c for c in candidates if _positional(c.node)]
        if len(siblings) != len(candidates) or step not in siblings:
            return None
        return candidates[siblings.index(step)]


# (parent type, field) slots whose expression runs whenever the enclosing statement runs
_EVALUATED_SLOTS = {
    (cst.Expr, "value"),
    (cst.Assign, "value"),
    (cst.AugAssign, "value"),
    (cst.AnnAssign, "value"),
    (cst.Return, "value"),
    (cst.Arg, "value"),
    (cst.Call, "args"),
    (cst.Call, "func"),
    (cst.Attribute, "value"),
    (cst.Subscript, "value"),
    (cst.Tuple, "elements"),
    (cst.List, "elements"),
    (cst.Element, "value"),
    (cst.BinaryOperation, "left"),
    (cst.BinaryOperation, "right"),
    (cst.UnaryOperation, "expression"),
    (cst.Comparison, "left"),
    (cst.FormattedString, "parts"),
    (cst.FormattedStringExpression, "expression"),
}


def _always_evaluated(tn: TNode, statement: TNode, imports: FlorImports) -> bool:
    """True if `tn` is computed every time `statement` runs (and is not already logged)."""
    if not isinstance(tn.node, cst.BaseExpression):
        return False
    node = tn
    while node.parent is not None and node.parent is not statement:
        parent = node.parent.node
        if (type(parent), node.field) not in _EVALUATED_SLOTS:
            return False
        if type(parent) is cst.Call and imports.api_of(parent.func) is not None:
            return False  # inside flor.log(...) / flor.arg(...): leave it alone
        node = node.parent
    return node.parent is statement


def _statements_run_with(block: TNode) -> list[tuple[TNode, bool]]:
    """Statements of a block and those nested in its if/with/try statements (not in nested
    loops or definitions), each with whether it runs only on some paths (an if branch
    other than `if True:`, an except handler)."""
    found: list[tuple[TNode, bool]] = []

    def visit(body: TNode, conditional: bool) -> None:
        for statement in body.children:
            found.append((statement, conditional))
            node = statement.node
            if isinstance(node, cst.If):
                expand(statement, conditional or not _if_true(node))
            elif isinstance(node, (cst.With, cst.Try, cst.TryStar)):
                expand(statement, conditional)

    def expand(owner: TNode, conditional: bool) -> None:
        for part in owner.children:
            node = part.node
            if isinstance(node, cst.IndentedBlock):
                visit(part, conditional)
            elif isinstance(node, (cst.If, cst.Else)) and isinstance(owner.node, cst.If):
                expand(part, True)  # elif / else of an if
            elif isinstance(node, (cst.ExceptHandler, cst.ExceptStarHandler)):
                expand(part, True)
            elif isinstance(node, (cst.Else, cst.Finally)):
                expand(part, conditional)

    visit(block, False)
    return found


def _if_true(node: cst.If) -> bool:
    return type(node.test) is cst.Name and node.test.value == "True"


def _touched(node: cst.CSTNode) -> set[str]:
    """Variables and `self.` attributes (as ".attr") a piece of code mentions."""
    found: set[str] = set()
    stack = [node]
    while stack:
        n = stack.pop()
        tp = type(n)
        if tp is cst.Name:
            if n.value not in BUILTIN_NAMES:  # type: ignore[attr-defined]
                found.add(n.value)  # type: ignore[attr-defined]
            continue
        if tp is cst.Attribute:
            base = n.value  # type: ignore[attr-defined]
            if type(base) is cst.Name and base.value == "self":
                found.add("." + n.attr.value)  # type: ignore[attr-defined]
            stack.append(base)
            continue
        stack.extend(child for child, _, _ in iter_children(n))
    return found


def _unreachable_from(block: TNode) -> TNode | None:
    """A statement that ends the flow before one of the statements enclosing `block`."""
    node = block
    while node.parent is not None:
        parent = node.parent
        if isinstance(parent.node, _BLOCKS) and node.key is not None:
            for earlier in parent.children[: node.key]:
                if ends_flow(earlier.node):
                    return earlier
        node = parent
    return None


def _positional(node: cst.CSTNode) -> bool:
    return isinstance(node, cst.Arg) and node.keyword is None and not node.star


def _statement_of(tn: TNode) -> TNode:
    node: TNode | None = tn
    while node is not None:
        if isinstance(node.node, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            return node
        node = node.parent
    return tn


def _block_of(tn: TNode) -> TNode:
    node = tn.parent
    while node is not None and not isinstance(node.node, (cst.Module, cst.IndentedBlock)):
        node = node.parent
    assert node is not None
    return node


def _code(node: cst.CSTNode) -> str:
    return cst.Module(body=()).code_for_node(node)


def _is_docstring(statement: cst.CSTNode) -> bool:
    return (
        isinstance(statement, cst.SimpleStatementLine)
        and len(statement.body) == 1
        and isinstance(statement.body[0], cst.Expr)
        and isinstance(statement.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    )


def _is_future_import(statement: cst.CSTNode) -> bool:
    return (
        isinstance(statement, cst.SimpleStatementLine)
        and isinstance(statement.body[0], cst.ImportFrom)
        and isinstance(statement.body[0].module, cst.Name)
        and statement.body[0].module.value == "__future__"
    )


def _skip_docstring(block: TNode, index: int) -> int:
    """Never insert above a docstring or a `from __future__` import."""
    if index != 0 or not block.children:
        return index
    # only the module's block has no parent
    owner = block.node if isinstance(block.node, cst.Module) else cast(TNode, block.parent).node
    body = list(block.node.body)  # type: ignore[attr-defined]
    if isinstance(owner, _DOC_OWNERS) and _is_docstring(body[0]):
        index = 1
    if isinstance(block.node, cst.Module):
        while index < len(body) and _is_future_import(body[index]):
            index += 1
    return index


def _import_index(module: cst.Module) -> int:
    """Where a missing `import florwb as flor` goes: after the leading imports."""
    body = list(module.body)
    index = 1 if body and _is_docstring(body[0]) else 0
    last = index
    for i in range(index, len(body)):
        statement = body[i]
        if isinstance(statement, cst.SimpleStatementLine) and all(
            isinstance(s, (cst.Import, cst.ImportFrom)) for s in statement.body
        ):
            last = i + 1
        else:
            break
    return last


def _pair_present(new_sites: list[LogSite], old_sites: list[LogSite]) -> dict[int, LogSite]:
    """new site -> old site logging the same name (same form and loops preferred)."""
    by_name: dict[str, list[LogSite]] = {}
    for site in old_sites:
        by_name.setdefault(site.name, []).append(site)
    present: dict[int, LogSite] = {}
    for name, olds in by_name.items():
        news = [s for s in new_sites if s.name == name]
        free = list(olds)
        for rule in (
            lambda a, b: a.form == b.form and a.loop_path == b.loop_path,
            lambda a, b: a.form == b.form,
            lambda a, b: True,
        ):
            for site in news:
                if id(site) in present:
                    continue
                match = next((o for o in free if rule(site, o)), None)
                if match is not None:
                    present[id(site)] = match
                    free.remove(match)
    return present


def _lines_of(analysis: Analysis, calls: list[cst.Call]) -> dict[int, int]:
    """Lines of log calls of an unchanged source, from its analysis."""
    by_call = {id(site.call): site.line for site in analysis.sites}
    return {id(call): by_call[id(call)] for call in calls if id(call) in by_call}
