"""The chart's metric picker: type a few letters of a name, pick from the best matches.

Runs log thousands of names (per-layer norms, per-class accuracies), so the picker never
lists them all: it ranks the names against what was typed (`fuzzy_rank`) and shows the
first SHOWN of them, saying how many more match. ⏎ on the input picks the best match;
the query itself comes back too, so the chart's grid can page through every match.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from rich.text import Text
from textual import events, on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, OptionList, Static
from textual.widgets.option_list import Option

from florwb.ui import keys

SHOWN = 100  # options listed at once; typing narrows the rest


def fuzzy_rank(names: Sequence[str], query: str) -> list[str]:
    """`names` that hold the query's characters in order (case-insensitive), best first:
    a whole-word substring, then a substring (earlier and in shorter names first), then
    scattered matches by how tightly they sit. An empty query keeps the given order."""
    query = query.strip().lower()
    if not query:
        return list(names)
    scattered = re.compile(".*?".join(re.escape(c) for c in query))
    ranked: list[tuple[tuple[int, int, int], str]] = []
    for name in names:
        low = name.lower()
        at = low.find(query)
        if at >= 0:
            whole = at == 0 or not low[at - 1].isalnum()
            ranked.append(((0 if whole else 1, at, len(name)), name))
            continue
        found = scattered.search(low)
        if found is not None:
            ranked.append(((2, found.end() - found.start(), len(name)), name))
    ranked.sort(key=lambda item: item[0])
    return [name for _key, name in ranked]


@dataclass(frozen=True)
class Picked:
    """The metric chosen and the query that found it (the grid pages through its matches)."""

    metric: str
    query: str
    matches: tuple[str, ...]


class MetricPicker(ModalScreen[Picked | None]):
    """`/` on the chart: the numeric names of the charted runs, fuzzy-searched."""

    BINDINGS = keys.bindings("metric_picker")
    KEY_SCOPES = ("metric_picker",)
    DEFAULT_CSS = """
    MetricPicker { align: center middle; }
    MetricPicker > Vertical { width: 76; max-width: 95%; height: 80%; border: thick $primary;
        background: $surface; }
    MetricPicker #picker-count { height: 1; color: $text-muted; padding: 0 1; }
    MetricPicker OptionList { height: 1fr; }
    """

    def __init__(self, names: Sequence[str], current: str | None = None, query: str = "") -> None:
        super().__init__()
        self.names = list(names)
        self.current = current
        self.search = query
        self.matches: list[str] = fuzzy_rank(self.names, query)

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Input(self.search, placeholder="metric name (fuzzy)", id="picker-input")
            yield Static(id="picker-count")
            yield OptionList(id="picker-options")

    def on_mount(self) -> None:
        self._show()
        self.query_one(Input).focus()

    @on(Input.Changed, "#picker-input")
    def _typed(self, event: Input.Changed) -> None:
        self.search = event.value
        self.matches = fuzzy_rank(self.names, event.value)
        self._show()

    def _show(self) -> None:
        options = self.query_one(OptionList)
        options.clear_options()
        options.add_options(
            Option(Text(name, style="bold" if name == self.current else ""), id=name)
            for name in self.matches[:SHOWN]
        )
        if self.matches:
            options.highlighted = 0
        more = len(self.matches) - SHOWN
        count = f"{len(self.matches):,} of {len(self.names):,} names"
        if more > 0:
            count += f" (first {SHOWN} listed: type to narrow)"
        self.query_one("#picker-count", Static).update(count)

    @on(Input.Submitted, "#picker-input")
    def _submitted(self) -> None:
        options = self.query_one(OptionList)
        at = options.highlighted if options.highlighted is not None else 0
        if self.matches:
            self._pick(self.matches[min(at, len(self.matches) - 1)])

    @on(OptionList.OptionSelected, "#picker-options")
    def _selected(self, event: OptionList.OptionSelected) -> None:
        self._pick(str(event.option.id))

    def on_key(self, event: events.Key) -> None:
        """↓/↑ in the input walk the list, so typing and choosing need no focus change."""
        if event.key in ("down", "up") and self.focused is self.query_one(Input):
            options = self.query_one(OptionList)
            if event.key == "down":
                options.action_cursor_down()
            else:
                options.action_cursor_up()
            event.stop()

    def _pick(self, name: str) -> None:
        self.dismiss(Picked(name, self.search, tuple(self.matches)))
