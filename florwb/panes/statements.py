"""The log-statement diff tab: which statement is in which version, and the code diff.

The table is the engine's (`florwb_engine.statements`: propagation's own analysis plus
the store's replayed statements), built in a worker because reading old versions and
matching syntax trees is slow. The pane owns what it shows: the app hands it the history,
the version under the history's cursor and the marked versions, and says when the code
may have changed (`invalidate`); the pane rebuilds only when it is stale and on screen.
"""

from __future__ import annotations

from pathlib import Path

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable, Static

from florwb.ui import format as fmt
from florwb.ui import keys
from florwb.ui.messages import PaneReady, ReplayRequested, StatementTableLoaded
from florwb.ui.workers import run_in_thread
from florwb.widgets.code_diff import DiffView, render_diff
from florwb.widgets.matrix_table import MatrixTable
from florwb_engine.statements import (
    WORKING,
    StatementTable,
    choose_script_and_versions,
    statement_table,
)
from florwb_engine.store import Store
from florwb_engine.store.queries import History

LEGEND = "● recorded ↻ replayed → propagatable ({replay} replays) ✗ cannot place + new"
CELL_TEXT = {
    "recorded": ("● L{line}", "green"),
    "replayed": ("↻ replayed", "cyan"),
    "propagatable": ("→ L{line}", "yellow"),
    "cannot place": ("✗ no", "red"),
    "in tree": ("● L{line}", "bold green"),
    # in the working tree, but no run recorded it and no replay filled it in yet
    "new in tree": ("+ L{line} new", "bold yellow"),
    "absent": ("-", "dim"),
}


def tree_status(table: StatementTable, name: str) -> str:
    """The working-tree cell's look: ● only where some version's runs have the statement
    (recorded or replayed); a statement no run has yet reads + new."""
    cell = table.cells[(name, WORKING)]
    if cell.status != "in tree":
        return cell.status
    had = any(
        table.cells[(name, v)].status in ("recorded", "replayed")
        for v in table.versions
        if v != WORKING
    )
    return "in tree" if had else "new in tree"


class StatementsPane(Vertical, can_focus=False):
    """Matrix of log statements x versions above a diff of the chosen version."""

    BINDINGS = keys.bindings("statements")
    DEFAULT_CSS = """
    StatementsPane #statements-title { height: 1; text-style: bold; }
    StatementsPane #matrix { height: auto; max-height: 9; }
    StatementsPane #cell-reason { height: auto; max-height: 2; color: $text-muted; }
    StatementsPane #diff-title { height: 1; text-style: bold; border-top: solid $primary-darken-2;
        height: 2; }
    StatementsPane DiffView { height: 1fr; }
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
        self.data: StatementTable | None = None
        self.base_is_marked = False
        self.history: History | None = None
        self.selected_version: str | None = None
        self.selected_script: str | None = None  # the script of the run under the cursor
        self.marked_versions: set[str] = set()
        self.stale = True
        self.order: list[str] = []  # the versions in column order (working tree first)

    def on_mount(self) -> None:
        self.post_message(PaneReady(self))

    # --- what the app hands over ----------------------------------------------------------

    def set_history(self, history: History) -> None:
        """Stale only when what the table shows can differ: the runs' scripts, versions
        and replays (a run's values growing changes no cell)."""
        shown = [(r.script, r.version, tuple(r.replays)) for r in history.runs]
        before = self.history
        if before is None or shown != [
            (r.script, r.version, tuple(r.replays)) for r in before.runs
        ]:
            self.stale = True
        self.history = history

    def select_version(self, version: str | None, script: str | None = None) -> None:
        """The history's cursor moved to `version` (the diff starts there next time); on a
        run of another script than the one shown, the table is of that script next time."""
        self.selected_version = version
        if script is not None and script != self.selected_script:
            self.selected_script = script
            self.stale = True

    def set_marked_versions(self, versions: set[str]) -> None:
        self.marked_versions = set(versions)
        self.show_diff()

    def invalidate(self) -> None:
        """The code or the replays changed: rebuild before showing the table again."""
        self.stale = True

    def refresh_if_stale(self) -> None:
        """Called when the tab is shown: rebuild the table if anything changed."""
        if self.stale:
            self.load()

    def compose(self) -> ComposeResult:
        yield Static("Reading versions…", id="statements-title")
        table = MatrixTable(id="matrix", cursor_type="cell", zebra_stripes=True)
        yield table
        yield Static(id="cell-reason")
        yield Static(id="diff-title")
        yield DiffView(hints=self.hints, id="diff-view")

    # --- loading --------------------------------------------------------------------------

    def load(self) -> None:
        history = self.history
        if history is None:
            return
        self.stale = False
        choice = choose_script_and_versions(
            ((r.script, r.version) for r in history.runs),
            [v.version for v in history.versions],
            self.selected_version,
            wanted_script=self.selected_script,
        )
        if choice is None:
            self.query_one("#statements-title", Static).update("No recorded scripts yet.")
            return
        script, chosen, counts = choice

        def work() -> None:
            table = statement_table(self.project, self.store, script, chosen, counts)
            self.post_message(StatementTableLoaded(table))

        run_in_thread(self, work, group="matrix", description="building the log-statement diff")

    @on(StatementTableLoaded)
    def _loaded(self, loaded: StatementTableLoaded) -> None:
        loaded.stop()
        kept = self._cursor_cell(self.query_one("#matrix", DataTable))  # before the rebuild
        message = self.data = loaded.table
        title = f"{message.script}: {LEGEND.format(replay=self.hints('matrix.replay'))}"
        if message.note:
            title += f" · {message.note}"
        self.query_one("#statements-title", Static).update(Text(fmt.clip(title, 400)))
        table = self.query_one("#matrix", DataTable)
        table.clear(columns=True)
        table.add_column("statement", key="name")
        # The working tree right after the statement names, both fixed: however many versions
        # scroll by on a narrow terminal, that column is never cut.
        self.order = [v for v in message.versions if v == WORKING] + [
            v for v in message.versions if v != WORKING
        ]
        table.fixed_columns = 1 + (WORKING in message.versions)
        for version in self.order:
            label = (
                WORKING
                if version == WORKING
                else (f"{fmt.short_version(version)} ({message.runs_per_version.get(version, 0)})")
            )
            table.add_column(label, key=version)
        for name in message.names:
            cells = [Text(name, "bold")]
            for version in self.order:
                cell = message.cells[(name, version)]
                status = tree_status(message, name) if version == WORKING else cell.status
                label, style = CELL_TEXT[status]
                cells.append(Text(label.format(line=cell.line), style))
            table.add_row(*cells, key=name)
        start = self.selected_version
        recorded = [v for v in self.order if v != WORKING]
        if kept is not None and kept[0] in message.names and kept[1] in self.order:
            # rebuilt (the history changed, the tab shown again): the cursor stays put
            table.move_cursor(
                row=message.names.index(kept[0]), column=self.order.index(kept[1]) + 1
            )
        elif start in self.order:
            table.move_cursor(column=self.order.index(start) + 1, row=0)
        elif recorded:  # the newest recorded version
            table.move_cursor(column=self.order.index(recorded[-1]) + 1, row=0)
        self._show_cell()
        self.show_diff()

    # --- cursor, reason, diff -------------------------------------------------------------

    def _cursor_cell(self, table: DataTable) -> tuple[str, str] | None:
        """(statement, version) under the matrix's cursor, before a rebuild."""
        if not table.row_count or not self.order:
            return None
        row, column = table.cursor_coordinate
        names = self.data.names if self.data is not None else []
        if not (0 <= row < len(names)) or not (1 <= column <= len(self.order)):
            return None
        return names[row], self.order[column - 1]

    @on(DataTable.CellHighlighted, "#matrix")
    def _cell_moved(self) -> None:
        self._show_cell()
        self.show_diff()

    def _cursor(self) -> tuple[str | None, str | None]:
        data = self.data
        table = self.query_one("#matrix", DataTable)
        if data is None or not data.names:
            return None, None
        row, column = table.cursor_coordinate
        name = data.names[min(row, len(data.names) - 1)]
        version = self.order[column - 1] if 1 <= column <= len(self.order) else None
        return name, version

    def _show_cell(self) -> None:
        name, version = self._cursor()
        reason = self.query_one("#cell-reason", Static)
        if self.data is None or name is None:
            reason.update("No log statements found." if self.data else "")
            return
        if version is None:
            present = [
                v
                for v in self.data.versions
                if self.data.cells[(name, v)].status in ("recorded", "in tree")
            ]
            reason.update(f"{name}: in {len(present)} of {len(self.data.versions)} columns")
            return
        cell = self.data.cells[(name, version)]
        line, why = cell.line, cell.reason
        status = tree_status(self.data, name) if version == WORKING else str(cell.status)
        where = WORKING if version == WORKING else f"version {fmt.short_version(version)}"
        explain = {
            "recorded": f"recorded by its runs, at line {line}",
            "in tree": f"at line {line} of the working tree",
            "new in tree": f"at line {line} of the working tree; no run has it yet",
            "absent": "not in the working tree",
            "replayed": "filled in for its runs by a replay",
            "propagatable": (
                f"propagatable: would be inserted at line {line}; "
                f"{self.hints('matrix.replay')} replays it for this "
                "version's runs"
            ),
            "cannot place": f"cannot place: {why or 'no matching place in this version'}",
        }[status]
        reason.update(Text(f"{name} in {where}: {explain}"))

    def show_diff(self) -> None:
        data = self.data
        if data is None:
            return
        _name, version = self._cursor()
        versions_only = [v for v in data.versions if v != WORKING]
        if version is None or version == WORKING:
            version = self.selected_version if self.selected_version in versions_only else None
            version = version or (versions_only[-1] if versions_only else None)
        base = WORKING if WORKING in data.sources else None
        marked = [v for v in self.marked_versions if v in data.sources and v != version]
        if self.base_is_marked and marked:
            base = marked[0]
        title = self.query_one("#diff-title", Static)
        target = self.query_one(DiffView)
        if version is None or base is None or version not in data.sources:
            title.update("No code to compare.")
            target.set_diff(Text())
            return
        base_label = WORKING if base == WORKING else f"version {fmt.short_version(base)}"
        title.update(
            Text.assemble(
                (f"diff version {fmt.short_version(version)} → {base_label}", "bold"),
                ("  ◆ log statement · b: other base · /: search", "dim"),
            )
        )
        diff = render_diff(
            data.sources[version],
            data.sources[base],
            old_name=f"{data.script} @ {fmt.short_version(version)}",
            new_name=f"{data.script} @ {base_label}",
            old_log_lines=data.log_lines.get(version, set()),
            new_log_lines=data.log_lines.get(base, set()),
        )
        target.set_diff(diff)

    # --- actions --------------------------------------------------------------------------

    def action_toggle_base(self) -> None:
        if not self.marked_versions:
            self.notify("Mark a version in the history (space) to compare against it.")
            self.base_is_marked = False
        else:
            self.base_is_marked = not self.base_is_marked
        self.show_diff()

    def action_focus_diff(self) -> None:
        self.query_one(DiffView).focus_diff()

    def action_search_diff(self) -> None:
        self.query_one(DiffView).action_search()

    @on(DataTable.CellSelected, "#matrix")
    def _cell_selected(self, event: DataTable.CellSelected) -> None:
        """⏎ on a propagatable cell plans a replay of exactly that statement for that
        version's runs (the plan screen then lets the user leave runs out)."""
        event.stop()
        self.replay_cell()

    def replay_cell(self) -> None:
        name, version = self._cursor()
        data, history = self.data, self.history
        if data is None or name is None or version is None or history is None:
            return
        cell = data.cells[(name, version)]
        if cell.status != "propagatable":
            where = WORKING if version == WORKING else f"version {fmt.short_version(version)}"
            self.notify(
                f"{name} in {where} is not propagatable ({cell.status}): "
                f"{self.hints('matrix.replay')} replays only → cells.",
                title="Replay",
            )
            return
        run_ids = [
            r.run_id for r in history.runs if r.version == version and r.script == data.script
        ]
        if not run_ids:
            self.notify(f"Version {fmt.short_version(version)} has no runs.", title="Replay")
            return
        self.post_message(ReplayRequested(run_ids, names=[name]))

    def action_focus_matrix(self) -> None:
        self.query_one("#matrix").focus()
