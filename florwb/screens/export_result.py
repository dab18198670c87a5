"""^e in the Query tab: ask where to write the current result; the format comes from the
extension (.csv, .parquet, .json, .jsonl). Writing is the engine's (user_export)."""

from __future__ import annotations

from pathlib import Path

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Static

from florwb.ui import keys


class ExportScreen(ModalScreen[Path | None]):
    """Returns the path typed (relative paths are relative to the project), or None."""

    BINDINGS = keys.bindings("export")
    KEY_SCOPES = ("export",)
    DEFAULT_CSS = """
    ExportScreen { align: center middle; }
    ExportScreen > Vertical { width: 76; max-width: 95%; height: auto; border: thick $primary;
        background: $surface; padding: 0 1; }
    ExportScreen #export-hint { color: $text-muted; }
    """

    def __init__(self, project: Path, suggested: str, hints: keys.KeyHints | None = None) -> None:
        super().__init__()
        self.project = project
        self.suggested = suggested
        self.hints = hints or keys.KeyHints()

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static("Export the result to a file", markup=False)
            yield Input(self.suggested, id="export-path")
            yield Static(
                f"⏎ write · {self.hints('export.close')} cancel · format from the extension: "
                ".csv .parquet .json .jsonl",
                id="export-hint",
                markup=False,
            )

    def on_mount(self) -> None:
        self.query_one(Input).focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        text = event.value.strip()
        if not text:
            return
        path = Path(text).expanduser()
        self.dismiss(path if path.is_absolute() else self.project / path)

    def action_close(self) -> None:
        self.dismiss(None)
