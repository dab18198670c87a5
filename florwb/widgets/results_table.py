"""Query results: a DataTable that grows a page at a time, numeric list columns drawn as
sparklines, ⏎ on a cell opens its whole value.

The pane hands it pages as the result streams (engine/store/result_stream.py); the table
asks for the next one (`MoreWanted`) when the cursor comes near the last loaded row, so a
million-row result shows as fast as a ten-row one and is walked through without being
loaded whole. It keeps the raw values of the rows it holds, for the cell viewer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from rich.text import Text
from textual.message import Message
from textual.widgets import DataTable

from florwb.ui import format as fmt
from florwb.ui import keys
from florwb.widgets.sparkline import sparkline

CELL_WIDTH = 40
SPARK_WIDTH = 16
NEAR_END_ROWS = 20  # the next page is asked for when the cursor is this close to the end


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
    """j/k/g/G move the cursor, ⏎ opens the cell (florwb.ui.keys, scope "results").
    `start(columns, types, series)` begins a result, `append(rows)` adds a page: the first
    rows are on screen in the next frame, the rest a chunk per frame."""

    BINDINGS = keys.bindings("results")

    @dataclass
    class MoreWanted(Message):
        """The cursor is near the last loaded row: the pane fetches the next page."""

        generation: int

    @dataclass
    class CellOpened(Message):
        column: str
        kind: str
        value: Any

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.generation = 0
        self.columns_shown: list[str] = []
        self.types_shown: list[str] = []
        self.raw_rows: list[tuple] = []  # every row handed over, as DuckDB gave it
        self.complete = True  # no more pages to come
        self._scales: dict[int, Scale | None] = {}
        self._asked = False
        self._appending = False  # a page is being added a chunk per frame

    def start(
        self, columns: list[str], types: list[str], series: list[int], first_rows: list[tuple]
    ) -> int:
        """A new result (`series`: the numeric list columns, drawn as sparklines on one
        scale per column taken from `first_rows`); its generation (pages of an older one
        are ignored)."""
        self.generation += 1
        self.clear(columns=True)
        self.columns_shown, self.types_shown = list(columns), list(types)
        self.raw_rows = []
        self.complete = False
        self._asked = False
        # one scale per list column, from the first page; later pages are drawn on it
        self._scales = {i: column_scale(first_rows, i) for i in series}
        for index, (name, kind) in enumerate(zip(columns, types)):
            label = Text.assemble(fmt.clip(name, CELL_WIDTH), (f" {kind.lower()}", "dim"))
            scale = self._scales.get(index)
            if scale is not None:
                low, high = (fmt.number(v, 3) for v in scale)
                label.append(f" one scale {low}..{high}", "dim")
            self.add_column(label, key=f"c{index}")
        return self.generation

    def append(self, generation: int, rows: list[tuple], *, complete: bool) -> None:
        if generation != self.generation:
            return
        self.raw_rows.extend(rows)
        self.complete = complete
        self._asked = False
        self._appending = True
        self._append(rows, 0, FIRST_ROWS, generation)

    def _append(self, rows: list[tuple], start: int, count: int, generation: int) -> None:
        if generation != self.generation:
            return  # a newer result replaced this one
        chunk = rows[start : start + count]
        scales = self._scales
        self.add_rows(
            [cell(v, i in scales, scales.get(i)) for i, v in enumerate(row)] for row in chunk
        )
        if start + count < len(rows):
            self.call_after_refresh(self._append, rows, start + count, CHUNK_ROWS, generation)
        else:
            self._appending = False
            self._check_near_end()

    def watch_cursor_coordinate(self, old: Any, new: Any) -> None:
        super().watch_cursor_coordinate(old, new)
        self._check_near_end()

    def _check_near_end(self) -> None:
        if self.complete or self._asked or self._appending or not self.row_count:
            return
        if self.cursor_coordinate.row >= self.row_count - NEAR_END_ROWS:
            self._asked = True
            self.post_message(self.MoreWanted(self.generation))

    def action_open_cell(self) -> None:
        row, column = self.cursor_coordinate
        if not (0 <= row < len(self.raw_rows)) or not (0 <= column < len(self.columns_shown)):
            return
        self.post_message(
            self.CellOpened(
                self.columns_shown[column], self.types_shown[column], self.raw_rows[row][column]
            )
        )
