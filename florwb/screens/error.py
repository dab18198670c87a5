"""A modal that shows an error and lets the user go on (Harlequin style): the app never
crashes on bad SQL or a failing engine call; esc or enter closes it."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from florwb.ui import keys


class ErrorScreen(ModalScreen[None]):
    BINDINGS = keys.bindings("error")
    DEFAULT_CSS = """
    ErrorScreen { align: center middle; }
    ErrorScreen > Vertical { width: 72; max-width: 95%; height: auto; max-height: 80%;
        border: thick $error; background: $surface; padding: 0 1; }
    ErrorScreen #error-title { text-style: bold; color: $error; }
    ErrorScreen #error-text { margin: 1 0; }
    ErrorScreen Button { width: 100%; }
    """

    def __init__(self, title: str, message: str, hints: keys.KeyHints | None = None) -> None:
        super().__init__()
        self.title_text = title
        self.message = message
        self.hints = hints or keys.KeyHints()

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(self.title_text, id="error-title", markup=False)
            yield Static(self.message, id="error-text", markup=False)
            yield Button(f"OK ({self.hints('error.close')})", id="error-ok", variant="error")

    def on_button_pressed(self) -> None:
        self.dismiss(None)

    def action_dismiss_error(self) -> None:
        self.dismiss(None)
