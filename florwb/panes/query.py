"""The query tab: a SQL editor with completion and history, a schema sidebar, and a results
table that pages through the whole result without loading it.

Queries run in thread workers on a result stream (engine/store/result_stream.py): several
statements run in order and the last one's rows show; the first page is posted as soon as
DuckDB has it, the next ones as the cursor nears the end, the row count when known. esc or
^c stops a running query (DuckDB's interrupt). An error opens DuckDB's whole message in a
scrollable view; ⏎ on a cell opens its value; ^e writes the result to a file; F9 shows the
tables and views with their columns. History is kept per project in
`.florwb/workbench/query_history.json`.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Static

from florwb.screens.export_result import ExportScreen
from florwb.screens.query_history import (
    QueryHistoryPicker,
    read_query_history,
    write_query_history,
)
from florwb.screens.text_view import TextViewScreen, cell_text
from florwb.ui import format as fmt
from florwb.ui import keys
from florwb.ui.messages import (
    OutlineLoaded,
    QueryCounted,
    QueryExported,
    QueryFailed,
    QueryRows,
    StoreWaiting,
)
from florwb.ui.workers import run_in_thread
from florwb.widgets.results_table import ResultsTable
from florwb.widgets.schema_tree import SchemaTree
from florwb.widgets.sql_editor import SqlEditor
from florwb_engine.store import Store, StoreBusy, StoreError
from florwb_engine.store.catalog_outline import Relation, outline
from florwb_engine.store.db import LockWaitListener, lock_waits_reported
from florwb_engine.store.queries import PAGE_ROWS, example_query, series_columns
from florwb_engine.store.result_stream import ResultStream
from florwb_engine.store.user_export import export_result, export_rows
from florwb_engine.store.user_sql import QueryStopped, UserSqlError


class QueryPane(Vertical):
    BINDINGS = keys.bindings("query")
    DEFAULT_CSS = """
    QueryPane #query-body { height: 1fr; }
    QueryPane #schema { display: none; }
    QueryPane #sql { height: 7; }
    QueryPane #query-status { height: 1; padding: 0 1; }
    QueryPane #results { height: 1fr; }
    """

    def __init__(
        self,
        project: Path,
        store: Store,
        *,
        hints: keys.KeyHints | None = None,
        id: str | None = None,
    ) -> None:
        super().__init__(id=id)
        self.project = project
        self.store = store
        self.hints = hints or keys.KeyHints()
        self._showing_keys = True  # the status line shows the key line (no query run yet)
        self.serial = 0
        self.past_queries: list[str] = []
        self.position: int | None = None  # index into history while browsing it
        self.started = 0.0
        self.last_sql = ""
        self.stream: ResultStream | None = None  # the result on screen, while it streams
        self.running = False  # the first page is not here yet
        self.total: int | None = None
        self.elapsed_s = 0.0
        self.outline: list[Relation] | None = None
        self._stop_serial = -1
        self._fetching = False
        self.example = example_query(None)  # in the editor until the user changes it
        self._shown: ResultStream | None = None  # the stream whose rows the table holds

    def suggest_metric(self, metric: str | None) -> None:
        """The example query names `metric`, a name the project has (the history's), while
        the editor still holds the untouched example."""
        example = example_query(metric)
        if example == self.example:
            return
        if not self.is_mounted or self.editor.text == self.example:
            if self.is_mounted:
                self.editor.text = example
            self.example = example

    def key_line(self) -> str:
        """The editor's keys in force, under it until the first query runs."""
        k = self.hints
        return (
            f"{k('query.run')} run · {k('query.leave')} stop/leave · {k('query.export')} export"
            f" · {k('query.schema')} schema · {k('query.previous')}{k('query.next')} history"
            f" · {k('query.history')} list"
        )

    def compose(self) -> ComposeResult:
        editor = SqlEditor(self.example, id="sql", soft_wrap=True, tab_behavior="focus")
        with Horizontal(id="query-body"):
            yield SchemaTree(id="schema")
            with Vertical(id="query-main"):
                yield editor
                yield Static(Text(self.key_line(), "dim"), id="query-status")
                yield ResultsTable(id="results", zebra_stripes=True)
        yield editor.dropdown

    def on_mount(self) -> None:
        self.past_queries = read_query_history(self.project)
        self.editor.border_title = "SQL"
        # a keymap set after this pane was built: the key line names the keys in force
        self.screen.bindings_updated_signal.subscribe(self, self._bindings_changed)

    def _bindings_changed(self, _screen: object) -> None:
        if self._showing_keys:
            self.query_one("#query-status", Static).update(Text(self.key_line(), "dim"))

    def on_show(self) -> None:
        if self.outline is None:
            self.load_outline()

    def on_unmount(self) -> None:
        self.screen.bindings_updated_signal.unsubscribe(self)
        if self.stream is not None:
            self.stream.close(wait=False)

    @property
    def editor(self) -> SqlEditor:
        return self.query_one("#sql", SqlEditor)

    @property
    def results(self) -> ResultsTable:
        return self.query_one(ResultsTable)

    def _status(self, text: Text | str) -> None:
        self._showing_keys = False
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
        if not self.past_queries or self.past_queries[-1] != sql:
            self.past_queries.append(sql)
            write_query_history(self.project, self.past_queries)
        self.position = None
        self._close_stream()
        self.serial += 1
        self.started = time.perf_counter()
        self.last_sql = sql
        self.running = True
        self.total = None
        stop = f"{self.hints('query.leave')} or {self.hints('query.stop')} stops"
        self._status(Text(f"running… ({stop})", "yellow"))
        self._query(self.serial, sql)

    def _close_stream(self) -> None:
        stream, self.stream = self.stream, None
        if stream is not None:
            self._discard(stream)

    def _discard(self, stream: ResultStream) -> None:
        """Close a result no longer shown (a group of its own: an exclusive group could
        cancel a close not yet started, and the file would stay held)."""
        stream.interrupt()
        run_in_thread(self, stream.close, group=f"close-{id(stream)}", description="closing")

    def _waiting(self, serial: int) -> LockWaitListener:
        def said(holder: str, waited_s: float) -> None:
            if self._stop_serial == serial:  # esc while waiting: give up the wait
                raise QueryStopped("stopped")
            self.post_message(StoreWaiting(holder, waited_s, serial))

        return said

    def _query(self, serial: int, sql: str) -> None:
        def work() -> None:
            started = time.perf_counter()
            try:
                with lock_waits_reported(self._waiting(serial)):
                    stream = ResultStream(self.store, sql)
                    if serial == self.serial:
                        self.stream = stream
                    if self._stop_serial == serial:
                        stream.interrupt()
                    stream.start()
                    rows = stream.fetch(PAGE_ROWS) if stream.returns_rows else []
            except (StoreError, StoreBusy) as exc:  # the user's SQL: said in the pane
                self._post_failure(serial, exc)
                return
            elapsed = time.perf_counter() - started
            if serial != self.serial:  # another query was started meanwhile
                stream.close()
                return
            self.post_message(QueryRows(serial, stream, rows, True, elapsed))

        run_in_thread(self, work, group="query", description="running the query")

    def _post_failure(self, serial: int, exc: Exception) -> None:
        detail = exc.detail if isinstance(exc, UserSqlError) else str(exc)
        stopped = isinstance(exc, QueryStopped)
        self.post_message(QueryFailed(serial, str(exc), detail, stopped))

    def _more(self) -> None:
        stream, serial = self.stream, self.serial
        if stream is None or stream.exhausted or self._fetching:
            return
        self._fetching = True

        def work() -> None:
            started = time.perf_counter()
            try:
                with lock_waits_reported(self._waiting(serial)):
                    rows = stream.fetch(PAGE_ROWS)
            except (StoreError, StoreBusy) as exc:
                self._post_failure(serial, exc)
                return
            finally:
                self._fetching = False
            self.post_message(QueryRows(serial, stream, rows, False, time.perf_counter() - started))

        run_in_thread(self, work, group="more", description="fetching more rows")

    def _count(self, serial: int, stream: ResultStream) -> None:
        """Started once the first page is on screen, so counting (as slow as the whole
        query) never competes with drawing it."""

        def work() -> None:
            try:
                total = stream.count()
            except (StoreError, StoreBusy):
                return  # the rows are shown; the label keeps saying "so far"
            self.post_message(QueryCounted(serial, total))

        run_in_thread(self, work, group="count", description="counting the query's rows")

    @on(QueryRows)
    def _rows(self, message: QueryRows) -> None:
        message.stop()
        if message.serial != self.serial:
            if message.first and message.stream is not self.stream:
                self._discard(message.stream)
            return
        stream: ResultStream = message.stream
        table = self.results
        if message.first:
            self.running = False
            self.elapsed_s = message.elapsed_s
            if not stream.returns_rows:
                table.start([], [], [], [])
                table.append(table.generation, [], complete=True)
                self._status(Text.assemble(("✓ ", "green"), "done (no rows returned)"))
                return
            self._shown = stream
            series = series_columns(stream.types)
            table.start(stream.columns, [str(t) for t in stream.types], series, message.rows)
            if not stream.exhausted:
                self.call_after_refresh(self._count, message.serial, stream)
        table.append(table.generation, message.rows, complete=stream.exhausted)
        if stream.exhausted:
            self.total = stream.fetched
        self._show_rows()

    def _show_rows(self) -> None:
        loaded = len(self.results.raw_rows)
        stream = self.stream
        if stream is None or stream.exhausted:
            label = fmt.plural(loaded, "row")
        elif self.total is not None:
            label = f"rows 1–{loaded:,} of {self.total:,}"
        else:
            label = f"rows 1–{loaded:,} · {loaded:,}+ so far (counting…)"
        self._status(Text.assemble(("✓ ", "green"), label, (f" · {self.elapsed_s:.2f} s", "dim")))

    @on(QueryCounted)
    def _counted(self, message: QueryCounted) -> None:
        message.stop()
        if message.serial != self.serial:
            return
        self.total = message.total
        self._show_rows()

    @on(QueryFailed)
    def _failed(self, message: QueryFailed) -> None:
        message.stop()
        if message.serial != self.serial:
            return
        self.running = False
        if message.stopped:
            self._status(Text.assemble(("■ ", "yellow"), ("stopped", "yellow")))
            return
        self._status(Text.assemble(("✗ ", "red"), (fmt.clip(message.error, 200), "red")))
        self.app.push_screen(TextViewScreen("Query failed", message.detail, error=True))

    @on(StoreWaiting)
    def _store_waiting(self, message: StoreWaiting) -> None:
        message.stop()
        if message.serial != self.serial or not self.running:
            return
        self._status(
            Text(
                f"waiting: the catalog is held by {message.holder} · "
                f"{message.waited_s:.0f} s (esc stops)",
                "yellow",
            )
        )

    @on(ResultsTable.MoreWanted)
    def _more_wanted(self, message: ResultsTable.MoreWanted) -> None:
        message.stop()
        if message.generation == self.results.generation:
            self._more()

    # --- stopping -------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "stop_query":
            return self.running  # otherwise ^c copies, as everywhere
        return super().check_action(action, parameters)

    def action_stop_query(self) -> None:
        if not self.running:
            return
        self._stop_serial = self.serial
        if self.stream is not None:
            self.stream.interrupt()
        self._status(Text("stopping…", "yellow"))

    # --- cells, export, schema ------------------------------------------------------------

    @on(ResultsTable.CellOpened)
    def _cell_opened(self, message: ResultsTable.CellOpened) -> None:
        message.stop()
        title = f"{message.column} ({message.kind.lower()})"
        self.app.push_screen(TextViewScreen(title, cell_text(message.value)))

    def action_export(self) -> None:
        sql = self.last_sql
        if not sql:
            export = self.hints("query.export")
            self._status(
                Text(f"Run a query first; {export} writes its result to a file.", "yellow")
            )
            return

        def chosen(path: Path | None) -> None:
            if path is not None:
                self._export(sql, path)

        self.app.push_screen(ExportScreen(self.project, "query-result.csv", self.hints), chosen)

    def _export(self, sql: str, path: Path) -> None:
        """The result on screen, as shown: the rows the table holds, then the rest of the
        same stream (added to the table too). Only a result no longer on screen (a query
        that failed or was stopped) is run again."""
        serial = self.serial
        self._status(Text(f"writing {path}…", "yellow"))
        stream, table = self.stream, self.results
        shown = stream is not None and stream is self._shown and stream.returns_rows
        held = list(table.raw_rows) if shown else []

        def rest() -> Iterator[list[tuple]]:
            yield held
            while stream is not None and not stream.exhausted:
                rows = stream.fetch(PAGE_ROWS * 10)
                self.post_message(QueryRows(serial, stream, rows, False, 0.0))
                yield rows

        def work() -> None:
            try:
                with lock_waits_reported(self._waiting(serial)):
                    if shown and stream is not None:
                        self._fetching = True  # the pages arrive in order, from here alone
                        try:
                            rows = export_rows(stream.columns, stream.types, rest(), path)
                        finally:
                            self._fetching = False
                    else:
                        rows = export_result(self.store, sql, path)
            except (StoreError, StoreBusy) as exc:
                self._post_failure(serial, exc)
                return
            self.post_message(QueryExported(str(path), rows))

        run_in_thread(self, work, group="export", description="exporting the result")

    @on(QueryExported)
    def _exported(self, message: QueryExported) -> None:
        message.stop()
        self._status(
            Text.assemble(
                ("✓ ", "green"), f"wrote {fmt.plural(message.rows, 'row')} to ", message.path
            )
        )

    def load_outline(self) -> None:
        def work() -> None:
            try:
                relations = outline(self.store)
            except (StoreError, StoreBusy):
                return  # no sidebar and no completion this time; F9 tries again
            self.post_message(OutlineLoaded(relations))

        run_in_thread(self, work, group="outline", description="reading the catalog's tables")

    @on(OutlineLoaded)
    def _outline_loaded(self, message: OutlineLoaded) -> None:
        message.stop()
        self.outline = message.relations
        self.query_one(SchemaTree).show(message.relations)
        words: dict[str, str] = {}
        for relation in message.relations:
            for column, _kind in relation.columns:
                words.setdefault(column, "column")
        for relation in message.relations:
            words[relation.name] = relation.kind
        self.editor.set_vocabulary(words)

    def action_toggle_schema(self) -> None:
        tree = self.query_one(SchemaTree)
        tree.display = not tree.display
        if tree.display and self.outline is None:
            self.load_outline()

    # --- history --------------------------------------------------------------------------

    def action_history_previous(self) -> None:
        if not self.past_queries:
            return
        self.position = (
            len(self.past_queries) - 1 if self.position is None else max(self.position - 1, 0)
        )
        self.editor.load_text(self.past_queries[self.position])

    def action_history_next(self) -> None:
        if self.position is None:
            return
        if self.position >= len(self.past_queries) - 1:
            self.position = None
            self.editor.load_text("")
            return
        self.position += 1
        self.editor.load_text(self.past_queries[self.position])

    def action_history_list(self) -> None:
        def chosen(sql: str | None) -> None:
            if sql:
                self.editor.load_text(sql)
                self.editor.focus()

        self.app.push_screen(QueryHistoryPicker(self.past_queries, self.hints), chosen)

    def action_leave_editor(self) -> None:
        if self.running:
            self.action_stop_query()
            return
        self.results.focus()

    def action_focus_results(self) -> None:
        if self.editor.has_focus:
            self.query_one(ResultsTable).focus()
        else:
            self.editor.focus()
