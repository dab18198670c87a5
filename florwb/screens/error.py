"""A modal that shows an error and lets the user go on (Harlequin style): the app never
crashes on bad SQL or a failing engine call; esc or enter closes it.

An unexpected failure also carries its traceback (`details`), hidden until the user asks
for it (`error.details`), and says where the app's error log keeps it."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from florwb.ui import keys


class ErrorScreen(ModalScreen[None]):
    BINDINGS = keys.bindings("error")
    KEY_SCOPES = ("error",)
    DEFAULT_CSS = """
    ErrorScreen { align: center middle; }
    ErrorScreen > Vertical { width: 72; max-width: 95%; height: auto; max-height: 80%;
        border: thick $error; background: $surface; padding: 0 1; }
    ErrorScreen #error-title { text-style: bold; color: $error; }
    ErrorScreen #error-text { margin: 1 0; }
    ErrorScreen #error-where { color: $text-muted; margin: 0 0 1 0; }
    ErrorScreen #error-details { height: auto; max-height: 16; display: none; }
    ErrorScreen #error-details.shown { display: block; }
    ErrorScreen Button { width: 100%; }
    """

    def __init__(
        self,
        title: str,
        message: str,
        hints: keys.KeyHints | None = None,
        *,
        details: str | None = None,
        logged: str | None = None,
    ) -> None:
        """`details`: the traceback, shown on demand; `logged`: where it was written, or
        why it could not be."""
        super().__init__()
        self.title_text = title
        self.message = message
        self.hints = hints or keys.KeyHints()
        self.details = details
        self.logged = logged

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(self.title_text, id="error-title", markup=False)
            yield Static(self.message, id="error-text", markup=False)
            if self.details is not None:
                where = f" ({self.logged})" if self.logged else ""
                line = f"{self.hints('error.details')} shows the traceback{where}"
                yield Static(line, id="error-where", markup=False)
                with VerticalScroll(id="error-details"):
                    yield Static(self.details, markup=False)
            yield Button(f"OK ({self.hints('error.close')})", id="error-ok", variant="error")

    @property
    def details_shown(self) -> bool:
        return self.details is not None and self.query_one("#error-details").has_class("shown")

    def on_button_pressed(self) -> None:
        self.dismiss(None)

    def action_dismiss_error(self) -> None:
        self.dismiss(None)

    def action_toggle_details(self) -> None:
        if self.details is not None:
            self.query_one("#error-details").toggle_class("shown")
