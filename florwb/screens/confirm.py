"""A yes/no question before something that loses work, such as quitting while a replay
runs: `q` asks before it throws a running replay away."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from florwb.ui import keys


class ConfirmScreen(ModalScreen[bool]):
    """Dismissed with True for y/⏎/Yes, False for n/esc/No."""

    BINDINGS = keys.bindings("confirm")
    KEY_SCOPES = ("confirm",)
    DEFAULT_CSS = """
    ConfirmScreen { align: center middle; }
    ConfirmScreen > Vertical { width: 64; max-width: 95%; height: auto;
        border: thick $warning; background: $surface; padding: 0 1; }
    ConfirmScreen #confirm-title { text-style: bold; }
    ConfirmScreen #confirm-text { margin: 1 0; }
    ConfirmScreen Horizontal { height: 3; align-horizontal: right; }
    ConfirmScreen Button { margin-left: 1; }
    """

    def __init__(self, title: str, question: str, hints: keys.KeyHints | None = None) -> None:
        super().__init__()
        self.title_text = title
        self.question = question
        self.hints = hints or keys.KeyHints()

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(self.title_text, id="confirm-title", markup=False)
            yield Static(self.question, id="confirm-text", markup=False)
            with Horizontal():
                yield Button(
                    f"Yes {self.hints('confirm.yes')}", id="confirm-yes", variant="warning"
                )
                yield Button(f"No {self.hints('confirm.no')}", id="confirm-no")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "confirm-yes")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)
