"""GumTree-style matching of two syntax trees (new version -> old version).

Phases, after Falleri et al. (ASE 2014), tuned for placing statements:
1. top-down: identical subtrees (equal shape hash), largest first; a subtree with several
   identical twins is set aside as *ambiguous* instead of being guessed;
2. bottom-up: an unmatched container maps to the old container of the same kind sharing
   the most matched descendants (Dice >= MIN_DICE), then its unmatched children are
   recovered (identical children, statements by token similarity, unique kinds);
3. ambiguous twins are resolved by context (matched parents, parent Dice, matched
   neighbours); a tie stays unmatched and is remembered as ambiguous;
4. bottom-up again with the extra matches.
5. statements left unmatched in matched blocks that are the same code apart from names
   the matching shows renamed (in their function) are paired.
The result also yields identifier renames (`net` in new <-> `model` in old) from matched
leaves, file-wide and per function, which lets a statement reading a renamed variable be
rewritten for the old version.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import cast

from florwb_engine.propagate.match_tree import TNode, Tree, bag_dice

MIN_HEIGHT = 2
MIN_DICE = 0.4
STATEMENT_SIMILARITY = 0.5
UNIQUE_STATEMENT_SIMILARITY = 0.3
KEY_BONUS = 0.3
MAX_AMBIGUOUS_PAIRS = 400
_EPS = 1e-9

_COMPOUND_LABELS = frozenset(
    {
        "If",
        "For",
        "While",
        "With",
        "Try",
        "TryStar",
        "FunctionDef",
        "ClassDef",
        "Match",
        "async For",
        "async With",
        "async FunctionDef",
    }
)


_FUNCTION_LABELS = frozenset({"FunctionDef", "async FunctionDef"})


def _is_statement_label(label: str) -> bool:
    return label in _COMPOUND_LABELS or label.startswith("SimpleStatementLine")


def _statement_key(tn: TNode) -> tuple[int, ...]:
    """What a statement binds or defines: assignment targets, loop target, def name."""
    keys: list[int] = []
    for child in tn.children:
        label = child.label
        if label == "Return":
            keys.append(0)  # a block's return: the function's result either way
        elif label == "Assign":
            keys.extend(c.hash for c in child.children if c.label == "AssignTarget")
        elif label.startswith(("AugAssign", "AnnAssign")) and child.children:
            keys.append(child.children[0].hash)
        elif child.field in ("target", "name"):
            keys.append(child.hash)
    return tuple(keys)


_BINDING_SLOTS = {
    ("AssignTarget", "target"),
    ("For", "target"),
    ("async For", "target"),
    ("AsName", "name"),
    ("Param", "name"),
    ("NamedExpr", "target"),
    ("AnnAssign", "target"),
}
_TARGET_LABELS = ("Tuple", "List", "Element", "StarredElement")


def _is_binding(name: TNode) -> bool:
    """A Name (or the `x` of `self.x`) in an assignment / loop / with / parameter target."""
    node = name.parent if name.field == "attr" else name
    while node is not None and node.parent is not None and node.parent.label in _TARGET_LABELS:
        node = node.parent
    if node is None or node.parent is None:
        return False
    parent_label = node.parent.label
    if parent_label.startswith("AugAssign"):
        return node.field == "target"
    return (parent_label, node.field) in _BINDING_SLOTS


def _keyword(tn: TNode) -> str | None:
    """The keyword of a keyword argument (`f(k=v)`), else None."""
    if tn.label == "Arg" and tn.children and tn.children[-1].field == "keyword":
        return tn.children[-1].value
    return None


def _binding_units(name: TNode) -> list[TNode]:
    """The code that gives a binding occurrence its value, to compare across versions."""
    node = name.parent if name.field == "attr" else name
    while node is not None and node.parent is not None and node.parent.label in _TARGET_LABELS:
        node = node.parent
    slot = node.parent if node is not None else None
    if slot is None:
        return []
    label = slot.label
    if label == "AssignTarget" and slot.parent is not None:
        return [slot.parent]
    if label in ("For", "async For"):
        return [c for c in slot.children if c.field in ("target", "iter")]
    if label == "AsName" and slot.parent is not None:
        return [slot.parent]
    if label in ("Param", "NamedExpr", "AnnAssign") or label.startswith("AugAssign"):
        return [slot]
    return []


def _statement_of(tn: TNode) -> TNode:
    node: TNode | None = tn
    while node is not None:
        if _is_statement_label(node.label):
            return node
        node = node.parent
    return tn


def _on_self(attr_name: TNode) -> bool:
    """True for the `x` of `self.x`."""
    parent = attr_name.parent
    if parent is None or parent.label != "Attribute" or not parent.children:
        return False
    base = parent.children[0]
    return base.label == "Name" and base.value == "self"


class Matching:
    """A one-to-one mapping between nodes of `new` and nodes of `old`."""

    def __init__(self, new: Tree, old: Tree) -> None:
        self.new = new
        self.old = old
        self.n2o = [-1] * len(new.nodes)
        self.o2n = [-1] * len(old.nodes)
        self.ambiguous_new: set[int] = set()
        self._dice_cache: dict[tuple[int, int], float] = {}
        self._rename_cache: tuple[dict[str, str], dict[str, str]] | None = None
        self._local_cache: dict[int, tuple[dict[str, str], frozenset[str]]] = {}
        self._run()

    # -- queries ---------------------------------------------------------------------------
    def old_of(self, tn: TNode) -> TNode | None:
        j = self.n2o[tn.idx]
        return self.old.nodes[j] if j >= 0 else None

    def new_of(self, tn: TNode) -> TNode | None:
        i = self.o2n[tn.idx]
        return self.new.nodes[i] if i >= 0 else None

    def is_ambiguous(self, tn: TNode) -> bool:
        return self.n2o[tn.idx] < 0 and tn.idx in self.ambiguous_new

    def renames(self) -> dict[str, str]:
        """new identifier -> old identifier, where the matching shows a rename."""
        return self._renames()[0]

    def attribute_renames(self) -> dict[str, str]:
        """new `self.<attr>` name -> old one, where the matching shows a rename."""
        return self._renames()[1]

    def local_renames(self, function: TNode) -> tuple[dict[str, str], frozenset[str]]:
        """Renames shown inside one new function (its own subtree), and the names whose
        matched occurrences there say anything at all (renamed or kept).

        A local renamed in one function of a file whose other functions keep using the
        same name is outvoted file-wide; counted inside the function it is not."""
        cached = self._local_cache.get(function.idx)
        if cached is None:
            renames, seen = self._renames_in(function.idx, function.end)
            cached = (renames[0], seen)
            self._local_cache[function.idx] = cached
        return cached

    def _renames(self) -> tuple[dict[str, str], dict[str, str]]:
        """Renames over the whole file (see `_renames_in`). Cached."""
        if self._rename_cache is None:
            self._rename_cache = self._renames_in(0, len(self.new.nodes) - 1)[0]
        return self._rename_cache

    def _renames_in(
        self, lo: int, hi: int
    ) -> tuple[tuple[dict[str, str], dict[str, str]], frozenset[str]]:
        """Renames among new nodes lo..hi backed by (1) most matched occurrences agreeing
        and (2) a matched pair of *binding* occurrences (`net = f(x)` / `model = f(x)`,
        loop targets, parameters) whose binding code is the same apart from renamed
        names; and the plain names with matched occurrences there."""
        counts: tuple[dict[str, Counter[str]], dict[str, Counter[str]]] = (
            defaultdict(Counter),
            defaultdict(Counter),
        )
        bindings: list[tuple[int, TNode, TNode]] = []
        for tn in self.new.nodes[lo : hi + 1]:
            if tn.label != "Name" or tn.field == "keyword":
                continue
            j = self.n2o[tn.idx]
            if j < 0:
                continue
            other = self.old.nodes[j]
            if other.label != "Name" or other.field == "keyword":
                continue
            kind = 1 if tn.field == "attr" else 0
            if (other.field == "attr") != bool(kind):
                continue
            if kind and not (_on_self(tn) and _on_self(other)):
                continue
            # label "Name" is a leaf kind, so both values are str
            counts[kind][cast(str, tn.value)][cast(str, other.value)] += 1
            if tn.value != other.value and _is_binding(tn) and _is_binding(other):
                bindings.append((kind, tn, other))
        candidates: tuple[dict[str, str], dict[str, str]] = ({}, {})
        for kind in (0, 1):
            for new_name, seen in counts[kind].items():
                (old_name, best), *rest = seen.most_common()
                if old_name == new_name or (rest and rest[0][1] == best):
                    continue
                if best >= 0.75 * sum(seen.values()):
                    candidates[kind][new_name] = old_name
        allowed = {**candidates[1], **candidates[0]}
        result: tuple[dict[str, str], dict[str, str]] = ({}, {})
        for kind, a, b in bindings:
            # bindings hold "Name" leaves only, whose values are str
            a_name, b_name = cast(str, a.value), cast(str, b.value)
            if candidates[kind].get(a_name) != b_name or a_name in result[kind]:
                continue
            units_a, units_b = _binding_units(a), _binding_units(b)
            if (
                units_a
                and len(units_a) == len(units_b)
                and all(self._same_modulo(x, y, allowed) for x, y in zip(units_a, units_b))
            ):
                result[kind][a_name] = b_name
        for renames in result:  # two new names onto one old name is no rename we can trust
            targets = Counter(renames.values())
            for key in [k for k, v in renames.items() if targets[v] > 1]:
                del renames[key]
        return result, frozenset(counts[0])

    def _same_modulo(self, a: TNode, b: TNode, allowed: dict[str, str]) -> bool:
        """Same shape and leaves, except names renamed consistently with `allowed`."""
        if a.end - a.idx != b.end - b.idx:
            return False
        old_nodes = self.old.nodes
        offset = b.idx - a.idx
        for x in self.new.nodes[a.idx : a.end + 1]:
            y = old_nodes[x.idx + offset]
            if x.label != y.label:
                return False
            if x.value != y.value and not (
                x.label == "Name" and allowed.get(cast(str, x.value)) == y.value
            ):
                return False
        return True

    # -- core ------------------------------------------------------------------------------
    def _link(self, a: TNode, b: TNode) -> None:
        self.n2o[a.idx] = b.idx
        self.o2n[b.idx] = a.idx

    def _link_subtree(self, a: TNode, b: TNode) -> None:
        n2o, o2n = self.n2o, self.o2n
        offset = b.idx - a.idx
        for i in range(a.idx, a.end + 1):
            j = i + offset
            if n2o[i] < 0 and o2n[j] < 0:
                n2o[i] = j
                o2n[j] = i

    def _run(self) -> None:
        ambiguous = self._top_down()
        self._bottom_up()
        self._resolve_ambiguous(ambiguous)
        self._bottom_up()
        if self.n2o[0] < 0 and self.o2n[0] < 0:
            self._link(self.new.root, self.old.root)
        self._recover_renamed()

    def _recover_renamed(self) -> None:
        """Phase 5: pair the statements left unmatched in two matched blocks that are the
        same code apart from names the rest of the matching shows renamed.

        `loss = f(x)` / `loss_value = f(x)`: the renamed binding shares too few tokens to
        pass the similarity threshold, yet every other occurrence of the name is matched
        to the new name. Only pairs unique on both sides count (twins stay unmatched)."""
        n2o, o2n = self.n2o, self.o2n
        old_nodes = self.old.nodes
        linked = False
        by_function: dict[int, dict[str, str]] = {}
        for block in self.new.nodes:
            if not block.children or n2o[block.idx] < 0:
                continue
            if not _is_statement_label(block.children[0].label):
                continue
            free_a = [c for c in block.children if n2o[c.idx] < 0 and _is_statement_label(c.label)]
            if not free_a:
                continue
            old_block = old_nodes[n2o[block.idx]]
            free_b = [
                d for d in old_block.children if o2n[d.idx] < 0 and _is_statement_label(d.label)
            ]
            if not free_b:
                continue
            function = block.parent
            while function is not None and function.label not in _FUNCTION_LABELS:
                function = function.parent
            lo, hi = (function.idx, function.end) if function else (0, len(self.new.nodes) - 1)
            candidates = by_function.get(lo)
            if candidates is None:
                candidates = by_function[lo] = self._name_candidates(lo, hi)
            if not candidates:
                continue
            same = {
                c.idx: [d for d in free_b if self._same_modulo(c, d, candidates)] for c in free_a
            }
            for c in free_a:
                found = same[c.idx]
                if len(found) != 1:
                    continue
                d = found[0]
                if sum(d in other for other in same.values()) != 1:
                    continue
                self._link_subtree(c, d)
                linked = True
        if linked:
            self._rename_cache = None
            self._local_cache.clear()

    def _name_candidates(self, lo: int, hi: int) -> dict[str, str]:
        """new name -> old name where most matched occurrences of it among new nodes
        lo..hi (a function, or the file) show that rename."""
        counts: dict[str, Counter[str]] = defaultdict(Counter)
        old_nodes = self.old.nodes
        for tn in self.new.nodes[lo : hi + 1]:
            if tn.label != "Name" or tn.field in ("keyword", "attr"):
                continue
            j = self.n2o[tn.idx]
            if j < 0 or old_nodes[j].label != "Name" or old_nodes[j].field in ("keyword", "attr"):
                continue
            counts[cast(str, tn.value)][cast(str, old_nodes[j].value)] += 1
        found: dict[str, str] = {}
        for new_name, seen in counts.items():
            (old_name, best), *rest = seen.most_common()
            if old_name == new_name or (rest and rest[0][1] == best):
                continue
            if best >= 0.75 * sum(seen.values()):
                found[new_name] = old_name
        return found

    def _top_down(self) -> list[tuple[list[TNode], list[TNode]]]:
        new_nodes, old_nodes = self.new.nodes, self.old.nodes
        by_height_new: dict[int, list[TNode]] = defaultdict(list)
        by_height_old: dict[int, list[TNode]] = defaultdict(list)
        for tn in new_nodes:
            if tn.height >= MIN_HEIGHT:
                by_height_new[tn.height].append(tn)
        for tn in old_nodes:
            if tn.height >= MIN_HEIGHT:
                by_height_old[tn.height].append(tn)
        covered_new = bytearray(len(new_nodes))
        covered_old = bytearray(len(old_nodes))
        ambiguous: list[tuple[list[TNode], list[TNode]]] = []
        heights = sorted(set(by_height_new) & set(by_height_old), reverse=True)
        for h in heights:
            groups: dict[int, tuple[list[TNode], list[TNode]]] = {}
            for tn in by_height_new[h]:
                if not covered_new[tn.idx]:
                    groups.setdefault(tn.hash, ([], []))[0].append(tn)
            for tn in by_height_old[h]:
                if not covered_old[tn.idx]:
                    group = groups.get(tn.hash)
                    if group is not None:
                        group[1].append(tn)
            for news, olds in groups.values():
                if not olds:
                    continue
                if len(news) == 1 and len(olds) == 1:
                    self._link_subtree(news[0], olds[0])
                elif len(news) * len(olds) <= MAX_AMBIGUOUS_PAIRS:
                    ambiguous.append((news, olds))
                else:
                    continue
                for tn in news:
                    covered_new[tn.idx : tn.end + 1] = b"\x01" * tn.size
                for tn in olds:
                    covered_old[tn.idx : tn.end + 1] = b"\x01" * tn.size
        return ambiguous

    def dice(self, a: TNode, b: TNode) -> float:
        """Share of descendants matched into each other (Dice coefficient)."""
        key = (a.idx, b.idx)
        cached = self._dice_cache.get(key)
        if cached is not None:
            return cached
        total = (a.end - a.idx) + (b.end - b.idx)
        if total == 0:
            return 0.0
        lo, hi = b.idx, b.end
        n2o = self.n2o
        common = 0
        for i in range(a.idx + 1, a.end + 1):
            j = n2o[i]
            if lo < j <= hi:
                common += 1
        value = 2.0 * common / total
        self._dice_cache[key] = value
        return value

    def _bottom_up(self) -> None:
        n2o, o2n = self.n2o, self.o2n
        old_nodes = self.old.nodes
        for t1 in self.new.postorder():
            if n2o[t1.idx] >= 0 or not t1.children:
                continue
            if t1.parent is None:
                if o2n[0] < 0:
                    self._link(t1, self.old.root)
                    self._recover(t1, self.old.root)
                continue
            seen: set[int] = set()
            candidates: list[TNode] = []
            for i in range(t1.idx + 1, t1.end + 1):
                j = n2o[i]
                if j < 0:
                    continue
                anc = old_nodes[j].parent
                while anc is not None and anc.idx not in seen:
                    seen.add(anc.idx)
                    if anc.label == t1.label and o2n[anc.idx] < 0:
                        candidates.append(anc)
                    anc = anc.parent
            if not candidates:
                continue
            self._dice_cache.clear()
            scored = sorted(((self.dice(t1, c), c) for c in candidates), key=lambda x: -x[0])
            best_score, best = scored[0]
            if best_score < MIN_DICE:
                continue
            if len(scored) > 1 and scored[1][0] >= best_score - _EPS:
                self.ambiguous_new.add(t1.idx)
                continue
            self._link(t1, best)
            self._recover(t1, best)

    def _recover(self, a: TNode, b: TNode) -> None:
        """Match unmatched children of two matched nodes, recursively."""
        n2o, o2n = self.n2o, self.o2n
        free_a = [c for c in a.children if n2o[c.idx] < 0]
        free_b = [c for c in b.children if o2n[c.idx] < 0]
        if not free_a or not free_b:
            return
        # identical children, unique on both sides
        hashes_a = Counter(c.hash for c in free_a)
        hashes_b = Counter(c.hash for c in free_b)
        for c in free_a:
            if hashes_a[c.hash] == 1 and hashes_b[c.hash] == 1:
                d = next(x for x in free_b if x.hash == c.hash)
                self._link_subtree(c, d)
        free_a = [c for c in free_a if n2o[c.idx] < 0]
        free_b = [c for c in free_b if o2n[c.idx] < 0]
        if not free_a or not free_b:
            return
        # statements: most similar of the same kind, by token bags, no ties
        stmts_a = [c for c in free_a if _is_statement_label(c.label)]
        if stmts_a:
            self._match_statements(stmts_a, [c for c in free_b if _is_statement_label(c.label)])
        # expressions: keyword arguments by keyword, then each kind in order when it
        # occurs equally often on both sides (`f(a, b)` / `f(x, y)`, tuple elements)
        exprs_a = [c for c in free_a if not _is_statement_label(c.label) and n2o[c.idx] < 0]
        exprs_b = [c for c in free_b if not _is_statement_label(c.label) and o2n[c.idx] < 0]
        keywords_b = {_keyword(d): d for d in exprs_b if _keyword(d) is not None}
        for c in exprs_a:
            kw = keywords_b.get(_keyword(c)) if _keyword(c) is not None else None
            if kw is not None and kw.label == c.label and o2n[kw.idx] < 0:
                self._link(c, kw)
                self._recover(c, kw)
        exprs_a = [c for c in exprs_a if n2o[c.idx] < 0 and _keyword(c) is None]
        exprs_b = [c for c in exprs_b if o2n[c.idx] < 0 and _keyword(c) is None]
        by_label_b: dict[str, list[TNode]] = defaultdict(list)
        for d in exprs_b:
            by_label_b[d.label].append(d)
        by_label_a: dict[str, list[TNode]] = defaultdict(list)
        for c in exprs_a:
            by_label_a[c.label].append(c)
        for label, group_a in by_label_a.items():
            group_b = by_label_b.get(label, [])
            if len(group_a) == len(group_b):
                for c, d in zip(group_a, group_b):
                    self._link(c, d)
                    self._recover(c, d)
        for c in a.children:
            j = n2o[c.idx]
            if j >= 0 and self.old.nodes[j].parent is b and c.children:
                if c.hash != self.old.nodes[j].hash:
                    self._recover(c, self.old.nodes[j])

    def _match_statements(self, stmts_a: list[TNode], stmts_b: list[TNode]) -> None:
        """Pair changed statements of two matched blocks by content similarity.

        Similarity is the Dice coefficient of the statements' leaf bags (names, literals),
        plus a bonus when both bind the same targets (`loss = ...` vs `loss = ...`). A
        second pass accepts less similarity for a statement kind left once on both sides
        (most likely the edited version of the other). Ties are refused.
        """
        self._pair_statements(stmts_a, stmts_b, unique_only=False)
        n2o, o2n = self.n2o, self.o2n
        rest_a = [c for c in stmts_a if n2o[c.idx] < 0]
        rest_b = [c for c in stmts_b if o2n[c.idx] < 0]
        if rest_a and rest_b:
            self._pair_statements(rest_a, rest_b, unique_only=True)

    def _pair_statements(self, stmts_a: list[TNode], stmts_b: list[TNode], unique_only: bool):
        if not stmts_b:
            return
        n2o, o2n = self.n2o, self.o2n
        new_tree, old_tree = self.new, self.old
        labels_a = Counter(c.label for c in stmts_a)
        labels_b = Counter(c.label for c in stmts_b)
        threshold = UNIQUE_STATEMENT_SIMILARITY if unique_only else STATEMENT_SIMILARITY
        pairs: list[tuple[float, int, TNode, TNode]] = []
        for pa, c in enumerate(stmts_a):
            if unique_only and labels_a[c.label] != 1:
                continue
            bag_a = new_tree.bag(c)
            key_a = _statement_key(c)
            for pb, d in enumerate(stmts_b):
                if c.label != d.label or (unique_only and labels_b[d.label] != 1):
                    continue
                if len(stmts_a) * len(stmts_b) > 2500 and abs(pa - pb) > 25:
                    continue
                score = bag_dice(bag_a, old_tree.bag(d))
                if key_a and key_a == _statement_key(d):
                    score += KEY_BONUS
                if score >= threshold:
                    pairs.append((score, -abs(pa - pb), c, d))
        pairs.sort(key=lambda p: (-p[0], -p[1]))
        for score, _, c, d in pairs:
            if n2o[c.idx] >= 0 or o2n[d.idx] >= 0:
                continue
            rivals = [
                p
                for p in pairs
                if (p[2] is c) != (p[3] is d)
                and p[0] >= score - _EPS
                and n2o[p[2].idx] < 0
                and o2n[p[3].idx] < 0
            ]
            if rivals:
                self.ambiguous_new.add(c.idx)
                continue
            d = self._unwrap(c, d, score)
            self._link(c, d)
            self._recover(c, d)

    def _unwrap(self, c: TNode, d: TNode, score: float) -> TNode:
        """The old statement to pair with `c` when `d` wraps it: a free statement of the
        same kind in one of d's blocks that is more like `c` than `d` is (`if a: B` in
        the new version, `if flag: [if a: B]` in the old one: the whole wrapper resembles
        the wrapped code, but its counterpart is the inner statement). Descends while
        that holds."""
        o2n = self.o2n
        bag_c, key_c = self.new.bag(c), _statement_key(c)
        while True:
            best: TNode | None = None
            for block in d.children:
                if block.label != "IndentedBlock":
                    continue
                for e in block.children:
                    if o2n[e.idx] >= 0 or e.label != c.label:
                        continue
                    value = bag_dice(bag_c, self.old.bag(e))
                    if key_c and key_c == _statement_key(e):
                        value += KEY_BONUS
                    if value > score + _EPS:
                        best, score = e, value
            if best is None:
                return d
            d = best

    def _resolve_ambiguous(self, groups: list[tuple[list[TNode], list[TNode]]]) -> None:
        n2o, o2n = self.n2o, self.o2n
        groups.sort(key=lambda g: -g[0][0].height)
        for news, olds in groups:
            self._dice_cache.clear()
            pairs = []
            for a in news:
                if n2o[a.idx] >= 0:
                    continue
                for b in olds:
                    if o2n[b.idx] >= 0:
                        continue
                    pairs.append((self._context_score(a, b), a, b))
            pairs.sort(key=lambda p: p[0], reverse=True)
            by_score: dict[tuple[int, float, int], list[tuple[TNode, TNode]]] = defaultdict(list)
            for score, a, b in pairs:
                by_score[score].append((a, b))
            consumed_new: set[int] = set()
            consumed_old: set[int] = set()
            for score, a, b in pairs:
                if a.idx in consumed_new or b.idx in consumed_old:
                    continue
                if n2o[a.idx] >= 0 or o2n[b.idx] >= 0:
                    continue
                tied = [
                    (x, y)
                    for x, y in by_score[score]
                    if (x is a) != (y is b)
                    and x.idx not in consumed_new
                    and y.idx not in consumed_old
                    and n2o[x.idx] < 0
                    and o2n[y.idx] < 0
                ]
                if tied:
                    for x, y in [(a, b), *tied]:
                        consumed_new.add(x.idx)
                        consumed_old.add(y.idx)
                        self.ambiguous_new.add(x.idx)
                    continue
                self._link_subtree(a, b)
                consumed_new.add(a.idx)
                consumed_old.add(b.idx)

    def _context_score(self, a: TNode, b: TNode) -> tuple[int, float, int]:
        pa, pb = a.parent, b.parent
        if pa is None or pb is None:
            return (0, 0.0, 0)
        parents_matched = 1 if self.n2o[pa.idx] == pb.idx else 0
        parent_dice = 1.0 if parents_matched else round(self.dice(pa, pb), 6)
        neighbours = 0
        sa, sb = pa.children, pb.children
        ia, ib = sa.index(a), sb.index(b)
        for da in (-1, 1):
            ja, jb = ia + da, ib + da
            if 0 <= ja < len(sa) and 0 <= jb < len(sb) and self.n2o[sa[ja].idx] == sb[jb].idx:
                neighbours += 1
        return (parents_matched, parent_dice, neighbours)
