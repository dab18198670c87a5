"""Every key binding of the workbench, as data with ids (the Posting / W&B approach).

Screens and widgets take their BINDINGS from this table. Each id is stable, so a keymap
(`App.set_keymap({"history.filter": "f"})`, or the user's keymap file, `load_keymap`) can
rebind it; the `?` help screen and the
command palette read the table through `active_keys` with the app's keymap applied, so
what they say is what the keys do. How a key reads on screen (`enter` -> `⏎`) is a property
of the key, not of the binding (`KEY_DISPLAY`), so a rebound key reads right in the footer.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from textual.binding import Binding, BindingType

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - the same parser, before it joined the standard library
    import tomli as tomllib


@dataclass(frozen=True)
class Key:
    """One action and the keys that trigger it."""

    id: str
    keys: str  # comma-separated Textual key names or single characters
    action: str  # action name on the scope's node (e.g. "filter" -> action_filter)
    description: str
    show: bool = False  # in the footer
    label: str = ""  # short footer text (the description is for help and the palette)
    priority: bool = False
    palette: bool = True  # offered in the command palette


# Scope id -> (title in the help screen, CSS selector of the widget holding the actions on
# its screen ("": the screen itself, or the app for "app"), tab to switch to before running
# an action from the command palette). A scope without a tab lives on a modal screen: the
# screen class names it in its KEY_SCOPES, so the palette offers its keys while an instance
# of that class is on top and runs them there (`screen_scopes`).
SCOPES: dict[str, tuple[str, str, str | None]] = {
    "app": ("Everywhere", "", None),
    "history": ("Version history (1)", "#history-list", "history"),
    "statements": ("Log-statement diff (2)", "#statements-pane", "statements"),
    "replay": ("Replay (3)", "#replay-pane", "replay"),
    "query": ("Query (4)", "#query-pane", "query"),
    "run": ("Run detail", "", None),
    "plan": ("Replay plan", "", None),
    "chart": ("Chart", "", None),
    "matrix": ("Statement matrix (2)", "#matrix", "statements"),
    "results": ("Query results (4)", "#results", "query"),
    "diff": ("Code diff", "DiffView", "statements"),
    "plan_runs": ("Replay plan: runs", "PlanRunsTable", None),
    "past": ("Past replays (3)", "#past-replays", "replay"),
    "compare": ("Run comparison", "", None),
    "replay_detail": ("Replay detail", "", None),
    "editor": ("SQL editor completion (4)", "#sql", "query"),
    "textview": ("Error / cell viewer", "", None),
    "export": ("Export a result", "", None),
    "query_history": ("Query history (4, F8)", "", None),
    "metric_picker": ("Chart: find a metric", "", None),
    "help": ("This help", "", None),
    "confirm": ("A question (quit during a replay)", "", None),
    "error": ("An error", "", None),
}
APP_SCOPE = "app"

# Scopes that live on a modal screen: offered by the palette only while it is open.
SCREEN_SCOPES = frozenset(
    scope for scope, (_title, _sel, tab) in SCOPES.items() if tab is None and scope != APP_SCOPE
)


def screen_scopes(screen: object) -> tuple[str, ...]:
    """The scopes whose keys live on `screen`: its class's KEY_SCOPES (none for the
    tabs' screen)."""
    return tuple(getattr(type(screen), "KEY_SCOPES", ()))


KEYS: dict[str, tuple[Key, ...]] = {
    "app": (
        Key("app.help", "question_mark,f1", "help", "Help: every key", True, label="help"),
        Key("app.tab.history", "1", "show_tab('history')", "Version history"),
        Key("app.tab.statements", "2", "show_tab('statements')", "Log-statement diff"),
        Key("app.tab.replay", "3", "show_tab('replay')", "Replay progress"),
        Key("app.tab.query", "4", "show_tab('query')", "SQL query"),
        Key("app.replay", "r", "replay", "Replay pending log statements", True, label="replay"),
        Key("app.reload", "ctrl+r", "reload", "Reload from the store"),
        Key("app.theme", "ctrl+t", "change_theme", "Change theme"),
        Key("app.palette", "ctrl+p", "command_palette", "Command palette", palette=False),
        Key("app.quit", "q", "quit", "Quit", True, label="quit"),
    ),
    "history": (
        Key("history.down", "j,down", "cursor_down", "Next row"),
        Key("history.up", "k,up", "cursor_up", "Previous row"),
        Key("history.page_down", "pagedown", "page_down", "Page down"),
        Key("history.page_up", "pageup", "page_up", "Page up"),
        Key("history.first", "g,home", "first", "First row"),
        Key("history.last", "G,end", "last", "Last row"),
        Key(
            "history.open",
            "enter",
            "open",
            "Open run detail / version diff",
            True,
            label="open",
        ),
        Key("history.mark", "space", "mark", "Mark run or version", True, label="mark"),
        Key("history.unmark", "u", "unmark_all", "Clear marks"),
        Key("history.filter", "slash", "filter", "Filter runs", True, label="filter"),
        Key(
            "history.metric", "m", "next_metric", "Next metric for sparklines", True, label="metric"
        ),
        Key("history.metric_back", "M", "previous_metric", "Previous metric"),
        # not in the footer: at 80 columns it would push `q quit` off (help and palette list it)
        Key("history.chart", "c", "chart", "Chart marked runs (or the version)"),
        Key("history.sort", "s", "cycle_sort", "Sort runs by the next column"),
        Key("history.sort_reverse", "S", "reverse_sort", "Reverse the sort order"),
        Key("history.compare", "v", "compare", "Compare the two marked runs"),
    ),
    "statements": (
        Key(
            "statements.base",
            "b",
            "toggle_base",
            "Diff against tree / marked version",
            True,
            label="base",
        ),
        Key("statements.diff", "d", "focus_diff", "Focus the code diff"),
        Key("statements.matrix", "x", "focus_matrix", "Focus the matrix"),
        Key("statements.search", "slash", "search_diff", "Search the code diff"),
    ),
    # ⏎ on a cell of the matrix (DataTable's select) plans its replay: said in help here
    "diff": (
        Key("diff.search", "slash", "search", "Search the diff", True, label="search"),
        Key("diff.next", "n", "next_match", "Next match", True, label="next"),
        Key("diff.previous", "N", "previous_match", "Previous match"),
    ),
    "plan_runs": (
        Key(
            "plan_runs.toggle",
            "space",
            "toggle_run",
            "Include / exclude the run",
            True,
            label="include",
        ),
    ),
    "past": (
        Key(
            "past.open", "enter", "open_replay", "Open the replay's details", True, label="details"
        ),
    ),
    "compare": (
        Key("compare.back", "escape,q", "back", "Back", True, label="back"),
        Key("compare.diff", "d", "focus_diff", "Focus the code diff"),
    ),
    "replay_detail": (
        Key("replay_detail.back", "escape,backspace,q", "back", "Back", True, label="back"),
    ),
    "replay": (
        Key("replay.cancel", "c", "cancel", "Cancel the running replay", True, label="cancel"),
        Key("replay.past", "p", "focus_past", "Focus past replays"),
    ),
    "query": (
        Key("query.run", "ctrl+enter,ctrl+j,f5", "run_query", "Run query", True, label="run"),
        Key("query.previous", "ctrl+up", "history_previous", "Previous query in history"),
        Key("query.next", "ctrl+down", "history_next", "Next query in history"),
        Key(
            "query.history", "f8", "history_list", "Pick from query history", True, label="history"
        ),
        Key("query.results", "ctrl+o", "focus_results", "Focus results / editor"),
        Key("query.leave", "escape", "leave_editor", "Stop the query / leave the editor"),
        Key("query.stop", "ctrl+c", "stop_query", "Stop the running query", priority=True),
        Key(
            "query.export",
            "ctrl+e",
            "export",
            "Export the result to a file",
            True,
            label="export",
            priority=True,  # the editor's ^e (end of line) would take it otherwise
        ),
        Key("query.schema", "f9", "toggle_schema", "Show / hide the schema", True, label="schema"),
    ),
    "run": (
        Key("run.back", "escape,backspace", "back", "Back", True, label="back"),
        Key("run.down", "j,down", "scroll_down", "Scroll down"),
        Key("run.up", "k,up", "scroll_up", "Scroll up"),
        Key("run.first", "g,home", "first", "Top"),
        Key("run.last", "G,end", "last", "Bottom"),
        Key("run.find", "slash", "find", "Find a metric by name", True, label="find"),
        Key(
            "run.replay",
            "r",
            "replay_run",
            "Replay pending statements: this run",
            True,
            label="replay",
        ),
    ),
    # The vim keys of the tables (arrows, home/end are DataTable's own).
    "matrix": (
        Key("matrix.down", "j", "cursor_down", "Next statement"),
        Key("matrix.up", "k", "cursor_up", "Previous statement"),
        Key("matrix.left", "h", "cursor_left", "Previous version"),
        Key("matrix.right", "l", "cursor_right", "Next version"),
        Key("matrix.first", "g", "scroll_top", "First statement"),
        Key("matrix.last", "G", "scroll_bottom", "Last statement"),
        Key(
            "matrix.replay",
            "enter",
            "select_cursor",
            "Replay the cell's statement",
            True,
            label="replay cell",
        ),
    ),
    "results": (
        Key("results.down", "j", "cursor_down", "Next row"),
        Key("results.up", "k", "cursor_up", "Previous row"),
        Key("results.first", "g", "scroll_top", "First row"),
        Key("results.last", "G", "scroll_bottom", "Last loaded row (loads more)"),
        Key("results.open", "enter", "open_cell", "Open the cell's whole value"),
    ),
    # Only while the completion list is open; otherwise the keys do what they always do.
    "editor": (
        Key("editor.accept", "tab", "accept_completion", "Accept the completion"),
        Key("editor.down", "down", "completion_down", "Next completion", palette=False),
        Key("editor.up", "up", "completion_up", "Previous completion", palette=False),
        Key("editor.close", "escape", "close_completion", "Close the completion list"),
    ),
    "textview": (Key("textview.close", "escape,q", "close", "Close", True, label="close"),),
    "export": (Key("export.close", "escape", "close", "Cancel the export", True, label="cancel"),),
    "query_history": (Key("query_history.close", "escape", "dismiss(None)", "Close the history"),),
    "metric_picker": (Key("metric_picker.close", "escape", "dismiss(None)", "Close the picker"),),
    "help": (
        Key("help.close", "escape,question_mark,q", "close", "Close the help"),
        Key("help.find", "slash", "find", "Search the keys"),
    ),
    "confirm": (
        Key("confirm.yes", "y,enter", "answer(True)", "Yes", palette=False),
        Key("confirm.no", "n,escape,q", "answer(False)", "No", palette=False),
    ),
    "error": (
        Key("error.close", "escape,enter,q", "dismiss_error", "Close the error"),
        Key("error.details", "t", "toggle_details", "Show / hide the error's traceback"),
    ),
    "chart": (
        Key("chart.back", "escape,backspace", "back", "Back", True, label="back"),
        Key("chart.axis", "x", "next_axis", "x axis: steps / epochs / wall time", True, "axis"),
        Key("chart.log", "l", "toggle_log", "Log scale on/off", True, label="log"),
        Key("chart.smooth", "s", "next_smoothing", "Smoothing 0 / 0.6 / 0.9", True, "smooth"),
        Key("chart.narrow", "plus,equals_sign", "zoom(0.5)", "Narrow the x range"),
        Key("chart.widen", "minus", "zoom(2.0)", "Widen the x range"),
        Key("chart.cursor_left", "left", "cursor(-1)", "Cursor left: each run's value there"),
        Key("chart.cursor_right", "right", "cursor(1)", "Cursor right", True, "cursor"),
        Key("chart.left", "shift+left,comma", "pan(-0.25)", "Move the x range left"),
        Key("chart.right", "shift+right,full_stop", "pan(0.25)", "Move the x range right"),
        Key("chart.all", "0", "reset_zoom", "Show the whole x range"),
        Key("chart.metric", "m", "metric(1)", "Next metric"),
        Key("chart.metric_back", "M", "metric(-1)", "Previous metric"),
        Key("chart.find", "slash,f", "find_metric", "Find a metric (fuzzy)", True, "find"),
        Key("chart.grid", "g", "toggle_grid", "Grid of several metrics", True, "grid"),
        Key("chart.next_page", "right_square_bracket,pagedown", "page(1)", "Grid: next page"),
        Key("chart.prev_page", "left_square_bracket,pageup", "page(-1)", "Grid: previous page"),
    ),
    "plan": (
        Key("plan.start", "enter,y", "start", "Start the replay", True, label="start"),
        Key("plan.close", "escape,n", "close", "Close without replaying", True, label="close"),
        Key("plan.more", "plus", "workers(1)", "More workers", True, label="workers"),
        Key("plan.fewer", "minus", "workers(-1)", "Fewer workers", True, label="workers"),
    ),
}


# Key name -> how it reads in the footer, the help and the palette (others: Textual's way).
KEY_DISPLAY = {
    "question_mark": "?",
    "slash": "/",
    "enter": "⏎",
    "space": "␣",
    "escape": "esc",
    "ctrl+enter": "^⏎",
    "plus": "+",
    "minus": "-",
    "equals_sign": "=",
    **{f"f{n}": f"F{n}" for n in range(1, 13)},
}


def bindings(scope: str) -> list[BindingType]:
    """Textual bindings for one scope, each carrying its id from the table."""
    return [
        Binding(
            key.keys,
            key.action,
            key.label or key.description,
            show=key.show,
            priority=key.priority,
            id=key.id,
        )
        for key in KEYS[scope]
    ]


def active_keys(key: Key, keymap: Mapping[str, str]) -> list[str]:
    """The key names that trigger `key` once `keymap` (binding id -> keys) is applied."""
    names = keymap.get(key.id, key.keys)
    return [name.strip() for name in names.split(",") if name.strip()]


class KeyHints:
    """The keys in force, for lines of text that name one ("c cancels"): the app keeps
    `keymap` current (`set_keymap`) and hands this object to the panes it builds, so a hint
    names the key that works, as the help, the palette and the footer do."""

    def __init__(self, display: Callable[[str], str] | None = None) -> None:
        self.keymap: Mapping[str, str] = {}
        self.display = display or (lambda name: KEY_DISPLAY.get(name, name))

    def __call__(self, key_id: str) -> str:
        """How the first key bound to `key_id` reads (`c`, `⏎`); `none` when unbound."""
        active = active_keys(find(key_id)[1], self.keymap)
        return self.display(active[0]) if active else "none"


def find(key_id: str) -> tuple[str, Key]:
    for scope, entries in KEYS.items():
        for key in entries:
            if key.id == key_id:
                return scope, key
    raise KeyError(key_id)


KEYMAP_FILE = Path("florwb") / "keymap.toml"


def keymap_path() -> Path:
    """The user's keymap file: `$XDG_CONFIG_HOME/florwb/keymap.toml`, else under
    `~/.config`."""
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / KEYMAP_FILE


def load_keymap(path: Path | None = None) -> tuple[dict[str, str], str | None]:
    """The keymap in the user's file (binding id -> keys) and a one-line warning.

    The file maps binding ids (those `?` lists) to keys, a string of comma-separated key
    names or a list of them: `history.filter = "f"` (TOML reads the dotted id as a table,
    as does `[history]` then `filter = "f"`). No file: no keymap, no warning. A file that
    does not parse or names an unknown id or a value that is no key is ignored whole, so
    the defaults stay in force, and the warning says why."""
    path = keymap_path() if path is None else path
    try:
        with path.open("rb") as handle:
            data = tomllib.load(handle)
    except FileNotFoundError:
        return {}, None
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        return {}, f"{path}: ignored ({_first_line(exc)}); the default keys are in force"
    keymap: dict[str, str] = {}
    problem = _flatten(data, "", keymap)
    if problem:
        return {}, f"{path}: ignored ({problem}); the default keys are in force"
    return keymap, None


def _flatten(table: Mapping[str, object], prefix: str, out: dict[str, str]) -> str | None:
    """Fill `out` with binding id -> keys from a parsed keymap; the first problem, if any."""
    for name, value in table.items():
        key_id = f"{prefix}{name}"
        if isinstance(value, Mapping):
            problem = _flatten(value, f"{key_id}.", out)
            if problem:
                return problem
            continue
        try:
            find(key_id)
        except KeyError:
            return f"no key {key_id!r}: `?` lists the ids"
        if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
            value = ",".join(value)
        if not isinstance(value, str) or not any(part.strip() for part in value.split(",")):
            return f"{key_id}: expected a key name or a list of them"
        out[key_id] = ",".join(part.strip() for part in value.split(",") if part.strip())
    return None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
