"""Modals that show text as it is, in a scrollable read-only editor (no reflow, so DuckDB's
`LINE 1: ... ^^^` pointer stays under the word it points at): the query tab's full error
and the cell viewer (long text, JSON pretty-printed). Harlequin shows both the same way."""

from __future__ import annotations

import json
from typing import Any

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static, TextArea

from florwb.ui import keys


def cell_text(value: Any) -> str:
    """A cell's whole value: JSON (lists, structs, maps, JSON text) indented, other text as
    it is, NULL as NULL."""
    if value is None:
        return "NULL"
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value, indent=2, default=str, ensure_ascii=False)
    text = str(value)
    stripped = text.strip()
    if stripped[:1] in ("{", "[") and stripped[-1:] in ("}", "]"):
        try:
            return json.dumps(json.loads(stripped), indent=2, ensure_ascii=False)
        except ValueError:
            return text
    return text


class TextViewScreen(ModalScreen[None]):
    """A title, the text in a read-only, scrollable editor, esc to close."""

    BINDINGS = keys.bindings("textview")
    KEY_SCOPES = ("textview",)
    DEFAULT_CSS = """
    TextViewScreen { align: center middle; }
    TextViewScreen > Vertical { width: 90%; height: 80%; border: thick $primary;
        background: $surface; }
    TextViewScreen.error > Vertical { border: thick $error; }
    TextViewScreen #textview-title { text-style: bold; padding: 0 1; }
    TextViewScreen.error #textview-title { color: $error; }
    TextViewScreen #textview-text { height: 1fr; }
    TextViewScreen #textview-hint { color: $text-muted; padding: 0 1; }
    """

    def __init__(self, title: str, text: str, *, error: bool = False) -> None:
        super().__init__(classes="error" if error else None)
        self.title_text = title
        self.text = text
        self.wrap = not error  # an error keeps its lines, so the ^^^ pointer lines up

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(self.title_text, id="textview-title", markup=False)
            yield TextArea(
                self.text,
                id="textview-text",
                read_only=True,
                soft_wrap=self.wrap,
                show_line_numbers=False,
            )
            yield Static("esc: close · arrows scroll · select to copy", id="textview-hint")

    def on_mount(self) -> None:
        self.query_one("#textview-text", TextArea).focus()

    def action_close(self) -> None:
        self.dismiss(None)
