"""The query tab: a SQL editor with history, and a results table that pages.

Queries run in an exclusive thread worker: the first page is posted as soon as DuckDB has
it, the row count follows when known, and an error opens a modal instead of raising.
History is kept per project in `.florwb/workbench/query_history.json`.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import OptionList, Static, TextArea
from textual.widgets.option_list import Option

from florwb.ui import format as fmt
from florwb.ui import keys
from florwb.ui.messages import ErrorReported, QueryCounted, QueryFailed, QueryPageLoaded
from florwb.ui.workers import run_in_thread
from florwb.widgets.results_table import ResultsTable
from florwb_engine import project as projects
from florwb_engine.store import Store, StoreBusy, StoreError
from florwb_engine.store.queries import PAGE_ROWS, count_rows, query_page

HISTORY_LIMIT = 200
# `source = 'record'`: a replay re-executes recorded statements too, so without it each
# replay would add another copy of every value (issue 14, defect 4).
DEFAULT_SQL = (
    "SELECT run_id, list(value ORDER BY epoch) AS acc\n"
    "FROM logs WHERE name = 'acc' AND source = 'record'\nGROUP BY run_id ORDER BY run_id"
)


def history_path(project: Path) -> Path:
    return projects.store_dir(project) / "workbench" / "query_history.json"


def read_history(project: Path) -> list[str]:
    try:
        items = json.loads(history_path(project).read_text())
    except (OSError, ValueError):
        return []
    return [q for q in items if isinstance(q, str)] if isinstance(items, list) else []


def write_history(project: Path, items: list[str]) -> None:
    path = history_path(project)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(items[-HISTORY_LIMIT:], indent=0))
        tmp.replace(path)
    except OSError:
        pass  # history is a convenience; a read-only store must not break queries


class HistoryPicker(ModalScreen[str | None]):
    """F8: the query history, newest first; enter puts one back in the editor."""

    BINDINGS = [("escape", "dismiss(None)", "Close")]
    DEFAULT_CSS = """
    HistoryPicker { align: center middle; }
    HistoryPicker > Vertical { width: 76; max-width: 95%; height: 70%; border: thick $primary;
        background: $surface; }
    HistoryPicker OptionList { height: 1fr; }
    """

    def __init__(self, items: list[str]) -> None:
        super().__init__()
        self.items = list(reversed(items))

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(" Query history (enter: use, esc: close)", markup=False)
            yield OptionList(
                *[
                    Option(fmt.clip(" ".join(q.split()), 200), id=str(i))
                    for i, q in enumerate(self.items)
                ],
                id="history-options",
            )

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(self.items[int(event.option.id or 0)])


class QueryPane(Vertical):
    BINDINGS = keys.bindings("query")
    DEFAULT_CSS = """
    QueryPane #sql { height: 7; }
    QueryPane #query-status { height: 1; padding: 0 1; }
    QueryPane #results { height: 1fr; }
    """

    def __init__(self, project: Path, store: Store, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.project = project
        self.store = store
        self.serial = 0
        self.history: list[str] = []
        self.position: int | None = None  # index into history while browsing it
        self.started = 0.0
        self.shown_rows = 0
        self.last_sql = ""

    def compose(self) -> ComposeResult:
        yield TextArea(DEFAULT_SQL, id="sql", soft_wrap=True, tab_behavior="focus")
        yield Static(
            Text("^⏎ / ^j / F5 run · ^↑ ^↓ history · F8 list · esc leaves the editor", "dim"),
            id="query-status",
        )
        yield ResultsTable(id="results", zebra_stripes=True)

    def on_mount(self) -> None:
        self.history = read_history(self.project)
        self.query_one("#sql", TextArea).border_title = "SQL"

    @property
    def editor(self) -> TextArea:
        return self.query_one("#sql", TextArea)

    def _status(self, text: Text | str) -> None:
        self.query_one("#query-status", Static).update(text)

    # --- running --------------------------------------------------------------------------

    def action_run_query(self) -> None:
        self.run_sql(self.editor.text)

    def run_sql(self, sql: str) -> None:
        """Run `sql` (shown in the editor first, so the screen says what ran)."""
        if sql != self.editor.text:
            self.editor.load_text(sql)
        sql = sql.strip()
        if not sql:
            self._status(Text("Nothing to run.", "yellow"))
            return
        if not self.history or self.history[-1] != sql:
            self.history.append(sql)
            write_history(self.project, self.history)
        self.position = None
        self.serial += 1
        self.started = time.perf_counter()
        self.last_sql = sql
        self._status(Text("running…", "yellow"))
        self._query(self.serial, sql)

    def _query(self, serial: int, sql: str) -> None:
        def work() -> None:
            started = time.perf_counter()
            try:
                page = query_page(self.store, sql, PAGE_ROWS)
            except (StoreError, StoreBusy) as exc:  # the user's SQL: said in the pane
                self.post_message(QueryFailed(serial, sql, str(exc)))
                return
            self.post_message(QueryPageLoaded(serial, sql, page, time.perf_counter() - started))

        run_in_thread(self, work, group="query", description="running the query")

    def _count(self, serial: int, sql: str) -> None:
        """Started once the first page is on screen, so counting (as slow as the whole
        query) never competes with drawing it."""

        def work() -> None:
            try:
                total = count_rows(self.store, sql)
            except (StoreError, StoreBusy):
                return  # the page is shown; the label keeps saying "counting…" is unknown
            if serial == self.serial:
                self.post_message(QueryCounted(serial, total))

        run_in_thread(self, work, group="count", description="counting the query's rows")

    @on(QueryPageLoaded)
    def _page(self, message: QueryPageLoaded) -> None:
        message.stop()
        if message.serial != self.serial:
            return
        self.query_one(ResultsTable).show(message.page)
        self.shown_rows = len(message.page.rows)
        if message.page.total is None:
            self.call_after_refresh(self._count, message.serial, message.sql)
        self._status(
            Text.assemble(
                ("✓ ", "green"),
                fmt.rows_label(self.shown_rows, message.page.total),
                (f" · {message.elapsed_s:.2f} s", "dim"),
            )
        )

    @on(QueryCounted)
    def _counted(self, message: QueryCounted) -> None:
        message.stop()
        if message.serial != self.serial:
            return
        self._status(
            Text.assemble(
                ("✓ ", "green"),
                fmt.rows_label(self.shown_rows, message.total),
                (f" · {time.perf_counter() - self.started:.2f} s", "dim"),
            )
        )

    @on(QueryFailed)
    def _failed(self, message: QueryFailed) -> None:
        message.stop()
        if message.serial != self.serial:
            return
        self._status(Text.assemble(("✗ ", "red"), (fmt.clip(message.error, 200), "red")))
        self.post_message(ErrorReported("Query failed", message.error))

    # --- history --------------------------------------------------------------------------

    def action_history_previous(self) -> None:
        if not self.history:
            return
        self.position = (
            len(self.history) - 1 if self.position is None else max(self.position - 1, 0)
        )
        self.editor.load_text(self.history[self.position])

    def action_history_next(self) -> None:
        if self.position is None:
            return
        if self.position >= len(self.history) - 1:
            self.position = None
            self.editor.load_text("")
            return
        self.position += 1
        self.editor.load_text(self.history[self.position])

    def action_history_list(self) -> None:
        def chosen(sql: str | None) -> None:
            if sql:
                self.editor.load_text(sql)
                self.editor.focus()

        self.app.push_screen(HistoryPicker(self.history), chosen)

    def action_leave_editor(self) -> None:
        self.query_one(ResultsTable).focus()

    def action_focus_results(self) -> None:
        if self.editor.has_focus:
            self.query_one(ResultsTable).focus()
        else:
            self.editor.focus()
