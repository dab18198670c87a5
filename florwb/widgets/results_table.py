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


def cell(value: Any, as_series: bool) -> Text | str:
    if value is None:
        return Text("NULL", "dim italic")
    if as_series and isinstance(value, (list, tuple)):
        numbers = [v for v in value if v is not None]
        last = numbers[-1] if numbers else None
        return Text.assemble(
            (sparkline(value, SPARK_WIDTH), "cyan"),
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
        series = frozenset(page.series_columns)
        for index, (name, kind) in enumerate(zip(page.columns, page.types)):
            label = Text.assemble(fmt.clip(name, CELL_WIDTH), (f" {kind.lower()}", "dim"))
            self.add_column(label, key=f"c{index}")
        self._append(page.rows, 0, FIRST_ROWS, series, self._generation)

    def _append(
        self, rows: list[tuple], start: int, count: int, series: frozenset[int], generation: int
    ) -> None:
        if generation != self._generation:
            return  # a newer result replaced this one
        chunk = rows[start : start + count]
        self.add_rows([cell(v, i in series) for i, v in enumerate(row)] for row in chunk)
        if start + count < len(rows):
            self.call_after_refresh(
                self._append, rows, start + count, CHUNK_ROWS, series, generation
            )
