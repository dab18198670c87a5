"""The SQL editor with completion of table and column names.

Textual's TextArea has a `suggestion` hook (ghost text) but no list to choose from, so the
editor keeps a small dropdown of candidates under the cursor, as harlequin's does: it opens
while a word is being typed that starts some known name, ↑/↓ move in it, tab accepts, esc
closes it (florwb.ui.keys, scope "editor"; with the list closed those keys do what they
always do). The names come from the catalog outline (engine/store/catalog_outline.py).
"""

from __future__ import annotations

import re
from typing import Any

from rich.text import Text
from textual import on
from textual.geometry import Offset
from textual.widget import Widget
from textual.widgets import OptionList, TextArea
from textual.widgets.option_list import Option

from florwb.ui import keys

MAX_CANDIDATES = 8
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*$")


class CompletionList(OptionList):
    """The dropdown; placed by the editor, never focused (the editor keeps the keys)."""

    can_focus = False
    DEFAULT_CSS = """
    CompletionList { position: absolute; overlay: screen; display: none; width: auto;
        min-width: 20; max-width: 50; height: auto; max-height: 10; border: none;
        padding: 0; background: $panel; }
    """


class SqlEditor(TextArea):
    """A TextArea that completes names from `vocabulary` (name -> what it is)."""

    BINDINGS = keys.bindings("editor")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.vocabulary: dict[str, str] = {}
        self.dropdown = CompletionList(id="completions")
        self.candidates: list[str] = []
        self._prefix = ""
        self._accepted: str | None = None  # the name just put in: no list for it again

    def set_vocabulary(self, words: dict[str, str]) -> None:
        self.vocabulary = dict(words)

    @property
    def completing(self) -> bool:
        return bool(self.candidates) and self.dropdown.display

    def word_before_cursor(self) -> str:
        row, column = self.cursor_location
        found = _WORD.search(self.document[row][:column])
        return found.group(0) if found else ""

    def complete_for(self, prefix: str) -> list[str]:
        """Known names that start with `prefix` (any case), tables before columns."""
        if not prefix:
            return []
        low = prefix.lower()
        names = [n for n in self.vocabulary if n.lower().startswith(low) and n != prefix]
        names.sort(key=lambda n: (self.vocabulary[n] == "column", len(n), n))
        return names[:MAX_CANDIDATES]

    @on(TextArea.Changed)
    def _changed(self, event: TextArea.Changed) -> None:
        if event.text_area is self:
            self.refresh_completion()

    def refresh_completion(self) -> None:
        prefix = self.word_before_cursor()
        self._prefix = prefix
        accepted, self._accepted = self._accepted, None
        if accepted is not None and prefix == accepted:
            self.close_completion()
            return
        self.candidates = self.complete_for(prefix) if self.has_focus else []
        if not self.candidates:
            self.close_completion()
            return
        self.dropdown.clear_options()
        self.dropdown.add_options(
            Option(Text.assemble(name, (f"  {self.vocabulary[name]}", "dim")), id=name)
            for name in self.candidates
        )
        self.dropdown.highlighted = 0
        parent = self.dropdown.parent
        if isinstance(parent, Widget):
            origin = parent.content_region.offset
            cursor = self.cursor_screen_offset
            self.dropdown.styles.offset = Offset(
                max(cursor.x - len(prefix) - origin.x, 0), cursor.y + 1 - origin.y
            )
        self.dropdown.display = True

    def close_completion(self) -> None:
        self.candidates = []
        self.dropdown.display = False

    def on_blur(self) -> None:
        self.close_completion()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("accept_completion", "close_completion"):
            return self.completing  # otherwise tab and esc go on to the screen and the pane
        return super().check_action(action, parameters)

    def action_accept_completion(self) -> None:
        index = self.dropdown.highlighted or 0
        if not self.candidates:
            return
        name = self.candidates[index]
        row, column = self.cursor_location
        self.close_completion()
        self._accepted = name
        self.replace(name, (row, column - len(self._prefix)), (row, column))

    # A subclass binding replaces TextArea's for the same key, so with the list closed the
    # arrows do here what TextArea's own bindings do.
    def action_completion_down(self) -> None:
        if self.completing:
            self.dropdown.action_cursor_down()
        else:
            self.action_cursor_down()

    def action_completion_up(self) -> None:
        if self.completing:
            self.dropdown.action_cursor_up()
        else:
            self.action_cursor_up()

    def action_close_completion(self) -> None:
        self.close_completion()
