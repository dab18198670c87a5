"""Rendering query results for a terminal, CSV or JSON, the same way for every command."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
import shutil
import sys
from collections.abc import Iterable
from typing import Any, Literal, TextIO

TABLE_ROW_LIMIT = 200
CELL_LIMIT = 40  # characters of a cell in a table, except the last column where told


def json_safe(value: Any) -> Any:
    """JSON has no NaN/inf and no timestamps: spell them as strings so nothing is lost."""
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return value
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, dt.timedelta):  # an INTERVAL (pandas.Timedelta is one too)
        return _seconds(value)
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if hasattr(value, "isoformat"):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return blob_text(bytes(value))
    if isinstance(value, decimal.Decimal):  # a JSON number when a float says it exactly
        number = float(value)
        return number if decimal.Decimal(repr(number)) == value else str(value)
    if getattr(value, "ndim", 0):  # a LIST column's numpy array (masked: None where NULL)
        return [json_safe(v) for v in value.tolist()]
    if hasattr(value, "item"):
        return json_safe(value.item())
    if _is_missing(value):
        return None
    return str(value)


def blob_text(data: bytes) -> str:
    """A BLOB as DuckDB prints it: printable ASCII as is, every other byte as \\xHH."""
    return "".join(chr(b) if 32 <= b < 127 and b != 92 else f"\\x{b:02X}" for b in data)


def _is_missing(value: Any) -> bool:
    """None, NaN, NaT, pandas' NA. Without pandas loaded no pandas value can be here, and
    importing it (seconds on a busy machine) only to ask would slow `florwb replay`'s plan."""
    if value is None:
        return True
    pd = sys.modules.get("pandas")
    try:
        if pd is None:
            return bool(value != value)  # NaN and NaT only are unequal to themselves
        return bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


def _seconds(value: dt.timedelta) -> float | None:
    """An interval as seconds: what a reader compares and sums (a missing one is None)."""
    if _is_missing(value):
        return None
    return value.total_seconds()


def _cell(value: Any, limit: int | None = CELL_LIMIT) -> str:
    if value is None or _is_missing(value):
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, dt.timedelta):
        return f"{value.total_seconds():.6g}s"
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        if isinstance(value, dt.datetime):
            return value.isoformat(sep=" ", timespec="seconds")
        return value.isoformat()
    if hasattr(value, "isoformat"):
        return value.isoformat()
    text = str(value)
    return text if limit is None or len(text) <= limit else text[: limit - 1] + "…"


def terminal_width() -> int:
    """Columns of the terminal (COLUMNS wins, as for any Unix tool); 80 under a pipe."""
    return shutil.get_terminal_size((80, 24)).columns


def write_table(
    columns: list[str],
    rows: list[list[Any]],
    out: TextIO,
    total: int | None = None,
    more: bool = False,
    last: Literal["cut", "fit", "full"] = "cut",
):
    """A plain aligned table. Cells are cut at CELL_LIMIT characters; the last column may
    instead fill what the terminal's width leaves ("fit", at least CELL_LIMIT) or be
    written whole ("full": a reason nobody may lose)."""
    shown = rows[:TABLE_ROW_LIMIT]
    cells = [[_cell(v) for v in row[:-1]] + [_cell(v, None) for v in row[-1:]] for row in shown]
    widths = [len(c) for c in columns]
    for row in cells:
        widths[:-1] = [max(w, len(c)) for w, c in zip(widths[:-1], row[:-1])]
    if columns and last != "full":
        limit = CELL_LIMIT
        if last == "fit":
            limit = max(CELL_LIMIT, terminal_width() - sum(w + 2 for w in widths[:-1]))
        for row in cells:
            if row and len(row[-1]) > limit:
                row[-1] = row[-1][: limit - 1] + "…"
    for row in cells:
        if row:
            widths[-1] = max(widths[-1], len(row[-1]))
    out.write("  ".join(c.ljust(w) for c, w in zip(columns, widths)).rstrip() + "\n")
    for row in cells:
        out.write("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() + "\n")
    total = len(rows) if total is None else total
    if more:
        out.write(
            f"({len(cells):,} rows shown, more not counted; use --format csv or json for all)\n"
        )
    elif total > len(cells):
        out.write(f"({len(cells):,} of {total:,} rows shown; use --format csv or json for all)\n")
    elif total == 0:
        out.write("(no rows)\n")


def _records(frame: Any, columns: list[str]) -> list[dict[str, Any]]:
    """Rows as JSON-ready dicts. A missing value is null, also in a text column, where
    pandas spells it NaN (which json_safe would turn into the string "NaN")."""
    import pandas as pd

    text = {
        i
        for i, dtype in enumerate(frame.dtypes)
        if not (pd.api.types.is_numeric_dtype(dtype) or pd.api.types.is_bool_dtype(dtype))
    }
    return [
        {
            c: (None if i in text and _is_missing(v) else json_safe(v))
            for i, (c, v) in enumerate(zip(columns, row))
        }
        for row in frame.itertuples(index=False)
    ]


def write_frame(frame: Any, fmt: str, out: TextIO = sys.stdout) -> None:
    write_chunks([_nan_apart(frame, fmt)], fmt, out)


def _nan_apart(frame: Any, fmt: str) -> Any:
    """A logged NaN spelled out and a missing value left empty (null in JSON) in the float
    columns, where pandas holds both as NaN: the dataframe's `attrs["logged_nan"]` says
    which NaN cells were logged (engine/store/catalog.py)."""
    import numpy as np
    import pandas as pd

    logged_nan = frame.attrs.get("logged_nan")
    if logged_nan is None:  # not a dataframe of logged values: NaN is what it holds
        return frame
    floats = [
        c for c in frame.columns if pd.api.types.is_float_dtype(frame[c]) and frame[c].isna().any()
    ]
    if not floats:
        return frame
    frame = frame.copy()
    for name in floats:
        values = frame[name].to_numpy(dtype=float)
        nan = np.isnan(values)
        logged = frame.index.isin(list(logged_nan.get(name, ()))) & nan
        cells = values.astype(object)
        cells[nan & ~logged] = None
        cells[logged] = "NaN" if fmt == "json" else "nan"
        frame[name] = cells
    return frame


def write_chunks(chunks: Iterable[Any], fmt: str, out: TextIO = sys.stdout) -> None:
    """Write DataFrames that together make one result, as they come: CSV and JSON stream
    every row, a table takes only the rows it shows (and says when there were more)."""
    if fmt == "table":
        _write_table_head(chunks, out)
        return
    first = True
    for chunk in chunks:
        columns = [str(c) for c in chunk.columns]
        if fmt == "csv":
            _intervals_as_seconds(chunk).to_csv(out, index=False, header=first)
        else:
            for record in _records(chunk, columns):
                text = json.dumps(record, indent=1).replace("\n", "\n ")
                out.write(("[\n " if first else ",\n ") + text)
                first = False
            continue
        first = False
    if fmt == "json":
        out.write("[]\n" if first else "\n]\n")


def _intervals_as_seconds(frame: Any) -> Any:
    """INTERVAL columns (timedelta64) as seconds, the unit every table, CSV and JSON
    output of florwb uses for a duration (pandas would write "0 days 00:00:01.5")."""
    import pandas as pd

    spans = [c for c, t in frame.dtypes.items() if pd.api.types.is_timedelta64_dtype(t)]
    if not spans:
        return frame
    return frame.assign(**{str(c): frame[c].dt.total_seconds() for c in spans})


def _write_table_head(chunks: Iterable[Any], out: TextIO) -> None:
    import pandas as pd

    frames: list[Any] = []
    n = 0
    more = False
    for chunk in chunks:
        if n >= TABLE_ROW_LIMIT:
            more = True
            break
        frames.append(chunk)
        n += len(chunk)
    if not frames:
        write_table([], [], out)
        return
    frame = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    columns = [str(c) for c in frame.columns]
    head = frame.head(TABLE_ROW_LIMIT)
    if "version" in head.columns:  # a tree hash is 40 characters; 8 identify it on screen
        head = head.assign(
            version=head["version"].map(lambda v: v[:8] if isinstance(v, str) else v)
        )
    rows = [list(r) for r in head.itertuples(index=False)]
    # Unread chunks left: how many rows there are is not known (nor computed).
    write_table(columns, rows, out, total=len(frame), more=more)


# --- rows as DuckDB gives them (florwb query) ---------------------------------------------
# A DataFrame cannot tell SQL NULL from NaN in a DOUBLE column (both become NaN): written
# from one, a NULL read "NaN" in JSON and a NaN read as empty in CSV and tables. Python rows
# keep them apart (None, float('nan')).


def _shown(value: Any) -> Any:
    """A Python value as a table cell takes it: NaN and infinities spelled out."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return blob_text(bytes(value))
    if isinstance(value, (list, dict)):
        return json.dumps(json_safe(value))
    return value


def _csv_cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else _shown(value)
    if isinstance(value, dt.timedelta):
        return repr(value.total_seconds())
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ")
    return _shown(value)


def write_rows(columns: list[str], batches: Iterable[list[tuple]], fmt: str, out: TextIO) -> None:
    """Write a result fetched as Python rows, batch by batch: NULL is empty (CSV, table) or
    null (JSON), NaN is nan (CSV, table) or "NaN" (JSON); a table takes only what it shows."""
    if fmt == "table":
        rows: list[list[Any]] = []
        more = False
        for batch in batches:
            if len(rows) >= TABLE_ROW_LIMIT:
                more = True
                break
            rows.extend([_shown(v) for v in row] for row in batch)
        shown = rows[:TABLE_ROW_LIMIT]
        write_table(columns, shown, out, total=len(rows), more=more)
        return
    if fmt == "csv":
        import csv

        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(columns)
        for batch in batches:
            writer.writerows([_csv_cell(v) for v in row] for row in batch)
        return
    first = True
    for batch in batches:
        for row in batch:
            record = {c: json_safe(v) for c, v in zip(columns, row)}
            text = json.dumps(record, indent=1).replace("\n", "\n ")
            out.write(("[\n " if first else ",\n ") + text)
            first = False
    out.write("[]\n" if first else "\n]\n")
