"""Query results: a DataTable of the first page, numeric list columns drawn as sparklines.

Only the first page (PAGE_ROWS) is ever handed to the table, whatever the result size, so
a million-row result shows as fast as a ten-row one; the caption says how many there were.
"""

from __future__ import annotations

import math
from typing import Any

from rich.text import Text
from textual.widgets import DataTable

from florwb.ui import format as fmt
from florwb.ui import keys
from florwb.widgets.sparkline import sparkline
from florwb_engine.store.queries import QueryPage

CELL_WIDTH = 40
SPARK_WIDTH = 16


Scale = tuple[float, float]


def cell(value: Any, as_series: bool, scale: Scale | None = None) -> Text | str:
    """`scale`: the low..high every sparkline of the column is drawn against, so rows
    compare (each row scaled to itself would always span ▁ to █)."""
    if value is None:
        return Text("NULL", "dim italic")
    if as_series and isinstance(value, (list, tuple)):
        numbers = [v for v in value if v is not None]
        last = numbers[-1] if numbers else None
        low, high = scale if scale is not None else (None, None)
        return Text.assemble(
            (sparkline(value, SPARK_WIDTH, low, high), "cyan"),
            (f" {fmt.number(_float(last))}" if last is not None else "", ""),
            (f" n={len(value)}", "dim"),
        )
    if isinstance(value, float):
        return Text(fmt.number(value, 6), justify="right")
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return Text(str(value), justify="right")
    return fmt.clip(str(value).replace("\n", "⏎"), CELL_WIDTH)


def column_scale(rows: list[tuple], index: int) -> Scale | None:
    """The low and high over every finite number of a list column on this page."""
    low, high = math.inf, -math.inf
    for row in rows:
        values = row[index]
        if not isinstance(values, (list, tuple)):
            continue
        for v in values:
            number = _float(v)
            if number is not None and math.isfinite(number):
                low, high = min(low, number), max(high, number)
    return (low, high) if low <= high else None


def _float(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else number


FIRST_ROWS = 100  # drawn at once; the rest of the page follows in chunks after the frame
CHUNK_ROWS = 300


class ResultsTable(DataTable):
    """j/k/g/G move the cursor (florwb.ui.keys, scope "results").
    Holds one page; `show(page)` replaces it. The first rows are on screen in the next
    frame; the rest of the page is appended a chunk per frame, so a full page of wide rows
    never holds up the first paint."""

    BINDINGS = keys.bindings("results")

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._generation = 0

    def show(self, page: QueryPage) -> None:
        self._generation += 1
        self.clear(columns=True)
        series = {i: column_scale(page.rows, i) for i in page.series_columns}
        for index, (name, kind) in enumerate(zip(page.columns, page.types)):
            label = Text.assemble(fmt.clip(name, CELL_WIDTH), (f" {kind.lower()}", "dim"))
            scale = series.get(index)
            if scale is not None:
                low, high = (fmt.number(v, 3) for v in scale)
                label.append(f" one scale {low}..{high}", "dim")
            self.add_column(label, key=f"c{index}")
        self._append(page.rows, 0, FIRST_ROWS, series, self._generation)

    def _append(
        self,
        rows: list[tuple],
        start: int,
        count: int,
        series: dict[int, Scale | None],
        generation: int,
    ) -> None:
        if generation != self._generation:
            return  # a newer result replaced this one
        chunk = rows[start : start + count]
        self.add_rows(
            [cell(v, i in series, series.get(i)) for i, v in enumerate(row)] for row in chunk
        )
        if start + count < len(rows):
            self.call_after_refresh(
                self._append, rows, start + count, CHUNK_ROWS, series, generation
            )
