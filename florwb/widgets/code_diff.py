"""A unified diff of two versions of a script as Rich text, log statements highlighted.

Lines that hold a `flor.log` statement get a ◆ in the gutter and a highlight, so the eye
goes straight to what hindsight logging changes; the rest reads like `git diff`.
"""

from __future__ import annotations

import difflib

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import ScrollableContainer, Vertical
from textual.widgets import Input, Static

from florwb.ui import keys

LOG_STYLE = "bold black on yellow"
ADDED = "green"
REMOVED = "red"


def render_diff(
    old: str,
    new: str,
    *,
    old_name: str,
    new_name: str,
    old_log_lines: set[int] | frozenset[int] = frozenset(),
    new_log_lines: set[int] | frozenset[int] = frozenset(),
    context: int = 3,
) -> Text:
    """`git diff`-style hunks from `old` to `new`; line numbers are 1-based."""
    a, b = old.splitlines(), new.splitlines()
    text = Text()
    text.append(f"--- {old_name}\n", "bold red")
    text.append(f"+++ {new_name}\n", "bold green")
    groups = list(difflib.SequenceMatcher(None, a, b, autojunk=False).get_grouped_opcodes(context))
    if not groups:
        text.append("(no differences)\n", "dim")
        return text
    width = len(str(max(len(a), len(b), 1)))
    for group in groups:
        i1, i2, j1, j2 = group[0][1], group[-1][2], group[0][3], group[-1][4]
        text.append(f"@@ -{i1 + 1},{i2 - i1} +{j1 + 1},{j2 - j1} @@\n", "cyan")
        for tag, a1, a2, b1, b2 in group:
            if tag == "equal":
                for k in range(a2 - a1):
                    _line(
                        text, " ", a[a1 + k], b1 + k + 1, width, "", (b1 + k + 1) in new_log_lines
                    )
                continue
            for k in range(a1, a2):
                _line(text, "-", a[k], k + 1, width, REMOVED, (k + 1) in old_log_lines)
            for k in range(b1, b2):
                _line(text, "+", b[k], k + 1, width, ADDED, (k + 1) in new_log_lines)
    return text


def _line(text: Text, sign: str, line: str, number: int, width: int, style: str, log: bool) -> None:
    text.append(f"{number:>{width}} ", "dim")
    text.append("◆" if log else " ", "bold yellow" if log else "")
    text.append(sign, style or "dim")
    text.append(line.expandtabs(4), LOG_STYLE if log else style)
    text.append("\n")


SEARCH_STYLE = "black on cyan"
CURRENT_STYLE = "bold black on bright_yellow"


class SearchLine(Input):
    """The search line: esc leaves it (the search stays in force for n and N)."""

    def key_escape(self) -> None:
        parent = self.parent
        if isinstance(parent, DiffView):
            parent.focus_diff()


class DiffView(Vertical):
    """A scrollable diff with search: `/` asks for text, `n` and `N` jump to the next and
    previous match (every match highlighted, the current one brighter), esc closes the
    search line. Used by the log-statement diff tab and the run comparison."""

    BINDINGS = keys.bindings("diff")
    DEFAULT_CSS = """
    DiffView { height: 1fr; }
    DiffView #diff-search { height: 1; border: none; padding: 0 1; display: none; }
    DiffView #diff-search.-shown { display: block; }
    DiffView #diff-scroll { height: 1fr; overflow: auto auto; }
    DiffView #diff-scroll:focus { background-tint: $foreground 3%; }
    DiffView #diff { width: auto; }
    DiffView #diff-found { height: 1; color: $text-muted; display: none; }
    DiffView #diff-found.-shown { display: block; }
    """

    def __init__(self, *, hints: keys.KeyHints | None = None, id: str | None = None) -> None:
        super().__init__(id=id)
        self.hints = hints or keys.KeyHints()
        self.text = Text()
        self.term = ""
        self.matches: list[tuple[int, int, int]] = []  # (line, start, end) in the plain text
        self.current = -1

    def compose(self) -> ComposeResult:
        yield SearchLine(placeholder=self._search_hint(), id="diff-search")
        with ScrollableContainer(id="diff-scroll"):
            yield Static(id="diff")
        yield Static(id="diff-found")

    def set_diff(self, text: Text) -> None:
        """Show `text` (a rendered diff); a search in force is applied to it again."""
        self.text = text
        self.text.no_wrap = True
        self._find(keep_place=True)

    def focus_diff(self) -> None:
        self.query_one("#diff-scroll").focus()

    # --- search ---------------------------------------------------------------------------

    def _search_hint(self) -> str:
        """Named from the keymap in force when the search opens (it may have changed since
        the diff was built)."""
        return (
            f"search the diff (⏎ jumps, {self.hints('diff.next')}/"
            f"{self.hints('diff.previous')} next/previous)"
        )

    def action_search(self) -> None:
        box = self.query_one("#diff-search", Input)
        box.placeholder = self._search_hint()
        box.add_class("-shown")
        box.value = self.term
        box.focus()

    @on(Input.Changed, "#diff-search")
    def _typed(self, event: Input.Changed) -> None:
        event.stop()
        self.term = event.value
        self._find()

    @on(Input.Submitted, "#diff-search")
    def _submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.query_one("#diff-search", Input).remove_class("-shown")
        self.focus_diff()

    @on(Input.Blurred, "#diff-search")
    def _left(self) -> None:
        self.query_one("#diff-search", Input).remove_class("-shown")

    def action_next_match(self) -> None:
        self._step(1)

    def action_previous_match(self) -> None:
        self._step(-1)

    def _step(self, step: int) -> None:
        if not self.term:
            self.notify("Search with / first.", title="Diff")
            return
        if not self.matches:
            self.notify(f"No match for {self.term!r}.", title="Diff")
            return
        self.current = (self.current + step) % len(self.matches)
        self._show()

    def _find(self, keep_place: bool = False) -> None:
        """Every match of the term (case-insensitive unless it has a capital letter)."""
        self.matches = []
        term = self.term
        if term:
            fold = term == term.lower()
            needle = term.lower() if fold else term
            for number, line in enumerate(self.text.plain.split("\n")):
                hay = line.lower() if fold else line
                start = hay.find(needle)
                while start >= 0:
                    self.matches.append((number, start, start + len(needle)))
                    start = hay.find(needle, start + max(len(needle), 1))
        if not keep_place or self.current >= len(self.matches):
            self.current = 0 if self.matches else -1
        self._show()

    def _show(self) -> None:
        text = self.text.copy()
        offsets = [0]
        for plain_line in self.text.plain.split("\n"):
            offsets.append(offsets[-1] + len(plain_line) + 1)
        for index, (number, first, last) in enumerate(self.matches):
            style = CURRENT_STYLE if index == self.current else SEARCH_STYLE
            text.stylize(style, offsets[number] + first, offsets[number] + last)
        self.query_one("#diff", Static).update(text)
        found = self.query_one("#diff-found", Static)
        found.set_class(bool(self.term), "-shown")
        if not self.term:
            return
        if not self.matches:
            found.update(Text(f"/{self.term}: no match", "red"))
            return
        found.update(f"/{self.term}: match {self.current + 1} of {len(self.matches)} · n/N")
        scroll = self.query_one("#diff-scroll", ScrollableContainer)
        line, start, end = self.matches[self.current]
        scroll.scroll_to(
            x=0 if end < scroll.size.width else max(start - 10, 0),
            y=max(line - scroll.size.height // 2, 0),
            animate=False,
            force=True,
        )

    @property
    def current_line(self) -> int | None:
        """The diff line of the current match (0-based), for tests and the footer."""
        return self.matches[self.current][0] if 0 <= self.current < len(self.matches) else None
