"""The log-statement diff tab: which statement is in which version, and the code diff.

The matrix comes from the propagation engine's own analysis (`statement_matrix`), so a
cell never promises a placement that replay would refuse; replayed values come from the
store. Reading old versions and matching syntax trees is slow, so it runs in a worker.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.containers import ScrollableContainer, Vertical
from textual.widgets import DataTable, Static

from florwb.widgets.code_diff import render_diff
from florwb.workbench import format as fmt
from florwb.workbench import keys
from florwb.workbench.messages import MatrixLoaded, WorkFailed
from florwb_engine.store.queries import replayed_names
from florwb_engine.watch.pending import recorded_source

if TYPE_CHECKING:
    from florwb.app import WorkbenchApp

WORKING = "working tree"
MAX_VERSIONS = 10
LEGEND = "● recorded  ↻ replayed  → propagatable  ✗ cannot place"
CELL_TEXT = {
    "recorded": ("● L{line}", "green"),
    "replayed": ("↻ replayed", "cyan"),
    "propagatable": ("→ L{line}", "yellow"),
    "cannot place": ("✗ no", "red"),
    "in tree": ("● L{line}", "bold green"),
    "absent": ("-", "dim"),
}


class StatementsPane(Vertical, can_focus=False):
    """Matrix of log statements x versions above a diff of the chosen version."""

    BINDINGS = keys.bindings("statements")
    DEFAULT_CSS = """
    StatementsPane #statements-title { height: 1; text-style: bold; }
    StatementsPane #matrix { height: auto; max-height: 9; }
    StatementsPane #cell-reason { height: auto; max-height: 2; color: $text-muted; }
    StatementsPane #diff-title { height: 1; text-style: bold; border-top: solid $primary-darken-2;
        height: 2; }
    StatementsPane #diff-scroll { height: 1fr; overflow: auto auto; }
    StatementsPane #diff { width: auto; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.data: MatrixLoaded | None = None
        self.base_is_marked = False

    @property
    def workbench(self) -> WorkbenchApp:
        return self.app  # type: ignore[return-value]

    def compose(self) -> ComposeResult:
        yield Static("Reading versions…", id="statements-title")
        table: DataTable = DataTable(id="matrix", cursor_type="cell", zebra_stripes=True)
        yield table
        yield Static(id="cell-reason")
        yield Static(id="diff-title")
        with ScrollableContainer(id="diff-scroll"):
            yield Static(id="diff")

    # --- loading --------------------------------------------------------------------------

    def load(self) -> None:
        history = self.workbench.history
        if history is None:
            return
        scripts = [r.script for r in reversed(history.runs) if r.script]
        if not scripts:
            self.query_one("#statements-title", Static).update("No recorded scripts yet.")
            return
        wanted = self.workbench.selected_version
        script = next(
            (r.script for r in reversed(history.runs) if r.version == wanted and r.script),
            scripts[0],
        )
        order = [v.version for v in history.versions]
        counts: dict[str, int] = {}
        for run in history.runs:
            if run.script == script and run.version:
                counts[run.version] = counts.get(run.version, 0) + 1
        chosen = [v for v in order if v in counts] + [v for v in counts if v not in order]
        if len(chosen) > MAX_VERSIONS:
            keep = chosen[-MAX_VERSIONS:]
            if wanted in chosen and wanted not in keep:
                keep = [wanted, *keep[1:]]
            chosen = keep
        self._load(self.workbench.project, script, chosen, counts)

    @work(thread=True, exclusive=True, group="matrix")
    def _load(self, project: Path, script: str, chosen: list[str], counts: dict[str, int]) -> None:
        try:
            self.post_message(_build_matrix(project, script, chosen, counts, self.workbench.store))
        except Exception as exc:  # shown, never raised into the event loop
            self.post_message(WorkFailed("log-statement diff", str(exc).splitlines()[0]))

    @on(MatrixLoaded)
    def _loaded(self, message: MatrixLoaded) -> None:
        message.stop()
        self.data = message
        title = f"{message.script}: {LEGEND}"
        if message.note:
            title += f" · {message.note}"
        self.query_one("#statements-title", Static).update(Text(fmt.clip(title, 400)))
        table = self.query_one("#matrix", DataTable)
        table.clear(columns=True)
        table.add_column("statement", key="name")
        for version in message.versions:
            label = (
                WORKING
                if version == WORKING
                else (f"{fmt.short_version(version)} ({message.runs_per_version.get(version, 0)})")
            )
            table.add_column(label, key=version)
        for name in message.names:
            cells = [Text(name, "bold")]
            for version in message.versions:
                status, line, _reason = message.cells[(name, version)]
                label, style = CELL_TEXT[status]
                cells.append(Text(label.format(line=line), style))
            table.add_row(*cells, key=name)
        start = self.workbench.selected_version
        if start in message.versions:
            table.move_cursor(column=message.versions.index(start) + 1, row=0)
        elif len(message.versions) > 1:
            table.move_cursor(column=len(message.versions) - 1, row=0)
        self._show_cell()
        self.show_diff()

    # --- cursor, reason, diff -------------------------------------------------------------

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
        version = data.versions[column - 1] if column >= 1 else None
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
                if self.data.cells[(name, v)][0] in ("recorded", "in tree")
            ]
            reason.update(f"{name}: in {len(present)} of {len(self.data.versions)} columns")
            return
        status, line, why = self.data.cells[(name, version)]
        where = WORKING if version == WORKING else f"version {fmt.short_version(version)}"
        explain = {
            "recorded": f"recorded by its runs, at line {line}",
            "in tree": f"at line {line} of the working tree",
            "absent": "not in the working tree",
            "replayed": "filled in for its runs by a replay",
            "propagatable": f"propagatable: would be inserted at line {line}; r replays it",
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
            version = (
                self.workbench.selected_version
                if self.workbench.selected_version in versions_only
                else None
            )
            version = version or (versions_only[-1] if versions_only else None)
        base = WORKING if WORKING in data.sources else None
        marked = [v for v in self.workbench.marked_versions if v in data.sources and v != version]
        if self.base_is_marked and marked:
            base = marked[0]
        title = self.query_one("#diff-title", Static)
        target = self.query_one("#diff", Static)
        if version is None or base is None or version not in data.sources:
            title.update("No code to compare.")
            target.update("")
            return
        base_label = WORKING if base == WORKING else f"version {fmt.short_version(base)}"
        title.update(
            Text.assemble(
                (f"diff version {fmt.short_version(version)} → {base_label}", "bold"),
                ("  ◆ log statement · b: other base", "dim"),
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
        diff.no_wrap = True
        target.update(diff)

    # --- actions --------------------------------------------------------------------------

    def action_toggle_base(self) -> None:
        if not self.workbench.marked_versions:
            self.app.notify("Mark a version in the history (space) to compare against it.")
            self.base_is_marked = False
        else:
            self.base_is_marked = not self.base_is_marked
        self.show_diff()

    def action_focus_diff(self) -> None:
        self.query_one("#diff-scroll").focus()

    def action_focus_matrix(self) -> None:
        self.query_one("#matrix").focus()


def _build_matrix(
    project: Path, script: str, chosen: list[str], counts: dict[str, int], store
) -> MatrixLoaded:
    from florwb_engine.propagate import PropagationError, find_log_statements, statement_matrix

    sources: dict[str, str] = {}
    missing = 0
    for version in chosen:
        text = recorded_source(project, version, script)
        if text is None:
            missing += 1
            continue
        sources[version] = text
    working_path = project / script
    if working_path.is_file():
        sources[WORKING] = working_path.read_text(encoding="utf-8", errors="replace")
    note = f"{missing} versions without a code snapshot" if missing else None
    if not sources:
        return MatrixLoaded(script, [], [], {}, {}, counts, note or "no code")
    reference = WORKING if WORKING in sources else list(sources)[-1]
    try:
        matrix = statement_matrix(sources, reference)
    except PropagationError as exc:
        # The working tree does not parse (mid-edit): compare the recorded versions only.
        sources.pop(WORKING, None)
        if not sources:
            raise
        note = f"working tree: {exc}"
        reference = list(sources)[-1]
        matrix = statement_matrix(sources, reference)
    replayed = replayed_names(store)
    cells: dict[tuple[str, str], tuple[str, int | None, str | None]] = {}
    for name in matrix.names:
        for version in matrix.versions:
            cell = matrix.cell(name, version)
            if version == WORKING:
                status = "in tree" if cell.status == "present" else "absent"
            elif cell.status == "present":
                status = "recorded"
            elif name in replayed.get(version, set()):
                status = "replayed"
            else:
                status = cell.status
            cells[(name, version)] = (status, cell.line, cell.reason)
    log_lines = {}
    for version, source in sources.items():
        try:
            log_lines[version] = {s.line for s in find_log_statements(source)}
        except PropagationError:
            log_lines[version] = set()
    return MatrixLoaded(
        script, list(matrix.versions), list(matrix.names), cells, sources, counts, note, log_lines
    )
