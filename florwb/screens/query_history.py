"""The Query tab's history of SQL run (F8 lists it, ctrl+up/down walk it): kept per project
in `.florwb/workbench/query_history.json`, newest last, at most HISTORY_LIMIT. Not the
version history (panes/history.py): the queries the user ran."""

from __future__ import annotations

import json
from pathlib import Path

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from florwb.ui import format as fmt
from florwb.ui import keys
from florwb_engine import project as projects

HISTORY_LIMIT = 200


def query_history_path(project: Path) -> Path:
    return projects.store_dir(project) / "workbench" / "query_history.json"


def read_query_history(project: Path) -> list[str]:
    try:
        items = json.loads(query_history_path(project).read_text())
    except (OSError, ValueError):
        return []
    return [q for q in items if isinstance(q, str)] if isinstance(items, list) else []


def write_query_history(project: Path, items: list[str]) -> None:
    path = query_history_path(project)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(items[-HISTORY_LIMIT:], indent=0))
        tmp.replace(path)
    except OSError:
        pass  # history is a convenience; a read-only store must not break queries


class QueryHistoryPicker(ModalScreen[str | None]):
    """F8: the query history, newest first; enter puts one back in the editor."""

    BINDINGS = keys.bindings("query_history")
    KEY_SCOPES = ("query_history",)
    DEFAULT_CSS = """
    QueryHistoryPicker { align: center middle; }
    QueryHistoryPicker > Vertical { width: 76; max-width: 95%; height: 70%; border: thick $primary;
        background: $surface; }
    QueryHistoryPicker OptionList { height: 1fr; }
    """

    def __init__(self, items: list[str], hints: keys.KeyHints | None = None) -> None:
        super().__init__()
        self.items = list(reversed(items))
        self.hints = hints or keys.KeyHints()

    def compose(self) -> ComposeResult:
        with Vertical():
            close = self.hints("query_history.close")
            yield Static(f" Query history (⏎: use, {close}: close)", markup=False)
            yield OptionList(
                *[
                    Option(fmt.clip(" ".join(q.split()), 200), id=str(i))
                    for i, q in enumerate(self.items)
                ],
                id="history-options",
            )

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(self.items[int(event.option.id or 0)])
