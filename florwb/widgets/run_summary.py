"""The pane under the version history: what the highlighted run or version is, at a glance.

It is rebuilt from data the history already holds (no query), so moving the cursor
updates it within a frame even on a project with a thousand runs.
"""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.text import Text
from textual.widgets import Static

from florwb.ui import format as fmt
from florwb.ui import keys
from florwb.ui.history_rows import HistoryRow, run_status, took_text
from florwb.widgets.sparkline import sparkline
from florwb_engine.store.hints import data_wait_hint
from florwb_engine.store.queries import RunRow
from florwb_engine.store.run_selection import is_condition
from florwb_engine.watch import PendingStatements


def data_wait_line(share: float | None, wait_s: float | None) -> str | None:
    hint = data_wait_hint(share, wait_s)
    return f"hint: {hint}" if hint else None


class RunSummary(Static):
    """Two to four lines about the highlighted row; `shown_key` says which row it shows."""

    shown_key: str | None = None

    def __init__(self, *args: Any, hints: keys.KeyHints | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.hints = hints or keys.KeyHints()

    def show(
        self,
        row: HistoryRow | None,
        *,
        metric: str | None,
        series: list[float] | None,
        last: float | None,
        pending: list[PendingStatements],
        live: str | None = None,
        low: float | None = None,
        high: float | None = None,
        text_filter: str = "",
        values_pending: bool = False,
    ) -> None:
        self.shown_key = row.key if row is not None else None
        if row is None and text_filter and is_condition(text_filter):
            self.update(
                Text.assemble(
                    "No run matches the condition ",
                    (text_filter, "bold"),
                    " (SQL over runs, args as columns, as `florwb replay --where`); "
                    "esc clears the filter.",
                )
            )
        elif row is None and text_filter:
            self.update(
                Text.assemble(
                    "No run matches ",
                    (text_filter, "bold"),
                    ". Every word must appear in the run id, version, status, script or args; "
                    "esc clears the filter.",
                )
            )
        elif row is None:
            self.update("No runs recorded yet. Run a training script that imports florwb.")
        elif row.run is not None:
            self.update(self._run(row.run, metric, series, (last, low, high), live, values_pending))
        else:
            self.update(self._version(row, pending))

    def _run(
        self,
        run: RunRow,
        metric: str | None,
        series: list[float] | None,
        numbers: tuple[float | None, float | None, float | None],
        live: str | None,
        values_pending: bool = False,
    ) -> Group:
        """`numbers`: the exact last, min and max over all the run's values (the
        sparkline averages, so its own extremes would hide spikes)."""
        last, low, high = numbers
        status = run_status(run)
        head = Text()
        head.append(f"run {run.run_id}", "bold")
        head.append(
            f"  {fmt.STATUS_ICONS.get(status, '?')} {status}", fmt.STATUS_STYLES.get(status, "")
        )
        if run.exception:
            head.append(f" ({run.exception})", "red")
        if live:
            head.append(f" {live}", "yellow")
        head.append(f" · {took_text(run)} · version {fmt.short_version(run.version)}")
        head.append(f" · {run.script or '?'}")
        lines = [head]
        lines.append(Text.assemble(("args  ", "dim"), fmt.args_text(run.args) or "none"))
        if metric and series:
            spark = Text.assemble(
                (f"{metric}  ", "dim"),
                (sparkline(series, 32), "cyan"),
                f"  last {fmt.number(last)}",
            )
            if low is not None and high is not None:
                spark.append(f"  min {fmt.number(low)}  max {fmt.number(high)}")
            lines.append(spark)
        elif metric and values_pending:
            lines.append(Text.assemble((f"{metric}  ", "dim"), ("reading its values…", "dim")))
        facts = [
            f"{run.n_logs:,} logs",
            f"{run.n_checkpoints} checkpoints",
            f"data wait {fmt.percent(run.data_wait_share)}",
        ]
        if run.replays:
            facts.append(
                f"replayed by {len(run.replays)} replay" + ("s" if len(run.replays) > 1 else "")
            )
        lines.append(Text(" · ".join(facts) + f"   {self.hints('history.open')} details", "dim"))
        if run.verdict == "diverged":
            why = run.verdicts[-1].get("divergence") or "a value differed"
            lines.append(Text(f"replay diverged, its values withheld: {why}", "yellow"))
        hint = data_wait_line(run.data_wait_share, run.data_wait_s)
        if hint:
            lines.append(Text(hint, "yellow"))
        return Group(*lines)

    def _version(self, row: HistoryRow, pending: list[PendingStatements]) -> Group:
        head = Text()
        head.append(f"version {row.version or '(none)'}", "bold")
        lines = [head]
        facts = [fmt.plural(row.n_runs, "run")]
        if row.info is not None:
            facts.append(f"first seen {fmt.clock(row.info.first_seen)}")
            files = fmt.plural(row.info.n_files or 0, "file")
            facts.append(f"{files}, {fmt.size(row.info.n_bytes)}")
        lines.append(Text(" · ".join(facts)))
        new = [n for p in pending for n in p.new]
        if new:
            lines.append(
                Text(
                    f"working tree has log statements not recorded yet: {', '.join(new)}", "yellow"
                )
            )
        diff, mark = self.hints("history.open"), self.hints("history.mark")
        lines.append(Text(f"{diff} log-statement diff · {mark} mark to compare versions", "dim"))
        return Group(*lines)
