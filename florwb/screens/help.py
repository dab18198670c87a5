"""`?`: every key of the workbench, generated from the key table (florwb.ui.keys) with
the app's active keymap applied, so a key rebound with `App.set_keymap` is listed under
its new key: the help lists the keys that work, and only those."""

from __future__ import annotations

from collections.abc import Mapping

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual import on
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Input, Static

from florwb.ui import keys


def key_label(app: App, key: keys.Key, keymap: Mapping[str, str]) -> str:
    """How the active keys of one entry read, e.g. `j / ↓`."""
    shown = [
        app.get_key_display(Binding(name, key.action)) for name in keys.active_keys(key, keymap)
    ]
    return " / ".join(dict.fromkeys(shown))


def help_renderable(app: App, keymap: Mapping[str, str], find: str = "") -> Group:
    """Every scope's keys; with `find`, only the entries whose key, description, id or
    scope holds every word of it (case-insensitive)."""
    words = find.lower().split()
    parts: list[RenderableType] = []
    for scope, (title, _selector, _tab) in keys.SCOPES.items():
        table = Table(box=None, padding=(0, 1), show_header=False, expand=True)
        table.add_column(style="bold cyan", width=13, no_wrap=True)
        table.add_column(ratio=1, no_wrap=True, overflow="ellipsis")
        table.add_column(style="dim", no_wrap=True, width=20)
        for key in keys.KEYS[scope]:
            label = key_label(app, key, keymap)
            text = f"{label} {key.description} {key.id} {title}".lower()
            if all(word in text for word in words):
                table.add_row(label, key.description, key.id)
        if table.row_count:
            parts.extend([Text(title, "bold underline"), table, Text("")])
    if words and not parts:
        parts.append(Text(f"no key matches {find.strip()!r}", "yellow"))
    parts.append(
        Text(
            "Mouse: click rows, tabs and footer keys; wheel scrolls. "
            "The command palette (ctrl+p) lists every action above.",
            "dim",
        )
    )
    return Group(*parts)


class HelpScreen(ModalScreen[None]):
    """Built with the keymap in force (binding id -> keys)."""

    BINDINGS = keys.bindings("help")
    KEY_SCOPES = ("help",)
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > Vertical { width: 80; max-width: 100%; height: 100%; border: thick $primary;
        background: $surface; }
    HelpScreen #help-title { text-style: bold; padding: 0 1; }
    HelpScreen VerticalScroll { padding: 0 1; }
    HelpScreen #help-find { border: none; height: 1; padding: 0 1; }
    """

    def __init__(self, keymap: Mapping[str, str] | None = None) -> None:
        super().__init__()
        self.keymap = dict(keymap or {})

    def compose(self) -> ComposeResult:
        with Vertical():
            hints = keys.KeyHints(lambda name: self.app.get_key_display(Binding(name, "")))
            hints.keymap = self.keymap
            yield Static(
                f"Keys ({hints('help.close')} closes; {hints('help.find')} searches;"
                " j/k or wheel scroll)",
                id="help-title",
            )
            yield Input(placeholder="search keys: words of a key or what it does", id="help-find")
            with VerticalScroll(id="help-scroll"):
                yield Static(help_renderable(self.app, self.keymap), id="help-body")

    def on_mount(self) -> None:
        self.query_one("#help-scroll").focus()

    def key_j(self) -> None:
        self.query_one("#help-scroll", VerticalScroll).scroll_down(animate=False)

    def key_k(self) -> None:
        self.query_one("#help-scroll", VerticalScroll).scroll_up(animate=False)

    def action_find(self) -> None:
        self.query_one("#help-find", Input).focus()

    @on(Input.Changed, "#help-find")
    def _find_changed(self, message: Input.Changed) -> None:
        self.query_one("#help-body", Static).update(
            help_renderable(self.app, self.keymap, message.value)
        )

    @on(Input.Submitted, "#help-find")
    def _find_done(self) -> None:
        self.query_one("#help-scroll").focus()

    def action_close(self) -> None:
        box = self.query_one("#help-find", Input)
        if box.has_focus and box.value:  # esc clears the search first, then closes
            box.value = ""
            return
        self.dismiss(None)
