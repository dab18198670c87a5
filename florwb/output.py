"""Rendering query results for a terminal, CSV or JSON, the same way for every command."""

from __future__ import annotations

import json
import math
import sys
from typing import Any, TextIO

TABLE_ROW_LIMIT = 200


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
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if hasattr(value, "isoformat"):
        return value.isoformat()
    if hasattr(value, "item"):
        return json_safe(value.item())
    if _is_missing(value):
        return None
    return str(value)


def _is_missing(value: Any) -> bool:
    try:
        import pandas as pd

        return bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


def _cell(value: Any) -> str:
    if value is None or _is_missing(value):
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    if hasattr(value, "isoformat"):
        return value.isoformat(sep=" ", timespec="seconds")
    text = str(value)
    return text if len(text) <= 40 else text[:39] + "…"


def write_table(columns: list[str], rows: list[list[Any]], out: TextIO, total: int | None = None):
    cells = [[_cell(v) for v in row] for row in rows[:TABLE_ROW_LIMIT]]
    widths = [len(c) for c in columns]
    for row in cells:
        widths = [max(w, len(c)) for w, c in zip(widths, row)]
    out.write("  ".join(c.ljust(w) for c, w in zip(columns, widths)).rstrip() + "\n")
    for row in cells:
        out.write("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() + "\n")
    total = len(rows) if total is None else total
    if total > len(cells):
        out.write(f"({len(cells):,} of {total:,} rows shown; use --format csv or json for all)\n")
    elif total == 0:
        out.write("(no rows)\n")


def write_frame(frame: Any, fmt: str, out: TextIO = sys.stdout) -> None:
    columns = [str(c) for c in frame.columns]
    if fmt == "csv":
        frame.to_csv(out, index=False)
        return
    if fmt == "json":
        records = [dict(zip(columns, map(json_safe, row))) for row in frame.itertuples(index=False)]
        json.dump(records, out, indent=1)
        out.write("\n")
        return
    head = frame.head(TABLE_ROW_LIMIT)
    if "version" in head.columns:  # a tree hash is 40 characters; 8 identify it on screen
        head = head.assign(
            version=head["version"].map(lambda v: v[:8] if isinstance(v, str) else v)
        )
    write_table(columns, [list(r) for r in head.itertuples(index=False)], out, total=len(frame))
