"""The run table's columns at a width: which fit whole, which are dropped (and said so in
the header), the sparkline's share of what is left, and the one scale every sparkline of
the column is drawn against. Pure layout: the history list draws with it."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from rich.cells import cell_len
from rich.text import Text

from florwb.ui import format as fmt
from florwb_engine.run_compare import best_is_max

# The columns of the run table in the order they are dropped when the width runs out
# (first dropped first); `run` and `final` always stay. An arg column is never cut
# mid-value: a column that does not fit whole is left out, and the header says so.
DROP_ORDER = ("common", "took", "script", "status", "spark", "best", "args", "started")
SPARK_MIN, SPARK_MAX = 8, 40
PREFIX = 5  # "  *✓ ": indent, mark, status icon
STATUS_WIDTH = 10  # a wider status (live progress) is clipped to this when room runs out


@dataclass(frozen=True)
class Column:
    key: str  # "started", "run", "script", "status", "arg:<name>", "final", "best", "spark"
    title: str
    width: int
    right: bool = False  # numbers are right-aligned

    @property
    def sortable(self) -> bool:
        return self.key != "spark"


@dataclass(frozen=True)
class Columns:
    """The run table's columns at a given widget width (the header uses them too):
    started, run, status, one column per arg that differs, the metric's final and best
    value and its sparkline. `hidden` names the columns left out for want of width."""

    columns: tuple[Column, ...]
    hidden: tuple[str, ...] = ()
    spare: int = 0  # cells left after the last column

    @classmethod
    def fit(
        cls,
        width: int,
        args: Sequence[tuple[str, int]] = (),
        metric: str | None = None,
        values: tuple[int, int] = (6, 6),
        common: Sequence[tuple[str, int]] = (),
        script: int = 0,
        status: int = STATUS_WIDTH,
    ) -> Columns:
        """`args`: (name, widest value in cells) of each arg column, in order; `values`:
        the widest final and best value; `common`: args every run has the same value of,
        shown only where the width allows (at 200 columns); `script`: the widest script
        name where the runs listed ran several scripts (a pipeline), else 0: no column;
        `status`: the widest status (a recording run's `26/60 epoch`), shown whole where
        the width allows."""
        arg_columns = [
            Column(f"arg:{name}", name, max(cell_len(name), widest, 1), right=True)
            for name, widest in args
        ]
        best_title = f"best{'↑' if best_is_max(metric) else '↓'}"
        parts: dict[str, list[Column]] = {
            "started": [Column("started", "started", 11)],
            "run": [Column("run", "run", 6)],
            "script": [Column("script", "script", max(script, 6))] if script else [],
            "status": [Column("status", "status", max(status, STATUS_WIDTH))],
            "took": [Column("took", "took", 7, right=True)],
            "args": arg_columns,
            "final": [Column("final", "final", max(values[0], 5), right=True)],
            "best": [Column("best", best_title, max(values[1], 5), right=True)],
            "common": [
                Column(f"arg:{name}", name, max(cell_len(name), widest, 1), right=True)
                for name, widest in common
            ],
        }
        order = ("started", "run", "script", "status", "took", "args", "final", "best", "common")
        hidden: list[str] = []

        def used(note: int) -> int:
            cells = sum(c.width + 1 for key in order for c in parts[key])
            return PREFIX + cells + note

        def note_width() -> int:
            return len(f" +{len(hidden)} hidden") if hidden else 0

        # the sparkline takes what is left, between SPARK_MIN and SPARK_MAX cells
        drop = list(DROP_ORDER)
        spark = SPARK_MIN

        def too_wide() -> bool:
            return used(note_width()) + (spark + 1 if spark else 0) > width

        while too_wide() and drop:
            if parts["status"] and parts["status"][0].width > STATUS_WIDTH:
                parts["status"] = [Column("status", "status", STATUS_WIDTH)]  # clipped first
                continue
            key = drop[0]
            if key == "spark":
                hidden.append("spark")
                spark = 0
                drop.pop(0)
                continue
            if key in ("args", "common") and parts[key]:
                # the widest arg first (it frees the most room), whole
                widest = max(range(len(parts[key])), key=lambda i: (parts[key][i].width, i))
                column = parts[key].pop(widest)
                if key == "args":
                    hidden.append(column.title)
                if parts[key]:
                    continue
            elif key not in ("args", "common"):
                # took and a pipeline's script: extras of wide screens (the run detail says
                # both), not worth a note that would push the status out at 80 columns
                if key not in ("took", "script") and parts[key]:
                    hidden.append(key)
                parts[key] = []
            drop.pop(0)
        columns = [c for key in order for c in parts[key]]
        if "final" in {c.key for c in columns} and "spark" in hidden and metric:
            columns = [
                Column(c.key, fmt.clip(metric, c.width), c.width, c.right)
                if c.key == "final"
                else c
                for c in columns
            ]
        spare = width - used(note_width())
        if "spark" not in hidden:
            spark = min(max(spare - 1, SPARK_MIN), SPARK_MAX)
            columns.append(Column("spark", metric or "metric", spark))
            spare -= spark + 1
        return cls(tuple(columns), tuple(hidden), max(spare, 0))

    def cell(self, column: Column, text: str) -> str:
        return f"{text:>{column.width}}" if column.right else f"{text:<{column.width}}"

    def header(
        self,
        metric: str | None,
        scale: tuple[float, float] | None = None,
        sort: tuple[str, bool] | None = None,
    ) -> Text:
        """`scale`: the one low..high every sparkline of the column is drawn against;
        `sort`: (column key, descending) marks the sorted column with ▲ or ▼."""
        text = Text("     ")
        for column in self.columns:
            title = column.title
            if column.key == "spark":
                label = metric or "metric"
                if metric and scale is not None:
                    label += f" {fmt.number(scale[0], 3)}..{fmt.number(scale[1], 3)}"
                room = column.width + (0 if self.hidden else self.spare)
                text.append(fmt.clip(label, room).ljust(column.width) + " ")
                continue
            if sort is not None and sort[0] == column.key:
                title = fmt.clip(title, column.width - 1) + ("▼" if sort[1] else "▲")
            text.append(self.cell(column, fmt.clip(title, column.width)) + " ")
        if self.hidden:
            names = " ".join(self.hidden)
            room = len(f" +{len(self.hidden)} hidden")
            note = f" +{len(self.hidden)} hidden: {names}"
            text.append(
                note if len(note) <= room + self.spare else f" +{len(self.hidden)} hidden", "italic"
            )
        return text


def shared_scale(series: dict[str, list[float]]) -> tuple[float, float] | None:
    """The low and high over every run's points: sparklines drawn against one scale can be
    compared row to row (each row scaled to itself would always span ▁ to █)."""
    finite = [v for points in series.values() for v in points if v == v and abs(v) != math.inf]
    return (min(finite), max(finite)) if finite else None
