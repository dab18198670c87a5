"""One past replay in full: its names, status, and per run what the plan said (mode,
segments, why a run was skipped) and how it ended (status, rows, fidelity check, the
error's last lines).

Pushed by ⏎ on a row of the Replay tab's past replays; everything it shows is in the
replay's row (`replays.detail`: the plan and the results), so nothing is read.
"""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Header, Static

from florwb.ui import format as fmt
from florwb.ui import keys
from florwb_engine.store.queries import ReplayRow

STATUS_STYLE = {
    "finished": "green",
    "diverged": "yellow",
    "cancelled": "magenta",
    "failed": "red",
    "partial": "yellow",
    "running": "yellow",
    "skip": "yellow",
    "done": "dim",
    "ready": "green",
}


def render_replay(replay: ReplayRow) -> Group:
    detail = replay.detail
    head = Text()
    head.append(f"replay {replay.replay_id}", "bold")
    status = replay.status or "?"
    head.append(f"  {status}", STATUS_STYLE.get(status, ""))
    took = (
        (replay.ended - replay.started).total_seconds() if replay.ended and replay.started else None
    )
    facts = [
        f"names {replay.names or '-'}",
        f"started {fmt.clock(replay.started)}",
        f"took {fmt.duration(took)}",
        f"{replay.rows:,} rows",
    ]
    if detail.get("workers"):
        facts.append(fmt.plural(int(detail["workers"]), "worker"))
    if detail.get("estimate_s") is not None:
        facts.append(f"estimated {fmt.duration(float(detail['estimate_s']))}")
    parts: list[Any] = [head, Text(" · ".join(facts), "dim")]
    results = {r.get("run_id"): r for r in detail.get("results", []) if isinstance(r, dict)}
    planned = [r for r in detail.get("runs", []) if isinstance(r, dict)]
    if not planned and not results:
        parts.append(Text("\nNo per-run detail was kept for this replay.", "dim"))
        return Group(*parts)
    table = Table(box=None, padding=(0, 1), show_edge=False, header_style="bold")
    for column in ("run", "version", "mode", "planned", "ended", "rows", "checked"):
        table.add_column(column, no_wrap=True, justify="right" if column == "rows" else "left")
    errors: list[Text] = []
    for run in planned or [{"run_id": run_id} for run_id in results]:
        run_id = str(run.get("run_id"))
        result = results.get(run_id, {})
        plan_status = str(run.get("status") or "-")
        ended = str(result.get("status") or ("not run" if plan_status != "ready" else "-"))
        table.add_row(
            fmt.short_run(run_id),
            fmt.short_version(run.get("version")),
            str(run.get("mode") or "-"),
            Text(plan_status, STATUS_STYLE.get(plan_status, "")),
            Text(ended, STATUS_STYLE.get(ended, "")),
            f"{int(result.get('rows') or 0):,}" if result else "-",
            str(result.get("compared") or "-") if result else "-",
        )
        why = run.get("reason")
        if why and plan_status != "ready":
            errors.append(Text.assemble((f"{fmt.short_run(run_id)} {plan_status}: ", "bold"), why))
        if result.get("error"):
            errors.append(
                Text.assemble((f"{fmt.short_run(run_id)} failed: ", "bold red"), result["error"])
            )
        if result.get("divergence"):
            errors.append(
                Text.assemble(
                    (f"{fmt.short_run(run_id)} diverged: ", "bold yellow"), result["divergence"]
                )
            )
    parts += [Text("\nruns", "bold underline"), table]
    if errors:
        parts += [Text("\nwhy", "bold underline"), *errors]
    return Group(*parts)


class ReplayDetailScreen(Screen[None]):
    """The replay's runs with their statuses and errors; esc goes back."""

    BINDINGS = keys.bindings("replay_detail")
    KEY_SCOPES = ("replay_detail",)
    DEFAULT_CSS = """
    ReplayDetailScreen #replay-detail-scroll { padding: 0 1; }
    """

    def __init__(self, replay: ReplayRow) -> None:
        super().__init__()
        self.replay = replay

    def compose(self) -> ComposeResult:
        yield Header(icon=fmt.TITLE_ICON)
        with VerticalScroll(id="replay-detail-scroll"):
            yield Static(render_replay(self.replay), id="replay-detail")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        self.query_one("#replay-detail-scroll").focus()

    def action_back(self) -> None:
        self.dismiss(None)
